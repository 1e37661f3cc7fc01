"""The baseline metrics: CKA, R², the non-linearity coefficient, the extras, and model statistics."""

import numpy as np
import onnx
import pytest
from scipy.special import softmax

import onnxaff
from onnxaff.graph import augment_model, discover_sites
from onnxaff.graph.complexity import model_stats
from onnxaff.metrics import Chunk, Moments
from onnxaff_plugins.cka import linear_cka, pooled_cka
from onnxaff_plugins.extras import histogram_entropy, sparsity
from onnxaff_plugins.r2 import r2_held_out, r2_in_sample, r2_pooled
from tests.conftest import FIXTURES, parse, run


def orthogonal(rng, d):
    return np.linalg.qr(rng.standard_normal((d, d)))[0]


@pytest.mark.parametrize("n,d", [(500, 10), (40, 100)])  # feature form and Gram form
def test_cka_invariances(n, d, rng):
    x = rng.standard_normal((n, d))
    assert linear_cka(x, x @ orthogonal(rng, d)) == pytest.approx(1.0, abs=1e-12)
    assert linear_cka(x, -3.5 * x + 2) == pytest.approx(1.0, abs=1e-12)
    assert 0 < linear_cka(x, np.tanh(3 * x)) < 1


def test_cka_gram_and_feature_forms_agree(rng):
    x, y = rng.standard_normal((50, 60)), rng.standard_normal((50, 40))
    xc, yc = x - x.mean(0), y - y.mean(0)
    direct = np.linalg.norm(yc.T @ xc) ** 2 / (np.linalg.norm(xc.T @ xc) * np.linalg.norm(yc.T @ yc))
    assert linear_cka(x, y) == pytest.approx(direct, rel=1e-12)


def test_pooled_cka_and_r2_equal_batch_formulas_on_all_rows(rng):
    x = rng.standard_normal((900, 6))
    y = np.tanh(x @ rng.standard_normal((6, 4))) + 0.1 * rng.standard_normal((900, 4))
    m = Moments(6, 4)
    for i in range(0, 900, 128):
        m.update(x[i:i + 128], y[i:i + 128])
    assert pooled_cka(m) == pytest.approx(linear_cka(x, y), rel=1e-10)
    assert r2_pooled(m) == pytest.approx(r2_in_sample(x, y), rel=1e-10)


def test_r2_affine_and_independent(rng):
    x = rng.standard_normal((512, 5))
    y = x @ rng.standard_normal((5, 3)) + 4
    assert r2_in_sample(x, y) == pytest.approx(1.0, abs=1e-12)
    assert r2_pooled(Moments.of(x, y)) == pytest.approx(1.0, abs=1e-10)
    x2 = rng.standard_normal((512, 5))
    assert r2_held_out(Chunk(x, y), Chunk(x2, x2 @ np.linalg.lstsq(x, y - 4, rcond=None)[0] + 4)) == pytest.approx(1)
    z = rng.standard_normal((512, 3))
    assert abs(r2_in_sample(x, z)) < 0.03  # E R² = d/(n−1) ≈ 0.01 for independent Y
    assert r2_held_out(Chunk(x, z), Chunk(x2, rng.standard_normal((512, 3)))) < 0.02


def test_r2_caveat_when_d_exceeds_n_agrees_with_the_value(rng):
    """n ≤ d + 1: R² is 1 when X's live directions span the rows, below 1 when dead features leave fewer (as on
    ResNet-18's layer4, 0.99981 under a caveat that said "trivially 1"); the caveat says both."""
    from onnxaff_plugins.r2 import R2

    note = R2().caveat(rows=64, dx=128, dy=128)
    assert "R² = 1" in note and "R² < 1" in note and "fewer than 63" in note and "trivially" not in note
    assert R2().caveat(rows=512, dx=64, dy=64) is None
    x = rng.standard_normal((64, 128))
    y = np.tanh(rng.standard_normal((64, 8)))
    assert r2_in_sample(x, y) == pytest.approx(1.0, abs=1e-9)  # 128 live directions span the 64 rows
    x[:, 40:] = 0.0  # dead channels: 40 live directions for 64 rows
    assert r2_in_sample(x, y) < 1 - 1e-3


def test_extras():
    x = np.linspace(-1, 1, 1001)[:, None]
    assert sparsity(np.maximum(x, 0)) == pytest.approx(501 / 1001)
    assert sparsity(x) == pytest.approx(1 / 1001)
    assert histogram_entropy(np.ones(100)) == pytest.approx(0.0)
    assert histogram_entropy(np.arange(1000.0)) == pytest.approx(np.log(100), rel=1e-3)


# -- the non-linearity coefficient ---------------------------------------------------------------


def jvp_outputs(text, x):
    model = parse(text)
    sites = discover_sites(model)
    aug, outs = augment_model(model, sites, jvp=True)
    onnx.checker.check_model(aug, full_check=True)
    return run(aug, {"x": x}), outs[0].jvp


def test_finite_difference_matches_tanh_derivative(rng):
    x = rng.standard_normal((16, 4, 3)).astype(np.float32) * 2
    got, jvp = jvp_outputs("""<ir_version: 8, opset_import: ["" : 17]>
        g (float[N, 4, 3] x) => (float[N, 4, 3] y) { y = Tanh(x) }""", x)
    assert jvp.form == "elementwise"
    analytic = (1 / np.cosh(x.astype(np.float64)) ** 4).sum(axis=0)  # Σ_batch σ'(x)²
    np.testing.assert_allclose(got[jvp.names["d2sum"]], analytic, rtol=1e-3)


@pytest.mark.parametrize("opset", [9, 13, 18])
def test_finite_difference_jvp_matches_softmax_jacobian(opset, rng):
    x = rng.standard_normal((7, 5)).astype(np.float32)
    got, jvp = jvp_outputs(f"""<ir_version: 8, opset_import: ["" : {opset}]>
        g (float[N, 5] x) => (float[N, 5] y) {{ y = Softmax<axis = 1>(x) }}""", x)
    assert jvp.form == "directional"
    x64 = x.astype(np.float64)
    v = np.roll(x64, 1, axis=0) - x64.mean(axis=0)
    s = softmax(x64, axis=1)
    jv = s * (v - (s * v).sum(axis=1, keepdims=True))  # J = diag(s) − s sᵀ
    np.testing.assert_allclose(got[jvp.names["jv2"]], (jv**2).sum(axis=1), rtol=1e-3)


NLC_MODEL = """<ir_version: 8, opset_import: ["" : 17]>
g (float[N, 6] x) => (float[N, 6] y, float[N, 6] lin) {
    w = Constant<value = float[6, 6] {%s}>()
    h = MatMul(x, w)
    lin = LeakyRelu<alpha = 1.0>(h)
    y = Tanh(h)
}"""


def test_nlc_is_one_for_affine_site_and_linear_network(rng, tmp_path):
    w = rng.standard_normal((6, 6))
    model = parse(NLC_MODEL % ", ".join(f"{v:.6f}" for v in w.ravel()))
    x = rng.standard_normal((1024, 6)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    sig = onnxaff.analyze(model, str(tmp_path / "x.npy"), metrics=["nlc"], progress=False)
    by_kind = {s["kind"]: s["metrics"]["nlc"] for s in sig.sites}
    assert by_kind["leaky_relu"]["mean"] == pytest.approx(1.0, abs=1e-3)
    assert by_kind["tanh"]["mean"] > 1.0
    assert sig.network["nlc"]["values"]["lin"] == pytest.approx(1.0, abs=1e-3)
    assert sig.network["nlc"]["values"]["y"] > 1.0
    # Independent: the per-element form with the analytic derivative, on the float32 pre-activations.
    h = x.astype(np.float64) @ w.astype(np.float32).astype(np.float64)
    num = np.sum(np.mean(1 / np.cosh(h) ** 4, axis=0) * h.var(axis=0, ddof=1))
    assert by_kind["tanh"]["mean"] == pytest.approx(np.sqrt(num / np.tanh(h).var(axis=0, ddof=1).sum()), rel=1e-3)


def test_nlc_softmax_site_matches_independent(rng, tmp_path):
    model = parse("""<ir_version: 8, opset_import: ["" : 17]>
        g (float[N, 4] x) => (float[N, 4] y) { y = Softmax<axis = 1>(x) }""")
    x = rng.standard_normal((3000, 4)).astype(np.float32) * 2
    np.save(tmp_path / "x.npy", x)
    sig = onnxaff.analyze(model, str(tmp_path / "x.npy"), metrics=["nlc"], batch_size=100, progress=False)
    x64 = x.astype(np.float64)
    s = softmax(x64, axis=1)
    cov = np.cov(x64, rowvar=False)
    jac = s[:, :, None] * (np.eye(4)[None] - s[:, None, :])  # J_ij = s_i(δ_ij − s_j)
    num = np.mean(np.einsum("nij,jk,nik->n", jac, cov, jac))
    expected = np.sqrt(num / s.var(axis=0, ddof=1).sum())
    # the directional estimator averages over 3000 random directions: a few percent of sampling noise
    assert sig.sites[0]["metrics"]["nlc"]["mean"] == pytest.approx(expected, rel=0.05)


def test_four_metrics_on_a_residual_fixture():
    sig = onnxaff.analyze(FIXTURES / "res_cnn_op17.onnx", "synthetic:gaussian", limit=128, chunk_size=64,
                          metrics=["affinity", "cka", "r2", "nlc"], progress=False)
    for s in sig.sites:
        for name in ("affinity", "cka", "r2", "nlc"):
            entry = s["metrics"][name]
            assert entry["status"] == "ok" and np.isfinite(entry["mean"]), (s["id"], name, entry)


# -- model statistics ------------------------------------------------------------------------------


def test_parameter_and_mac_counts_by_hand(rng):
    w = rng.standard_normal((8, 3, 3, 3)).astype(np.float32)
    model = parse(f"""<ir_version: 8, opset_import: ["" : 17]>
    g (float[N, 3, 16, 16] x) => (float[N, 2] y) {{
        w = Constant<value = float[8, 3, 3, 3] {{{", ".join(map(str, w.ravel()))}}}>()
        b = Constant<value = float[8] {{0, 0, 0, 0, 0, 0, 0, 0}}>()
        c = Conv<pads = [1, 1, 1, 1]>(x, w, b)
        r = Relu(c)
        p = GlobalAveragePool(r)
        shape = Constant<value = int64[2] {{0, 8}}>()
        f = Reshape(p, shape)
        gw = Constant<value = float[8, 4] {{{", ".join(["0.1"] * 32)}}}>()
        gb = Constant<value = float[4] {{0, 0, 0, 0}}>()
        h = Gemm(f, gw, gb)
        t = Tanh(h)
        mw = Constant<value = float[4, 2] {{1, 2, 3, 4, 5, 6, 7, 8}}>()
        y = MatMul(t, mw)
    }}""")
    inferred = onnx.shape_inference.infer_shapes(model)
    stats = model_stats(inferred, discover_sites(inferred))
    assert stats["parameters"] == (8 * 27 + 8) + (8 * 4 + 4) + 4 * 2  # int64 shape constant excluded
    assert stats["macs"] == 8 * 16 * 16 * 27 + 8 * 4 + 4 * 2
    assert stats["depth_sites"] == 2 and stats["depth_weighted_layers"] == 3
    assert stats["macs_unknown_nodes"] == []


def test_resnet50_light_model_stats():
    from tests.conftest import LIGHT_MODELS

    path = LIGHT_MODELS / "light_resnet50.onnx"
    if not path.exists():
        pytest.skip("no light models")
    from onnxaff.graph import load_model

    loaded = load_model(path)
    stats = model_stats(loaded.model, discover_sites(loaded.model, infer_shapes=False))
    assert stats["macs"] == pytest.approx(4.09e9, rel=0.01)  # ResNet-50's published 4.1 GMACs
    assert stats["parameters"] == pytest.approx(25.6e6, rel=0.01)


def test_grouped_and_transposed_convolution_macs():
    model = parse("""<ir_version: 8, opset_import: ["" : 17]>
    g (float[N, 8, 4, 4] x, float[8, 1, 3, 3] w, float[8, 2, 2, 2] wt) => (float[N, 2, 8, 8] y) {
        d = Conv<group = 8, pads = [1, 1, 1, 1]>(x, w)
        r = Relu(d)
        y = ConvTranspose<group = 1, strides = [2, 2]>(r, wt)
    }""")
    inferred = onnx.shape_inference.infer_shapes(model)
    stats = model_stats(inferred, discover_sites(inferred))
    # depthwise: each of 8·4·4 outputs reads 1·3·3 inputs; transposed: each of 8·4·4 inputs feeds 2·2·2 outputs
    assert stats["macs"] == 8 * 16 * 9 + 8 * 16 * 8


def test_r2_pooled_ignores_rounding_noise_directions(rng):
    """Real moments (the shipped residual CNN's stem ReLU on its 1024 digits): Σ_X has eigenvalues
    from 1e-14 to 1e-11 of the largest, rounding of float32 features. A plain pseudo-inverse let
    1e-16 relative changes of the moments move R² by up to 3e-4; with those directions dropped the
    change is at the 1e-7 level."""
    d = dict(np.load(FIXTURES / "stem_moments.npz"))
    m = Moments(int(d.pop("dx")), int(d.pop("dy")), int(d.pop("n")), **d)

    def plain_pinv(m):
        res = m.cov_y() - m.cov_xy().T @ np.linalg.pinv(m.cov_x(), hermitian=True) @ m.cov_xy()
        return float(np.mean(1.0 - np.diag(res) / np.diag(m.cov_y())))

    worst_plain = worst = 0.0
    for _ in range(5):
        noise = 1 + 1e-16 * rng.standard_normal(m.m_xx.shape)
        nudged = Moments(m.dx, m.dy, m.n, m.mean_x, m.mean_y, m.m_xx * (noise + noise.T) / 2, m.m_yy, m.m_xy)
        worst_plain = max(worst_plain, abs(plain_pinv(m) - plain_pinv(nudged)))
        worst = max(worst, abs(r2_pooled(m) - r2_pooled(nudged)))
    assert worst_plain > 1e-6  # the fixture is as ill-conditioned as described
    assert worst < 1e-6
    assert 0 < r2_pooled(m) < 1


def test_r2_pooled_does_not_depend_on_the_scale_of_x_features(rng):
    """R² is invariant under rescaling X's features; the rounding cutoff must be too. Before standardising,
    64 of 512 features scaled by 1e-5 fell under a cutoff relative to the largest eigenvalue, and Y = 3X
    scored 0.882."""
    n, d = 4096, 512
    x = rng.standard_normal((n, d)) @ (np.eye(d) + 0.1 * rng.standard_normal((d, d)))
    small = x.copy()
    small[:, :64] *= 1e-5
    assert r2_pooled(Moments.of(small, 3 * small)) == pytest.approx(1.0, abs=1e-9)
    y = np.tanh(x[:, :32])
    scales = np.exp(rng.uniform(-12, 12, d))
    assert r2_pooled(Moments.of(x * scales, y)) == pytest.approx(r2_pooled(Moments.of(x, y)), abs=1e-9)
    # A constant feature carries nothing: left out, not divided by zero.
    x[:, 5] = 2.0
    assert r2_pooled(Moments.of(x, y)) == pytest.approx(r2_pooled(Moments.of(np.delete(x, 5, axis=1), y)), abs=1e-12)


def test_r2_counts_dead_output_columns_as_scikit_learn_does(rng):
    """The reference scores in-sample R² with LinearRegression().score: a constant column predicted exactly is 1."""
    linear_model = pytest.importorskip("sklearn.linear_model")
    x = rng.standard_normal((200, 6))
    y = np.tanh(x @ rng.standard_normal((6, 6)))
    y[:, 1] = 0.0  # a dead ReLU channel
    y[:, 4] = 2.5  # a saturated one
    expected = linear_model.LinearRegression().fit(x, y).score(x, y)
    assert r2_in_sample(x, y) == pytest.approx(expected, abs=1e-6)
    assert r2_in_sample(x, y) > r2_in_sample(x, np.delete(y, [1, 4], axis=1)) - 0.5  # the two ones pull it up
    live = np.delete(y, [1, 4], axis=1)
    assert r2_in_sample(x, y) == pytest.approx((4 * r2_in_sample(x, live) + 2) / 6, abs=1e-12)


def test_r2_in_sample_ignores_rounding_noise_directions_of_x(rng):
    """A rank-3 X of 16 features stored in float32 has 13 more directions of pure rounding: not to be fitted."""
    base = rng.standard_normal((24, 3))
    x = (base @ rng.standard_normal((3, 16))).astype(np.float32).astype(np.float64)
    y = np.maximum(base @ rng.standard_normal((3, 4)), 0) + 0.3 * rng.standard_normal((24, 4))
    exact = r2_in_sample(base, y)
    assert r2_in_sample(x, y) == pytest.approx(exact, abs=1e-5)
    xc, yc = x - x.mean(axis=0), y - y.mean(axis=0)
    w, *_ = np.linalg.lstsq(xc, yc, rcond=None)  # float64's cutoff (the previous fit) keeps the noise directions
    naive = np.mean(1 - ((yc - xc @ w) ** 2).sum(axis=0) / (yc**2).sum(axis=0))
    assert naive > exact + 0.1

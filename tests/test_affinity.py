"""The affinity score against closed forms, an LP solution and an independent implementation."""

import itertools

import numpy as np
import pytest
import scipy.linalg
from scipy.optimize import linprog

from onnxaff_plugins.affinity import affine_ot_map, affinity_score, exact_w2_squared
from onnxaff_plugins.linalg import covariance, ledoit_wolf, ledoit_wolf_shrinkage


def spd(rng, d, lo=0.5, hi=2.0):
    q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    return q @ np.diag(rng.uniform(lo, hi, d)) @ q.T


def brute_force_affinity(x, y, eps=1e-6):
    """Written from the paper's formulas with other tools: scipy's general sqrtm, the Σ_X-side form of
    the Gaussian OT map, and W2² by enumerating permutations (tiny n) or by linprog."""
    n, d = x.shape
    sx = np.cov(x, rowvar=False).reshape(d, d) + eps * np.eye(d)
    sy = np.cov(y, rowvar=False).reshape(d, d) + eps * np.eye(d)
    rx = np.real(scipy.linalg.sqrtm(sx))
    rx_inv = np.linalg.inv(rx)
    a = rx_inv @ np.real(scipy.linalg.sqrtm(rx @ sy @ rx)) @ rx_inv
    t = (x - x.mean(0)) @ a.T + y.mean(0)
    cost = ((t[:, None, :] - y[None, :, :]) ** 2).sum(-1)
    if n <= 7:
        w2 = min(cost[np.arange(n), list(p)].mean() for p in itertools.permutations(range(n)))
    else:
        w2 = lp_w2(cost)
    return 1 - np.sqrt(w2 / (2 * np.trace(sy)))


def lp_w2(cost):
    """OT between uniform clouds as a linear program over doubly stochastic couplings."""
    n = cost.shape[0]
    a_eq = np.zeros((2 * n, n * n))
    for i in range(n):
        a_eq[i, i * n:(i + 1) * n] = 1
        a_eq[n + i, i::n] = 1
    res = linprog(cost.ravel() / n, A_eq=a_eq, b_eq=np.ones(2 * n), bounds=(0, None), method="highs")
    assert res.success
    return res.fun


@pytest.mark.parametrize("d", [1, 8, 64])
def test_affine_spd_map_scores_one(d, rng):
    x = rng.standard_normal((512, d))
    y = x @ spd(rng, d) + rng.standard_normal(d)
    # ε = 1e-6 regularises Σ_X and Σ_Y differently, which costs O(ε/λ_min) ≈ 1e-7 here.
    assert affinity_score(x, y) == pytest.approx(1.0, abs=1e-6)


def test_scaled_identity_and_translation_score_one(rng):
    x = rng.standard_normal((300, 5))
    assert affinity_score(x, 3.0 * x - 7.0) == pytest.approx(1.0, abs=1e-6)


def test_invariant_to_permuting_rows_of_y(rng):
    x = rng.standard_normal((200, 6))
    y = np.tanh(2 * x) + 0.1 * x**2
    perm = rng.permutation(200)
    assert affinity_score(x, y[perm]) == pytest.approx(affinity_score(x, y), abs=1e-12)


@pytest.mark.parametrize("seed", range(5))
def test_exact_ot_equals_linear_program(seed):
    rng = np.random.default_rng(seed)
    a, b = rng.standard_normal((9, 3)), rng.standard_normal((9, 3)) * 2 + 1
    cost = ((a[:, None] - b[None]) ** 2).sum(-1)
    assert exact_w2_squared(a, b) == pytest.approx(lp_w2(cost), rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("ties", [False, True])
def test_one_dimensional_ot_by_sorting_equals_the_assignment(ties, rng):
    """d = 1 takes the sorted matching; the assignment problem on the same points agrees (ties too)."""
    from scipy.optimize import linear_sum_assignment

    a = rng.standard_normal((300, 1))
    b = np.maximum(rng.standard_normal((300, 1)), 0) if ties else rng.standard_normal((300, 1)) ** 3
    rows, cols = linear_sum_assignment((a - b.T) ** 2)
    assert exact_w2_squared(a, b) == pytest.approx(np.mean((a[rows, 0] - b[cols, 0]) ** 2), rel=1e-12, abs=1e-15)
    cost = ((a[:9, None] - b[None, :9]) ** 2).sum(-1)
    assert exact_w2_squared(a[:9], b[:9]) == pytest.approx(lp_w2(cost), rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("n,d,f", [(6, 2, np.tanh), (7, 3, lambda v: np.maximum(v, 0)), (40, 4, np.sin),
                                   (60, 1, lambda v: v**3)])
def test_matches_independent_brute_force(n, d, f, rng):
    x = rng.standard_normal((n, d))
    y = f(x @ spd(rng, d))
    assert affinity_score(x, y) == pytest.approx(brute_force_affinity(x, y), abs=1e-7)


def test_constant_output_uses_zero_map(rng):
    x = rng.standard_normal((100, 4))
    sy = covariance(np.zeros((100, 4))) + 1e-6 * np.eye(4)
    assert np.all(affine_ot_map(covariance(x), sy) == 0)
    assert affinity_score(x, np.zeros((100, 4))) == pytest.approx(1.0)


@pytest.mark.parametrize("f", [np.tanh, lambda v: np.maximum(v, 0), np.sin, np.abs, lambda v: np.sign(v)])
def test_range_zero_to_one(f, rng):
    x = rng.standard_normal((256, 8))
    assert -1e-9 <= affinity_score(x, f(x)) <= 1 + 1e-9


def test_less_linear_functions_score_lower(rng):
    x = rng.standard_normal((512, 1))
    scores = [affinity_score(x, g(x)) for g in (lambda v: v + 0.01 * v**2, np.tanh, np.abs)]
    assert scores[0] > scores[1] > scores[2]


def test_unequal_dims_and_tiny_chunks_refused(rng):
    with pytest.raises(ValueError, match="equal feature dimensions"):
        affinity_score(rng.standard_normal((10, 3)), rng.standard_normal((10, 4)))
    with pytest.raises(ValueError, match="at least 2 rows"):
        affinity_score(np.ones((1, 3)), np.ones((1, 3)))


def test_ledoit_wolf_matches_its_definition(rng):
    x = rng.standard_normal((30, 5)) @ spd(rng, 5)
    n, d = x.shape
    xc = x - x.mean(0)
    s = xc.T @ xc / n
    mu = np.trace(s) / d
    delta = np.linalg.norm(s - mu * np.eye(d), "fro") ** 2 / d
    beta = sum(np.linalg.norm(np.outer(r, r) - s, "fro") ** 2 for r in xc) / n**2 / d
    shrink = min(beta, delta) / delta
    cov, got = ledoit_wolf(x)
    assert got == pytest.approx(shrink, rel=1e-12)
    np.testing.assert_allclose(cov, (1 - shrink) * s + shrink * mu * np.eye(d), rtol=1e-12)


def test_ledoit_wolf_matches_scikit_learn_when_available(rng):
    sk = pytest.importorskip("sklearn.covariance")
    x = rng.standard_normal((50, 80))
    cov, shrink = ledoit_wolf(x)
    ref_cov, ref_shrink = sk.ledoit_wolf(x)
    assert shrink == pytest.approx(ref_shrink, rel=1e-10)
    np.testing.assert_allclose(cov, ref_cov, rtol=1e-10, atol=1e-14)


def test_ledoit_wolf_variant_defined_when_d_exceeds_n(rng):
    x = rng.standard_normal((64, 128))
    v = affinity_score(x, np.maximum(x, 0), shrinkage="ledoit_wolf")
    assert 0 <= v <= 1


# --- the span-of-rows path (d > 2n) against the d×d path, and both against the literal formulas ---

def _cases(rng):
    """(name, X, Y) chunks with d > n, where the span path is the one `auto` takes when 2n < d."""
    x = rng.standard_normal((64, 300)) * rng.uniform(0.1, 3.0, 300) + 5 * rng.standard_normal(300)
    x2 = rng.standard_normal((40, 1000))
    low = rng.standard_normal((50, 4)) @ rng.standard_normal((4, 200))  # rank-deficient X
    x3 = rng.standard_normal((40, 120))
    return [
        ("tanh 64x300", x, np.tanh(x @ rng.standard_normal((300, 300)) / np.sqrt(300))),
        ("relu 40x1000", x2, np.maximum(x2, 0)),
        ("rank-deficient X", low, np.sin(low) + 0.1 * rng.standard_normal((50, 200))),
        ("rank-deficient X and Y", low, np.tanh(low[:, :1]) * rng.standard_normal(200)),
        ("constant Y", x2[:, :150], np.full((40, 150), 3.3)),
        ("constant X", np.zeros((30, 100)), rng.standard_normal((30, 100))),
        ("X B + c, B SPD", x3, x3 @ spd(rng, 120) + rng.standard_normal(120)),
    ]


@pytest.mark.parametrize("shrinkage", ["none", "ledoit_wolf"])
def test_span_path_equals_direct_path_when_d_exceeds_n(shrinkage, rng):
    for name, x, y in _cases(rng):
        direct = affinity_score(x, y, shrinkage=shrinkage, method="direct")
        span = affinity_score(x, y, shrinkage=shrinkage, method="span")
        assert span == pytest.approx(direct, abs=1e-8), name
        assert affinity_score(x, y, shrinkage=shrinkage) == span, name  # auto takes the span path here
        assert -1e-9 <= span <= 1 + 1e-9, name


def test_affine_spd_map_scores_one_on_both_paths_when_d_exceeds_n(rng):
    x = rng.standard_normal((40, 120))
    y = x @ spd(rng, 120) + rng.standard_normal(120)
    for method in ("direct", "span"):
        assert affinity_score(x, y, method=method) == pytest.approx(1.0, abs=1e-6)
    assert affinity_score(x, np.full((40, 120), -2.0), method="span") == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize("n,d", [(50, 20), (30, 45), (25, 50), (8, 1)])
@pytest.mark.parametrize("shrinkage", ["none", "ledoit_wolf"])
def test_span_path_is_exact_for_any_d(n, d, shrinkage, rng):
    """With d ≤ 2n the span coordinates are a rotation of R^d: no saving, same number."""
    x = rng.standard_normal((n, d))
    y = np.tanh(x @ rng.standard_normal((d, d))) + 0.1 * x
    direct = affinity_score(x, y, shrinkage=shrinkage, method="direct")
    assert affinity_score(x, y, shrinkage=shrinkage, method="span") == pytest.approx(direct, abs=1e-8)
    auto = "map" if n >= d else "direct"  # auto keeps a d×d path here (tests/test_affinity_paths.py)
    assert affinity_score(x, y, shrinkage=shrinkage) == affinity_score(x, y, shrinkage=shrinkage, method=auto)


def literal_affinity(x, y, eps=1e-6, shrinkage="none"):
    """The formulas as written, with d×d matrices: cov + εI, A = affine_ot_map, mapped = (X − m_X)Aᵀ + m_Y."""
    d = x.shape[1]
    if shrinkage == "ledoit_wolf":
        sx, sy = ledoit_wolf(x)[0], ledoit_wolf(y)[0]
    else:
        sx, sy = covariance(x), covariance(y)
    sx, sy = sx + eps * np.eye(d), sy + eps * np.eye(d)
    a = affine_ot_map(sx, sy, eps)
    mapped = (x - x.mean(0)) @ a.T + y.mean(0)
    return 1 - np.sqrt(exact_w2_squared(mapped, y) / (2 * np.trace(sy)))


@pytest.mark.parametrize("n,d", [(60, 10), (30, 50), (20, 90)])
@pytest.mark.parametrize("shrinkage", ["none", "ledoit_wolf"])
def test_both_paths_match_the_literal_formulas(n, d, shrinkage, rng):
    x = rng.standard_normal((n, d)) @ spd(rng, d)
    y = np.maximum(x, 0) + 0.3 * np.sin(3 * x)
    ref = literal_affinity(x, y, shrinkage=shrinkage)
    for method in ("direct", "span"):
        assert affinity_score(x, y, shrinkage=shrinkage, method=method) == pytest.approx(ref, abs=1e-8)


def test_singular_output_covariance_without_regulariser_falls_back_to_symmetric_root(rng):
    x = rng.standard_normal((30, 6))
    y = np.tanh(x[:, :2]) @ rng.standard_normal((2, 6))  # Σ_Y of rank 2 and ε = 0: no Cholesky factor
    ref = literal_affinity(x, y, eps=0.0)
    for method in ("direct", "span"):
        assert affinity_score(x, y, eps=0.0, method=method) == pytest.approx(ref, abs=1e-8)


def test_unknown_method_or_shrinkage_refused(rng):
    x = rng.standard_normal((10, 3))
    with pytest.raises(ValueError, match="method"):
        affinity_score(x, x, method="fast")
    with pytest.raises(ValueError, match="shrinkage"):
        affinity_score(x, x, shrinkage="oas")


def test_exact_w2_recomputes_matched_costs_without_cancellation(rng):
    a = rng.standard_normal((50, 20)) + 1e4  # ‖a‖² ≈ 2e9: the expanded form's rounding is ~1e-6 per pair
    assert exact_w2_squared(a, a[rng.permutation(50)]) == 0.0
    b = a + 1e-6 * rng.standard_normal((50, 20))
    assert exact_w2_squared(a, b) == pytest.approx(np.mean(np.sum((a - b) ** 2, axis=1)), rel=1e-9)


@pytest.mark.parametrize("n,d", [(20, 50), (50, 20)])
def test_ledoit_wolf_shrinkage_only_sees_the_gram_matrix(n, d, rng):
    """Same shrinkage and μ from the rows in R^d, rotated, or as QR coordinates of their span (with d given)."""
    x = rng.standard_normal((n, d)) @ spd(rng, d, 0.1, 5.0)
    xc = x - x.mean(0)
    want = ledoit_wolf_shrinkage(xc)
    _, shrink = ledoit_wolf(x)
    assert want[0] == pytest.approx(shrink, rel=1e-12)
    q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    coords = np.linalg.qr(xc.T, mode="r").T
    for got in (ledoit_wolf_shrinkage(xc @ q), ledoit_wolf_shrinkage(coords, d)):
        assert got == pytest.approx(want, rel=1e-10)


@pytest.mark.parametrize("method", ["direct", "span"])
def test_relative_eps_is_scale_free_for_a_relu_without_bias(method, rng):
    """The paper's absolute ε makes a zero-bias ReLU look linear at small scale; the relative ε does not."""
    d = 8 if method == "direct" else 40
    x = rng.standard_normal((48, d)) @ rng.standard_normal((d, d))
    base = affinity_score(x, np.maximum(x, 0), relative_eps=True, method=method)
    for c in (1e-6, 1e-4, 1e-2, 1e2, 1e4, 1e6):
        xc = c * x
        assert affinity_score(xc, np.maximum(xc, 0), relative_eps=True, method=method) == pytest.approx(base, abs=1e-9)
    absolute = [affinity_score(c * x, np.maximum(c * x, 0), method=method) for c in (1.0, 1e-4)]
    assert absolute[1] - absolute[0] > 0.05  # the absolute variant moves by scale alone
    assert base == pytest.approx(absolute[0], abs=1e-4)  # at unit scale the two agree


def test_relative_eps_constant_and_zero_outputs(rng):
    x = rng.standard_normal((30, 4))
    assert affinity_score(x, np.zeros_like(x), relative_eps=True) == 1.0
    assert 0.0 <= affinity_score(x, np.full_like(x, 3.0), relative_eps=True) <= 1.0

"""A convolution site's X features taken from the convolution's input (graph.conv_means): equal to the mean of
the convolution's output, and the activation stays fused into the convolution in onnxruntime."""

import collections

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from onnxaff.graph import augment_model, discover_sites
from onnxaff.graph.conv_means import CLONE_MACS
from tests.builders import HEADER, with_weights
from tests.conftest import run

# name: (weight shape, Conv attributes, activation, through an Identity (else the conv reads the graph input),
# which way X is computed per the module's rules: pointwise Gemm, window pools, input MatMuls, a clone, or None)
CASES = {
    "pointwise": ((24, 16, 1, 1), "", "Relu", True, "pointwise"),
    "pointwise_no_bias": ((24, 16, 1, 1), "", "Clip", True, "pointwise"),
    "depthwise_s2": ((16, 1, 3, 3), "<group: int = 16, strides: ints = [2, 2], pads: ints = [1, 1, 1, 1]>", "Clip",
                     True, "clone"),
    "depthwise_s2_input": ((16, 1, 3, 3), "<group: int = 16, strides: ints = [2, 2], pads: ints = [1, 1, 1, 1]>",
                           "Clip", False, "input"),
    "depthwise_5x5": ((16, 1, 5, 5), "<group: int = 16, pads: ints = [2, 2, 2, 2]>", "Sigmoid", True, "window"),
    "pointwise_s2": ((24, 16, 1, 1), "<strides: ints = [2, 2]>", "Relu", True, "clone"),  # 16 MACs: a second conv
    "full_3x3": ((24, 16, 3, 3), "<pads: ints = [1, 1, 1, 1]>", "Relu", True, "window"),
    "full_3x3_no_bias": ((24, 16, 3, 3), "<pads: ints = [1, 1, 1, 1]>", "Relu", True, "window"),
    "dilated": ((24, 16, 3, 3), "<dilations: ints = [2, 2], pads: ints = [2, 2, 2, 2]>", "Relu", True, "window"),
    "uneven_pads": ((24, 16, 3, 2), "<pads: ints = [0, 1, 2, 0]>", "HardSwish", True, "window"),
    "grouped": ((24, 4, 3, 3), "<group: int = 4, pads: ints = [1, 1, 1, 1]>", "Relu", True, "window"),
    "full_3x3_s2": ((24, 16, 3, 3), "<strides: ints = [2, 2], pads: ints = [1, 1, 1, 1]>", "Relu", True, None),
    "full_3x3_s2_input": ((24, 16, 3, 3), "<strides: ints = [2, 2], pads: ints = [1, 1, 1, 1]>", "Relu", False,
                          "input"),
    "stem_7x7": ((24, 16, 7, 7), "<strides: ints = [2, 2], pads: ints = [3, 3, 3, 3]>", "Relu", False, "input"),
    "odd_input": ((24, 16, 3, 3), "<strides: ints = [3, 2], dilations: ints = [2, 1], pads: ints = [2, 0, 1, 2]>",
                  "Relu", False, "input"),
    "not_fusable": ((24, 16, 1, 1), "", "Softplus", True, None),
    "same_upper": ((24, 16, 4, 3), '<auto_pad: string = "SAME_UPPER">', "Relu", True, "window"),
    "same_lower_input": ((24, 16, 4, 4), '<auto_pad: string = "SAME_LOWER", strides: ints = [2, 3]>', "Relu", False,
                         "input"),
    "valid": ((24, 16, 3, 3), '<auto_pad: string = "VALID">', "Relu", True, "window"),
}
ADDED = {  # ops a rule appends besides Flatten (and what its last step is: Gemm without groups, else Conv)
    "pointwise": {"GlobalAveragePool": 1, "Gemm": 1},
    "window": {"AveragePool": 2},
    "input": {"MatMul": 2},
    "clone": {"Conv": 1, "GlobalAveragePool": 1},
}


def conv_model(rng, weight_shape, attrs: str, act: str, bias: bool = True, through: bool = True,
               dims: tuple[int, int] = (12, 10)) -> onnx.ModelProto:
    cout = weight_shape[0]
    clip = ", lo, hi" if act == "Clip" else ""
    weights = {"w": (rng.standard_normal(weight_shape) * 0.3).astype(np.float32),
               "lo": np.array(0, np.float32), "hi": np.array(6, np.float32)}
    if bias:
        weights["b"] = rng.standard_normal(cout).astype(np.float32)
    text = HEADER + f""" g (float[N, 16, {dims[0]}, {dims[1]}] x) => (float[N, {cout}, H, W] y) {{
        {"xi = Identity(x)" if through else ""}
        c = Conv{attrs}({"xi" if through else "x"}, w{", b" if bias else ""})
        y = {act}(c{clip})
    }}"""
    return onnx.shape_inference.infer_shapes(with_weights(text, **weights))  # as load_model does


def augmented(model: onnx.ModelProto):
    """(the model's one site, the augmented model, its outputs by site) with mean features."""
    sites = discover_sites(model)
    (site,) = [s for s in sites if s.ok]
    aug, outs = augment_model(model, sites, "mean")
    return site, aug, outs


def conv_attrs(model: onnx.ModelProto) -> dict:
    (node,) = [n for n in model.graph.node if n.op_type == "Conv"]
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def conv2d(x, w, b=None, attrs: dict | None = None) -> np.ndarray:
    """Brute-force float64 convolution (ONNX Conv: explicit pads, strides, dilations, group) for the reference."""
    attrs = attrs or {}
    group = attrs.get("group", 1)
    sh, sw = attrs.get("strides", [1, 1])
    dh, dw = attrs.get("dilations", [1, 1])
    pt, pl, pb, pr = attrs.get("pads", [0, 0, 0, 0])
    auto = attrs.get("auto_pad", b"NOTSET")
    if auto in (b"SAME_UPPER", b"SAME_LOWER"):  # out = ceil(in / stride); the odd pad's extra at the end (UPPER)
        pads = []
        for i, k, s_, d in ((x.shape[2], w.shape[2], sh, dh), (x.shape[3], w.shape[3], sw, dw)):
            total = max(0, (-(-i // s_) - 1) * s_ + (k - 1) * d + 1 - i)
            pads.append((total // 2, total - total // 2) if auto == b"SAME_UPPER" else (total - total // 2, total // 2))
        (pt, pb), (pl, pr) = pads
    x, w = x.astype(np.float64), w.astype(np.float64)
    xp = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    cout, cin_g, kh, kw = w.shape
    ho, wo = (xp.shape[2] - dh * (kh - 1) - 1) // sh + 1, (xp.shape[3] - dw * (kw - 1) - 1) // sw + 1
    out = np.zeros((x.shape[0], cout, ho, wo))
    per = cout // group
    for co in range(cout):
        g = co // per
        for ci in range(cin_g):
            for i in range(kh):
                for j in range(kw):
                    rows = slice(i * dh, i * dh + sh * (ho - 1) + 1, sh)
                    cols = slice(j * dw, j * dw + sw * (wo - 1) + 1, sw)
                    window = xp[:, g * cin_g + ci, rows, cols]
                    out[:, co] += w[co, ci, i, j] * window
    return out + (0 if b is None else b.astype(np.float64)[None, :, None, None])


def _added(model: onnx.ModelProto, aug: onnx.ModelProto) -> collections.Counter:
    """The ops appended for X's features (besides Flatten)."""
    return collections.Counter(n.op_type for n in aug.graph.node[len(model.graph.node):]
                               if n.op_type != "Flatten" and ".x/" in n.name)


@pytest.mark.parametrize("name", sorted(CASES))
def test_x_features_equal_the_mean_of_the_convolution_output(name, rng):
    shape, attrs, act, through, way = CASES[name]
    model = conv_model(rng, shape, attrs, act, bias="no_bias" not in name, through=through)
    site, aug, outs = augmented(model)
    onnx.checker.check_model(aug, full_check=True)
    added = _added(model, aug)
    # the convolution's output keeps one reader (the activation) exactly when a rule applies
    readers = [n.op_type for n in aug.graph.node if "c" in n.input]
    assert readers == ([act] if way else [act, "GlobalAveragePool"])
    if way in ("window", "input"):
        grouped = conv_attrs(model).get("group", 1) != 1
        assert added == collections.Counter({**ADDED[way], "Conv" if grouped else "Gemm": 1})
    elif way:
        assert added == collections.Counter(ADDED[way])
    if way == "clone":
        assert np.prod(shape[1:]) <= CLONE_MACS
    x = rng.standard_normal((5, 16, 12, 10)).astype(np.float32) * 2 + 0.5
    got = run(aug, {"x": x})
    init = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    conv = conv2d(x, init["w"], init.get("b"), conv_attrs(model))
    want = conv.mean(axis=(2, 3))
    # float32 rounding of a mean over P = H·W values and of a sum over C_in·K products: both well under 1e-5
    scale = np.abs(conv).max()
    np.testing.assert_allclose(got[outs[site.index].x], want, rtol=0, atol=1e-5 * scale)
    np.testing.assert_allclose(got[outs[site.index].y], run(model, {"x": x})["y"].mean(axis=(2, 3)), rtol=1e-5,
                               atol=1e-6)


def test_a_window_wider_than_a_pad_allows_keeps_the_mean_of_the_output(rng):
    """onnxruntime refuses an AveragePool whose pads reach its window: a 3×3 convolution padded by 1 on a 1×1 map
    (the window is 1) keeps the plain mean of its output, and still gives the right number."""
    model = conv_model(rng, (24, 16, 3, 3), "<pads: ints = [1, 1, 1, 1]>", "Relu", dims=(1, 1))
    site, aug, outs = augmented(model)
    assert [n.op_type for n in aug.graph.node if "c" in n.input] == ["Relu", "GlobalAveragePool"]
    x = rng.standard_normal((4, 16, 1, 1)).astype(np.float32)
    init = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    want = conv2d(x, init["w"], init["b"], conv_attrs(model)).mean(axis=(2, 3))
    np.testing.assert_allclose(run(aug, {"x": x})[outs[site.index].x], want, rtol=0, atol=1e-5 * np.abs(want).max())


RESIDUAL = HEADER + """ g (float[N, 16, 12, 10] x) => (float[N, 16, 12, 10] y) {{
    xi = Conv(x, w0)
    c = Conv<pads: ints = [1, 1, 1, 1]>(xi, w, b)
    s = Add({terms})
    y = Relu(s)
}}"""


@pytest.mark.parametrize("terms, rule", [("c, xi", True), ("xi, c", True), ("c, bias", True), ("grid, c", False)])
def test_a_residual_sum_is_the_convolution_s_mean_plus_the_other_term_s(terms, rule, rng):
    """Conv → Add → Relu (a residual block's end, or a bias kept apart): onnxruntime fuses the Add into the
    convolution, so X = the Add's output is averaged as the convolution's mean (from its input) plus the other
    term's, a [16, 1, 1] constant's per channel; a constant varying over positions (a [12, 10] grid) keeps the
    mean of the sum."""
    weights = {"w0": (rng.standard_normal((16, 16, 1, 1)) * 0.3).astype(np.float32),
               "w": (rng.standard_normal((16, 16, 3, 3)) * 0.3).astype(np.float32),
               "b": rng.standard_normal(16).astype(np.float32),
               "bias": rng.standard_normal((16, 1, 1)).astype(np.float32),
               "grid": rng.standard_normal((12, 10)).astype(np.float32)}
    model = onnx.shape_inference.infer_shapes(with_weights(RESIDUAL.format(terms=terms), **weights))
    site, aug, outs = augmented(model)
    onnx.checker.check_model(aug, full_check=True)
    readers = [n.op_type for n in aug.graph.node if "s" in n.input]
    assert readers == (["Relu"] if rule else ["Relu", "GlobalAveragePool"])
    assert [n.op_type for n in aug.graph.node if "c" in n.input] == ["Add"]
    x = rng.standard_normal((3, 16, 12, 10)).astype(np.float32)
    xi = conv2d(x, weights["w0"]).astype(np.float32)
    other = xi if "xi" in terms else weights["bias" if "bias" in terms else "grid"].astype(np.float64)
    want = (conv2d(xi, weights["w"], weights["b"], {"pads": [1, 1, 1, 1]}) + other).mean(axis=(2, 3))
    np.testing.assert_allclose(run(aug, {"x": x})[outs[site.index].x], want, rtol=0, atol=1e-5 * np.abs(want).max())


def _fused(model: onnx.ModelProto, path) -> int:
    """Convolutions onnxruntime ran with an activation fused in (its optimised graph, written to path)."""
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.optimized_model_filepath = str(path)
    ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sum(1 for n in onnx.load(str(path)).graph.node
               if n.op_type in ("Conv", "FusedConv") and any(a.name == "activation" for a in n.attribute))


@pytest.mark.parametrize("name", ["pointwise", "depthwise_s2", "depthwise_5x5", "full_3x3", "stem_7x7", "residual"])
def test_the_activation_stays_fused_in_onnxruntime(name, rng, tmp_path):
    """The point of the rule: as many fused convolutions in the augmented model as in the plain one (on a CPU
    where onnxruntime fuses at all)."""
    if name == "residual":
        weights = {"w0": (rng.standard_normal((16, 16, 1, 1)) * 0.3).astype(np.float32),
                   "w": (rng.standard_normal((16, 16, 3, 3)) * 0.3).astype(np.float32),
                   "b": rng.standard_normal(16).astype(np.float32), "bias": np.zeros((16, 1, 1), np.float32)}
        model = onnx.shape_inference.infer_shapes(with_weights(RESIDUAL.format(terms="c, xi"), **weights))
    else:
        shape, attrs, act, through, _ = CASES[name]
        model = conv_model(rng, shape, attrs, act, through=through)
    plain = _fused(model, tmp_path / "plain.onnx")
    if plain == 0:
        pytest.skip("this onnxruntime build fuses no activation into a Conv")
    aug, _ = augment_model(model, discover_sites(model), "mean")
    assert _fused(aug, tmp_path / "aug.onnx") == plain


@pytest.mark.parametrize("opset", [6, 9, 10, 11])
@pytest.mark.parametrize("bias", [True, False])
def test_older_opsets_get_a_graph_onnxruntime_loads(opset, bias, rng):
    """Gemm's C is optional only from opset 11 and broadcasts only from 7: a 1×1 convolution without a bias at
    opset 10 made the whole augmented model unloadable (review); where no form fits, the output's mean."""
    model = conv_model(rng, (24, 16, 1, 1), "", "Relu", bias=bias)
    model.opset_import[0].version = opset
    site, aug, outs = augmented(model)
    x = rng.standard_normal((3, 16, 12, 10)).astype(np.float32)
    got = run(aug, {"x": x})[outs[site.index].x]
    init = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    want = conv2d(x, init["w"], init.get("b")).mean(axis=(2, 3))
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * np.abs(want).max())


@pytest.mark.parametrize("name", ["pointwise", "depthwise_s2", "full_3x3"])
def test_weights_left_on_disk_are_referred_to_not_read(name, rng, tmp_path):
    """Exporters write external data (torch's dynamo exporter by default): the copies refer to the same bytes on
    disk, and the features still equal the convolution's mean."""
    from onnxaff.graph.load import load_model

    shape, attrs, act, through, way = CASES[name]
    model = conv_model(rng, shape, attrs, act, through=through)
    init = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    onnx.save(model, tmp_path / "m.onnx", save_as_external_data=True, all_tensors_to_one_file=True,
              location="m.data", size_threshold=0)
    loaded = load_model(tmp_path / "m.onnx")
    sites = discover_sites(loaded.model)
    (site,) = [s for s in sites if s.ok]
    aug, outs = augment_model(loaded.model, sites, "mean")
    assert _added(loaded.model, aug)[{"window": "Gemm", "pointwise": "Gemm", "clone": "Conv"}[way]] == 1
    copies = [t for t in aug.graph.initializer if t.name.endswith(".weight")]
    assert all(t.data_location == onnx.TensorProto.EXTERNAL for t in copies)
    assert len(copies) == (way == "clone")  # a Gemm reads the weights through a Flatten: nothing copied
    onnx.save(aug, tmp_path / "aug.onnx")  # beside m.data, which its references name
    x = rng.standard_normal((3, 16, 12, 10)).astype(np.float32)
    sess = ort.InferenceSession(str(tmp_path / "aug.onnx"), providers=["CPUExecutionProvider"])
    got = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, {"x": x}), strict=True))
    want = conv2d(x, init["w"], init.get("b"), conv_attrs(model)).mean(axis=(2, 3))
    np.testing.assert_allclose(got[outs[site.index].x], want, rtol=0, atol=1e-5 * np.abs(want).max())


@pytest.mark.parametrize("through, attrs", [(False, "<strides: ints = [2], pads: ints = [1, 2]>"),
                                            (True, "<dilations: ints = [2], pads: ints = [2, 1]>")])
def test_a_one_dimensional_convolution_s_mean_is_taken_the_same_ways(through, attrs, rng):
    """Conv1d (audio, text): the graph input's MatMul at any stride, or one AveragePool, on [N, C, L]."""
    weights = {"w": (rng.standard_normal((8, 16, 3)) * 0.3).astype(np.float32),
               "b": rng.standard_normal(8).astype(np.float32)}
    text = HEADER + f""" g (float[N, 16, 20] x) => (float[N, 8, L] y) {{
        {"xi = Identity(x)" if through else ""}
        c = Conv{attrs}({"xi" if through else "x"}, w, b)
        y = Relu(c)
    }}"""
    model = onnx.shape_inference.infer_shapes(with_weights(text, **weights))
    site, aug, outs = augmented(model)
    assert _added(model, aug)[("AveragePool" if through else "MatMul")] == 1
    assert [n.op_type for n in aug.graph.node if "c" in n.input] == ["Relu"]
    x = rng.standard_normal((4, 16, 20)).astype(np.float32)
    a = conv_attrs(model)
    lo, hi = a["pads"]
    stride, dil = a.get("strides", [1])[0], a.get("dilations", [1])[0]
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (lo, hi)))
    out_len = (xp.shape[2] - dil * 2 - 1) // stride + 1
    conv = sum(np.einsum("oc,ncl->nol", weights["w"][:, :, k].astype(np.float64),
                         xp[:, :, k * dil:k * dil + stride * (out_len - 1) + 1:stride]) for k in range(3))
    want = (conv + weights["b"][None, :, None]).mean(axis=2)
    np.testing.assert_allclose(run(aug, {"x": x})[outs[site.index].x], want, rtol=0, atol=1e-5 * np.abs(want).max())


@pytest.mark.parametrize("opset, spatial, rule", [(17, None, True), (9, None, True), (7, 1, True), (7, 0, False)])
def test_a_batch_normalisation_the_export_did_not_fold_is_applied_to_the_means(opset, spatial, rule, rng, tmp_path):
    """Conv → BatchNormalization → activation (PaddlePaddle's exports): onnxruntime folds the normalisation into the
    convolution and fuses the activation, so X (the normalisation's output) is the same normalisation of the
    convolution's means; spatial=0 (per position, opsets 7–8) keeps the mean of the output."""
    c = 16
    weights = {"w": (rng.standard_normal((c, 16, 3, 3)) * 0.3).astype(np.float32),
               "b": rng.standard_normal(c).astype(np.float32),
               "g": rng.uniform(0.5, 2, c).astype(np.float32), "beta": rng.standard_normal(c).astype(np.float32),
               "mu": rng.standard_normal(c).astype(np.float32), "var": rng.uniform(0.5, 2, c).astype(np.float32)}
    if spatial == 0:  # per position: statistics of shape [C, H, W]
        for k in ("g", "beta", "mu", "var"):
            weights[k] = np.repeat(weights[k][:, None, None], 120, axis=1).reshape(c, 12, 10)
    extra = "" if spatial is None else f"<spatial: int = {spatial}>"
    header = f'<ir_version: 7, opset_import: ["" : {opset}]>'
    text = header + f""" g (float[N, 16, 12, 10] x) => (float[N, {c}, 12, 10] y) {{
        xi = Identity(x)
        conv = Conv<pads: ints = [1, 1, 1, 1]>(xi, w, b)
        s = BatchNormalization{extra}(conv, g, beta, mu, var)
        y = Relu(s)
    }}"""
    model = onnx.shape_inference.infer_shapes(with_weights(text, **weights))
    site, aug, outs = augmented(model)
    readers = [n.op_type for n in aug.graph.node if "s" in n.input]
    assert readers == (["Relu"] if rule else ["Relu", "GlobalAveragePool"])
    x = rng.standard_normal((3, 16, 12, 10)).astype(np.float32)
    conv = conv2d(x, weights["w"], weights["b"], {"pads": [1, 1, 1, 1]})
    shape = (1, c, 1, 1) if spatial != 0 else (1, c, 12, 10)
    g, beta, mu, var = (weights[k].astype(np.float64).reshape(shape) for k in ("g", "beta", "mu", "var"))
    want = (g * (conv - mu) / np.sqrt(var + 1e-5) + beta).mean(axis=(2, 3))
    np.testing.assert_allclose(run(aug, {"x": x})[outs[site.index].x], want, rtol=0, atol=1e-5 * np.abs(want).max())
    if rule and opset == 17:
        plain = _fused(model, tmp_path / "plain.onnx")
        if plain:
            assert _fused(aug, tmp_path / "aug.onnx") == plain

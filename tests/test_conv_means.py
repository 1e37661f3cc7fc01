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

# (name, weight shape, Conv attributes, activation): which way X is computed, per the module's rules
CASES = {
    "pointwise": ((24, 16, 1, 1), "", "Relu", "Gemm"),
    "pointwise_no_bias": ((24, 16, 1, 1), "", "Clip", "Gemm"),
    "depthwise_s2": ((16, 1, 3, 3), "<group: int = 16, strides: ints = [2, 2], pads: ints = [1, 1, 1, 1]>", "Clip",
                     "Conv"),
    "depthwise_5x5": ((16, 1, 5, 5), "<group: int = 16, pads: ints = [2, 2, 2, 2]>", "Sigmoid", "Conv"),
    "pointwise_s2": ((24, 16, 1, 1), "<strides: ints = [2, 2]>", "Relu", "Conv"),  # 16 MACs: a second conv
    "full_3x3": ((24, 16, 3, 3), "<pads: ints = [1, 1, 1, 1]>", "Relu", None),  # 144 MACs: the output's mean
    "not_fusable": ((24, 16, 1, 1), "", "Softplus", None),
}


def conv_model(rng, weight_shape, attrs: str, act: str, bias: bool = True) -> onnx.ModelProto:
    cout = weight_shape[0]
    clip = ", lo, hi" if act == "Clip" else ""
    weights = {"w": (rng.standard_normal(weight_shape) * 0.3).astype(np.float32),
               "lo": np.array(0, np.float32), "hi": np.array(6, np.float32)}
    if bias:
        weights["b"] = rng.standard_normal(cout).astype(np.float32)
    text = HEADER + f""" g (float[N, 16, 12, 10] x) => (float[N, {cout}, H, W] y) {{
        c = Conv{attrs}(x, w{", b" if bias else ""})
        y = {act}(c{clip})
    }}"""
    return with_weights(text, **weights)


def conv2d(x, w, b=None, attrs="") -> np.ndarray:
    """Brute-force float64 convolution (ONNX Conv with explicit pads, strides and group) for the reference."""
    group = int(attrs.split("group: int = ")[1].split(",")[0].rstrip(">")) if "group" in attrs else 1
    stride = int(attrs.split("strides: ints = [")[1][0]) if "strides" in attrs else 1
    pad = int(attrs.split("pads: ints = [")[1][0]) if "pads" in attrs else 0
    x, w = x.astype(np.float64), w.astype(np.float64)
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    cout, cin_g, kh, kw = w.shape
    ho, wo = (xp.shape[2] - kh) // stride + 1, (xp.shape[3] - kw) // stride + 1
    out = np.zeros((x.shape[0], cout, ho, wo))
    per = cout // group
    for co in range(cout):
        g = co // per
        for ci in range(cin_g):
            for i in range(kh):
                for j in range(kw):
                    window = xp[:, g * cin_g + ci, i:i + stride * ho:stride, j:j + stride * wo:stride]
                    out[:, co] += w[co, ci, i, j] * window
    return out + (0 if b is None else b.astype(np.float64)[None, :, None, None])


@pytest.mark.parametrize("name", sorted(CASES))
def test_x_features_equal_the_mean_of_the_convolution_output(name, rng):
    shape, attrs, act, way = CASES[name]
    model = conv_model(rng, shape, attrs, act, bias=name != "pointwise_no_bias")
    sites = discover_sites(model)
    (site,) = [s for s in sites if s.ok]
    aug, outs = augment_model(model, sites, "mean")
    onnx.checker.check_model(aug, full_check=True)
    added = collections.Counter(n.op_type for n in aug.graph.node[len(model.graph.node):])
    # the convolution's output keeps one reader (the activation) exactly when a rule applies
    readers = [n.op_type for n in aug.graph.node if "c" in n.input]
    assert readers == ([act] if way else [act, "GlobalAveragePool"])
    if way == "Gemm":
        assert added["Gemm"] == 1 and added["Conv"] == 0
    elif way == "Conv":
        assert added["Conv"] == 1 and np.prod(shape[1:]) <= CLONE_MACS
    x = rng.standard_normal((5, 16, 12, 10)).astype(np.float32) * 2 + 0.5
    got = run(aug, {"x": x})
    init = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    conv = conv2d(x, init["w"], init.get("b"), attrs)
    want = conv.mean(axis=(2, 3))
    # float32 rounding of a mean over P = H·W values and of a sum over C_in products: both well under 1e-5
    scale = np.abs(conv).max()
    np.testing.assert_allclose(got[outs[site.index].x], want, rtol=0, atol=1e-5 * scale)
    np.testing.assert_allclose(got[outs[site.index].y], run(model, {"x": x})["y"].mean(axis=(2, 3)), rtol=1e-5,
                               atol=1e-6)


def _fused(model: onnx.ModelProto, path) -> int:
    """Convolutions onnxruntime ran with an activation fused in (its optimised graph, written to path)."""
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.optimized_model_filepath = str(path)
    ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sum(1 for n in onnx.load(str(path)).graph.node
               if n.op_type in ("Conv", "FusedConv") and any(a.name == "activation" for a in n.attribute))


@pytest.mark.parametrize("name", ["pointwise", "depthwise_s2"])
def test_the_activation_stays_fused_in_onnxruntime(name, rng, tmp_path):
    """The point of the rule: as many fused convolutions in the augmented model as in the plain one (on a CPU
    where onnxruntime fuses at all)."""
    shape, attrs, act, _ = CASES[name]
    model = conv_model(rng, shape, attrs, act)
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
    sites = discover_sites(model)
    (site,) = [s for s in sites if s.ok]
    aug, outs = augment_model(model, sites, "mean")
    x = rng.standard_normal((3, 16, 12, 10)).astype(np.float32)
    got = run(aug, {"x": x})[outs[site.index].x]
    init = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    want = conv2d(x, init["w"], init.get("b")).mean(axis=(2, 3))
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * np.abs(want).max())


@pytest.mark.parametrize("name", ["pointwise", "depthwise_s2"])
def test_weights_left_on_disk_are_referred_to_not_read(name, rng, tmp_path):
    """Exporters write external data (torch's dynamo exporter by default): the copies refer to the same bytes on
    disk, and the features still equal the convolution's mean."""
    from onnxaff.graph.load import load_model

    shape, attrs, act, way = CASES[name]
    model = conv_model(rng, shape, attrs, act)
    init = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    onnx.save(model, tmp_path / "m.onnx", save_as_external_data=True, all_tensors_to_one_file=True,
              location="m.data", size_threshold=0)
    loaded = load_model(tmp_path / "m.onnx")
    sites = discover_sites(loaded.model)
    (site,) = [s for s in sites if s.ok]
    aug, outs = augment_model(loaded.model, sites, "mean")
    added = collections.Counter(n.op_type for n in aug.graph.node[len(loaded.model.graph.node):])
    assert added[way] == 1
    copies = [t for t in aug.graph.initializer if t.name.endswith(".weight")]
    assert copies and all(t.data_location == onnx.TensorProto.EXTERNAL for t in copies)
    onnx.save(aug, tmp_path / "aug.onnx")  # beside m.data, which its references name
    x = rng.standard_normal((3, 16, 12, 10)).astype(np.float32)
    sess = ort.InferenceSession(str(tmp_path / "aug.onnx"), providers=["CPUExecutionProvider"])
    got = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, {"x": x}), strict=True))
    want = conv2d(x, init["w"], init.get("b"), attrs).mean(axis=(2, 3))
    np.testing.assert_allclose(got[outs[site.index].x], want, rtol=0, atol=1e-5 * np.abs(want).max())

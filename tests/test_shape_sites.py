"""Shapes a site or a count reads (issue 50): no site on index or shape arithmetic, D from the shapes the graph
computes rather than a value_info that lies, and MACs counted on the shapes a run fed."""

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import onnxaff
from onnxaff.graph import discover_sites
from tests.builders import HEADER, with_weights
from tests.conftest import parse, run_cli

HEAD = '<ir_version: 8, opset_import: ["" : 17]>\n'
LAYER = "<float[6, 6] w = {" + ", ".join(str(round(0.1 * ((7 * k) % 11 - 5), 2)) for k in range(36)) + "}>"

# DeBERTa-v2's relative positions (TorchScript export): int64 indices clipped to ±k, then used as data.
INT_CLIP_OF_DATA = HEAD + f"""g (float[N, 6] x, int64[N, 6] pos) => (float[N, 6] y) {LAYER} {{
    h = MatMul(x, w)
    lo = Constant<value = int64 {{-2}}>()
    hi = Constant<value = int64 {{2}}>()
    c = Clip(pos, lo, hi)
    cf = Cast<to = 1>(c)
    a = Add(h, cf)
    y = MatMul(a, w)
}}"""
# The same Clip on positions computed from the input's shape (Shape → Gather → Range → Sub).
INT_CLIP_OF_SHAPE = HEAD + f"""g (float[N, 6] x) => (float[N, 6] y) {LAYER} {{
    h = MatMul(x, w)
    s = Shape(x)
    one = Constant<value = int64 {{1}}>()
    t = Gather<axis = 0>(s, one)
    zero = Constant<value = int64 {{0}}>()
    r = Range(zero, t, one)
    u = Unsqueeze(r, one)
    rel = Sub(r, u)
    lo = Constant<value = int64 {{-2}}>()
    hi = Constant<value = int64 {{2}}>()
    c = Clip(rel, lo, hi)
    cf = Cast<to = 1>(c)
    m = ReduceMean<axes = [0], keepdims = 0>(cf)
    a = Add(h, m)
    y = MatMul(a, w)
}}"""


def same_padding(dtype: int, clip: str) -> str:
    """timm's "same" padding (TorchScript EfficientNetV2): the padding of H, ceil(H / 2) clamped at 0, computed
    in floating point (dtype 1 float, 10 float16) from Shape; the data only goes through Pad and a Relu."""
    return HEAD + f"""g (float[N, 3, H, W] x) => (float[N, 3, ?, ?] y) {{
    s = Shape(x)
    two_i = Constant<value = int64 {{2}}>()
    hh = Gather<axis = 0>(s, two_i)
    hf = Cast<to = {dtype}>(hh)
    two = Constant<value_float = 2.0>()
    two_t = Cast<to = {dtype}>(two)
    q = Div(hf, two_t)
    c = Ceil(q)
    p = {clip}
    pi = Cast<to = 7>(p)
    one = Constant<value = int64 {{1}}>()
    pv = Reshape(pi, one)
    z6 = Constant<value = int64[6] {{0, 0, 0, 0, 0, 0}}>()
    pads = Concat<axis = 0>(z6, pv, pv)
    xp = Pad(x, pads)
    y = Relu(xp)
}}"""


@pytest.mark.parametrize("text", [INT_CLIP_OF_DATA, INT_CLIP_OF_SHAPE], ids=["data", "shape"])
def test_int64_clip_of_indices_is_no_site(text):
    assert discover_sites(parse(text)) == []


@pytest.mark.parametrize("dtype", [1, 10], ids=["float32", "float16"])
@pytest.mark.parametrize("clip", ["Clip(c, z)", "Relu(c)", "Max(c, z)"])
def test_clamp_of_shape_arithmetic_is_no_site(dtype, clip):
    text = same_padding(dtype, clip).replace("    p = ", f"    zf = Constant<value_float = 0.0>()\n    z = Cast<to = "
                                             f"{dtype}>(zf)\n    p = ")
    sites = discover_sites(parse(text))
    assert [(s.kind, s.input, s.status) for s in sites] == [("relu", "xp", "ok")]  # only the Relu of the data


def lying_value_info(rng, claim: int = 4) -> onnx.ModelProto:
    """x·w (w 8×16) → Relu, with a value_info that declares the MatMul's output [N, claim] (real: [N, 16])."""
    model = with_weights(HEADER + """ g (float[N, 8] x) => (float[N, 16] y) {
        h = MatMul(x, w)
        y = Relu(h)
    }""", w=rng.standard_normal((8, 16)).astype(np.float32))
    model.graph.value_info.append(helper.make_tensor_value_info("h", TensorProto.FLOAT, ["N", claim]))
    onnx.checker.check_model(model)
    return model


@pytest.mark.parametrize("external", [False, True], ids=["inline", "external_data"])
def test_sites_takes_d_from_the_graph_not_a_lying_value_info(tmp_path, capfd, rng, external):
    path = tmp_path / "lie.onnx"
    onnx.save(lying_value_info(rng), path, save_as_external_data=external, size_threshold=0, location="lie.bin")
    code, out, err = run_cli(capfd, "sites", path, "--format", "json")
    assert code == 0, err
    (site,) = json.loads(out)["sites"] if isinstance(json.loads(out), dict) else json.loads(out)
    assert site["input_shape"] == ["N", 16]
    assert "value_info declares h as [N, 4], but its graph computes [N, 16]" in err
    (found,) = discover_sites(lying_value_info(rng))
    assert found.input_shape == ["N", 16]


def test_analyze_uses_the_real_d_and_scores_as_the_honest_twin(tmp_path, rng):
    """The twin is the same model without the value_info: same code, same machine, same data, so the scores are
    the same to the bit."""
    lying = lying_value_info(np.random.default_rng(1))
    honest = onnx.ModelProto.FromString(lying.SerializeToString())
    del honest.graph.value_info[:]
    x = rng.standard_normal((256, 8)).astype(np.float32)
    sigs = [onnxaff.analyze(m, x, progress=False) for m in (lying, honest)]
    (lied, told) = (s.sites[0] for s in sigs)
    assert lied["dim"] == told["dim"] == 16 and lied["input_shape"] == ["N", 16]
    assert lied["metrics"]["affinity"]["mean"] == told["metrics"]["affinity"]["mean"]
    assert any("value_info declares h" in w for w in sigs[0].warnings)

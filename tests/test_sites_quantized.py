"""Quantized models: Q→DQ pairs are transparent to discovery, QOperator activations are expanded and found.

The fixtures (tests/fixtures/quantized/build.py) are one float activation zoo and it quantized by onnxruntime's
`quantize_static` to QDQ and to QOperator; the inline graphs put a Q→DQ pair inside each decomposed form.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest

import onnxaff
from onnxaff.analysis.sitelist import list_sites, probe_feed, resolve_unknown_ranks
from onnxaff.graph import augment_model, discover_sites
from onnxaff.graph.load import from_proto, load_model
from onnxaff.runtime.sessions import Runner
from tests.conftest import FIXTURES, parse, run

QUANTIZED = FIXTURES / "quantized"
KINDS = ["silu", "mish", "hardswish", "gelu_tanh", "gelu", "sigmoid", "leaky_relu", "softmax"]


def qdq_text(body: str, dq_scale: str = "s") -> str:
    """A [N, 4] graph whose `P(t)` reads t through QuantizeLinear → DequantizeLinear (scale 0.01, zero point 128)."""
    lines, k = [], 0
    for line in body.strip().splitlines():
        while "P(" in line:
            start = line.index("P(")
            t = line[start + 2:line.index(")", start)]
            lines += [f"q{k} = QuantizeLinear({t}, s, z)", f"d{k} = DequantizeLinear(q{k}, {dq_scale}, z)"]
            line = line.replace(f"P({t})", f"d{k}", 1)
            k += 1
        lines.append(line)
    return ('<ir_version: 8, opset_import: ["" : 17]> g (float[N, 4] x) => (float[N, 4] y) '
            '<float s = {0.01}, float s2 = {0.02}, uint8 z = {128}, float half = {0.5}, float one = {1.0}, '
            'float r2 = {1.4142135}, float c = {0.044715}, float k = {0.7978846}> {' + "\n".join(lines) + "}")


FORMS = {
    "silu": "a = Sigmoid(x)\ny = Mul(x, P(a))",
    "mish": "a = Softplus(x)\nt = Tanh(a)\ny = Mul(x, P(t))",
    "hardswish": "h = HardSigmoid<alpha: float = 0.16666667, beta: float = 0.5>(x)\ny = Mul(x, P(h))",
    "gelu_tanh": """sq = Mul(x, x)
cube = Mul(P(sq), x)
cc = Mul(P(cube), c)
inner = Add(x, P(cc))
sc = Mul(P(inner), k)
t = Tanh(P(sc))
t1 = Add(P(t), one)
hx = Mul(x, half)
y = Mul(P(hx), P(t1))""",
    "gelu": "d = Div(x, r2)\ne = Erf(d)\ne1 = Add(P(e), one)\nm = Mul(x, P(e1))\ny = Mul(P(m), half)",
}


@pytest.mark.parametrize("kind", sorted(FORMS))
def test_a_qdq_pair_inside_a_decomposed_activation_is_transparent(kind):
    model = parse(qdq_text(FORMS[kind]))
    sites = discover_sites(model)
    assert [(s.kind, s.input, s.output) for s in sites] == [(kind, "x", "y")]
    # X and Y are the model's own tensors: onnxruntime's y is the quantized form of the activation of x.
    x = np.linspace(-3, 3, 32, dtype=np.float32).reshape(8, 4)
    raw, outs = augment_model(model, sites, raw=True)
    got = run(raw, {"x": x})
    np.testing.assert_array_equal(got[outs[0].x], x)
    np.testing.assert_array_equal(got[outs[0].y], got["y"])


def test_a_pair_of_two_scales_is_no_identity():
    # DequantizeLinear with another scale than its QuantizeLinear doubles the gate: not a SiLU, its Sigmoid alone.
    sites = discover_sites(parse(qdq_text(FORMS["silu"], dq_scale="s2")))
    assert [s.kind for s in sites] == ["sigmoid"]


def test_a_region_begins_after_the_pair_so_x_is_what_the_activation_reads():
    sites = discover_sites(parse(qdq_text("a = Sigmoid(P(x))\ny = Mul(d0, a)")))
    assert [(s.kind, s.input, s.params["quantized"]["x"]) for s in sites] == [
        ("silu", "d0", {"scale": pytest.approx(0.01), "zero_point": 128})]


def test_dedicated_pairs_meet_at_the_float_tensor_before_them():
    # DedicatedQDQPair: the Sigmoid and the Mul each read x through a pair of their own.
    model = parse(qdq_text("a = Sigmoid(P(x))\ny = Mul(P(x), P(a))"))
    assert [n.input[0] for n in model.graph.node if n.op_type == "QuantizeLinear"] == ["x", "x", "a"]
    sites = discover_sites(model)
    assert [(s.kind, s.input, s.params["quantized"]["x"]["zero_point"]) for s in sites] == [("silu", "x", 128)]
    # One pair alone is not opened on: the same graph with one pair reading x is a SiLU of its DQ output.
    sites = discover_sites(parse(qdq_text("a = Sigmoid(P(x))\ny = Mul(d0, P(a))")))
    assert [(s.kind, s.input) for s in sites] == [("silu", "d0")]


def _kinds(name: str) -> list:
    loaded = load_model(QUANTIZED / f"quant_zoo_{name}.onnx")
    return [s.kind for s in list_sites(loaded).activations], loaded


def test_the_qdq_model_has_the_float_models_sites():
    float_kinds, _ = _kinds("float")
    kinds, loaded = _kinds("qdq")
    assert float_kinds == kinds == KINDS
    found = list_sites(loaded, explain=True)
    assert found.misses == []  # no pair is taken for a non-linearity left unexplained
    for s in found.activations:
        assert s.input.endswith("_DequantizeLinear_Output")
        assert set(s.params["quantized"]) == {"x", "y"}


def test_qoperator_activations_are_expanded_and_found():
    kinds, loaded = _kinds("qop")
    assert kinds == KINDS
    assert loaded.notes and "QLinearSigmoid ×2" in loaded.notes[0]
    assert not [n.op_type for n in loaded.model.graph.node if n.op_type in
                ("QLinearSigmoid", "QLinearLeakyRelu", "QLinearSoftmax", "QLinearMul", "QLinearAdd")]


def _with_outputs(model: onnx.ModelProto, names: list[str]) -> onnx.ModelProto:
    model = onnx.ModelProto.FromString(model.SerializeToString())
    model.graph.output.extend(onnx.helper.make_empty_tensor_value_info(n) for n in names)
    return model


def test_the_expansion_computes_what_onnxruntime_computes_to_the_quantisation_step():
    original = onnx.load(QUANTIZED / "quant_zoo_qop.onnx")
    expanded = from_proto(original).model
    rewritten = [n.output[0] for n in original.graph.node
                 if n.op_type in ("QLinearSigmoid", "QLinearLeakyRelu", "QLinearSoftmax", "QLinearMul", "QLinearAdd")]
    x = np.random.default_rng(3).normal(0, 1, (16, 3, 8, 8)).astype(np.float32)
    want, got = run(_with_outputs(original, rewritten), {"x": x}), run(_with_outputs(expanded, rewritten), {"x": x})
    for name in rewritten:  # every integer output within one step (rounding of a tie)
        assert np.abs(want[name].astype(int) - got[name].astype(int)).max() <= 1, name
    scale = onnx.numpy_helper.to_array(next(t for t in original.graph.initializer if t.name == "y_scale"))
    assert np.abs(want["y"] - got["y"]).max() <= scale + 1e-7


def test_observed_x_and_y_are_the_dequantized_tensors():
    original = onnx.load(QUANTIZED / "quant_zoo_qop.onnx")
    loaded = load_model(QUANTIZED / "quant_zoo_qop.onnx")
    sites = list_sites(loaded).activations
    feed = probe_feed(loaded, "synthetic:gaussian")
    resolve_unknown_ranks(loaded, sites, feed, "auto")
    raw, outs = augment_model(loaded.model, sites, raw=True, view=loaded.view)
    arrays = Runner(loaded, raw, device="cpu").run([n for s in sites for n in (outs[s.index].x, outs[s.index].y)], feed)
    view = loaded.view
    ints = {s.index: (view.nodes[view.producer[s.input]].input[0],
                      view.nodes[next(c for c in view.consumers[s.output] if view.nodes[c].op_type == "QuantizeLinear")]
                      .output[0]) for s in sites}
    want = run(_with_outputs(original, sorted({n for pair in ints.values() for n in pair})), feed)
    for k, s in enumerate(sites):
        q = s.params["quantized"]
        x, y = arrays[2 * k], arrays[2 * k + 1]
        xi, yi = (want[n].astype(np.float32) for n in ints[s.index])
        dequantized = (xi - q["x"]["zero_point"]) * np.float32(q["x"]["scale"])
        np.testing.assert_allclose(x, dequantized, rtol=1e-6, err_msg=s.kind)
        requantized = np.clip(np.rint(y / q["y"]["scale"]) + q["y"]["zero_point"], 0, 255)
        assert np.abs(requantized - yi).max() <= 1, s.kind  # Y: what the QLinear node quantized, before its rounding


def _qlinear_softmax(softmax_opset: int, model_opset: int) -> onnx.ModelProto:
    h = onnx.helper
    f, u8 = onnx.TensorProto.FLOAT, onnx.TensorProto.UINT8
    scalars = [h.make_tensor("s", f, [], [0.05]), h.make_tensor("z", u8, [], [128]),
               h.make_tensor("so", f, [], [1 / 256]), h.make_tensor("zo", u8, [], [0])]
    nodes = [h.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
             h.make_node("QLinearSoftmax", ["xq", "s", "z", "so", "zo"], ["yq"], domain="com.microsoft", axis=-1,
                         opset=softmax_opset),
             h.make_node("DequantizeLinear", ["yq", "so", "zo"], ["y"])]
    graph = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["N", 5])],
                         [h.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["N", 5])], scalars)
    return h.make_model(graph, opset_imports=[h.make_opsetid("", model_opset), h.make_opsetid("com.microsoft", 1)])


@pytest.mark.parametrize(("softmax_opset", "model_opset", "kinds"), [(13, 17, ["softmax"]), (12, 17, []), (13, 12, [])])
def test_a_qlinear_softmax_is_expanded_only_where_its_meaning_is_kept(softmax_opset, model_opset, kinds):
    model = _qlinear_softmax(softmax_opset, model_opset)
    loaded = from_proto(model)
    assert [s.kind for s in list_sites(loaded).activations] == kinds
    assert ("kept" in loaded.notes[0]) == (not kinds)
    x = np.random.default_rng(0).normal(0, 2, (6, 5)).astype(np.float32)
    if model_opset >= 13:  # outputs equal onnxruntime's own QLinearSoftmax to the quantisation step
        assert np.abs(run(model, {"x": x})["y"] - run(loaded.model, {"x": x})["y"]).max() <= 1 / 256 + 1e-7


def test_quantized_models_are_scored():
    by_model = {}
    for name in ("qdq", "qop"):
        sig = onnxaff.analyze(QUANTIZED / f"quant_zoo_{name}.onnx", "synthetic:gaussian", limit=64, chunk_size=32,
                              metrics=["affinity", "cka", "r2", "nlc"], progress=False)
        assert [s["kind"] for s in sig.sites] == KINDS
        for s in sig.sites:
            assert s["status"] == "ok", s
            assert all(np.isfinite(m["mean"]) for m in s["metrics"].values()), s
            assert 0.5 < s["metrics"]["nlc"]["mean"], s  # a pair inside a site is differentiated as the identity
        by_model[name] = [s["metrics"]["affinity"]["mean"] for s in sig.sites]
    # The expanded QOperator model computes what the QDQ model does: the same quantization, two spellings.
    np.testing.assert_allclose(by_model["qop"], by_model["qdq"], atol=1e-3)

"""Model-local functions are inlined for analysis, site ids keeping the call path (issue 26)."""

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxaff
from onnxaff.analysis.sitelist import list_sites
from onnxaff.graph import discover_sites
from onnxaff.graph.expand import functions
from onnxaff.graph.load import from_proto, load_model
from tests.conftest import parse

FIXTURES = Path(__file__).parent / "fixtures" / "functions"
OPS = [helper.make_opsetid("", 17)]
LOCAL = [*OPS, helper.make_opsetid("local", 1)]


def gelu_function(name="Gelu"):
    """erf GELU with its constants inside the body, its last node named `gelu`."""
    return helper.make_function("local", name, ["x"], ["y"], [
        helper.make_node("Constant", [], ["c"], name="sqrt2", value_float=float(np.sqrt(2))),
        helper.make_node("Div", ["x", "c"], ["d"], name="div"), helper.make_node("Erf", ["d"], ["e"], name="erf"),
        helper.make_node("Constant", [], ["one"], name="one", value_float=1.0),
        helper.make_node("Add", ["e", "one"], ["a"], name="add"), helper.make_node("Mul", ["x", "a"], ["m"]),
        helper.make_node("Constant", [], ["h"], name="half", value_float=0.5),
        helper.make_node("Mul", ["m", "h"], ["y"], name="gelu")], OPS)


def leaky_function():
    """A function attribute: LeakyRelu's alpha bound from the call (default 0.2)."""
    node = helper.make_node("LeakyRelu", ["x"], ["y"], name="leaky")
    node.attribute.append(helper.make_attribute_ref("alpha", onnx.AttributeProto.FLOAT))
    return helper.make_function("local", "Leaky", ["x"], ["y"], [node], OPS,
                                attribute_protos=[helper.make_attribute("alpha", 0.2)])


def block_function():
    """A layer calling another function (nested) and a plain op."""
    return helper.make_function("local", "Block", ["x", "w"], ["y"], [
        helper.make_node("MatMul", ["x", "w"], ["h"], name="fc"),
        helper.make_node("Gelu", ["h"], ["g"], name="act", domain="local"),
        helper.make_node("Tanh", ["g"], ["y"], name="tanh")], LOCAL)


def function_model():
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array((rng.standard_normal((6, 6)) / 2).astype(np.float32), f"w{i}") for i in (0, 1)]
    graph = helper.make_graph([
        helper.make_node("Block", ["x", "w0"], ["b0"], name="block.0", domain="local"),
        helper.make_node("Block", ["b0", "w1"], ["b1"], name="block.1", domain="local"),
        helper.make_node("Gelu", ["b1"], ["g"], name="head", domain="local"),
        helper.make_node("Leaky", ["g"], ["l0"], name="leaky.0", domain="local", alpha=0.1),
        helper.make_node("Leaky", ["l0"], ["y"], domain="local")],  # unnamed, default alpha
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 6])], weights)
    model = helper.make_model(graph, opset_imports=LOCAL,
                              functions=[gelu_function(), block_function(), leaky_function()])
    onnx.checker.check_model(model)
    return model


EXPECTED = [("block.0/act/gelu", "gelu", {}), ("block.0/tanh", "tanh", {}), ("block.1/act/gelu", "gelu", {}),
            ("block.1/tanh", "tanh", {}), ("head/gelu", "gelu", {}),
            ("leaky.0/leaky", "leaky_relu", {"alpha": float(np.float32(0.1))}),
            ("Leaky_4/leaky", "leaky_relu", {"alpha": float(np.float32(0.2))})]  # an unnamed call: op type, position


def _same_outputs(original, expanded, x):
    want = ort.InferenceSession(original.SerializeToString()).run(None, {"x": x})[0]
    got = ort.InferenceSession(expanded.SerializeToString()).run(None, {"x": x})[0]
    np.testing.assert_array_equal(got, want)


def test_functions_are_inlined_with_their_call_path():
    model = function_model()
    from onnxaff.graph.sites import find_sites
    from onnxaff.graph.view import GraphView

    assert find_sites(GraphView(model.graph)) == []  # the calls themselves: no rule sees into them
    assert [s.id for s in discover_sites(model)] == [e[0] for e in EXPECTED]  # inlined as analyze does
    loaded = from_proto(model)
    assert loaded.notes == ["inlined 7 calls of model-local functions (Block ×2, Gelu ×3, Leaky ×2)"]
    onnx.checker.check_model(loaded.model, full_check=True)
    assert not loaded.model.functions and len(model.functions) == 3  # the caller's proto as it was
    _same_outputs(model, loaded.model, np.linspace(-3, 3, 24, dtype=np.float32).reshape(4, 6))
    got = [(s.id, s.kind, s.params) for s in list_sites(loaded).sites]
    assert got == EXPECTED


def test_function_model_is_analysed(tmp_path):
    path = tmp_path / "functions.onnx"
    onnx.save(function_model(), path)
    sig = onnxaff.analyze(str(path), "synthetic:gaussian", limit=128, progress=False)
    assert [s["id"] for s in sig.sites] == [e[0] for e in EXPECTED]
    assert all(s["status"] == "ok" and np.isfinite(s["metrics"]["affinity"]["mean"]) for s in sig.sites)
    assert any("inlined 7 calls" in w for w in sig.warnings)


def test_a_model_without_functions_is_left_alone():
    model = parse('<ir_version: 8, opset_import: ["" : 17]> g (float[N, 4] x) => (float[N, 4] y) { y = Relu(x) }')
    before = model.SerializeToString()
    assert functions.apply(model) == [] and model.SerializeToString() == before


def test_function_with_a_subgraph_goes_to_onnx_inliner():
    branch = helper.make_graph([helper.make_node("Tanh", ["x"], ["t"])], "b", [],
                               [helper.make_tensor_value_info("t", TensorProto.FLOAT, None)])
    f = helper.make_function("local", "Maybe", ["c", "x"], ["y"], [
        helper.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=branch)], OPS)
    graph = helper.make_graph([helper.make_node("Maybe", ["c", "x"], ["y"], name="m", domain="local")], "g",
                              [helper.make_tensor_value_info("c", TensorProto.BOOL, []),
                               helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])])
    model = helper.make_model(graph, opset_imports=LOCAL, functions=[f])
    loaded = from_proto(model)
    assert loaded.notes == ["inlined by onnx's inliner, without call paths in site ids: Maybe"]
    assert [n.op_type for n in loaded.model.graph.node] == ["If"]
    feed = {"c": np.array(True), "x": np.array([-1.0, 0.0, 2.0], np.float32)}
    got = ort.InferenceSession(loaded.model.SerializeToString()).run(None, feed)[0]
    np.testing.assert_allclose(got, np.tanh(feed["x"]))


def test_castlike_of_a_constant_reads_no_value():
    """onnxscript's constants: CastLike(Constant, inner tensor) inside the island (no function involved)."""
    model = parse('''<ir_version: 8, opset_import: ["" : 17]> g (float[N, 4] x) => (float[N, 4] y) {
        c = Constant <value_float = 1.4142135>()   d = CastLike(c, x)   u = Div(x, d)   e = Erf(u)
        o = Constant <value_float = 1.0>()   ol = CastLike(o, e)   a = Add(e, ol)   m = Mul(x, a)
        h = Constant <value_float = 0.5>()   hl = CastLike(h, m)   y = Mul(m, hl) }''')
    assert [(s.kind, s.input, s.output) for s in discover_sites(model)] == [("gelu", "x", "y")]


ONNXSCRIPT_SITES = [("n0/n11", "gelu", "n0/h", "n0/g"), ("n0/n13/n16", "gelu_tanh", "n0/tmp_5", "tmp"),
                    ("n1/n11", "gelu", "n1/h", "n1/g"), ("n1/n13/n16", "gelu_tanh", "n1/tmp_5", "return_val")]


def test_onnxscript_functions():
    """Written by onnxscript (tests/fixtures/build_functions.py): calls n0, n1 of Block, which calls GeluTanh."""
    path = FIXTURES / "onnxscript_gelu.onnx"
    loaded = load_model(path)
    assert [(s.id, s.kind, s.input, s.output) for s in list_sites(loaded).sites] == ONNXSCRIPT_SITES
    x = np.random.default_rng(1).standard_normal((5, 8)).astype(np.float32)
    want = ort.InferenceSession(str(path)).run(None, {"x": x})[0]
    got = ort.InferenceSession(loaded.model.SerializeToString()).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    sig = onnxaff.analyze(str(path), "synthetic:gaussian", limit=128, progress=False)
    assert [s["kind"] for s in sig.sites] == ["gelu", "gelu_tanh"] * 2
    assert all(s["status"] == "ok" for s in sig.sites)


@pytest.mark.parametrize("keep", [True, False])
def test_float16_functions(keep):
    """A float16 conversion of a function model: the functions' bodies are converted too."""
    pytest.importorskip("onnxconverter_common")  # fixture-building tool; not an onnxaff dependency
    from onnxconverter_common import float16

    half = float16.convert_float_to_float16(function_model(), keep_io_types=keep)
    got = [(s.id, s.kind) for s in list_sites(from_proto(half)).sites]
    assert [k for _, k in got] == [k for _, k, _ in EXPECTED]
    assert [i for i, _ in got[:6]] == [i for i, _, _ in EXPECTED[:6]]  # (the unnamed call's position moves)

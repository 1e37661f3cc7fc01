"""Activations inside If branches and Loop/Scan bodies (torch.cond, scripted control flow, silero-vad).

Models written with onnx.helper: an If on a constant condition is inlined (graph/expand/branches.py) and gives
the original's outputs; the sites found, and their scores from `onnxaff.analyze` on synthetic data.
"""

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import onnxaff
from onnxaff.graph.expand import branches
from onnxaff.graph.load import from_proto
from onnxaff.sitelist import list_sites

RNG = np.random.default_rng(5)
D = 6
W = RNG.standard_normal((D, D)).astype(np.float32)
C = {"w": W, "sq2": np.float32(2 ** 0.5), "one": np.float32(1.0), "half": np.float32(0.5)}


def n(op, inputs, out, **attrs):
    return helper.make_node(op, inputs, [out], name=f"{op}_{out}", **attrs)


def vi(name, shape=("N", D), elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, list(shape) if shape is not None else None)


def erf_gelu(x, out, tag):
    """GELU as exporters decompose it: x·(1 + erf(x/√2))/2 (constants from the outer scope)."""
    return [n("Div", [x, "sq2"], f"{tag}1"), n("Erf", [f"{tag}1"], f"{tag}2"), n("Add", [f"{tag}2", "one"], f"{tag}3"),
            n("Mul", [x, f"{tag}3"], f"{tag}4"), n("Mul", [f"{tag}4", "half"], out)]


def branch(name, nodes, out):
    return helper.make_graph(nodes, name, [], [vi(out)])


def if_model(cond_nodes, cond_inputs=(), opset=17):
    """x → MatMul → If(cond){GELU → MatMul} else {Tanh → MatMul} → y: the whole model's work inside the If."""
    then = branch("then", [*erf_gelu("h", "tg", "t"), n("MatMul", ["tg", "w"], "to")], "to")
    other = branch("else", [n("Tanh", ["h"], "et"), n("MatMul", ["et", "w"], "eo")], "eo")
    nodes = [n("MatMul", ["x", "w"], "h"), *cond_nodes,
             helper.make_node("If", ["cond"], ["y"], name="switch", then_branch=then, else_branch=other)]
    graph = helper.make_graph(nodes, "g", [vi("x"), *cond_inputs], [vi("y")],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in C.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    onnx.checker.check_model(model)
    return model


def run(model, feed):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feed)


def constant_cond(value: bool):
    """cond = (Shape-free constant arithmetic): Constant 16000 == Constant 16000 (silero-vad's sampling-rate test)."""
    sr = helper.make_node("Constant", [], ["sr"], value=numpy_helper.from_array(np.array(16000, np.int64)))
    ref = helper.make_node("Constant", [], ["ref"], value=numpy_helper.from_array(np.array(16000 if value else 8000,
                                                                                            np.int64)))
    return [sr, ref, n("Equal", ["sr", "ref"], "cond")]


def test_constant_if_is_inlined_and_gives_the_same_outputs():
    x = RNG.standard_normal((5, D)).astype(np.float32)
    for value in (True, False):
        model = if_model(constant_cond(value))
        expanded = onnx.ModelProto.FromString(model.SerializeToString())
        notes = branches.apply(expanded)
        assert len(notes) == 1 and ("then_branch" if value else "else_branch") in notes[0]
        assert not any(node.op_type == "If" for node in expanded.graph.node)
        onnx.checker.check_model(expanded)
        np.testing.assert_allclose(run(expanded, {"x": x})[0], run(model, {"x": x})[0], rtol=0, atol=0)


def test_constant_if_sites_are_ordinary_sites_with_their_place_in_the_id():
    sites = list_sites(from_proto(if_model(constant_cond(True)))).sites
    assert [(s.id, s.kind, s.status) for s in sites] == [("switch/then/Mul_tg", "gelu", "ok")]
    sites = list_sites(from_proto(if_model(constant_cond(False)))).sites
    assert [(s.id, s.kind, s.status) for s in sites] == [("switch/else/Tanh_et", "tanh", "ok")]


def test_branch_names_that_collide_are_renamed():
    """Both branches, and the main graph's next If, may use one local name: the inlined copy gets a fresh one."""
    then = branch("then", [n("Relu", ["h"], "t"), n("Identity", ["t"], "o1")], "o1")
    other = branch("else", [n("Sigmoid", ["h"], "t"), n("Identity", ["t"], "o2")], "o2")
    cond = constant_cond(True)
    nodes = [n("MatMul", ["x", "w"], "h"), *cond,
             helper.make_node("If", ["cond"], ["a"], name="first", then_branch=then, else_branch=other),
             helper.make_node("If", ["cond"], ["y"], name="second", then_branch=branch("t2", [n("Tanh", ["a"], "t"),
                              n("Identity", ["t"], "o3")], "o3"), else_branch=branch("e2", [n("Identity", ["a"], "o4")],
                                                                                      "o4"))]
    graph = helper.make_graph(nodes, "g", [vi("x")], [vi("y")], [numpy_helper.from_array(W, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    expanded = onnx.ModelProto.FromString(model.SerializeToString())
    assert len(branches.apply(expanded)) == 2
    onnx.checker.check_model(expanded)
    x = RNG.standard_normal((3, D)).astype(np.float32)
    np.testing.assert_allclose(run(expanded, {"x": x})[0], run(model, {"x": x})[0], rtol=0, atol=0)
    kinds = [s.kind for s in list_sites(from_proto(model)).sites]
    assert kinds == ["relu", "tanh"]


def test_overridable_condition_is_not_inlined():
    """An initializer that is also a graph input can be fed another value: the If stays."""
    model = if_model([n("Identity", ["flag"], "cond")], cond_inputs=[vi("flag", (), TensorProto.BOOL)])
    model.graph.initializer.append(numpy_helper.from_array(np.array(True), "flag"))
    assert branches.apply(onnx.ModelProto.FromString(model.SerializeToString())) == []


def test_constant_if_model_is_analysable(tmp_path):
    """silero-vad's shape: the whole model inside a top-level If on a constant."""
    path = tmp_path / "m.onnx"
    onnx.save(if_model(constant_cond(True)), path)
    sig = onnxaff.analyze(path, "synthetic:gaussian", limit=64, chunk_size=64, progress=False)
    assert [(s["id"], s["kind"], s["status"]) for s in sig.sites] == [("switch/then/Mul_tg", "gelu", "ok")]
    for m in sig.sites[0]["metrics"].values():
        assert m["status"] == "ok" and np.isfinite(m["mean"]), m

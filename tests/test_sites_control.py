"""Activations inside If branches and Loop/Scan bodies (torch.cond, scripted control flow, silero-vad).

Models written with onnx.helper: an If on a constant condition is inlined (graph/expand/branches.py) and gives
the original's outputs; the sites found, and their scores from `onnxaff.analyze` on synthetic data.
"""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxaff
from onnxaff.analysis.sitelist import list_sites
from onnxaff.graph.expand import branches
from onnxaff.graph.load import from_proto

RNG = np.random.default_rng(5)
D = 6
W = RNG.standard_normal((D, D)).astype(np.float32)
C = {"w": W, "sq2": np.float32(2 ** 0.5), "one": np.float32(1.0), "half": np.float32(0.5), "zero": np.float32(0)}


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


def data_if_model():
    """The If's condition is mean(x) > 0: each batch takes one branch."""
    return if_model([n("ReduceMean", ["x"], "m", keepdims=0), n("Greater", ["m", "zero"], "cond")])


def augmented(model):
    from onnxaff.graph import augment_model

    loaded = from_proto(model)
    sites = list_sites(loaded).sites
    aug, outs = augment_model(loaded.model, sites, view=loaded.view)
    return sites, aug, outs


def test_data_dependent_if_sites_are_observed_in_the_branch_taken():
    model = data_if_model()
    sites, aug, outs = augmented(model)
    assert [(s.id, s.kind, s.status) for s in sites] == [
        ("switch/then/Mul_tg", "gelu", "ok"), ("switch/else/Tanh_et", "tanh", "ok")]
    assert branches.apply(onnx.ModelProto.FromString(model.SerializeToString())) == []
    sess = ort.InferenceSession(aug.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    for sign in (1.0, -1.0):
        x = (np.abs(RNG.standard_normal((5, D))) * sign).astype(np.float32)
        got = dict(zip(names, sess.run(None, {"x": x}), strict=True))
        np.testing.assert_array_equal(got["y"], run(model, {"x": x})[0])
        h = x @ W
        taken, other = (sites[0], sites[1]) if sign > 0 else (sites[1], sites[0])
        want = h * (1 + np.vectorize(__import__("math").erf)(h / 2 ** 0.5)) / 2 if sign > 0 else np.tanh(h)
        np.testing.assert_allclose(got[outs[taken.index].x], h, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(got[outs[taken.index].y], want, rtol=1e-4, atol=1e-5)
        assert got[outs[other.index].x].shape == (0, D) and got[outs[other.index].y].shape == (0, D)


def test_data_dependent_if_model_is_analysable(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(data_if_model(), path)
    sig = onnxaff.analyze(path, "synthetic:gaussian", limit=256, batch_size=8, chunk_size=32, progress=False)
    assert [s["kind"] for s in sig.sites] == ["gelu", "tanh"]
    for s in sig.sites:
        assert s["status"] == "ok", s
        for m in s["metrics"].values():
            assert m["status"] == "ok" and np.isfinite(m["mean"]), (s["id"], m)


def loop_model(steps=3):
    """h ← tanh(h·w) + sigmoid(h) for `steps` iterations of a Loop (its trip count a constant input)."""
    body = helper.make_graph(
        [n("MatMul", ["h_in", "w"], "bm"), n("Tanh", ["bm"], "bt"), n("Sigmoid", ["h_in"], "bs"),
         n("Add", ["bt", "bs"], "h_out"), n("Identity", ["c_in"], "c_out")],
        "body", [vi("i", [], TensorProto.INT64), vi("c_in", [], TensorProto.BOOL), vi("h_in")],
        [vi("c_out", [], TensorProto.BOOL), vi("h_out")])
    trip = numpy_helper.from_array(np.array(steps, np.int64), "trip")
    true = numpy_helper.from_array(np.array(True), "true")
    nodes = [helper.make_node("Loop", ["trip", "true", "x"], ["y"], name="loop", body=body)]
    graph = helper.make_graph(nodes, "g", [vi("x")], [vi("y")], [numpy_helper.from_array(W, "w"), trip, true])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model


def test_loop_body_sites_give_one_row_per_iteration_and_example():
    model = loop_model()
    sites, aug, outs = augmented(model)
    assert [(s.id, s.kind, s.status) for s in sites] == [("loop/body/Tanh_bt", "tanh", "ok"),
                                                          ("loop/body/Sigmoid_bs", "sigmoid", "ok")]
    x = RNG.standard_normal((4, D)).astype(np.float32)
    sess = ort.InferenceSession(aug.SerializeToString(), providers=["CPUExecutionProvider"])
    got = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, {"x": x}), strict=True))
    np.testing.assert_array_equal(got["y"], run(model, {"x": x})[0])
    hs, h = [], x
    for _ in range(3):
        hs.append(h)
        h = np.tanh(h @ W) + 1 / (1 + np.exp(-h))
    hs = np.concatenate(hs)  # rows = iterations × batch, iteration-major
    np.testing.assert_allclose(got[outs[0].x], hs @ W, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got[outs[0].y], np.tanh(hs @ W), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got[outs[1].x], hs, rtol=1e-4, atol=1e-5)


def scan_model():
    """A Scan over axis 1 of x [N, T, D]: each step s ← relu(s + x_t)·w, the step's tanh scanned out."""
    body = helper.make_graph(
        [n("Add", ["s_in", "xt"], "sa"), n("Relu", ["sa"], "sr"), n("MatMul", ["sr", "w"], "s_out"),
         n("Tanh", ["s_out"], "st")],
        "body", [vi("s_in"), vi("xt")], [vi("s_out"), vi("st")])
    nodes = [n("ReduceSum", ["x"], "s0", axes=[1], keepdims=0),
             helper.make_node("Scan", ["s0", "x"], ["s_end", "ys"], name="scan", body=body, num_scan_inputs=1,
                              scan_input_axes=[1], scan_output_axes=[1])]
    graph = helper.make_graph(nodes, "g", [vi("x", ("N", 3, D))], [vi("s_end"), vi("ys", ("N", 3, D))],
                              [numpy_helper.from_array(W, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 12)])
    onnx.checker.check_model(model)
    return model


def test_scan_body_sites_are_observed():
    model = scan_model()
    sites, aug, outs = augmented(model)
    assert [(s.id, s.kind, s.status) for s in sites] == [("scan/body/Relu_sr", "relu", "ok"),
                                                          ("scan/body/Tanh_st", "tanh", "ok")]
    x = RNG.standard_normal((4, 3, D)).astype(np.float32)
    sess = ort.InferenceSession(aug.SerializeToString(), providers=["CPUExecutionProvider"])
    got = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, {"x": x}), strict=True))
    for k, want in enumerate(run(model, {"x": x})):
        np.testing.assert_array_equal(got[model.graph.output[k].name], want)
    s, pre = x.sum(axis=1), []
    for t in range(3):
        pre.append(s + x[:, t])
        s = np.maximum(pre[-1], 0) @ W
    np.testing.assert_allclose(got[outs[0].x], np.concatenate(pre), rtol=1e-4, atol=1e-4)


def test_loop_and_scan_models_are_analysable(tmp_path):
    for tag, model in (("loop", loop_model()), ("scan", scan_model())):
        path = tmp_path / f"{tag}.onnx"
        onnx.save(model, path)
        sig = onnxaff.analyze(path, "synthetic:gaussian", limit=64, chunk_size=64, progress=False)
        assert len(sig.sites) == 2
        for s in sig.sites:
            assert s["status"] == "ok", s
            for m in s["metrics"].values():
                assert m["status"] == "ok" and np.isfinite(m["mean"]), (s["id"], m)


def test_nested_subgraph_sites_are_listed_and_skipped():
    inner = helper.make_node("If", ["cond"], ["bo"], name="inner",
                             then_branch=branch("t", [n("Tanh", ["h"], "io")], "io"),
                             else_branch=branch("e", [n("Sigmoid", ["h"], "eo2")], "eo2"))
    outer = helper.make_node("If", ["cond"], ["y"], name="outer", then_branch=branch("t", [inner], "bo"),
                             else_branch=branch("e", [n("Relu", ["h"], "ro")], "ro"))
    graph = helper.make_graph([n("MatMul", ["x", "w"], "h"), n("ReduceMean", ["x"], "m", keepdims=0),
                               n("Greater", ["m", "zero"], "cond"), outer], "g", [vi("x")], [vi("y")],
                              [numpy_helper.from_array(W, "w"), numpy_helper.from_array(np.float32(0), "zero")])
    sites = list_sites(from_proto(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))).sites
    assert [(s.id, s.kind, s.status) for s in sites] == [
        ("outer/then/inner/then/Tanh_io", "tanh", "skipped"), ("outer/then/inner/else/Sigmoid_eo2", "sigmoid",
                                                               "skipped"), ("outer/else/Relu_ro", "relu", "ok")]
    assert "one level deep" in sites[0].reason


def test_a_branch_no_batch_took_is_skipped_with_the_reason(tmp_path):
    """Positive data: every batch takes the then branch; the else branch's site says why it has no number."""
    path, data = tmp_path / "m.onnx", tmp_path / "pos.npy"
    onnx.save(data_if_model(), path)
    np.save(data, np.abs(RNG.standard_normal((256, D))).astype(np.float32))
    sig = onnxaff.analyze(path, str(data), batch_size=8, chunk_size=32, metrics=["affinity"], progress=False)
    then, other = sig.sites
    assert then["status"] == "ok" and then["rows"] == 256
    assert other["status"] == "skipped" and other["rows"] == 0 and "no batch took its If branch" in other["reason"]
    assert any("no batch took its If branch" in w for w in sig.warnings)
    from onnxaff.format.schema import validate

    validate(sig.to_dict(), "the signature")


def test_a_branch_no_batch_took_yet_resumes_and_merges(tmp_path):
    """A saved state where the If's other branch has 0 rows is whole (the counter check once called it damaged:
    a checkpoint of such a model could not be resumed, nor its shards merged): both equal one run."""
    from onnxaff.analysis import open_run
    from onnxaff.analysis.checkpoint import load_state
    from onnxaff.analysis.statecheck import check_state
    from onnxaff.errors import Interrupted
    from onnxaff.results.executors import shard_state
    from onnxaff.results.shards import merge_states
    from tests.test_scale import interrupt_after

    path, data = tmp_path / "m.onnx", tmp_path / "pos.npy"
    onnx.save(data_if_model(), path)
    np.save(data, np.abs(RNG.standard_normal((256, D))).astype(np.float32))
    options = dict(batch_size=8, chunk_size=32, metrics=["affinity"], progress=False)
    one = onnxaff.analyze(path, str(data), **options)
    ckpt = tmp_path / "c.npz"
    with open_run(str(path), str(data), checkpoint=ckpt, **options) as run:
        interrupt_after(run, 8)
        with pytest.raises(Interrupted):
            run.execute()
    check_state(load_state(ckpt), "the checkpoint")
    with open_run(str(path), str(data), checkpoint=ckpt, resume="always", **options) as run:
        assert run.state.cursor == 64
        run.execute()
        resumed = run.signature()
    merged = merge_states([shard_state(str(path), str(data), (i, 2), options) for i in range(2)])
    for sig in (resumed, merged):
        assert [(s["status"], s["rows"], s["metrics"]["affinity"]["mean"]) for s in sig.sites] == [
            (s["status"], s["rows"], s["metrics"]["affinity"]["mean"]) for s in one.sites]


def test_subgraph_sites_are_reduced_in_the_graph_under_reduce_in_numpy(tmp_path):
    """A subgraph's tensors cannot leave it raw: with reduce_in="numpy" its sites are still reduced in the graph,
    giving the same numbers."""
    path = tmp_path / "m.onnx"
    onnx.save(data_if_model(), path)
    options = dict(limit=256, batch_size=8, chunk_size=32, metrics=["affinity"], progress=False)
    graph = onnxaff.analyze(path, "synthetic:gaussian", **options)
    host = onnxaff.analyze(path, "synthetic:gaussian", reduce_in="numpy", **options)
    assert [s["metrics"]["affinity"]["mean"] for s in host.sites] == [s["metrics"]["affinity"]["mean"]
                                                                      for s in graph.sites]

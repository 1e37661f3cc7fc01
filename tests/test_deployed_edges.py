"""Edges of the deployed forms found by review: each once broke a run or hid a site (issue 26)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

import onnxaff
from onnxaff.analysis.sitelist import list_sites
from onnxaff.graph.load import from_proto, load_model

RNG = np.random.default_rng(0)


def _model(nodes, inputs, outputs, inits, extra_opsets=()):
    g = h.make_graph(nodes, "g", inputs, outputs, inits)
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17), *extra_opsets])


def test_a_castlike_inside_an_if_branch_is_read_like_any_constant():
    """A subgraph index read constants before it knew its own tensors: any CastLike in a branch crashed."""
    then = h.make_graph([h.make_node("Constant", [], ["c"], value=h.make_tensor("v", T.DOUBLE, [], [2.0])),
                         h.make_node("CastLike", ["c", "x"], ["c2"]), h.make_node("Mul", ["x", "c2"], ["xm"]),
                         h.make_node("Relu", ["xm"], ["yt"], name="relu_t")], "then", [],
                        [h.make_tensor_value_info("yt", T.FLOAT, [None, 4])])
    other = h.make_graph([h.make_node("Identity", ["x"], ["ye"])], "else", [],
                         [h.make_tensor_value_info("ye", T.FLOAT, [None, 4])])
    m = _model([h.make_node("ReduceSum", ["x"], ["s"], keepdims=0), h.make_node("Greater", ["s", "z"], ["cond"]),
                h.make_node("If", ["cond"], ["y"], name="if0", then_branch=then, else_branch=other)],
               [h.make_tensor_value_info("x", T.FLOAT, [None, 4])], [h.make_tensor_value_info("y", T.FLOAT, [None, 4])],
               [nh.from_array(np.array(0, np.float32), "z")])
    assert [(s.id, s.kind, s.status) for s in list_sites(from_proto(m)).sites] == [("if0/then/relu_t", "relu", "ok")]


def _fast_gelu_model():
    return _model([h.make_node("MatMul", ["x", "W"], ["a"], name="mm"),
                   h.make_node("FastGelu", ["a", "b"], ["y"], name="fg", domain="com.microsoft")],
                  [h.make_tensor_value_info("x", T.FLOAT, [None, 4])],
                  [h.make_tensor_value_info("y", T.FLOAT, [None, 4])],
                  [nh.from_array(RNG.standard_normal((4, 4)).astype(np.float32), "W"),
                   nh.from_array(RNG.standard_normal(4).astype(np.float32), "b")], [h.make_opsetid("com.microsoft", 1)])


def test_an_external_data_model_keeps_its_expansions(tmp_path):
    """Shape inference by path reloaded the file and dropped the split FastGelu (its notes still said split)."""
    onnx.save(_fast_gelu_model(), tmp_path / "m.onnx", save_as_external_data=True, all_tensors_to_one_file=True,
              location="w.bin", size_threshold=0)
    loaded = load_model(tmp_path / "m.onnx")
    assert loaded.external_locations == ["w.bin"]
    assert [(s.id, s.kind, s.status) for s in list_sites(loaded).sites] == [("fg", "gelu_tanh", "ok")]
    sig = onnxaff.analyze(tmp_path / "m.onnx", "synthetic:gaussian", limit=64, metrics=["affinity"], progress=False)
    assert sig.sites[0]["metrics"]["affinity"]["status"] == "ok"


def test_an_unsorted_external_data_model_loads(tmp_path):
    """The sorted graph is checked in memory with its weight files resolved from the model's folder."""
    m = _model([h.make_node("Relu", ["a"], ["y"], name="r"), h.make_node("MatMul", ["x", "W"], ["a"], name="mm")],
               [h.make_tensor_value_info("x", T.FLOAT, [None, 4])], [h.make_tensor_value_info("y", T.FLOAT, [None, 4])],
               [nh.from_array(RNG.standard_normal((4, 4)).astype(np.float32), "W")])
    onnx.save(m, tmp_path / "m.onnx", save_as_external_data=True, location="w.bin", size_threshold=0)
    loaded = load_model(tmp_path / "m.onnx")
    assert [n.op_type for n in loaded.model.graph.node] == ["MatMul", "Relu"]
    assert [s.kind for s in list_sites(loaded).sites] == ["relu"]


def test_nlc_of_unrolled_recurrent_gates_is_not_applicable_not_a_crash():
    t, i, hid = 5, 4, 3
    m = _model([h.make_node("GRU", ["x", "W", "R"], ["y", "yh"], hidden_size=hid, layout=1, name="gru")],
               [h.make_tensor_value_info("x", T.FLOAT, ["N", t, i])],
               [h.make_tensor_value_info("yh", T.FLOAT, ["N", 1, hid])],
               [nh.from_array(RNG.standard_normal((1, 3 * hid, i)).astype(np.float32), "W"),
                nh.from_array(RNG.standard_normal((1, 3 * hid, hid)).astype(np.float32), "R")])
    sig = onnxaff.analyze(m, "synthetic:gaussian", limit=64, chunk_size=32, metrics=["affinity", "nlc"],
                          progress=False)
    assert [s["id"] for s in sig.sites] == ["gru/forward/z", "gru/forward/r", "gru/forward/g"]
    for s in sig.sites:
        assert s["metrics"]["affinity"]["status"] == "ok" and s["metrics"]["nlc"]["status"] == "not_applicable"


def test_a_loop_whose_state_grows_is_listed_skipped_not_run_to_a_crash():
    body = h.make_graph([h.make_node("Identity", ["cin"], ["cout"]), h.make_node("MatMul", ["st", "W"], ["a"]),
                         h.make_node("Tanh", ["a"], ["t"], name="tanh_b"),
                         h.make_node("Slice", ["t", "s0", "s1"], ["t0"]),
                         h.make_node("Concat", ["st", "t0"], ["st2"], axis=0)], "body",
                        [h.make_tensor_value_info("i", T.INT64, []), h.make_tensor_value_info("cin", T.BOOL, []),
                         h.make_tensor_value_info("st", T.FLOAT, [None, 8])],
                        [h.make_tensor_value_info("cout", T.BOOL, []),
                         h.make_tensor_value_info("st2", T.FLOAT, [None, 8])])
    m = _model([h.make_node("Loop", ["M", "c", "x"], ["y"], name="loop0", body=body),
                h.make_node("Relu", ["y"], ["z"], name="after")],
               [h.make_tensor_value_info("x", T.FLOAT, ["N", 8])], [h.make_tensor_value_info("z", T.FLOAT, [None, 8])],
               [nh.from_array(RNG.standard_normal((8, 8)).astype(np.float32), "W"),
                nh.from_array(np.array(3, np.int64), "M"), nh.from_array(np.array(True), "c"),
                nh.from_array(np.array([0], np.int64), "s0"), nh.from_array(np.array([1], np.int64), "s1")])
    sites = list_sites(from_proto(m)).sites
    inner = next(s for s in sites if s.id == "loop0/body/tanh_b")
    assert inner.status == "skipped" and "may change shape between iterations" in inner.reason
    sig = onnxaff.analyze(m, "synthetic:gaussian", limit=64, metrics=["affinity"], progress=False)
    assert {s["id"]: s["status"] for s in sig.sites} == {"loop0/body/tanh_b": "skipped", "after": "ok"}


def test_discover_sites_reads_a_deployed_model_as_analyze_does():
    """The public sites(proto) (formerly discover_sites) applies the same expansions (a FastGelu with a bias gave no
    site), on a copy: the caller's proto is unchanged."""
    from onnxaff.graph import discover_sites

    model = _fast_gelu_model()
    before = model.SerializeToString()
    assert [(s.id, s.kind) for s in onnxaff.sites(model)] == [("fg", "gelu_tanh")]
    assert [(s.id, s.kind) for s in discover_sites(model)] == [("fg", "gelu_tanh")]
    assert model.SerializeToString() == before

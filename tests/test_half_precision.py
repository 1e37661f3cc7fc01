"""float16 and bfloat16 models: the same sites as their float32 originals, analysed like them (issue 26).

The converter's fixtures are built by tests/fixtures/build_fp16.py; the hand-written ones here are what
`model.half()` then export leaves: half-precision constants, Cast nodes around float32 islands, CastLike.
"""

from pathlib import Path

import ml_dtypes
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxaff
from onnxaff.analysis.sitelist import list_sites
from onnxaff.graph import discover_sites
from onnxaff.graph.fold import exact_half
from onnxaff.graph.load import from_proto, load_model
from tests.fixtures.build_fp16 import KINDS

FIXTURES = Path(__file__).parent / "fixtures" / "half"
H, BF = TensorProto.FLOAT16, TensorProto.BFLOAT16


def kinds(loaded):
    return [s.kind for s in list_sites(loaded).sites]


@pytest.mark.parametrize("name", ["acts_fp32", "acts_fp16", "acts_fp16_io"])
def test_converter_output_has_the_float32_sites(name):
    # Before: float16's √2, √(2/π) and 0.044715 made the GELU `elementwise` and the tanh GELU its `tanh`.
    assert kinds(load_model(FIXTURES / f"{name}.onnx")) == KINDS


def _scores(sig):
    out = []
    for site in sig.sites:
        assert site["status"] == "ok", site
        out.append(site["metrics"]["affinity"]["mean"])
    assert all(np.isfinite(out)), out
    return out


def test_fp16_features_are_those_of_the_float32_model():
    """The augmented model reduces float16 features in float32 and float64: scores as the float32 model's."""
    base = _scores(onnxaff.analyze(str(FIXTURES / "acts_fp32.onnx"), "synthetic:gaussian", limit=256,
                                   progress=False))
    for name in ("acts_fp16", "acts_fp16_io"):
        got = _scores(onnxaff.analyze(str(FIXTURES / f"{name}.onnx"), "synthetic:gaussian", limit=256,
                                      progress=False))
        np.testing.assert_allclose(got, base, atol=2e-3)


def _reversed(model):
    nodes = list(model.graph.node)[::-1]
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    return model


def test_unsorted_graph_is_sorted_as_onnxruntime_runs_it(tmp_path):
    model = _reversed(onnx.load(FIXTURES / "acts_fp16_io.onnx"))
    with pytest.raises(onnx.checker.ValidationError, match="topologically sorted"):
        onnx.checker.check_model(model)
    path = tmp_path / "unsorted.onnx"
    onnx.save(model, path)
    ort.InferenceSession(str(path))  # the runtime accepts it, so onnxaff must
    assert kinds(load_model(path)) == KINDS
    assert kinds(from_proto(model)) == KINDS
    assert model.graph.node[0].op_type == "Cast" and model.graph.node[-1].op_type == "Cast"  # the caller's, as given
    sig = onnxaff.analyze(str(path), "synthetic:gaussian", limit=128, progress=False)
    assert [s["kind"] for s in sig.sites] == KINDS and len(_scores(sig)) == 5


def test_unsorted_subgraph_is_sorted():
    then = helper.make_graph([helper.make_node("Tanh", ["t"], ["o1"]), helper.make_node("Relu", ["x"], ["t"])],
                             "then", [], [helper.make_tensor_value_info("o1", TensorProto.FLOAT, None)])
    other = helper.make_graph([helper.make_node("Sigmoid", ["x"], ["o2"])], "else", [],
                              [helper.make_tensor_value_info("o2", TensorProto.FLOAT, None)])
    graph = helper.make_graph(
        [helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)], "g",
        [helper.make_tensor_value_info("c", TensorProto.BOOL, []), helper.make_tensor_value_info("x", 1, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    loaded = from_proto(model)  # (onnxruntime refuses an unsorted subgraph; onnxaff sorts them all the same)
    onnx.checker.check_model(loaded.model)
    branch = next(a.g for a in loaded.model.graph.node[0].attribute if a.name == "then_branch")
    assert [n.op_type for n in branch.node] == ["Relu", "Tanh"]
    x = {"c": np.array(True), "x": np.array([-1.0, 2.0], np.float32)}
    assert ort.InferenceSession(loaded.model.SerializeToString()).run(None, x)[0][1] == np.float32(np.tanh(2.0))


def test_exact_half_reads_rounded_exporter_constants_only():
    sqrt2 = np.array([np.sqrt(2), -np.sqrt(2), 0.1, 6.0], np.float16)
    got = exact_half(sqrt2)
    assert got[0] == np.sqrt(2) and got[1] == -np.sqrt(2)
    assert got[2] == np.float64(np.float16(0.1)) and got[3] == 6.0  # a learned 0.1 stays what float16 holds
    assert exact_half(np.array(np.sqrt(2), ml_dtypes.bfloat16)) == np.sqrt(2)
    assert exact_half(np.array(np.sqrt(2), np.float32)) == np.float32(np.sqrt(2))  # float32 models unchanged


def _const(name, value, dtype):
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.array(value, dtype)))


def half_model(elem=H):
    """x (float16) -> erf GELU in float16 constants -> tanh GELU in float32 between Casts, its constants
    float16 Cast to float -> SiLU with a CastLike'd 1 -> HardSwish with float32 constants Cast to float16."""
    np_t = helper.tensor_dtype_to_np_dtype(elem)
    nodes = [
        _const("k_sqrt2", np.sqrt(2), np_t), _const("k_one", 1.0, np_t), _const("k_half", 0.5, np_t),
        helper.make_node("Div", ["x", "k_sqrt2"], ["e0"]), helper.make_node("Erf", ["e0"], ["e1"]),
        helper.make_node("Add", ["e1", "k_one"], ["e2"]), helper.make_node("Mul", ["x", "e2"], ["e3"]),
        helper.make_node("Mul", ["e3", "k_half"], ["g0"]),
        helper.make_node("Cast", ["g0"], ["f"], to=TensorProto.FLOAT),
        _const("c044", 0.044715, np_t), _const("c079", np.sqrt(2 / np.pi), np_t),
        helper.make_node("Cast", ["c044"], ["f044"], to=TensorProto.FLOAT),
        helper.make_node("Cast", ["c079"], ["f079"], to=TensorProto.FLOAT),
        helper.make_node("Cast", ["k_half"], ["fhalf"], to=TensorProto.FLOAT),
        helper.make_node("Cast", ["k_one"], ["fone"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["f", "f"], ["t0"]), helper.make_node("Mul", ["t0", "f"], ["t1"]),
        helper.make_node("Mul", ["t1", "f044"], ["t2"]), helper.make_node("Add", ["f", "t2"], ["t3"]),
        helper.make_node("Mul", ["t3", "f079"], ["t4"]), helper.make_node("Tanh", ["t4"], ["t5"]),
        helper.make_node("Add", ["t5", "fone"], ["t6"]), helper.make_node("Mul", ["f", "fhalf"], ["t7"]),
        helper.make_node("Mul", ["t7", "t6"], ["g1f"]),
        helper.make_node("Cast", ["g1f"], ["g1"], to=elem),
        helper.make_node("Constant", [], ["b1"], value_float=1.0),
        helper.make_node("CastLike", ["b1", "g1"], ["beta"]),
        helper.make_node("Mul", ["g1", "beta"], ["s0"]), helper.make_node("Sigmoid", ["s0"], ["s1"]),
        helper.make_node("Mul", ["g1", "s1"], ["g2"]),
        helper.make_node("Constant", [], ["three32"], value_float=3.0),
        helper.make_node("Constant", [], ["six32"], value_float=6.0),
        helper.make_node("Cast", ["three32"], ["three"], to=elem),
        helper.make_node("Cast", ["six32"], ["six"], to=elem),
        helper.make_node("Add", ["g2", "three"], ["h0"]), helper.make_node("Relu", ["h0"], ["h1"]),
        helper.make_node("Min", ["h1", "six"], ["h2"]), helper.make_node("Mul", ["g2", "h2"], ["h3"]),
        helper.make_node("Div", ["h3", "six"], ["y"]),
    ]
    graph = helper.make_graph(nodes, "half", [helper.make_tensor_value_info("x", elem, ["N", 8])],
                              [helper.make_tensor_value_info("y", elem, ["N", 8])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model


HALF_SITES = [("gelu", "x", "g0"), ("gelu_tanh", "f", "g1f"), ("silu", "g1", "g2"), ("hardswish", "g2", "y")]


def test_model_half_export_keeps_the_kinds():
    assert [(s.kind, s.input, s.output) for s in discover_sites(half_model())] == HALF_SITES


def test_model_half_export_is_analysed():
    model = half_model()
    x = np.linspace(-4, 4, 64, dtype=np.float16).reshape(8, 8)
    y = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    assert y.dtype == np.float16 and np.isfinite(y).all()
    sig = onnxaff.analyze(model, "synthetic:gaussian", limit=256, progress=False)
    assert [s["kind"] for s in sig.sites] == [k for k, _, _ in HALF_SITES] and len(_scores(sig)) == 4


def bf16_input_model():
    """A bfloat16 input, cast to float32 (onnxruntime's CPU kernels are float32), then a bfloat16-constant GELU."""
    nodes = [helper.make_node("Cast", ["x"], ["f"], to=TensorProto.FLOAT),
             _const("k", np.sqrt(2), ml_dtypes.bfloat16), helper.make_node("Cast", ["k"], ["kf"], to=1),
             helper.make_node("Div", ["f", "kf"], ["e0"]), helper.make_node("Erf", ["e0"], ["e1"]),
             helper.make_node("Constant", [], ["one"], value_float=1.0),
             helper.make_node("Constant", [], ["half"], value_float=0.5),
             helper.make_node("Add", ["e1", "one"], ["e2"]), helper.make_node("Mul", ["f", "e2"], ["e3"]),
             helper.make_node("Mul", ["e3", "half"], ["y"])]
    graph = helper.make_graph(nodes, "bf", [helper.make_tensor_value_info("x", BF, ["N", 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 6])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model


@pytest.mark.parametrize("data", ["synthetic:gaussian", "bf16.npy", "bf16.npz", "f32.npy"])
def test_bfloat16_input_data_are_loaded(tmp_path, data):
    # Before: "has dtype |V2 but model input x: bfloat16 needs bfloat16", and onnxruntime refused the arrays.
    path = tmp_path / "bf.onnx"
    onnx.save(bf16_input_model(), path)
    values = np.random.default_rng(0).standard_normal((96, 6))
    np.save(tmp_path / "bf16.npy", values.astype(ml_dtypes.bfloat16))
    np.savez(tmp_path / "bf16.npz", x=values.astype(ml_dtypes.bfloat16))
    np.save(tmp_path / "f32.npy", values.astype(np.float32))
    source = data if data.startswith("synthetic") else str(tmp_path / data)
    sig = onnxaff.analyze(str(path), source, progress=False)
    assert [s["kind"] for s in sig.sites] == ["gelu"]
    assert len(_scores(sig)) == 1


@pytest.mark.parametrize("io_binding", [False, True])
def test_runner_feeds_bfloat16_arrays(io_binding):
    from onnxaff.runtime.sessions import Runner

    loaded = from_proto(bf16_input_model())
    x = np.linspace(-2, 2, 12).reshape(2, 6).astype(ml_dtypes.bfloat16)
    got = Runner(loaded, loaded.model, device="cpu", io_binding=io_binding).run(["y"], {"x": x})[0]
    f = x.astype(np.float64)
    from math import erf
    want = 0.5 * f * (1 + np.vectorize(erf)(f / float(ml_dtypes.bfloat16(np.sqrt(2)))))  # the model holds its √2
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)

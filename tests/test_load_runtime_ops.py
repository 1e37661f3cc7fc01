"""What onnxruntime loads, onnxaff loads: an op onnxruntime registers in the standard domain (its T5 optimizer's
SimplifiedLayerNormalization) fails onnx's checker, and the model is analysed all the same, with a warning; the
checker still judges everything else."""

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxaff.errors import OnnxaffError
from onnxaff.graph import load_model
from tests.conftest import run_cli


def _model(op: str, opset: int = 17) -> onnx.ModelProto:
    nodes = [helper.make_node(op, ["x", "s"], ["n"], axis=-1, epsilon=1e-6), helper.make_node("Relu", ["n"], ["y"])]
    graph = helper.make_graph(nodes, "t5_norm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8])],
                              [numpy_helper.from_array(np.linspace(0.5, 1.5, 8, dtype=np.float32), "s")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


@pytest.fixture
def t5_norm(tmp_path):
    path = tmp_path / "t5_norm.onnx"
    onnx.save(_model("SimplifiedLayerNormalization"), path)
    return path


@pytest.mark.parametrize("op, opset", [("SimplifiedLayerNormalization", 17), ("SimplifiedLayerNormalization", 13),
                                       ("LayerNormalization", 13)])  # onnxruntime's, before ONNX had its own
def test_the_checker_refuses_it_and_onnxruntime_runs_it(tmp_path, op, opset):
    import onnxruntime as ort

    path = tmp_path / "norm.onnx"
    onnx.save(_model(op, opset), path)
    with pytest.raises(onnx.checker.ValidationError, match=op):
        onnx.checker.check_model(str(path))
    y = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": np.ones((2, 8), "f")})
    assert y[0].shape == (2, 8)
    loaded = load_model(path)
    assert loaded.notes and f"onnxruntime registers in the standard domain ({op})" in loaded.notes[0]
    assert [n.domain for n in loaded.model.graph.node] == ["", ""]  # checked on a copy: the model is as written


def test_its_sites_are_listed_and_scored(t5_norm, tmp_path, capfd):
    code, out, err = run_cli(capfd, "sites", str(t5_norm))
    assert code == 0, err
    assert "1 sites in t5_norm.onnx (1 ok, 0 skipped)" in out
    assert "note: onnx's checker refused the model (No Op registered for SimplifiedLayerNormalization" in err
    sig = tmp_path / "t5.json"
    code, out, err = run_cli(capfd, "analyze", str(t5_norm), "--data", "synthetic:gaussian", "--limit", "600",
                             "--metrics", "affinity", "--out", str(sig))
    assert code == 0, err
    written = json.loads(sig.read_text())
    (site,) = written["sites"]
    assert site["kind"] == "relu" and np.isfinite(site["metrics"]["affinity"]["mean"])
    assert any("checker refused" in w for w in written["warnings"])


@pytest.mark.parametrize("op, opset", [("NoSuchNormalization", 17), ("LayerNormalization", 17)])
def test_an_op_neither_knows_is_still_refused_in_one_line(tmp_path, op, opset):
    """An unknown op; and ONNX's own LayerNormalization given a wrong input is ONNX's to judge, not set aside."""
    path = tmp_path / "bad.onnx"
    model = _model(op, opset)
    if op == "LayerNormalization":
        model.graph.node[0].input.extend(["", "", "extra"])
    onnx.save(model, path)
    with pytest.raises(OnnxaffError, match=r"^invalid ONNX model bad.onnx: "):
        load_model(path)

"""LSTM, GRU and RNN nodes: unrolled, they compute onnxruntime's outputs, and their gates are sites that score."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxaff
from onnxaff.graph.expand import recurrent
from onnxaff.graph.load import from_proto
from onnxaff.graph.sites import find_sites

GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}


def build(op, direction="forward", layout=0, steps=5, batch=3, size=4, hidden=6, seq=False, init=False,
          peep=False, bias=True, seed=0, **attrs):
    """One recurrent node on random weights; X (and initial states, lengths) are graph inputs."""
    rng = np.random.default_rng(seed)
    dirs, gates = (2 if direction == "bidirectional" else 1), GATES[op]
    w = {"W": (dirs, gates * hidden, size), "R": (dirs, gates * hidden, hidden), "B": (dirs, 2 * gates * hidden),
         "P": (dirs, 3 * hidden)}
    inits = [numpy_helper.from_array(rng.normal(size=w[k]).astype(np.float32), k) for k in "WR"]
    x_shape = [steps, batch, size] if layout == 0 else [batch, steps, size]
    state_shape = [dirs, batch, hidden] if layout == 0 else [batch, dirs, hidden]
    inputs, feeds = [helper.make_tensor_value_info("X", TensorProto.FLOAT, x_shape)], {}
    feeds["X"] = rng.normal(size=x_shape).astype(np.float32)
    names = ["X", "W", "R", "B" if bias else ""]
    if bias:
        inits.append(numpy_helper.from_array(rng.normal(size=w["B"]).astype(np.float32), "B"))
    names.append("S" if seq else "")
    if seq:
        inputs.append(helper.make_tensor_value_info("S", TensorProto.INT32, [batch]))
        feeds["S"] = rng.integers(1, steps + 1, size=batch).astype(np.int32)
    for state in ("H0", "C0") if op == "LSTM" else ("H0",):
        names.append(state if init else "")
        if init:
            inputs.append(helper.make_tensor_value_info(state, TensorProto.FLOAT, state_shape))
            feeds[state] = rng.normal(size=state_shape).astype(np.float32)
    if peep:
        names.append("P")
        inits.append(numpy_helper.from_array(rng.normal(size=w["P"]).astype(np.float32), "P"))
    while names[-1] == "":
        names.pop()
    outs = ["Y", "Y_h", "Y_c"][: 3 if op == "LSTM" else 2]
    node = helper.make_node(op, names, outs, name="rnn1", hidden_size=hidden, direction=direction, layout=layout,
                            **attrs)
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info(o, TensorProto.FLOAT, None)
                                                    for o in outs], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)], ir_version=8), feeds


def run(model, feeds):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def reference(model, feeds):
    """onnxruntime's own node; it runs layout 0 only, so a layout-1 node is run batch-second and transposed back."""
    node = model.graph.node[0]
    if not any(a.name == "layout" and a.i for a in node.attribute):
        return run(model, feeds)
    m = onnx.ModelProto.FromString(model.SerializeToString())
    next(a for a in m.graph.node[0].attribute if a.name == "layout").i = 0
    for v in m.graph.input:
        if v.name != "S":
            dims = v.type.tensor_type.shape.dim
            dims[0].dim_value, dims[1].dim_value = dims[1].dim_value, dims[0].dim_value
    out = run(m, {k: v if k == "S" else v.transpose(1, 0, 2) for k, v in feeds.items()})
    return [out[0].transpose(2, 0, 1, 3)] + [o.transpose(1, 0, 2) for o in out[1:]]


CASES = [dict(op=op, direction=d, layout=lay, seq=s, init=s) for op in GATES
         for d in ("forward", "reverse", "bidirectional") for lay in (0, 1) for s in (False, True)]
CASES += [
    dict(op="LSTM", direction="bidirectional", clip=0.5, seq=True),
    dict(op="LSTM", direction="bidirectional", input_forget=1, init=True),
    dict(op="LSTM", direction="bidirectional", peep=True, seq=True, init=True),
    dict(op="LSTM", activations=["HardSigmoid", "LeakyRelu", "Softsign"], activation_alpha=[0.3, 0.2],
         activation_beta=[0.4]),
    dict(op="GRU", direction="bidirectional", linear_before_reset=1, seq=True, init=True),
    dict(op="GRU", direction="reverse", bias=False, clip=0.7),
    dict(op="RNN", direction="bidirectional", activations=["Relu", "Tanh"], clip=0.7),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items()))
def test_unrolled_node_computes_onnxruntimes_outputs(case):
    model, feeds = build(**case)
    expected = reference(model, feeds)
    unrolled = onnx.ModelProto.FromString(model.SerializeToString())
    notes = recurrent.apply(unrolled)
    assert notes == [f"{case['op']} rnn1 unrolled over its 5 time steps: its gates are sites"]
    assert not any(n.op_type in GATES for n in unrolled.graph.node)
    # The weights are wired in, never copied: the only new constants are indices and scalars.
    assert {t.name for t in model.graph.initializer} <= {t.name for t in unrolled.graph.initializer}
    assert all(np.prod(t.dims) <= 2 for t in unrolled.graph.initializer if t.name not in "WRBP")
    for got, want in zip(run(unrolled, feeds), expected, strict=True):
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-5)


def sites_of(model):
    loaded = from_proto(model)
    return loaded, find_sites(loaded.view)


@pytest.mark.parametrize("op, gates, kinds", [
    ("LSTM", "ifgoh", ["sigmoid", "sigmoid", "tanh", "sigmoid", "tanh"]),
    ("GRU", "zrg", ["sigmoid", "sigmoid", "tanh"]),
    ("RNN", "h", ["tanh"]),
])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_gates_are_sites_over_every_step(op, gates, kinds, direction):
    loaded, sites = sites_of(build(op, direction=direction, steps=5, batch=3, hidden=6)[0])
    dirs = ["forward", "reverse"] if direction == "bidirectional" else [direction]
    assert [s.id for s in sites] == [f"rnn1/{d}/{g}" for d in dirs for g in gates]
    assert [s.kind for s in sites] == kinds * len(dirs)
    for s in sites:
        assert s.status == "ok" and s.layout == "vector" and s.feature_axis == 1
        assert s.input_shape == s.output_shape == [15, 6]  # rows: 5 steps × 3 examples; features: H
        assert len(s.node_indices) == 5
    assert loaded.notes == [f"{op} rnn1 unrolled over its 5 time steps: its gates are sites"]


def test_the_attributes_name_the_kinds_and_the_gates():
    acts = dict(activations=["HardSigmoid", "Relu", "Softsign"], activation_alpha=[0.3], activation_beta=[0.4])
    _, sites = sites_of(build("LSTM", input_forget=1, **acts)[0])
    assert [(s.id, s.kind) for s in sites] == [("rnn1/forward/i", "hard_sigmoid"), ("rnn1/forward/g", "relu"),
                                               ("rnn1/forward/o", "hard_sigmoid"), ("rnn1/forward/h", "softsign")]
    assert sites[0].params == {"alpha": pytest.approx(0.3), "beta": pytest.approx(0.4)}  # f = 1 − i: no site
    _, sites = sites_of(build("GRU", clip=0.5)[0])
    assert [(s.id, s.kind) for s in sites] == [
        ("rnn1/forward/z/clip", "clip"), ("rnn1/forward/z", "sigmoid"), ("rnn1/forward/r/clip", "clip"),
        ("rnn1/forward/r", "sigmoid"), ("rnn1/forward/g/clip", "clip"), ("rnn1/forward/g", "tanh")]
    assert sites[0].params == {"min": -0.5, "max": 0.5}


def test_a_dynamic_sequence_length_lists_the_gates_as_skipped():
    model, _ = build("LSTM", direction="bidirectional")
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "T"
    loaded, sites = sites_of(model)
    assert loaded.notes == ["LSTM rnn1 left whole (its sequence length is not static): its gates are listed as "
                            "skipped"]
    assert [s.id for s in sites] == [f"rnn1/{d}/{g}" for d in ("forward", "reverse") for g in "ifgoh"]
    assert all(s.status == "skipped" and "LSTM" in s.reason for s in sites)
    assert [s.kind for s in sites[:5]] == ["sigmoid", "sigmoid", "tanh", "sigmoid", "tanh"]


def batch_first(op, direction, hidden=5):
    """The exporters' form: X [N, T, I] transposed into the node, Y back to batch-first; N dynamic."""
    model, _ = build(op, direction=direction, steps=4, batch=1, size=3, hidden=hidden)
    g = model.graph
    g.node[0].input[0] = "Xt"
    g.node.insert(0, helper.make_node("Transpose", ["X"], ["Xt"], perm=[1, 0, 2]))
    g.node.append(helper.make_node("Transpose", ["Y"], ["out"], perm=[2, 0, 1, 3]))
    del g.input[:], g.output[:]
    g.input.append(helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 4, 3]))
    dirs = 2 if direction == "bidirectional" else 1
    g.output.append(helper.make_tensor_value_info("out", TensorProto.FLOAT, ["N", 4, dirs, hidden]))
    return model


@pytest.mark.parametrize("op, direction", [("LSTM", "bidirectional"), ("GRU", "forward"), ("RNN", "reverse")])
def test_analyze_scores_the_gates(tmp_path, op, direction):
    path = tmp_path / "m.onnx"
    onnx.save(batch_first(op, direction), path)
    sig = onnxaff.analyze(path, "synthetic:gaussian", limit=64, chunk_size=128, progress=False)
    dirs = 2 if direction == "bidirectional" else 1
    assert len(sig.sites) == dirs * {"LSTM": 5, "GRU": 3, "RNN": 1}[op]
    assert any("unrolled over its 4 time steps" in w for w in sig.warnings)
    for s in sig.sites:
        assert s["status"] == "ok", s
        for m in s["metrics"].values():
            assert m["status"] == "ok" and np.isfinite(m["mean"]), (s["id"], m)

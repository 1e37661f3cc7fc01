"""onnxruntime's fused contrib activations are sites of the activation they compute, with the plain twin's kind.

Each fused model (written with onnx.helper) beside the standard-ONNX model computing the same function: the
split model (graph/expand/fused.py) gives onnxruntime's outputs to 1e-5, the sites agree in kind and
parameters, and the affinity and NLC on the same data agree.
"""

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxaff
from onnxaff.analysis.sitelist import list_sites
from onnxaff.graph.expand import fused
from onnxaff.graph.load import from_proto

RNG = np.random.default_rng(3)
W = RNG.standard_normal((6, 6)).astype(np.float32)
B = RNG.standard_normal(6).astype(np.float32)
CW = RNG.standard_normal((4, 3, 3, 3)).astype(np.float32)
CB = RNG.standard_normal(4).astype(np.float32)
SQRT1_2, SQRT2_PI = 0.7071067811865476, 0.7978845608028654


def model(nodes, inits, shape=("N", 6), out_shape=None, opset=17):
    """x → nodes → y (the last node writes y); a MatMul before and after, so the site sits between layers."""
    inits = [numpy_helper.from_array(a, n) for n, a in {"w": W, "b": B, "cw": CW, "cb": CB, **inits}.items()]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(out_shape or shape))], inits)
    opsets = [helper.make_opsetid("", opset), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets)


def n(op, inputs, out, domain="", **attrs):
    return helper.make_node(op, inputs, [out], name=f"{op}_{out}", domain=domain, **attrs)


def mlp(act_nodes, **inits):
    """h = x·w; act_nodes read h and b and write a; y = a·w."""
    return model([n("MatMul", ["x", "w"], "h"), *act_nodes, n("MatMul", ["a", "w"], "y")], inits)


def erf_gelu(x, out):
    return [n("Div", [x, "sq2"], "g1"), n("Erf", ["g1"], "g2"), n("Add", ["g2", "one"], "g3"),
            n("Mul", [x, "g3"], "g4"), n("Mul", ["g4", "half"], out)]


def tanh_gelu(x, out):
    return [n("Pow", [x, "three"], "t1"), n("Mul", ["t1", "c"], "t2"), n("Add", [x, "t2"], "t3"),
            n("Mul", ["t3", "k"], "t4"), n("Tanh", ["t4"], "t5"), n("Add", ["t5", "one"], "t6"),
            n("Mul", [x, "t6"], "t7"), n("Mul", ["t7", "half"], out)]


C = {k: np.array(v, np.float32) for k, v in
     {"sq2": 2 ** 0.5, "one": 1.0, "half": 0.5, "three": 3.0, "c": 0.044715, "k": SQRT2_PI}.items()}
ADD = [n("Add", ["h", "b"], "hb")]
TWINS = {  # name: (fused model, its standard-ONNX twin)
    "BiasGelu": (mlp([n("BiasGelu", ["h", "b"], "a", "com.microsoft")]), mlp(ADD + erf_gelu("hb", "a"), **C)),
    "FastGelu+bias": (mlp([n("FastGelu", ["h", "b"], "a", "com.microsoft")]), mlp(ADD + tanh_gelu("hb", "a"), **C)),
    "FastGelu": (mlp([n("FastGelu", ["h"], "a", "com.microsoft")]), mlp(tanh_gelu("h", "a"), **C)),
    "Gelu": (mlp([n("Gelu", ["h"], "a", "com.microsoft")]), mlp(erf_gelu("h", "a"), **C)),
    "QuickGelu": (mlp([n("QuickGelu", ["h"], "a", "com.microsoft")]),
                  mlp([n("Mul", ["h", "qa"], "q1"), n("Sigmoid", ["q1"], "q2"), n("Mul", ["h", "q2"], "a")],
                      qa=np.array(1.702, np.float32))),
    "QuickGelu(alpha=1)": (mlp([n("QuickGelu", ["h"], "a", "com.microsoft", alpha=1.0)]),
                           mlp([n("Sigmoid", ["h"], "q2"), n("Mul", ["h", "q2"], "a")])),
    "QuickGelu(alpha=0.5)": (mlp([n("QuickGelu", ["h"], "a", "com.microsoft", alpha=0.5)]),
                             mlp([n("Mul", ["h", "qa"], "q1"), n("Sigmoid", ["q1"], "q2"), n("Mul", ["h", "q2"], "a")],
                                 qa=np.array(0.5, np.float32))),
}
GEMM_ACTS = {"Relu": {}, "Tanh": {}, "Sigmoid": {}, "LeakyRelu": {"alpha": 0.2}, "Elu": {"alpha": 0.7},
             "HardSigmoid": {"alpha": 0.3, "beta": 0.4}}
for act, p in GEMM_ACTS.items():
    TWINS[f"FusedGemm({act})"] = (
        mlp([n("FusedGemm", ["h", "w", "b"], "a", "com.microsoft", activation=act,
               **{f"activation_{k}": v for k, v in p.items()})]),
        mlp([n("Gemm", ["h", "w", "b"], "g"), n(act, ["g"], "a", **p)]))
CONV_ACTS = {"Relu": [], "Tanh": [], "Sigmoid": [], "LeakyRelu": [0.2], "Clip": [-0.5, 1.5], "HardSigmoid": [0.3, 0.4]}
IMG = ("N", 3, 5, 5)


def conv(act_nodes, z=False):
    """x → FusedConv-like nodes → a; y = Conv(a) over the activation map; z = Conv(x) without bias."""
    nodes = [*act_nodes, n("Conv", ["a", "cw2"], "y", pads=[1, 1, 1, 1])]
    if z:  # FusedConv's Z (a residual branch) has the Conv's output shape
        nodes.insert(0, n("Conv", ["x", "cw"], "z", pads=[1, 1, 1, 1]))
    return model(nodes, {"cw2": np.full((3, 4, 3, 3), 0.1, np.float32)}, IMG, IMG)


for act, values in CONV_ACTS.items():
    for z in (False, True):
        keys = {"LeakyRelu": ["alpha"], "HardSigmoid": ["alpha", "beta"]}.get(act, [])
        p = dict(zip(keys, values, strict=False))
        twin_act = ([n("Clip", ["s", "lo", "hi"], "a")] if act == "Clip" else [n(act, ["s"], "a", **p)])
        inputs = ["x", "cw", "cb", "z"] if z else ["x", "cw", "cb"]
        layer = [n("Conv", ["x", "cw", "cb"], "c", pads=[1, 1, 1, 1])] + ([n("Add", ["c", "z"], "s")] if z else
                                                                          [n("Identity", ["c"], "s")])
        fused_model = conv([n("FusedConv", inputs, "a", "com.microsoft", activation=act, pads=[1, 1, 1, 1],
                              **({"activation_params": values} if values else {}))], z)
        twin = conv(layer + twin_act, z)
        if act == "Clip":
            twin.graph.initializer.extend([numpy_helper.from_array(np.float32(v), k) for k, v in
                                           zip(("lo", "hi"), values, strict=True)])
        TWINS[f"FusedConv({act}{', Z' if z else ''})"] = (fused_model, twin)


def run(m, x):
    return ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def data(m):
    dims = [d.dim_value or 16 for d in m.graph.input[0].type.tensor_type.shape.dim]
    return RNG.standard_normal(dims).astype(np.float32) * 2


@pytest.mark.parametrize("name", sorted(TWINS))
def test_split_model_computes_what_onnxruntime_fused(name):
    fused_model, twin = TWINS[name]
    x = data(fused_model)
    split = onnx.ModelProto.FromString(fused_model.SerializeToString())
    fused.apply(split)
    np.testing.assert_allclose(run(split, x), run(fused_model, x), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(run(twin, x), run(fused_model, x), rtol=1e-4, atol=1e-4)


def rows(m):
    return [(s.kind, s.params, s.status, s.output) for s in list_sites(from_proto(m)).sites]


@pytest.mark.parametrize("name", sorted(TWINS))
def test_fused_activation_is_the_twins_site(name):
    fused_model, twin = TWINS[name]
    assert rows(fused_model) == rows(twin)
    assert len(rows(twin)) == 1 and rows(twin)[0][2] == "ok"


def scores(m, x, tmp_path, tag):
    path = tmp_path / f"{tag}.onnx"
    onnx.save(m, path)
    np.save(tmp_path / f"{tag}.npy", np.concatenate([x] * 6))
    sig = onnxaff.analyze(path, str(tmp_path / f"{tag}.npy"), chunk_size=32, metrics=["affinity", "nlc"],
                          progress=False, chunk_workers=0)
    return [(s["kind"], s["status"], s["metrics"]["affinity"]["mean"], s["metrics"]["nlc"]["mean"]) for s in sig.sites]


@pytest.mark.parametrize("name", ["BiasGelu", "FastGelu+bias", "QuickGelu", "FusedGemm(LeakyRelu)",
                                  "FusedConv(Clip, Z)", "FusedConv(HardSigmoid)"])
def test_fused_activation_scores_as_its_twin(name, tmp_path):
    fused_model, twin = TWINS[name]
    x = data(fused_model)
    got, want = scores(fused_model, x, tmp_path, "f"), scores(twin, x, tmp_path, "t")
    assert [r[:2] for r in got] == [r[:2] for r in want] and want[0][1] == "ok"
    assert [v for r in got for v in r[2:]] == pytest.approx([v for r in want for v in r[2:]], abs=1e-4)


def test_an_activation_no_standard_op_computes_stays_fused_with_a_note():
    m = mlp([n("FusedGemm", ["h", "w", "b"], "a", "com.microsoft", activation="ScaledTanh")])
    notes = fused.apply(m)
    assert [x.op_type for x in m.graph.node] == ["MatMul", "FusedGemm", "MatMul"]
    assert "ScaledTanh" in notes[0]


FIXTURES = Path(__file__).parent / "fixtures" / "ort"


def bert_scores(path, tmp_path):
    rng = np.random.default_rng(5)
    ids = rng.integers(0, 32, size=(96, 8))
    mask = (np.arange(8)[None, :] < rng.integers(3, 9, size=(96, 1))).astype(np.int64)
    np.savez(tmp_path / "tokens.npz", input_ids=ids, attention_mask=mask)
    sig = onnxaff.analyze(path, str(tmp_path / "tokens.npz"), chunk_size=48, metrics=["affinity"], progress=False,
                          chunk_workers=0)
    return [(s["kind"], s["status"], s["metrics"].get("affinity", {}).get("mean")) for s in sig.sites]


def test_bert_optimised_by_onnxruntime_keeps_the_plain_models_gelu_sites_and_scores(tmp_path):
    """tests/fixtures/build_bert_optimized.py: the optimiser wrote BiasGelu for each erf GELU + its bias."""
    ops = [x.op_type for x in onnx.load(str(FIXTURES / "bert_tiny_ort.onnx")).graph.node]
    assert ops.count("BiasGelu") == 2 and "Erf" not in ops
    plain = bert_scores(FIXTURES / "bert_tiny_plain.onnx", tmp_path)
    optimised = bert_scores(FIXTURES / "bert_tiny_ort.onnx", tmp_path)
    assert [r[:2] for r in optimised] == [r[:2] for r in plain]
    gelus = [k for k, r in enumerate(plain) if r[0] == "gelu"]
    assert len(gelus) == 2 and all(plain[k][1] == "ok" and np.isfinite(plain[k][2]) for k in gelus)
    # The same function on the same data: the fused LayerNorms change the float32 rounding only.
    assert [optimised[k][2] for k in gelus] == pytest.approx([plain[k][2] for k in gelus], abs=1e-4)


def test_bert_with_onnxruntimes_gelu_approximation_has_tanh_gelu_sites(tmp_path):
    """enable_gelu_approximation writes FastGelu(x, bias): the tanh GELU, a function within 1e-3 of the erf one."""
    ops = [x.op_type for x in onnx.load(str(FIXTURES / "bert_tiny_ort_fastgelu.onnx")).graph.node]
    assert ops.count("FastGelu") == 2
    plain = bert_scores(FIXTURES / "bert_tiny_plain.onnx", tmp_path)
    approximated = bert_scores(FIXTURES / "bert_tiny_ort_fastgelu.onnx", tmp_path)
    assert [r[:2] for r in approximated] == [("gelu_tanh" if k == "gelu" else k, s) for k, s, _ in plain]
    assert [r[2] for r in approximated] == pytest.approx([r[2] for r in plain], abs=1e-2)

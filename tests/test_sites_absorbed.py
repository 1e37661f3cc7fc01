"""ReLUs onnxruntime's quantizer folds into a QuantizeLinear (zero point at the type's minimum: the clamp at 0) are
sites: a QDQ model lists every ReLU its float model has, a QOperator one lists them as skipped, and nothing
non-negative by construction (x·x, tanh(x) + 1, a pooled ReLU, a sigmoid) is taken for one."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxaff
from onnxaff.analysis.sitelist import list_sites
from onnxaff.graph import load_model
from onnxaff.graph.absorbed import bounds
from onnxaff.graph.sites import find_sites
from onnxaff.graph.view import GraphView
from tests.conftest import parse

C = 8


def mobilenet_v3_block() -> onnx.ModelProto:
    """Conv-ReLU, depthwise Conv-ReLU, squeeze-excitation (ReLU, HardSigmoid, x·s), HardSwish, residual Add-ReLU."""
    rng = np.random.default_rng(0)
    inits, nodes = [], []

    def const(name, value):
        inits.append(numpy_helper.from_array(np.asarray(value, dtype=np.float32), name))
        return name

    def conv(x, k, cin, cout=C, group=1, ks=3):
        w, b = const(f"w{k}", rng.normal(0, 0.5, (cout, cin // group, ks, ks))), const(f"b{k}", rng.normal(0, .1, cout))
        nodes.append(helper.make_node("Conv", [x, w, b], [f"c{k}"], pads=[ks // 2] * 4, group=group, name=f"conv{k}"))
        return f"c{k}"

    def op(kind, inputs, out, **attrs):
        nodes.append(helper.make_node(kind, inputs, [out], name=out, **attrs))
        return out

    x = op("Relu", [conv("x", 0, 3)], "r0")
    x = op("Relu", [conv(x, 1, C, group=C)], "r1")
    s = op("Relu", [conv(op("GlobalAveragePool", [x], "gap"), 2, C, 4, ks=1)], "se_r")
    s = op("HardSigmoid", [conv(s, 3, 4, C, ks=1)], "se_h", alpha=1 / 6, beta=0.5)
    x = op("HardSwish", [conv(op("Mul", [x, s], "se"), 4, C)], "hs")
    x = op("Relu", [op("Add", [conv(x, 5, C), x], "res")], "r2")
    x = op("Flatten", [op("GlobalAveragePool", [x], "gap2")], "flat")
    op("Gemm", [x, const("fcw", rng.normal(0, 0.5, (C, 5))), const("fcb", np.zeros(5))], "y")
    graph = helper.make_graph(nodes, "mnv3", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 5])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


class _Reader:
    def __init__(self):
        data = np.random.default_rng(1).normal(0, 1, (16, 3, 8, 8)).astype(np.float32)
        self._it = iter([{"x": data[i:i + 1]} for i in range(len(data))])

    def get_next(self):
        return next(self._it, None)


@pytest.fixture(scope="module")
def quantized(tmp_path_factory):
    """The float block and it through quantize_static: QDQ with uint8 and int8 activations, and QOperator."""
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static

    folder = tmp_path_factory.mktemp("absorbed")
    onnx.save(mobilenet_v3_block(), folder / "float.onnx")
    out = {"float": folder / "float.onnx"}
    for name, fmt, act in (("qdq_u8", QuantFormat.QDQ, QuantType.QUInt8), ("qdq_s8", QuantFormat.QDQ, QuantType.QInt8),
                           ("qop_u8", QuantFormat.QOperator, QuantType.QUInt8)):
        quantize_static(out["float"], folder / f"{name}.onnx", _Reader(), quant_format=fmt, activation_type=act,
                        weight_type=QuantType.QInt8)
        out[name] = folder / f"{name}.onnx"
    return out


def _sites(path):
    return list_sites(load_model(path)).activations


FLOAT_KINDS = ["relu", "relu", "relu", "hard_sigmoid", "hardswish", "relu"]


@pytest.mark.parametrize("name", ["qdq_u8", "qdq_s8"])
def test_a_qdq_model_lists_every_relu_of_its_float_model(quantized, name):
    assert [s.kind for s in _sites(quantized["float"])] == FLOAT_KINDS
    model = onnx.load(quantized[name])
    assert "Relu" not in {n.op_type for n in model.graph.node}  # the quantizer removed all four
    found = _sites(quantized[name])
    assert [s.kind for s in found] == FLOAT_KINDS
    view = load_model(quantized[name]).view
    for s in (s for s in found if s.kind == "relu"):
        assert s.status == "ok" and s.params["absorbed_by"] == "QuantizeLinear"
        assert s.op_types == ["QuantizeLinear", "DequantizeLinear"] and s.params["max"] > 0
        assert view.nodes[view.producer[s.input]].op_type in ("Conv", "Add")  # X: the float tensor before the clamp
        assert view.nodes[view.producer[s.output]].op_type == "DequantizeLinear"


def test_a_qoperator_model_lists_them_as_skipped_with_the_reason(quantized):
    found = _sites(quantized["qop_u8"])
    assert [s.kind for s in found] == FLOAT_KINDS
    skipped = [s for s in found if s.status == "skipped"]
    assert len(skipped) == 4 and all(s.kind == "relu" and "absorbed into" in s.reason for s in skipped)
    assert {s.params["absorbed_by"] for s in skipped} == {"QLinearConv", "QuantizeLinear"}


def test_the_absorbed_relus_score_as_the_float_models(quantized):
    """Same data: the clamp a Q performs is the ReLU, up to the quantisation step (measured: ≤ 0.001 on the 8-wide
    sites; the 4-wide SE ReLU on one 1×1 map moves by 0.015, within its own interval)."""
    data = np.random.default_rng(2).normal(0, 1, (1024, 3, 8, 8)).astype(np.float32)
    options = {"metrics": ["affinity"], "progress": False}
    plain = onnxaff.analyze(quantized["float"], data, **options)
    qdq = onnxaff.analyze(quantized["qdq_u8"], data, **options)
    pairs = zip(plain.scores("affinity"), qdq.scores("affinity"), _sites(quantized["float"]), strict=True)
    compared = [(a, b) for a, b, site in pairs if site.kind == "relu" and site.input_shape[1] == C]
    assert len(compared) == 3
    for a, b in compared:
        assert b == pytest.approx(a, abs=0.01)


def _view(body: str) -> GraphView:
    consts = "s = Constant<value_float = 0.05>()  z = Constant<value = uint8 {0}>()"
    return GraphView(parse('<ir_version: 8, opset_import: ["" : 17]> g (float[N, 4] x) => (float[N, 4] y) '
                           f"{{ {consts}  {body} }}").graph, opset=17)


@pytest.mark.parametrize("body, absorbed", [
    ("w = Constant<value = float[4, 4] {1,0,0,0,0,1,0,0,0,0,1,0,0,0,0,1}>()  h = MatMul(x, w)", True),
    ("one = Constant<value_float = 1.0>()  h = Add(x, one)", True),
    ("h = Mul(x, x)", False),  # a square
    ("t = Tanh(x)  one = Constant<value_float = 1.0>()  h = Add(t, one)", False),  # GELU's 1 + tanh
    ("r = Relu(x)  k = Constant<value_float = 2.0>()  h = Mul(r, k)", False),
    ("h = Identity(x)", False),  # no linear op before it
])
def test_only_a_clamp_that_cuts_something_is_a_relu(body, absorbed):
    view = _view(f"{body}  q = QuantizeLinear(h, s, z)  y = DequantizeLinear(q, s, z)")
    kinds = [(s.kind, s.params.get("absorbed_by")) for s in find_sites(view)]
    assert (("relu", "QuantizeLinear") in kinds) == absorbed


def test_bounds_follow_pairs_pooling_and_products():
    view = _view("r = Relu(x)  q0 = QuantizeLinear(r, s, z)  d0 = DequantizeLinear(q0, s, z)  "
                 "g = Sigmoid(x)  m = Mul(d0, g)  n = Neg(m)  y = Sub(n, x)")
    assert bounds(view, "d0") == (0.0, np.inf)
    assert bounds(view, "m") == (0.0, np.inf)  # 0·∞ is 0 in an interval product
    assert bounds(view, "n") == (-np.inf, 0.0)
    assert bounds(view, "y") == (-np.inf, np.inf)


# --- degenerate quantization is no evidence of a clamp (issue 50) ---

def _clamped(scale: float, producer: str = "MatMul") -> onnx.ModelProto:
    """x → MatMul (or Add of a −3.4e38 causal mask: Phi's QDQ) → Q(scale, uint8 0) → DQ."""
    w = numpy_helper.from_array(np.eye(4, dtype=np.float32), "w")
    if producer == "Add":
        w = numpy_helper.from_array(np.where(np.tril(np.ones((4, 4))), 0, np.finfo(np.float32).min)
                                    .astype(np.float32), "w")
    nodes = [helper.make_node(producer, ["x", "w"], ["h"]), helper.make_node("QuantizeLinear", ["h", "s", "z"], ["q"]),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"])]
    inits = [w, numpy_helper.from_array(np.array(scale, np.float32), "s"), numpy_helper.from_array(np.uint8(0), "z")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _relus(model: onnx.ModelProto) -> list:
    return [s for s in find_sites(GraphView(model.graph, opset=17)) if s.kind == "relu"]


@pytest.mark.parametrize("scale, producer, absorbed", [
    (0.05, "MatMul", True),  # the control: a calibrated range [0, 12.75]
    (np.inf, "MatMul", False), (np.inf, "Add", False),  # a range of −3.4e38 whose width overflowed (Phi: 2 sites)
    (np.nan, "MatMul", False), (0.0, "MatMul", False),  # no range at all
    (1e-40, "MatMul", False),  # below float32's smallest normal: onnxruntime's quantizer reads it as no range
    (3e38, "MatMul", False),  # 255 · scale overflows: an infinite top
])
def test_a_degenerate_scale_is_no_clamp(scale, producer, absorbed):
    """Before: every one of these was an absorbed ReLU (its zero point is uint8's minimum, whatever the data)."""
    assert bool(_relus(_clamped(scale, producer))) == absorbed


def _zero_branch(tmp_path, form: str) -> tuple:
    """LeViT's residual branch: its last BatchNormalization zero-initialised (γ = β = 0), or that BN folded into
    the Conv (zero weights); through quantize_static, whose calibrated range [0, 0] gives scale 1, zero point 0."""
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static

    rng = np.random.default_rng(0)
    inits = {"w0": rng.normal(0, .5, (C, 3, 3, 3)), "b0": np.zeros(C), "w1": rng.normal(0, .5, (C, C, 1, 1)),
             "g": np.zeros(C), "beta": np.zeros(C), "mean": np.zeros(C), "var": np.ones(C)}
    nodes = [helper.make_node("Conv", ["x", "w0", "b0"], ["c0"], pads=[1] * 4)]
    if form == "batchnorm":
        nodes += [helper.make_node("Conv", ["c0", "w1"], ["c1"]),
                  helper.make_node("BatchNormalization", ["c1", "g", "beta", "mean", "var"], ["branch"])]
    else:
        inits["w1"] = np.zeros((C, C, 1, 1))
        nodes += [helper.make_node("Conv", ["c0", "w1"], ["branch"])]
    nodes.append(helper.make_node("Add", ["c0", "branch"], ["y"]))
    used = {i for n in nodes for i in n.input}
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", C, 8, 8])],
                              [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in inits.items()
                               if k in used])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8),
              tmp_path / "float.onnx")
    data = iter([{"x": a[None]} for a in rng.normal(0, 1, (8, 3, 8, 8)).astype(np.float32)])
    reader = type("Reader", (), {"get_next": lambda self: next(data, None)})()
    quantize_static(tmp_path / "float.onnx", tmp_path / "qdq.onnx", reader, quant_format=QuantFormat.QDQ,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    return tmp_path / "float.onnx", tmp_path / "qdq.onnx"


@pytest.mark.parametrize("form", ["batchnorm", "zero_weights"])
def test_a_zero_initialised_branch_is_no_clamp(form, tmp_path):
    """Before: the branch's Q (scale 1, zero point 0) was a `relu` site (LeViT QDQ: 20 of them); the float model
    has no ReLU and the quantized one lists none either."""
    plain, quantized = _zero_branch(tmp_path, form)
    q = next(n for n in onnx.load(quantized).graph.node if n.op_type == "QuantizeLinear" and n.input[0] == "branch")
    scale = next(numpy_helper.to_array(t) for t in onnx.load(quantized).graph.initializer if t.name == q.input[1])
    assert scale == 1.0  # what the quantizer writes for the zero-width range
    assert _sites(plain) == [] and _sites(quantized) == []


def test_a_zero_scaled_normalisation_is_its_bias():
    """bounds: a BatchNormalization of γ = 0 is β whatever its input (a negative β: still no clamp, X is constant)."""
    text = ('<ir_version: 8, opset_import: ["" : 17]> g (float[N, 2] x) => (float[N, 2] y) {'
            " g = Constant<value = float[2] {0, 0}>()  b = Constant<value = float[2] {-1, 2}>()"
            " m = Constant<value = float[2] {0, 0}>()  v = Constant<value = float[2] {1, 1}>()"
            " h = BatchNormalization(x, g, b, m, v)  s = Constant<value_float = 0.05>()"
            " z = Constant<value = uint8 {0}>()  q = QuantizeLinear(h, s, z)  y = DequantizeLinear(q, s, z) }")
    view = GraphView(parse(text).graph, opset=17)
    assert bounds(view, "h") == (-1.0, 2.0)
    assert [s for s in find_sites(view) if s.kind == "relu"] == []

"""Decomposed activations in every operand order and both constant styles are one site each."""

import itertools
import math

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxaff.graph import discover_sites
from tests.conftest import run
from tests.test_rewrite import check_against_raw


class Builder:
    """Writes a graph h -> x = h + bias -> [pattern] -> y, so the entry is an inner tensor."""

    def __init__(self, const_style: str):
        self.style, self.nodes, self.inits, self.k = const_style, [], [], 0

    def _name(self, base):
        self.k += 1
        return f"{base}{self.k}"

    def const(self, value: float) -> str:
        name = self._name("c")
        arr = np.array(value, dtype=np.float32)
        if self.style == "initializer":
            self.inits.append(numpy_helper.from_array(arr, name))
        else:
            self.nodes.append(helper.make_node("Constant", [], [name], value=numpy_helper.from_array(arr)))
        return name

    def op(self, op, *inputs, out=None, **attrs) -> str:
        out = out or self._name(op.lower())
        self.nodes.append(helper.make_node(op, list(inputs), [out], name=self._name(op), **attrs))
        return out

    def model(self, y: str, opset: int = 17) -> onnx.ModelProto:
        bias = numpy_helper.from_array(np.linspace(-1, 1, 6).astype(np.float32), "bias")
        nodes = [helper.make_node("Add", ["h", "bias"], ["x"], name="bias_add"), *self.nodes]
        nodes.append(helper.make_node("Identity", [y], ["out"], name="out"))
        graph = helper.make_graph(
            nodes, "g", [helper.make_tensor_value_info("h", TensorProto.FLOAT, ["N", 6])],
            [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["N", 6])], [bias, *self.inits],
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        onnx.checker.check_model(model)
        return model


def mul(b, p, q, swap):
    return b.op("Mul", q, p) if swap else b.op("Mul", p, q)


def assert_one_site(model, kind, n_nodes, y, params=None):
    sites = discover_sites(model)
    assert [(s.kind, s.input, s.output) for s in sites] == [(kind, "x", y)]
    assert len(sites[0].op_types) == n_nodes
    if params is not None:
        assert sites[0].params == params
    # The augmented model hands out exactly the site's entry and exit tensors, reduced.
    feeds = {"h": np.linspace(-4, 4, 24, dtype=np.float32).reshape(4, 6)}
    assert check_against_raw(model, feeds, "mean") == 1


STYLES = ["initializer", "constant_node"]
SQ2 = math.sqrt(2.0)


@pytest.mark.parametrize(
    "style,scale,add_swap,half,swap",
    list(itertools.product(STYLES, ["div", "mul"], [0, 1], ["after", "after_div", "before_x", "on_a"], [0, 1])),
)
def test_gelu_erf_all_forms(style, scale, add_swap, half, swap):
    b = Builder(style)
    u = b.op("Div", "x", b.const(SQ2)) if scale == "div" else mul(b, "x", b.const(1 / SQ2), swap)
    e = b.op("Erf", u)
    a = b.op("Add", b.const(1.0), e) if add_swap else b.op("Add", e, b.const(1.0))
    if half == "after":
        y = mul(b, mul(b, "x", a, swap), b.const(0.5), swap)
    elif half == "after_div":
        y = b.op("Div", mul(b, "x", a, swap), b.const(2.0))
    elif half == "before_x":
        y = mul(b, mul(b, "x", b.const(0.5), swap), a, swap)
    else:
        y = mul(b, "x", mul(b, a, b.const(0.5), swap), swap)
    model = b.model(y)
    assert_one_site(model, "gelu", 5, y)
    x = np.linspace(-4, 4, 24).reshape(4, 6)
    from scipy.special import erf

    h = (x - np.linspace(-1, 1, 6)).astype(np.float32)
    got = run(model, {"h": h})["out"]
    xx = h.astype(np.float64) + np.linspace(-1, 1, 6).astype(np.float32)
    np.testing.assert_allclose(got, 0.5 * xx * (1 + erf(xx / SQ2)), atol=1e-5)


@pytest.mark.parametrize(
    "style,cube,form,half,swap",
    list(itertools.product(STYLES, ["pow", "mul"], ["factored", "expanded"], ["after", "before_x"], [0, 1])),
)
def test_gelu_tanh_all_forms(style, cube, form, half, swap):
    c1, c2 = math.sqrt(2 / math.pi), 0.044715
    b = Builder(style)
    x3 = b.op("Pow", "x", b.const(3.0)) if cube == "pow" else mul(b, "x", mul(b, "x", "x", 0), swap)
    if form == "factored":
        u = mul(b, b.const(c1), b.op("Add", "x", mul(b, b.const(c2), x3, swap)), swap)
    else:
        u = b.op("Add", mul(b, b.const(c1), "x", swap), mul(b, b.const(c1 * c2), x3, swap))
    a = b.op("Add", b.op("Tanh", u), b.const(1.0))
    if half == "after":
        y = mul(b, mul(b, "x", a, swap), b.const(0.5), swap)
    else:
        y = mul(b, a, mul(b, b.const(0.5), "x", swap), swap)
    model = b.model(y)
    n_ops = sum(n.op_type != "Constant" for n in model.graph.node) - 2  # all but bias_add and out
    assert_one_site(model, "gelu_tanh", n_ops, y)


@pytest.mark.parametrize("swap", [0, 1])
@pytest.mark.parametrize(
    "beta,kind,params",
    [(None, "silu", {}), (1.0, "silu", {}), (1.702, "quick_gelu", {}), (1.5, "swish", {"beta": 1.5})],
)
@pytest.mark.parametrize("style", STYLES)
def test_swish_family(style, swap, beta, kind, params):
    b = Builder(style)
    u = "x" if beta is None else mul(b, "x", b.const(beta), swap)
    y = mul(b, "x", b.op("Sigmoid", u), swap)
    assert_one_site(b.model(y), kind, 2 if beta is None else 3, y, params)


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("form", ["hardsigmoid", "clip_div", "clip_mul", "relu6_minmax", "relu_min", "maxmin",
                                  "gate_first"])
@pytest.mark.parametrize("swap", [0, 1])
def test_hardswish_forms(style, form, swap):
    b = Builder(style)
    if form == "hardsigmoid":
        y = mul(b, "x", b.op("HardSigmoid", "x", alpha=1 / 6, beta=0.5), swap)
        n = 2
    elif form == "gate_first":
        g = b.op("Div", b.op("Clip", b.op("Add", "x", b.const(3.0)), b.const(0.0), b.const(6.0)), b.const(6.0))
        y, n = mul(b, "x", g, swap), 4
    else:
        s = b.op("Add", b.const(3.0), "x") if swap else b.op("Add", "x", b.const(3.0))
        if form in ("clip_div", "clip_mul"):
            r, n = b.op("Clip", s, b.const(0.0), b.const(6.0)), 4
        elif form == "relu6_minmax":
            r, n = b.op("Min", b.op("Max", s, b.const(0.0)), b.const(6.0)), 5
        elif form == "relu_min":
            r, n = b.op("Min", b.const(6.0), b.op("Relu", s)), 5
        else:
            r, n = b.op("Max", b.op("Min", s, b.const(6.0)), b.const(0.0)), 5
        p = mul(b, "x", r, swap)
        y = b.op("Mul", p, b.const(1 / 6)) if form == "clip_mul" else b.op("Div", p, b.const(6.0))
    assert_one_site(b.model(y), "hardswish", n, y)


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("form", ["softplus", "log_exp"])
@pytest.mark.parametrize("swap", [0, 1])
def test_mish_forms(style, form, swap):
    b = Builder(style)
    if form == "softplus":
        sp, n = b.op("Softplus", "x"), 3
    else:
        sp, n = b.op("Log", b.op("Add", b.op("Exp", "x"), b.const(1.0))), 5
    y = mul(b, b.op("Tanh", sp), "x", swap)
    assert_one_site(b.model(y), "mish", n, y)


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("form", ["minmax", "maxmin", "relu_min"])
def test_relu6_from_two_nodes(style, form):
    b = Builder(style)
    if form == "minmax":
        y = b.op("Min", b.op("Max", "x", b.const(0.0)), b.const(6.0))
    elif form == "maxmin":
        y = b.op("Max", b.const(0.0), b.op("Min", "x", b.const(6.0)))
    else:
        y = b.op("Min", b.op("Relu", "x"), b.const(6.0))
    assert_one_site(b.model(y), "relu6", 2, y, params={"min": 0.0, "max": 6.0})


@pytest.mark.parametrize("style", STYLES)
def test_softsign_decomposed(style):
    b = Builder(style)
    y = b.op("Div", "x", b.op("Add", b.op("Abs", "x"), b.const(1.0)))
    assert_one_site(b.model(y), "softsign", 3, y)


# -- negatives ------------------------------------------------------------------------------------


def test_sigmoid_gating_another_tensor_is_not_silu():
    b = Builder("initializer")
    s = b.op("Sigmoid", b.op("Mul", "x", b.const(2.0)))
    z = b.op("Neg", "x")
    y = b.op("Mul", z, s)
    sites = discover_sites(b.model(y))
    assert [(s_.kind, s_.output) for s_ in sites] == [("sigmoid", s)]


def test_squeeze_excitation_gate_is_its_own_site():
    text = """<ir_version: 8, opset_import: ["" : 17]>
    g (float[N, 4, 5, 5] x) => (float[N, 4, 5, 5] y) {
        p = GlobalAveragePool(x)
        g = Sigmoid(p)
        y = Mul(x, g)
    }"""
    sites = discover_sites(onnx.parser.parse_model(text))
    assert [(s.kind, s.input, s.output) for s in sites] == [("sigmoid", "p", "g")]


def test_hardsigmoid_with_other_slope_is_not_hardswish():
    b = Builder("initializer")
    g = b.op("HardSigmoid", "x")  # alpha 0.2: x·hardsigmoid(x) is not HardSwish
    y = b.op("Mul", "x", g)
    assert [(s.kind, s.output) for s in discover_sites(b.model(y))] == [("hard_sigmoid", g)]


def test_clip_that_is_not_relu6_stays_a_clip_site():
    b = Builder("constant_node")
    y = b.op("Clip", "x", b.const(-1.0), b.const(1.0))
    assert [(s.kind, s.params) for s in discover_sites(b.model(y))] == [("clip", {"min": -1.0, "max": 1.0})]


def test_pattern_with_an_inner_tensor_used_elsewhere_is_not_merged():
    b = Builder("initializer")
    s = b.op("Sigmoid", "x")
    y = b.op("Mul", "x", s)
    b.op("Identity", s, out="leak")  # the gate is read outside the pattern
    model = b.model(y)
    model.graph.output.append(helper.make_tensor_value_info("leak", TensorProto.FLOAT, ["N", 6]))
    assert [(s_.kind, s_.output) for s_ in discover_sites(model)] == [("sigmoid", s)]


def test_scaled_silu_stops_at_the_activation():
    b = Builder("initializer")
    y = b.op("Mul", "x", b.op("Sigmoid", "x"))
    y2 = b.op("Mul", y, b.const(2.0))
    assert [(s.kind, s.output) for s in discover_sites(b.model(y2))] == [("silu", y)]


@pytest.mark.parametrize("betas,kinds", [(np.linspace(1.0, 2.0, 6), ["sigmoid"]), (np.full(6, 1.5), ["swish"])])
def test_per_channel_constant_is_a_pattern_only_when_uniform(betas, kinds):
    # A β per channel is a different function per channel: no named site, and the Sigmoid stays one.
    # The same β in every channel is one Swish-β, however the constant is stored.
    b = Builder("initializer")
    beta = "beta_vec"
    b.inits.append(numpy_helper.from_array(betas.astype(np.float32), beta))
    s = b.op("Sigmoid", b.op("Mul", "x", beta))
    y = b.op("Mul", "x", s)
    assert [s_.kind for s_ in discover_sites(b.model(y))] == kinds

"""Anchor-free islands, constant folding and decomposed softmax, written inline in ONNX text.

Each graph reads h and adds a bias first (x = h + b), so the island's entry is an inner tensor; each
site is checked numerically: onnxruntime's X and Y of the site against the named function.
"""

import numpy as np
import pytest
from scipy import special

from onnxaff.graph import discover_sites
from tests.conftest import parse, run

HEAD = '<ir_version: 8, opset_import: ["" : {opset}]>\n'


def graph(body: str, opset: int = 17, out: str = "y") -> str:
    return HEAD.format(opset=opset) + (
        "g (float[N, 6] h) => (float[N, 6] out) <float[6] b = {-1, -0.5, 0, 0.5, 1, 1.5}> {\n"
        f"x = Add(h, b)\n{body}\nout = Identity({out})\n}}"
    )


def sites_of(body, opset=17, out="y"):
    model = parse(graph(body, opset, out))
    return model, discover_sites(model)


def check_numerically(model, site, fn):
    """onnxruntime's X and Y of the site obey Y = fn(X) (float32)."""
    from onnx import helper

    m = model.__deepcopy__()
    for t in (site.input, site.output):
        m.graph.output.append(helper.make_tensor_value_info(t, 1, None))
    h = np.linspace(-6, 6, 60, dtype=np.float32).reshape(10, 6)
    got = run(m, {"h": h})
    np.testing.assert_allclose(got[site.output], fn(got[site.input].astype(np.float64)), rtol=1e-5, atol=1e-5)


def test_max_against_a_castlike_zero_is_relu():
    model, (site,) = sites_of("z = Constant<value_float = 0.0>()\nzc = CastLike(z, x)\ny = Max(x, zc)")
    assert (site.kind, site.input, site.output, site.params) == ("relu", "x", "y", {})
    check_numerically(model, site, lambda x: np.maximum(x, 0))


def test_folded_constant_chain_gelu():
    # 0.5·x·(1 + erf(x / sqrt(2))) with sqrt(2) computed in the graph from a CastLike'd 2 and Sum for the 1 +.
    body = """two = Constant<value_float = 2.0>()
    twoc = CastLike(two, x)
    s = Sqrt(twoc)
    one = Constant<value_float = 1.0>()
    onec = CastLike(one, x)
    half = Constant<value_float = 0.5>()
    d = Div(x, s)
    e = Erf(d)
    p = Sum(e, onec)
    m = Mul(x, half)
    y = Mul(m, p)"""
    model, (site,) = sites_of(body)
    assert (site.kind, site.input, site.output) == ("gelu", "x", "y")
    check_numerically(model, site, lambda x: 0.5 * x * (1 + special.erf(x / np.sqrt(2))))


def test_celu_is_the_outer_function_on_the_original_input():
    body = """a = Constant<value_float = 0.5>()
    d = Div(x, a)
    e = Elu(d)
    y = Mul(a, e)"""
    model, (site,) = sites_of(body)
    assert (site.kind, site.input, site.output, site.params) == ("celu", "x", "y", {"alpha": 0.5})
    check_numerically(model, site, lambda x: np.where(x > 0, x, 0.5 * np.expm1(x / 0.5)))


def test_leaky_relu_from_where_and_a_comparison_of_the_same_tensor():
    body = """z = Constant<value_float = 0.0>()
    a = Constant<value_float = 0.2>()
    c = Less(x, z)
    m = Mul(a, x)
    y = Where(c, m, x)"""
    model, (site,) = sites_of(body)
    assert (site.kind, site.input, site.params) == ("leaky_relu", "x", {"alpha": pytest.approx(0.2)})
    assert sorted(site.op_types) == ["Less", "Mul", "Where"]
    check_numerically(model, site, lambda x: np.where(x < 0, 0.2 * x, x))


def test_unnamed_non_linearity_is_an_elementwise_site():
    # x·exp(-x²): a non-linearity with no name is still one.
    body = """e2 = Mul(x, x)
    n = Neg(e2)
    e = Exp(n)
    y = Mul(x, e)"""
    model, (site,) = sites_of(body)
    assert (site.kind, site.input, site.output, site.params) == ("elementwise", "x", "y", {})
    check_numerically(model, site, lambda x: x * np.exp(-x * x))


@pytest.mark.parametrize("body", [
    # affine: x·2 + 1
    "t = Constant<value_float = 2.0>()\no = Constant<value_float = 1.0>()\nm = Mul(x, t)\ny = Add(m, o)",
    # algebra beside a reduction: the variance and rsqrt of a layer norm
    "p = Constant<value_float = 2.0>()\nq = Pow(x, p)\nr = ReduceMean<axes = [1]>(q)\n"
    "e = Constant<value_float = 1e-5>()\nv = Add(r, e)\ns = Sqrt(v)\ny = Div(x, s)",
    # a lone unnamed op (an Exp decoding box sizes)
    "y = Exp(x)",
    # parts that cancel: Clip with min > max is a constant
    "lo = Constant<value_float = 2.0>()\nhi = Constant<value_float = 1.0>()\nc1 = Less(x, lo)\n"
    "t = Where(c1, lo, x)\nc2 = Less(hi, t)\ny = Where(c2, hi, t)",
])
def test_no_site(body):
    assert discover_sites(parse(graph(body))) == []


def test_two_activations_in_a_row_stay_two_sites():
    _, sites = sites_of("r = Relu(x)\ny = Sigmoid(r)")
    assert [(s.kind, s.input, s.output) for s in sites] == [("relu", "x", "r"), ("sigmoid", "r", "y")]


def test_a_scaled_activation_keeps_its_name_and_leaves_the_scale_out():
    _, sites = sites_of("t = Constant<value_float = 3.0>()\nr = Relu(x)\ny = Mul(r, t)")
    assert [(s.kind, s.input, s.output) for s in sites] == [("relu", "x", "r")]


def test_prelu_slopes_fitted_per_channel_match_the_node():
    slopes = "<float[6] s = {0.1, 0.2, 0.3, -0.1, 0.5, 0.25}>"
    text = graph("z = Constant<value_float = 0.0>()\nc = Less(x, z)\nm = Mul(s, x)\ny = Where(c, m, x)")
    text = text.replace("<float[6] b", slopes[:-1] + ", float[6] b")
    node = graph("y = PRelu(x, s)").replace("<float[6] b", slopes[:-1] + ", float[6] b")
    (expanded,), (single,) = discover_sites(parse(text)), discover_sites(parse(node))
    assert (expanded.kind, expanded.params) == (single.kind, single.params) == (
        "prelu", {"slope": [pytest.approx(v) for v in (0.1, 0.2, 0.3, -0.1, 0.5, 0.25)]})


SOFTMAX = {
    "softmax": "e = Exp({t})\ns = ReduceSum<keepdims = 1>(e, ax)\ny = Div(e, s)",
    "log_softmax": "e = Exp({t})\ns = ReduceSum<keepdims = 1>(e, ax)\nl = Log(s)\ny = Sub({t}, l)",
}


@pytest.mark.parametrize("kind", sorted(SOFTMAX))
@pytest.mark.parametrize("max_sub", [True, False])
@pytest.mark.parametrize("opset", [11, 17])
def test_decomposed_softmax(kind, max_sub, opset):
    body = "ax = Constant<value_ints = [1]>()\n"
    if max_sub:
        body += "mx = ReduceMax<axes = [1], keepdims = 1>(x)\nt = Sub(x, mx)\n"
    body += SOFTMAX[kind].format(t="t" if max_sub else "x")
    if opset < 13:  # ReduceSum's axes were an attribute
        body = body.replace("ReduceSum<keepdims = 1>(e, ax)", "ReduceSum<keepdims = 1, axes = [1]>(e)")
        body = body.replace("ax = Constant<value_ints = [1]>()\n", "")
    model, (site,) = sites_of(body, opset)
    assert (site.kind, site.input, site.output, site.params, site.feature_axis) == (kind, "x", "y", {"axis": 1}, 1)
    ref = special.softmax if kind == "softmax" else special.log_softmax
    check_numerically(model, site, lambda x: ref(x, axis=1))


def test_exp_read_elsewhere_is_no_softmax():
    body = ("ax = Constant<value_ints = [1]>()\ne = Exp(x)\ns = ReduceSum<keepdims = 1>(e, ax)\nd = Div(e, s)\n"
            "y = Add(d, e)")
    assert [s.kind for s in discover_sites(parse(graph(body)))] == []


@pytest.mark.parametrize("body", [
    # island constants that cannot broadcast together
    "c3 = Constant<value_floats = [1, 2, 3]>()\nc4 = Constant<value_floats = [1, 2, 3, 4]>()\n"
    "a = Mul(x, c3)\ne = Exp(a)\ny = Mul(e, c4)",
    # a ConstantOfShape asked for a negative size
    "s = Constant<value_ints = [-2]>()\nc = ConstantOfShape(s)\ne = Exp(x)\ny = Mul(e, c)",
])
def test_malformed_constants_leave_discovery_standing(body):
    from onnx import parser

    model = parser.parse_model(graph(body))  # not checked: invalid on purpose
    assert [s.kind for s in discover_sites(model, infer_shapes=False)] == []


REFERENCE = {
    "relu": lambda x, p: np.maximum(x, 0), "relu6": lambda x, p: np.clip(x, 0, 6),
    "clip": lambda x, p: np.clip(x, -np.inf if p["min"] is None else p["min"],
                                 np.inf if p["max"] is None else p["max"]),
    "leaky_relu": lambda x, p: np.where(x < 0, p["alpha"] * x, x),
    "elu": lambda x, p: np.where(x > 0, x, p["alpha"] * np.expm1(np.minimum(x, 0))),
    "selu": lambda x, p: p["gamma"] * np.where(x > 0, x, p["alpha"] * np.expm1(np.minimum(x, 0))),
    "celu": lambda x, p: np.where(x > 0, x, p["alpha"] * np.expm1(np.minimum(x, 0) / p["alpha"])),
    "thresholded_relu": lambda x, p: np.where(x > p["alpha"], x, 0),
    "hard_sigmoid": lambda x, p: np.clip(p["alpha"] * x + p["beta"], 0, 1),
    "sigmoid": lambda x, p: special.expit(x), "tanh": lambda x, p: np.tanh(x),
    "softplus": lambda x, p: np.logaddexp(0, x), "softsign": lambda x, p: x / (1 + np.abs(x)),
    "silu": lambda x, p: x * special.expit(x), "swish": lambda x, p: x * special.expit(p["beta"] * x),
    "quick_gelu": lambda x, p: x * special.expit(1.702 * x),
    "gelu": lambda x, p: 0.5 * x * (1 + special.erf(x / np.sqrt(2))),
    "gelu_tanh": lambda x, p: 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3))),
    "mish": lambda x, p: x * np.tanh(np.logaddexp(0, x)), "hardswish": lambda x, p: x * np.clip(x + 3, 0, 6) / 6,
}
_UNARY = ["Relu", "Sigmoid", "Tanh", "Abs", "Neg", "Erf", "Softplus"]
_WITH_CONST = ["Mul", "Add", "Sub", "Div", "Max", "Min"]


def random_graph(rng, n_ops: int) -> str:
    """x = h + b, then random elementwise ops on earlier tensors, constants as Constant or CastLike."""
    lines, tensors = [], ["x"]
    for k in range(n_ops):
        a = tensors[rng.integers(max(0, len(tensors) - 3), len(tensors))]
        kind = rng.integers(4)
        c = f"c{k}"
        value = float(rng.choice([0.0, 0.5, 1.0, 2.0, -1.0, 3.0, 6.0, 0.1]))
        lines.append(f"{c}0 = Constant<value_float = {value}>()\n{c} = CastLike({c}0, x)")
        if kind == 0:
            lines.append(f"t{k} = {rng.choice(_UNARY)}({a})")
        elif kind == 1:
            op = rng.choice(_WITH_CONST)
            if op == "Div" and value == 0.0:  # x/0 feeds infinities, where the island and its name part
                op = "Mul"
            lines.append(f"t{k} = {op}({a}, {c})")
        elif kind == 2:
            b = tensors[rng.integers(max(0, len(tensors) - 3), len(tensors))]
            lines.append(f"t{k} = {rng.choice(['Mul', 'Add'])}({a}, {b})")
        else:
            lines.append(f"w{k} = Less({a}, {c})\nm{k} = Mul({a}, {c})\nt{k} = Where(w{k}, m{k}, {a})")
        tensors.append(f"t{k}")
    return "\n".join(lines), tensors[-1]


@pytest.mark.parametrize("seed", range(40))
def test_random_elementwise_graphs_name_only_what_they_compute(seed):
    # Never a traceback, and every named site is what onnxruntime computes between its X and Y.
    rng = np.random.default_rng(seed)
    body, out = random_graph(rng, int(rng.integers(2, 9)))
    model = parse(graph(body, out=out))
    for site in discover_sites(model):
        if site.kind in REFERENCE:
            check_numerically(model, site, lambda x, s=site: REFERENCE[s.kind](x, s.params))

"""A rule declares where its region lies around its anchor (`Rule.region`); discovery asks each rule for it.

A rule defined here, with its own region, is found without any change to graph/patterns/region.py; the built-in
rules keep the region every rule had before rules declared one, so the frozen site lists stay as they are.
"""

import numpy as np
import onnx
import onnx.parser
import pytest

from onnxaff.graph import discover_sites, patterns
from onnxaff.graph.patterns.region import candidates
from onnxaff.graph.patterns.rule import Region, reference_rule
from onnxaff.graph.view import GraphView
from tests.conftest import run
from tests.test_rewrite import check_against_raw

A, B = 1.7159, 2.0 / 3.0  # LeCun's scaled tanh: A·tanh(B·x), B inside the anchor's input


def lecun_tanh(x):
    return A * np.tanh(B * x)


def graph(body: str) -> onnx.ModelProto:
    """h → x = h + bias → BODY (x to y) → out, so that the site's entry is an inner tensor."""
    model = onnx.parser.parse_model(f"""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[N, 6] h) => (float[N, 6] out)
        <float[6] bias = {{-1.0, -0.6, -0.2, 0.2, 0.6, 1.0}}> {{
            x = Add(h, bias)
            {body}
            out = Identity(y)
        }}""")
    onnx.checker.check_model(model)
    return model


LECUN = graph(f"""
    b = Constant<value = float {{{B!r}}}>()
    a = Constant<value = float {{{A!r}}}>()
    s = Mul(x, b)
    t = Tanh(s)
    y = Mul(a, t)""")
FEEDS = {"h": np.linspace(-4, 4, 24, dtype=np.float32).reshape(4, 6)}


def with_rule(monkeypatch, region: Region):
    rule = reference_rule("lecun_tanh", {"Tanh"}, lecun_tanh, "1.7159·tanh(2x/3)", region=region)
    monkeypatch.setattr(patterns, "RULES", [*patterns.RULES, rule])


def values(model: onnx.ModelProto, names: list[str]) -> list[np.ndarray]:
    """The tensors `names` as onnxruntime computes them on FEEDS."""
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    probe.graph.output.extend(onnx.helper.make_empty_tensor_value_info(n) for n in names)
    got = run(probe, FEEDS)
    return [got[n] for n in names]


def test_a_rule_of_its_own_region_is_found(monkeypatch):
    with_rule(monkeypatch, Region(before=1))
    sites = discover_sites(LECUN)
    assert [(s.kind, s.input, s.output, s.op_types) for s in sites] == [
        ("lecun_tanh", "x", "y", ["Mul", "Tanh", "Mul"])]
    # What onnxruntime computes at the site's Y is the rule's function of what it computes at its X.
    x, y = values(LECUN, ["x", "y"])
    np.testing.assert_allclose(y, lecun_tanh(x.astype(np.float64)), rtol=1e-6, atol=1e-6)
    assert check_against_raw(LECUN, FEEDS, "mean") == 1


def test_without_the_declaration_the_rule_misses_it(monkeypatch):
    # The region every built-in rule has: entry at the anchor's input, so B·x → y, which is no LeCun tanh.
    with_rule(monkeypatch, Region())
    assert "lecun_tanh" not in [s.kind for s in discover_sites(LECUN)]


def test_candidates_follow_the_declaration():
    view = GraphView(LECUN.graph)
    anchor = next(i for i, n in enumerate(view.nodes) if n.op_type == "Tanh")
    pairs = [(c.entry, c.exit) for c in candidates(view, anchor)]
    assert pairs == [("s", "y"), ("s", "t")]
    # Longest first: each exit with its farthest entry first.
    pairs = [(c.entry, c.exit) for c in candidates(view, anchor, Region(before=1))]
    assert pairs == [("x", "y"), ("s", "y"), ("x", "t"), ("s", "t")]
    assert [(c.entry, c.exit) for c in candidates(view, anchor, Region(after=0))] == [("s", "t")]


GELU_TANH = graph("""
    c = Constant<value = float {0.044715}>()
    k = Constant<value = float {0.7978845608}>()
    half = Constant<value = float {0.5}>()
    one = Constant<value = float {1.0}>()
    x3 = Mul(x, x)
    x3b = Mul(x3, x)
    cx3 = Mul(c, x3b)
    inner = Add(x, cx3)
    u = Mul(inner, k)
    t = Tanh(u)
    p = Add(t, one)
    hx = Mul(half, x)
    y = Mul(hx, p)""")


def test_another_rule_region_leaves_the_builtin_rules_alone(monkeypatch):
    before = [(s.kind, s.input, s.output, s.op_types) for s in discover_sites(GELU_TANH)]
    assert before == [("gelu_tanh", "x", "y", ["Mul", "Mul", "Mul", "Add", "Mul", "Tanh", "Add", "Mul", "Mul"])]
    with_rule(monkeypatch, Region(before=1))
    assert [(s.kind, s.input, s.output, s.op_types) for s in discover_sites(GELU_TANH)] == before


def test_builtin_rules_keep_the_one_region():
    # The region all rules shared before they declared one; only the parameterised softplus reaches above.
    assert {r.kind: r.region for r in patterns.RULES if r.region != Region()} == {"softplus": Region(before=1)}


SOFTPLUS = {
    "node": "s = Mul(x, b)\n sp = Softplus(s)\n y = Div(sp, b)",  # torch's nn.Softplus(beta)
    "log_exp": "s = Mul(b, x)\n e = Exp(s)\n a = Add(one, e)\n l = Log(a)\n y = Div(l, b)",
    "reciprocal": "s = Mul(x, b)\n sp = Softplus(s)\n y = Mul(sp, r)",
}


@pytest.mark.parametrize("form", sorted(SOFTPLUS))
@pytest.mark.parametrize("beta", [2.0, 0.5])
def test_parameterised_softplus(form, beta):
    model = graph(f"""
        b = Constant<value = float {{{beta!r}}}>()
        r = Constant<value = float {{{1 / beta!r}}}>()
        one = Constant<value = float {{1.0}}>()
        {SOFTPLUS[form]}""")
    sites = discover_sites(model)
    assert [(s.kind, s.input, s.output, s.params) for s in sites] == [("softplus", "x", "y", {"beta": beta})]
    x, y = values(model, ["x", "y"])
    np.testing.assert_allclose(y, np.logaddexp(0.0, beta * x.astype(np.float64)) / beta, rtol=1e-6, atol=1e-6)
    assert check_against_raw(model, FEEDS, "mean") == 1


def test_softplus_of_beta_one_stays_as_it_was():
    # β = 1 is plain softplus: the single node, or the island of Exp, Add, Log, as before the rule.
    model = graph("""
        one = Constant<value = float {1.0}>()
        s = Mul(x, one)
        e = Exp(s)
        a = Add(e, one)
        y = Log(a)""")
    assert [(s.kind, s.params) for s in discover_sites(model)] == [("softplus", {})]
    model = graph("y = Softplus(x)")
    assert [(s.kind, s.input, s.output, s.params) for s in discover_sites(model)] == [("softplus", "x", "y", {})]

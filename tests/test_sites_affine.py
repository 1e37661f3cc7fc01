"""An affine island is no site, wherever its root falls: random chains of scales and shifts over 12 orders of
magnitude, each with its root placed on a probe point, give no site, by the exact derivation and by the probes."""

from fractions import Fraction

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from onnxaff.graph.explain import explain_misses
from onnxaff.graph.patterns import affine, library
from onnxaff.graph.sites import find_sites, run_passes
from onnxaff.graph.view import GraphView

PROBES = np.unique(np.concatenate([library.WIDE, affine.SPREAD]))
_OPS = ["mul", "rmul", "add", "sub", "rsub", "div", "neg"]


def _onnx_op(kind: str, h: str, c: str, out: str) -> onnx.NodeProto:
    spec = {"mul": ("Mul", [h, c]), "rmul": ("Mul", [c, h]), "add": ("Add", [h, c]), "sub": ("Sub", [h, c]),
            "rsub": ("Sub", [c, h]), "div": ("Div", [h, c]), "neg": ("Neg", [h])}[kind]
    return helper.make_node(spec[0], spec[1], [out])


def _numpy_op(kind: str, h, c):
    return {"mul": lambda: h * c, "rmul": lambda: c * h, "add": lambda: h + c, "sub": lambda: h - c,
            "rsub": lambda: c - h, "div": lambda: h / c, "neg": lambda: -h}[kind]()


@st.composite
def chains(draw):
    """(ops with their float32 constants, the probe point p) of a chain whose root sits on p."""
    n = draw(st.integers(1, 5))
    steps = []
    for _ in range(n):
        kind = draw(st.sampled_from(_OPS))
        magnitude = 10.0 ** draw(st.floats(-6.0, 6.0))
        steps.append((kind, float(np.float32(magnitude * draw(st.sampled_from([-1.0, 1.0]))))))
    # The last shift puts the root on a probe point p: a + b·p + c = 0, c rounded to the float32 the model stores.
    p = float(draw(st.sampled_from(PROBES.tolist())))
    a, b = _line(steps)
    steps.append(("add", float(np.float32(-(a + b * p)))))
    return steps, p


def _line(steps) -> tuple[float, float]:
    """(a, b) of the chain, exactly (rational arithmetic on its float32 constants), rounded once at the end."""
    g0, g1 = Fraction(0), Fraction(1)
    for kind, c in steps:
        g0, g1 = _numpy_op(kind, g0, Fraction(c)), _numpy_op(kind, g1, Fraction(c))
    return float(g0), float(g1 - g0)


def _model(steps, prefix: list[onnx.NodeProto] | None = None, entry: str = "x") -> onnx.ModelProto:
    nodes, inits, h = list(prefix or []), [], entry
    for k, (kind, c) in enumerate(steps):
        out = "y" if k == len(steps) - 1 else f"h{k}"
        inits.append(numpy_helper.from_array(np.array(c, np.float32), f"c{k}"))
        nodes.append(_onnx_op(kind, h, f"c{k}", out))
        h = out
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _sites(model):
    view = GraphView(model.graph, opset=17)
    return view, find_sites(view)


@settings(max_examples=150, deadline=None)
@given(chains())
def test_a_random_affine_chain_with_its_root_on_a_probe_is_no_site(chain):
    steps, _ = chain
    view, sites = _sites(_model(steps))
    assert sites == []
    if len(steps) >= 2:  # explained as the line it is
        (shown,) = explain_misses(view, sites)
        assert shown.affine and "derived exactly from its ops" in shown.tried[0].reason


@settings(max_examples=150, deadline=None)
@given(chains())
def test_the_probes_call_the_same_chains_affine(chain):
    """The fallback alone, on values computed in float64 as discovery does (x broadcast against the constants)."""
    steps, _ = chain
    g = affine.SPREAD.copy()
    magnitude = np.abs(g)
    for kind, c in steps:
        g = _numpy_op(kind, g, np.float64(np.float32(c)))
        magnitude = magnitude + np.abs(g)
    verdict = affine.on_probes(g, magnitude)
    assert verdict.affine, verdict.why
    a, b = _line(steps)
    # b read where the slope's rounding over the distance is least: eps·(sum of magnitudes) / 5.3e8 at worst.
    assert verdict.b[0] == pytest.approx(b, rel=1e-9, abs=1e-12 * magnitude.max() / affine.SPREAD.max())


@settings(max_examples=100, deadline=None)
@given(chains())
def test_an_affine_chain_after_cancelling_non_linear_parts_is_no_site(chain):
    """Sign(x)·|x| is x: the ops cannot show it (a product of two terms in x), the probes must."""
    steps, _ = chain
    prefix = [helper.make_node("Sign", ["x"], ["p"]), helper.make_node("Abs", ["x"], ["q"]),
              helper.make_node("Mul", ["p", "q"], ["s"])]
    view, sites = _sites(_model(steps, prefix, entry="s"))
    assert sites == []
    records = []
    run_passes(view, misses=records)
    assert any("non-linear parts cancel" in m.reason and "on 137 probes" in m.reason for _, _, m in records)


@pytest.mark.parametrize("at", [-1e6, -1e-3, 1e-6, 1e-3, 0.37, 1e3, 1e6])
@pytest.mark.parametrize("height", [1e-6, 1e-3, 1.0])
@pytest.mark.parametrize("a, b", [(0.5880577, 1.4282762), (-3.1e6, 2e-4), (0.0, 1e5)])
def test_a_bend_at_any_scale_is_seen(at, height, a, b):
    """A kink at `at` that moves the line by `height` of its value there (1e-6 … 1) is no line."""
    x = affine.SPREAD
    g = a + b * x + height * (abs(a) + abs(b * at)) * np.maximum(x - at, 0.0) / abs(at)
    assert not affine.on_probes(g, np.abs(g) + np.abs(x)).affine


def test_paddlepaddles_affine_block_is_no_site():
    """Mul(x, 1.4282762) → Add(0.5880577) after a Conv (PP-OCRv4): once called an `elementwise` site."""
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("Mul", ["c", "a"], ["m"]),
             helper.make_node("Add", ["m", "b"], ["y"]), helper.make_node("Relu", ["y"], ["z"])]
    graph = helper.make_graph(
        nodes, "pp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 4, 8, 8])],
        [numpy_helper.from_array(np.ones((4, 3, 1, 1), np.float32), "w"),
         numpy_helper.from_array(np.array(1.4282762, np.float32), "a"),
         numpy_helper.from_array(np.array(0.5880577, np.float32), "b")])
    _, sites = _sites(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    assert [s.kind for s in sites] == ["relu"]


@pytest.mark.parametrize("body, kind", [("h = Mul(x, x)", "elementwise"), ("h = Div(x, x)", None)])
def test_products_of_x_are_left_to_the_probes(body, kind):
    """x·x is a polynomial (a site); x/x is 1 but for 0, not a site: neither is derived from the ops alone."""
    from tests.conftest import parse

    _, sites = _sites(parse(f'<ir_version: 8, opset_import: ["" : 17]> g (float[N, 4] x) => (float[N, 4] y) '
                            f'{{ {body}  y = Add(h, x) }}'))
    assert [s.kind for s in sites] == ([kind] if kind else [])

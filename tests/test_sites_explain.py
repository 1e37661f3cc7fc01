"""`onnxaff sites --explain`: a near-miss of a named activation says which rule refused it and why."""

import json

import pytest

from onnxaff.graph.explain import explain_misses
from onnxaff.graph.sites import find_sites, run_passes
from onnxaff.graph.view import GraphView
from tests.builders import HEADER, save
from tests.conftest import FIXTURES, parse, run_cli

CONSTS = """
    one = Constant<value_float = 1.0>()
    half = Constant<value_float = 0.5>()"""


def erf_gelu(scale: float) -> str:
    """0.5·x·(1 + erf(x·scale)): GELU when scale is 1/√2."""
    return f"""{HEADER}
    g (float[N, 4] x) => (float[N, 4] y) {{{CONSTS}
        c = Constant<value_float = {scale}>()
        u = Mul(x, c)
        e = Erf(u)
        a = Add(e, one)
        m = Mul(x, a)
        y = Mul(m, half)
    }}"""


def tanh_gelu(cubic: float | None) -> str:
    """0.5·x·(1 + tanh(√(2/π)·(x + cubic·x³))): GELU's tanh form when cubic is 0.044715; no x³ when None."""
    inner = "s = Identity(x)" if cubic is None else f"""k = Constant<value_float = {cubic}>()
        three = Constant<value_float = 3.0>()
        p = Pow(x, three)
        kp = Mul(p, k)
        s = Add(x, kp)"""
    return f"""{HEADER}
    g (float[N, 4] x) => (float[N, 4] y) {{{CONSTS}
        c = Constant<value_float = 0.7978845608>()
        {inner}
        u = Mul(s, c)
        t = Tanh(u)
        a = Add(t, one)
        m = Mul(x, a)
        y = Mul(m, half)
    }}"""


def explained(text: str):
    view = GraphView(parse(text).graph, opset=17)
    sites = find_sites(view)
    return sites, explain_misses(view, sites)


def reasons(miss, stage: str, rule: str) -> list[str]:
    return [t.reason for t in miss.tried if (t.stage, t.rule) == (stage, rule)]


def test_near_gelu_with_a_wrong_constant_says_the_gelu_rule_refused_it():
    sites, misses = explained(erf_gelu(0.7))
    assert [s.kind for s in sites] == ["elementwise"]  # still a site, but no name
    (miss,) = misses
    assert miss.site == sites[0].id and miss.ops == ["Mul", "Erf", "Add", "Mul", "Mul"]
    (why,) = reasons(miss, "rule", "gelu")
    assert why.startswith("differs from gelu by 0.0027 at x=")
    (lib,) = reasons(miss, "library", "gelu")
    assert lib.startswith("f(-1) = -0.161") and "gelu gives -0.158655" in lib
    assert {t.rule for t in miss.tried if t.stage == "library"} >= {"gelu_tanh", "swish", "leaky_relu", "clip"}


def test_tanh_gelu_with_a_wrong_cubic_term_leaves_its_gate_explained():
    sites, misses = explained(tanh_gelu(0.0044715))
    # Its cubic argument is a polynomial of the data (a site), the Tanh another, the product x·(1 + t) neither.
    assert [(s.kind, s.op_types) for s in sites] == [("elementwise", ["Pow", "Mul", "Add", "Mul"]), ("tanh", ["Tanh"])]
    (miss,) = [m for m in misses if m.site is None]
    assert miss.ops == ["Mul"]
    (why,) = reasons(miss, "rule", "gelu_tanh")
    assert why.startswith("differs from gelu_tanh by 0.028 at x=")
    verdicts = reasons(miss, "island", "island")
    assert any("holds Tanh, a site of its own" in v for v in verdicts)


def test_tanh_gelu_without_its_cubic_term_is_a_swish_and_no_miss():
    # 0.5·x·(1 + tanh(cx)) is exactly x·σ(2cx): a named site, nothing to explain.
    sites, misses = explained(tanh_gelu(None))
    assert [(s.kind, s.params) for s in sites] == [("swish", {"beta": 1.595769})]
    assert misses == []


@pytest.mark.parametrize("text", [erf_gelu(0.70710678), tanh_gelu(0.044715)])
def test_exact_gelu_shows_no_miss(text):
    sites, misses = explained(text)
    assert [s.kind for s in sites] in (["gelu"], ["gelu_tanh"])
    assert misses == []


def test_softmax_that_drops_its_axis_says_so():
    sites, misses = explained(f"""{HEADER}
    g (float[N, 4] x) => (float[N, 4] y) {{
        e = Exp(x)
        s = ReduceSum<keepdims = 0>(e)
        y = Div(e, s)
    }}""")
    assert [s.kind for s in sites] == []
    (miss,) = misses
    assert miss.ops == ["Exp"]
    assert reasons(miss, "softmax", "softmax") == ["its ReduceSum drops the reduced axis (keepdims=0)"]
    assert any("lone op (Exp)" in v for v in reasons(miss, "island", "island"))


def test_a_small_scale_is_affine_and_never_explained():
    sites, misses = explained(f"""{HEADER}
    g (float[N, 4] x) => (float[N, 4] y) {{
        k = Constant<value_float = 0.0044715>()
        y = Mul(x, k)
    }}""")
    assert sites == [] and misses == []


@pytest.mark.parametrize("name", ["act_zoo_op17", "encoder_op17", "tiny_vit_op17", "gelu_tanh_cnn_op20"])
def test_recording_refusals_changes_no_match(name):
    from onnxaff.graph import load_model

    view = load_model(FIXTURES / f"{name}.onnx").view
    records = []
    key = run_passes(view)  # the registered passes, as discovery runs them
    assert run_passes(view, misses=records) == key
    assert records and all(isinstance(m.reason, str) and m.reason for _, _, m in records)


def test_cli_table_and_json(tmp_path, capfd):
    path = save(parse(erf_gelu(0.7)), tmp_path / "near_gelu.onnx")
    code, out, err = run_cli(capfd, "sites", path, "--explain")
    assert code == 0, err
    assert "non-linearities no site names: 1" in out
    row = next(line for line in out.splitlines() if " gelu " in line)
    assert "rule" in row and "x → y (5 ops)" in row and "differs from gelu by 0.0027" in row
    assert "nearest of 15: gelu_tanh" in out  # of the library's refusals, only the nearest is shown
    code, out, err = run_cli(capfd, "sites", path, "--explain", "--format", "json")
    assert code == 0, err
    found = json.loads(out)
    assert [s["kind"] for s in found["sites"]] == ["elementwise"]
    (miss,) = found["misses"]
    assert miss["site"] == found["sites"][0]["id"]
    tried = {(t["stage"], t["rule"]): t for t in miss["tried"]}
    assert tried["rule", "gelu"]["reason"].startswith("differs from gelu") and tried["rule", "gelu"]["gap"] > 1e-3
    assert len([t for t in miss["tried"] if t["stage"] == "library"]) == 15
    # Without --explain the JSON is the plain list it always was.
    assert isinstance(json.loads(run_cli(capfd, "sites", path, "--format", "json")[1]), list)


def test_cli_exact_gelu_has_nothing_to_explain(capfd):
    code, out, err = run_cli(capfd, "sites", FIXTURES / "gelu_cnn_op17.onnx", "--explain")
    assert code == 0, err
    assert "nothing to explain" in out

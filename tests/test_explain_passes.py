"""`sites --explain` runs discovery's own passes (graph.sites.run_passes): a pass added to the registry has its
refusals shown, every refusal is made after what the earlier passes took, as in discovery, and the bodies of
If/Loop/Scan nodes are explained as discovery finds their sites."""

import ast
import json
import os
from pathlib import Path

import pytest

import onnxaff.graph.explain
from onnxaff.graph import sites
from onnxaff.graph.explain import explain_misses
from onnxaff.graph.load import load_model
from onnxaff.graph.patterns.region import Candidate
from onnxaff.graph.patterns.rule import Miss
from onnxaff.graph.site import Site
from onnxaff.graph.sites import find_sites, run_passes
from onnxaff.graph.view import GraphView
from tests.builders import HEADER, save
from tests.conftest import FIXTURES, parse, run_cli
from tests.test_sites_explain import erf_gelu

SINE = f"""{HEADER}
g (float[N, 4] x) => (float[N, 4] y) {{
    y = Sin(x)
}}"""  # a lone op no built-in pass names: left unclaimed


class RefusesSines:
    """A pass of the test's own, run last: it takes nothing and refuses every Sin no earlier pass took."""

    name = "sines"

    def find(self, view, taken, layout, misses=None):
        for i, node in enumerate(view.nodes):
            if node.op_type == "Sin" and i not in taken and misses is not None:
                misses.append(("sines", Candidate(node.input[0], node.output[0], (i,)),
                               Miss("sine", "a {} is no sine wave of ours", (node.op_type,))))
        return []


class TakesErf:
    """A pass of the test's own that runs first and takes every Erf, as StackedGates takes a gate's steps."""

    name = "erf"

    def find(self, view, taken, layout, misses=None):
        return [(view.order[i], Site(index=-1, id=f"erf{i}", kind="erf", input=node.input[0], output=node.output[0],
                                     op_types=["Erf"], nodes=[view.node_label(i)], node_indices=[i]))
                for i, node in enumerate(view.nodes) if node.op_type == "Erf" and i not in taken]


@pytest.fixture
def registered(monkeypatch):
    """Adds a pass to the registry discovery reads (first or last), for the test only."""
    registry = sites.passes

    def add(step, first=False):
        monkeypatch.setattr(sites, "passes", lambda: [step, *registry()] if first else [*registry(), step])

    return add


def explained(text: str):
    view = GraphView(parse(text).graph, opset=17)
    found = find_sites(view)
    return found, explain_misses(view, found)


def test_a_registered_pass_refusal_is_explained(registered):
    found, misses = explained(SINE)
    assert found == [] and [m.ops for m in misses] == [["Sin"]]
    assert not any(t.stage == "sines" for m in misses for t in m.tried)
    registered(RefusesSines())
    found, (miss,) = explained(SINE)
    assert found == [] and miss.ops == ["Sin"] and miss.site is None
    (toy,) = [t for t in miss.tried if t.stage == "sines"]
    assert (toy.rule, toy.entry, toy.exit, toy.ops, toy.reason) == ("sine", "x", "y", ("Sin",),
                                                                     "a Sin is no sine wave of ours")
    assert any("lone op (Sin)" in t.reason for t in miss.tried if t.stage == "island")  # the islands' still there


def test_the_cli_shows_a_registered_pass_refusal(registered, tmp_path, capfd):
    path = save(parse(SINE), tmp_path / "sine.onnx")
    registered(RefusesSines())
    code, out, err = run_cli(capfd, "sites", path, "--explain")
    assert code == 0, err
    row = next(line for line in out.splitlines() if " sines " in line)
    assert " sine " in row and "x → y (1 op)" in row and "a Sin is no sine wave of ours" in row
    code, out, err = run_cli(capfd, "sites", path, "--explain", "--format", "json")
    assert code == 0, err
    (miss,) = json.loads(out)["misses"]
    assert {"stage": "sines", "rule": "sine", "input": "x", "output": "y", "ops": ["Sin"],
            "reason": "a Sin is no sine wave of ours", "gap": None} in miss["tried"]


def test_refusals_come_after_what_an_earlier_pass_took(registered):
    _, misses = explained(erf_gelu(0.7))
    assert any((t.stage, t.rule) == ("rule", "gelu") for m in misses for t in m.tried)
    registered(TakesErf(), first=True)
    found, misses = explained(erf_gelu(0.7))
    assert [s.kind for s in found] == ["erf"]
    # The Erf is taken before the patterns run: no rule is tried around it, and no region tried holds it (the
    # product x·(1 + erf) left unclaimed has no region of one entry left to try).
    assert [m.ops for m in misses] == [["Mul"]]
    tried = [t for m in misses for t in m.tried]
    assert not any(t.stage == "rule" or "Erf" in t.ops for t in tried)


FROZEN = FIXTURES / "frozen_explain.json"
EXPLAINED = ["act_zoo_op17", "encoder_op17", "tiny_vit_op17", "text/gpt_tiny"]


def explain_outputs(capfd, name: str) -> dict[str, str]:
    path = FIXTURES / f"{name}.onnx"
    out = {}
    for fmt in ("table", "json"):
        code, text, err = run_cli(capfd, "sites", path, "--explain", "--format", fmt)
        assert code == 0, err
        out[fmt] = text
    return out


@pytest.mark.parametrize("name", EXPLAINED)
def test_the_explain_output_of_models_without_bodies_stays(name, capfd):
    """`sites --explain` of these fixtures, table and JSON, byte for byte as before the registered passes ran it
    (fixtures/frozen_explain.json; `ONNXAFF_FREEZE=1` rewrites it: only for a change an issue asks for)."""
    got = explain_outputs(capfd, name)
    if os.environ.get("ONNXAFF_FREEZE") == "1":
        frozen = json.loads(FROZEN.read_text()) if FROZEN.exists() else {}
        FROZEN.write_text(json.dumps({**frozen, name: got}, indent=1, ensure_ascii=False, sort_keys=True) + "\n")
    assert got == json.loads(FROZEN.read_text())[name]


@pytest.mark.parametrize("name", EXPLAINED)
def test_explain_reads_the_refusals_of_the_registered_passes(name, monkeypatch):
    """What explain reads is what `run_passes` records (the registered passes in discovery's order), nothing of its
    own: every refusal it shows is one of those records."""
    view = load_model(FIXTURES / f"{name}.onnx").view
    records: list = []
    run_passes(view, "auto", records)
    given = {(c.entry, c.exit, m.rule, m.reason) for _, c, m in records}
    calls = []
    monkeypatch.setattr(onnxaff.graph.explain, "run_passes", lambda *a: (calls.append(a), run_passes(*a))[1])
    misses = explain_misses(view, find_sites(view))
    assert len(calls) == 1
    assert {(t.entry, t.exit, t.rule, t.reason) for m in misses for t in m.tried} <= given


# --- the bodies of If/Loop/Scan: explained as discovery finds their sites ---

NEAR_GELU = """
        c = Constant<value_float = 0.7>()
        u = Mul(x, c)
        e = Erf(u)
        a = Add(e, one)
        p = Mul(x, a)
        {out} = Mul(p, half)"""

IF_NEAR_GELU = f"""{HEADER}
g (float[N, 4] x) => (float[N, 4] y) {{
    zero = Constant<value_float = 0.0>()
    one = Constant<value_float = 1.0>()
    half = Constant<value_float = 0.5>()
    m = ReduceMean<keepdims = 0>(x)
    cond = Greater(m, zero)
    y = If<then_branch = then_g () => (float[N, 4] t) {{{NEAR_GELU.format(out="t")}
    }}, else_branch = else_g () => (float[N, 4] s) {{
        s = Tanh(x)
    }}>(cond)
}}"""  # a GELU whose erf reads x·0.7, not x/√2, in the then branch; the If's condition is the data's


def test_a_near_miss_inside_an_if_branch_is_explained():
    found, misses = explained(IF_NEAR_GELU)
    assert [(s.id, s.kind) for s in found] == [("If#5/then/Mul:t", "elementwise"), ("If#5/else/Tanh:s", "tanh")]
    (miss,) = misses
    assert miss.body == "If#5/then" and miss.site == "If#5/then/Mul:t"  # the site discovery reports
    assert miss.nodes[0] == "If#5/then/Mul#1" and miss.ops == ["Mul", "Erf", "Add", "Mul", "Mul"]
    (gelu,) = [t for t in miss.tried if (t.stage, t.rule) == ("rule", "gelu")]
    assert gelu.reason.startswith("differs from gelu by 0.0027") and (gelu.entry, gelu.exit) == ("x", "t")
    # the same refusals as the same near-GELU at top level gets
    (top,) = explained(erf_gelu(0.7))[1]
    assert [(t.stage, t.rule, t.reason) for t in miss.tried] == [(t.stage, t.rule, t.reason) for t in top.tried]


def test_a_body_nested_in_a_loop_body_is_explained_with_its_path():
    text = f"""{HEADER}
g (float[N, 4] x) => (float[N, 4] y) {{
    zero = Constant<value_float = 0.0>()
    one = Constant<value_float = 1.0>()
    half = Constant<value_float = 0.5>()
    trip = Constant<value_int = 2>()
    go = Constant<value = bool {{1}}>()
    y = Loop<body = loop_g (int64 i, bool k, float[N, 4] h) => (bool k2, float[N, 4] h2) {{
        k2 = Identity(k)
        m = ReduceMean<keepdims = 0>(h)
        cond = Greater(m, zero)
        h2 = If<then_branch = then_g () => (float[N, 4] t) {{{NEAR_GELU.replace("x", "h").format(out="t")}
        }}, else_branch = else_g () => (float[N, 4] s) {{
            s = Tanh(h)
        }}>(cond)
    }}>(trip, go, x)
}}"""
    found, misses = explained(text)
    ids = {s.id for s in found}
    (miss,) = [m for m in misses if "Erf" in m.ops]
    assert miss.body.startswith("Loop#") and miss.body.endswith("/body/If#3/then")
    assert miss.site in ids and miss.site.startswith(miss.body + "/")
    assert all(n.startswith(miss.body + "/") for n in miss.nodes)
    assert any((t.stage, t.rule) == ("rule", "gelu") for t in miss.tried)


def test_the_cli_shows_a_refusal_inside_a_body(tmp_path, capfd):
    path = save(parse(IF_NEAR_GELU), tmp_path / "if_near_gelu.onnx")
    code, out, err = run_cli(capfd, "sites", path, "--explain")
    assert code == 0, err
    assert "non-linearities no site names: 1" in out
    row = next(line for line in out.splitlines() if " gelu " in line)
    assert "site If#5/then/Mul:t" in row and "rule" in row and "differs from gelu by 0.0027" in row
    code, out, err = run_cli(capfd, "sites", path, "--explain", "--format", "json")
    assert code == 0, err
    (miss,) = json.loads(out)["misses"]
    assert miss["body"] == "If#5/then" and miss["site"] == "If#5/then/Mul:t"
    assert any(t["stage"] == "rule" and t["rule"] == "gelu" for t in miss["tried"])


def test_a_miss_outside_any_body_says_no_body():
    _, (miss,) = explained(erf_gelu(0.7))
    assert miss.body is None and "body" not in miss.to_dict()


def test_explain_imports_no_private_name():
    tree = ast.parse(Path(onnxaff.graph.explain.__file__).read_text())
    imported = [a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names]
    assert imported and not [n for n in imported if n.startswith("_")]

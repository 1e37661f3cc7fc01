"""`sites --explain` runs discovery's own passes (graph.sites.run_passes): a pass added to the registry has its
refusals shown, and every refusal is made after what the earlier passes took, as in discovery."""

import ast
import json
from pathlib import Path

import pytest

import onnxaff.graph.explain
from onnxaff.graph import patterns, sites
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


@pytest.mark.parametrize("name", ["act_zoo_op17", "encoder_op17", "tiny_vit_op17", "text/gpt_tiny"])
def test_the_pattern_passes_refuse_as_before(name):
    """Where the passes before the patterns take nothing, discovery's refusals are those `patterns.match` records
    (the order explain ran before): the explain output of the current refusal kinds is unchanged."""
    view = load_model(FIXTURES / f"{name}.onnx").view
    before: list = []
    patterns.match(view, before)
    records: list = []
    run_passes(view, "auto", records)
    assert [(st, c, m.rule, m.reason) for st, c, m in records] == [(st, c, m.rule, m.reason) for st, c, m in before]


def test_explain_imports_no_private_name():
    tree = ast.parse(Path(onnxaff.graph.explain.__file__).read_text())
    imported = [a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names]
    assert imported and not [n for n in imported if n.startswith("_")]

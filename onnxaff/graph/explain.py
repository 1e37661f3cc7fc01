"""Why discovery left a non-linearity unclaimed or unnamed: the rules tried on it and each one's refusal.

Discovery keeps no trace of what it turned down, so a near-GELU (a wrong constant, a missing cubic term)
would pass unnoticed. `explain_misses` runs the passes once more with a record of every refusal and
keeps, for each non-affine node no site holds and for each unnamed (`elementwise`) site, the refusals
of the regions that contain it. It costs one more discovery pass, so it runs only when asked.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from onnxaff.graph import patterns, qdq
from onnxaff.graph.patterns import library
from onnxaff.graph.patterns.islands import Islands
from onnxaff.graph.patterns.region import Candidate
from onnxaff.graph.patterns.rule import Miss
from onnxaff.graph.sites import Site
from onnxaff.graph.view import GraphView

# Refusals named by the step, not by a function: each distinct reason is kept, not one per rule.
_VERDICTS = {"island", "softmax", "anchor"}


@dataclass(frozen=True)
class Tried:
    """One refusal: the pass, the rule (or library entry), the region it was tried on, and why."""

    stage: str  # softmax, rule (anchored), library (island naming), island (the island's own verdict)
    rule: str
    entry: str
    exit: str
    ops: tuple[str, ...]
    reason: str
    gap: float  # relative deviation at the deciding point; inf where no value decided

    def to_dict(self) -> dict:
        return {"stage": self.stage, "rule": self.rule, "input": self.entry, "output": self.exit,
                "ops": list(self.ops), "reason": self.reason, "gap": self.gap if np.isfinite(self.gap) else None}


@dataclass
class Explained:
    """A non-linearity discovery did not name: an unclaimed node (site None) or an unnamed site's nodes."""

    nodes: list[str]
    ops: list[str]
    site: str | None
    tried: list[Tried] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"nodes": self.nodes, "ops": self.ops, "site": self.site, "tried": [t.to_dict() for t in self.tried]}


def explain_misses(view: GraphView, sites: list[Site]) -> list[Explained]:
    """For each unclaimed non-affine node and each unnamed site, in forward order, the refusals around it."""
    records: list[tuple[str, Candidate, Miss]] = []
    patterns.match(view, records)
    claimed = {i for s in sites for i in s.node_indices}
    groups = [(view.order[max(s.node_indices, key=view.order.__getitem__)], s.id, s.node_indices)
              for s in sites if s.kind == "elementwise" and s.node_indices]
    # Unclaimed nodes of one region (the largest tried around them) are explained together.
    regions: dict[tuple, list[int]] = {}
    for i in _unclaimed_non_affine(view, claimed):
        around = [c.nodes for _, c, _ in records if i in c.nodes]
        regions.setdefault(max(around, key=len) if around else (i,), []).append(i)
    groups += [(view.order[nodes[-1]], None, nodes) for nodes in regions.values()]
    out = []
    for _, site_id, nodes in sorted(groups, key=lambda g: g[0]):
        inside = set(nodes)
        tried = _keep_largest(view, [(st, c, m) for st, c, m in records if inside.intersection(c.nodes)])
        out.append(Explained([view.node_label(i) for i in nodes], [view.nodes[i].op_type for i in nodes],
                             site_id, tried))
    return out


def _unclaimed_non_affine(view: GraphView, claimed: set[int]) -> list[int]:
    """Elementwise nodes outside every site whose innermost island (from one entry tensor) is non-affine.

    A scale or shift is affine on its own; a product x·g(x) is a non-linearity once g is; a product of two
    unrelated tensors has no one entry and is left out, as are comparisons (their output is no number).
    """
    isl = Islands(view, set())
    inner = {}
    for i in sorted(range(len(view.nodes)), key=view.order.__getitem__):
        if (i in claimed or isl.variable_inputs(i) is None or i in qdq.paired(view)
                or view.nodes[i].op_type in ("Identity", "Cast", "CastLike")):
            continue  # a pass-through (a Q → DQ pair too) ends no non-linearity
        cands = isl.candidates(i)
        if cands:
            inner[i] = cands[0]
    values = isl.values(list(inner.values()))
    found = []
    for i, cand in inner.items():
        g = values[cand]
        if g is not None and g.size and np.issubdtype(g.dtype, np.number) and not _affine(g.astype(np.float64)):
            found.append(i)
    return found


def _affine(g: np.ndarray) -> bool:
    """a + b·x per column on library.WIDE, by the residual of the fit alone (library.is_affine's secant
    shortcut divides by the 1e-16 steps between WIDE's near-duplicate points, so small slopes fail it)."""
    ok = np.all(np.isfinite(g), axis=1)
    if ok.sum() < 3:
        return False
    x, g = library.WIDE[ok], g[ok]
    a = np.stack([np.ones_like(x), x], axis=1)
    coef, *_ = np.linalg.lstsq(a, g, rcond=None)
    return bool(np.all(np.abs(a @ coef - g) <= 1e-9 * (1.0 + np.abs(g) + library.FAR * np.abs(coef[1]))))


def _keep_largest(view: GraphView, records: list[tuple[str, Candidate, Miss]]) -> list[Tried]:
    """One refusal per rule (per reason for a step's own verdicts): the one on the largest region tried."""
    kept: dict[tuple, tuple[Candidate, Miss, str]] = {}
    for stage, cand, miss in records:
        key = (stage, miss.rule, miss.why if miss.rule in _VERDICTS else "")
        if key not in kept or len(cand.nodes) > len(kept[key][0].nodes):
            kept[key] = (cand, miss, stage)
    return [Tried(stage, miss.rule, cand.entry, cand.exit, tuple(view.nodes[i].op_type for i in cand.nodes),
                  miss.reason, miss.gap) for cand, miss, stage in kept.values()]

"""Why discovery left a non-linearity unclaimed or unnamed: the rules tried on it and each one's refusal.

Discovery keeps no trace of what it turned down, so a near-GELU (a wrong constant, a missing cubic term)
would pass unnoticed. `explain_misses` runs discovery's passes once more (`sites.run_passes`: the registered
passes, in their order, each after what the earlier ones took) with a record every pass adds its refusals to,
and keeps, for each non-affine node no site holds and for each unnamed (`elementwise`) site, the refusals
of the regions that contain it. The If/Loop/Scan bodies the passes hand back are explained as discovery finds
their sites (`find_sites` on the body's own view), each miss labelled with the body it lives in. It costs one more
discovery pass, so it runs only when asked.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from onnxaff import defaults
from onnxaff.graph.patterns.islands import PASS_THROUGH, Islands
from onnxaff.graph.patterns.region import Candidate
from onnxaff.graph.patterns.rule import Miss
from onnxaff.graph.sites import Site, find_sites, run_passes
from onnxaff.graph.subsites import Body
from onnxaff.graph.view import GraphView

# Refusals named by the step, not by a function: each distinct reason is kept, not one per rule.
_VERDICTS = {"island", "softmax", "anchor"}


@dataclass(frozen=True)
class Tried:
    """One refusal: the pass, the rule (or library entry), the region it was tried on, and why."""

    stage: str  # softmax, rule (anchored), library (island naming), island (the island's own verdict), or a pass's own
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
    """A non-linearity discovery did not name: an unclaimed node (site None) or an unnamed site's nodes.

    Inside an If/Loop/Scan body, `body` says which (`<node>/<then|else|body>`, nested ones joined by '/'), and the
    node labels and the site id carry it in front, as discovery's site ids do; the regions tried name the body's
    own tensors."""

    nodes: list[str]
    ops: list[str]
    site: str | None
    tried: list[Tried] = field(default_factory=list)
    affine: bool = False  # an island of several ops called a + b·x: no site, and `tried` says how that was decided
    body: str | None = None

    def to_dict(self) -> dict:
        d = {"nodes": self.nodes, "ops": self.ops, "site": self.site}
        if self.body is not None:
            d["body"] = self.body
        return {**d, "affine": self.affine, "tried": [t.to_dict() for t in self.tried]}

    def inside(self, body: Body) -> Explained:
        """This miss of `body`'s own graph, as the enclosing graph names it."""
        where = body.where
        return dataclasses.replace(self, nodes=[f"{where}/{n}" for n in self.nodes],
                                   site=None if self.site is None else f"{where}/{self.site}",
                                   body=where if self.body is None else f"{where}/{self.body}")


def explain_misses(view: GraphView, sites: list[Site], layout: str = defaults.LAYOUT) -> list[Explained]:
    """For each unclaimed non-affine node and each unnamed site, in forward order, the refusals around it
    (`sites`: what `find_sites` found on this view, with this layout), each body's after its control node's; then
    the islands called affine, the bodies' after the graph's own."""
    records: list[tuple[str, Candidate, Miss]] = []
    entries = run_passes(view, layout, records)
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
    for position, site_id, nodes in groups:
        inside = set(nodes)
        tried = _keep_largest(view, [(st, c, m) for st, c, m in records
                                     if st != "affine" and inside.intersection(c.nodes)])
        out.append(((position, 0, 0), Explained([view.node_label(i) for i in nodes],
                                                 [view.nodes[i].op_type for i in nodes], site_id, tried)))
    lines = _affine_islands(view, records, claimed)
    for k, (position, body) in enumerate((p, b) for p, b in entries if isinstance(b, Body)):
        for e in explain_misses(body.view, find_sites(body.view, layout, follow_batch=False), layout):
            if e.affine:
                lines.append(e.inside(body))
            else:
                out.append(((position, 1, k), e.inside(body)))
    return [e for _, e in sorted(out, key=lambda g: g[0])] + lines


def _affine_islands(view: GraphView, records, claimed: set[int]) -> list[Explained]:
    """The islands of two ops or more (a lone scale or shift is everywhere) called affine, the largest of each
    nest, in forward order: a reader who expected a site there sees the line and how it was decided."""
    found = [(c, m) for st, c, m in records if st == "affine" and claimed.isdisjoint(c.nodes)
             and sum(view.nodes[i].op_type not in PASS_THROUGH for i in c.nodes) >= 2]
    found = [(c, m) for c, m in found if not any(set(c.nodes) < set(o.nodes) for o, _ in found)]
    out = []
    for c, m in sorted(found, key=lambda cm: view.order[cm[0].nodes[-1]]):
        ops = tuple(view.nodes[i].op_type for i in c.nodes)
        out.append(Explained([view.node_label(i) for i in c.nodes], list(ops), None,
                             [Tried("affine", "affine", c.entry, c.exit, ops, m.reason, float("inf"))], affine=True))
    return out


def _unclaimed_non_affine(view: GraphView, claimed: set[int]) -> list[int]:
    """Elementwise nodes outside every site whose innermost island (from one entry tensor) is non-affine.

    A scale or shift is affine on its own; a product x·g(x) is a non-linearity once g is; a product of two
    unrelated tensors has no one entry and is left out, as are comparisons (their output is no number).
    """
    isl = Islands(view, set())
    inner = {}
    for i in sorted(range(len(view.nodes)), key=view.order.__getitem__):
        if (i in claimed or isl.variable_inputs(i) is None or i in view.qdq_pairs
                or view.nodes[i].op_type in ("Identity", "Cast", "CastLike")):
            continue  # a pass-through (a Q → DQ pair too) ends no non-linearity
        cands = isl.candidates(i)
        if cands:
            inner[i] = cands[0]
    values = isl.values(list(inner.values()))
    found = []
    for i, cand in inner.items():
        g = values[cand]
        if g is not None and g.size and np.issubdtype(g.dtype, np.number) and not isl.affine(cand).affine:
            found.append(i)
    return found


def _keep_largest(view: GraphView, records: list[tuple[str, Candidate, Miss]]) -> list[Tried]:
    """One refusal per rule (per reason for a step's own verdicts): the one on the largest region tried."""
    kept: dict[tuple, tuple[Candidate, Miss, str]] = {}
    for stage, cand, miss in records:
        key = (stage, miss.rule, miss.why if miss.rule in _VERDICTS else "")
        if key not in kept or len(cand.nodes) > len(kept[key][0].nodes):
            kept[key] = (cand, miss, stage)
    return [Tried(stage, miss.rule, cand.entry, cand.exit, tuple(view.nodes[i].op_type for i in cand.nodes),
                  miss.reason, miss.gap) for cand, miss, stage in kept.values()]

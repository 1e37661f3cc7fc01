"""Decomposed activations, one rule module each; `match` claims them in forward order."""

from __future__ import annotations

from dataclasses import dataclass, field

from onnxaff.graph.patterns import gelu, hardswish, mish, relu6, softplus, softsign, swish
from onnxaff.graph.patterns.islands import match_islands
from onnxaff.graph.patterns.region import Candidate, evaluator, proposals
from onnxaff.graph.patterns.rule import Miss, Rule
from onnxaff.graph.patterns.softmax import match_softmax
from onnxaff.graph.view import GraphView

RULES: list[Rule] = [*gelu.RULES, *swish.RULES, *hardswish.RULES, *mish.RULES, *relu6.RULES, *softsign.RULES,
                     *softplus.RULES]


@dataclass
class PatternMatch:
    kind: str
    candidate: Candidate
    params: dict = field(default_factory=dict)


def match(view: GraphView, misses: list[tuple[str, Candidate, Miss]] | None = None,
          taken: set[int] | frozenset = frozenset()) -> list[PatternMatch]:
    """Every decomposed activation in the graph; each node belongs to at most one match.

    Decomposed softmaxes first, then the anchored rules (exporters' forms), then anonymous islands. With
    `misses`, each pass records (pass, region, Miss) for every refusal; what is found stays the same. Nodes in
    `taken` belong to sites found before (stacked steps) and join no match.
    """
    claimed: set[int] = set(taken)
    found = []
    for step in (match_softmax, match_anchored, match_islands):
        found += [PatternMatch(kind, cand, params) for kind, cand, params in step(view, claimed, misses)]
    return found


def match_anchored(view: GraphView, claimed: set[int],
                   misses: list[tuple[str, Candidate, Miss]] | None = None) -> list[tuple[str, Candidate, dict]]:
    """The exporters' forms around an anchor op (Erf, Sigmoid, Clip, ...): (kind, region, params) each, in forward
    order of the anchor; their nodes are added to `claimed`. Each rule is tried on the regions it declares."""
    found = []
    for i in sorted(range(len(view.nodes)), key=view.order.__getitem__):
        node = view.nodes[i]
        rules = [r for r in RULES if node.op_type in r.anchors]
        if i in claimed or not rules or node.domain not in ("", "ai.onnx"):
            continue
        cands = [(c, by) for c, by in proposals(view, i, rules) if len(c.nodes) >= 2]
        if not cands and misses is not None:
            misses.append(("rule", Candidate(node.input[0] if node.input else "", node.output[0], (i,)),
                           Miss("anchor", NO_REGION, (node.op_type,))))
        for cand, by in cands:
            if claimed.intersection(cand.nodes):
                if misses is not None:
                    misses.append(("rule", cand, Miss("anchor", "overlaps a site found earlier")))
                continue
            hit = _classify(by, evaluator(view, cand), cand, misses)
            if hit is not None:
                found.append((hit[0].kind, cand, hit[1]))
                claimed.update(cand.nodes)
                break
    return found


NO_REGION = ("no closed region of two ops or more around this {} (an inner tensor read outside, a second "
             "variable input, or an op the rules do not evaluate)")


def _classify(rules: list[Rule], f, cand: Candidate, misses) -> tuple[Rule, dict] | None:
    """The first rule that names f, with its parameters; the others' refusals go to `misses`."""
    for r in rules:
        p = r.classify(f)
        if type(p) is not Miss:
            return r, p
        if misses is not None:
            misses.append(("rule", cand, p))
    return None

"""Decomposed activations, one rule module each; the passes that claim them (graph/passes/: decomposed softmaxes,
the anchored rules here, the anonymous islands) run in the one order of graph.passes.passes."""

from __future__ import annotations

from onnxaff.graph.patterns import gelu, hardswish, mish, relu6, softplus, softsign, swish
from onnxaff.graph.patterns.islands import match_islands
from onnxaff.graph.patterns.region import Candidate, evaluator, proposals
from onnxaff.graph.patterns.rule import Miss, Rule
from onnxaff.graph.patterns.softmax import match_softmax
from onnxaff.graph.view import GraphView

__all__ = ["RULES", "match_anchored", "match_islands", "match_softmax"]

RULES: list[Rule] = [*gelu.RULES, *swish.RULES, *hardswish.RULES, *mish.RULES, *relu6.RULES, *softsign.RULES,
                     *softplus.RULES]


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

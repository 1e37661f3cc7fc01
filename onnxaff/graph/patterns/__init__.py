"""Decomposed activations, one rule module each; `match` claims them in forward order."""

from __future__ import annotations

from dataclasses import dataclass, field

from onnxaff.graph.patterns import gelu, hardswish, mish, relu6, softsign, swish
from onnxaff.graph.patterns.islands import match_islands
from onnxaff.graph.patterns.region import ANCHORS, Candidate, candidates, evaluator
from onnxaff.graph.patterns.rule import Rule
from onnxaff.graph.patterns.softmax import match_softmax
from onnxaff.graph.view import GraphView

RULES: list[Rule] = [*gelu.RULES, *swish.RULES, *hardswish.RULES, *mish.RULES, *relu6.RULES, *softsign.RULES]


@dataclass
class PatternMatch:
    kind: str
    candidate: Candidate
    params: dict = field(default_factory=dict)


def match(view: GraphView) -> list[PatternMatch]:
    """Every decomposed activation in the graph; each node belongs to at most one match.

    Decomposed softmaxes first, then the anchored rules (exporters' forms), then anonymous islands.
    """
    claimed: set[int] = set()
    found = [PatternMatch(kind, cand, params) for kind, cand, params in match_softmax(view, claimed)]
    for i in sorted(range(len(view.nodes)), key=view.order.__getitem__):
        node = view.nodes[i]
        if i in claimed or node.op_type not in ANCHORS or node.domain not in ("", "ai.onnx"):
            continue
        rules = [r for r in RULES if node.op_type in r.anchors]
        for cand in candidates(view, i):
            if len(cand.nodes) < 2 or claimed.intersection(cand.nodes):
                continue
            f = evaluator(view, cand)
            hit = next(((r, p) for r in rules if (p := r.classify(f)) is not None), None)
            if hit is not None:
                found.append(PatternMatch(hit[0].kind, cand, hit[1]))
                claimed.update(cand.nodes)
                break
    found += [PatternMatch(kind, cand, params) for kind, cand, params in match_islands(view, claimed)]
    return found

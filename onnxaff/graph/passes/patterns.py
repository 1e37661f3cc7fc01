"""Passes: the decomposed forms (graph/patterns/): decomposed Softmax/LogSoftmax, the exporters' anchored forms, and
elementwise islands named from the function library (or `elementwise`). Each match is one site, X its entry."""

from __future__ import annotations

from onnxaff.graph.patterns import match_anchored, match_islands, match_softmax
from onnxaff.graph.site import Site
from onnxaff.graph.view import GraphView


def _sites(view: GraphView, matches) -> list[tuple]:
    out = []
    for kind, cand, params in matches:
        exit_node = cand.nodes[-1]
        out.append((view.order[exit_node], Site(
            index=-1, id=view.base_id(exit_node, cand.exit), kind=kind, input=cand.entry, output=cand.exit,
            op_types=[view.nodes[i].op_type for i in cand.nodes], nodes=[view.node_label(i) for i in cand.nodes],
            params=params, node_indices=list(cand.nodes))))
    return out


class DecomposedSoftmax:
    name = "decomposed softmax"

    def find(self, view: GraphView, taken: set[int], layout: str, misses: list | None = None) -> list[tuple]:
        return _sites(view, match_softmax(view, set(taken), misses))


class AnchoredRules:
    name = "anchored rules"

    def find(self, view: GraphView, taken: set[int], layout: str, misses: list | None = None) -> list[tuple]:
        return _sites(view, match_anchored(view, set(taken), misses))


class ElementwiseIslands:
    name = "elementwise islands"

    def find(self, view: GraphView, taken: set[int], layout: str, misses: list | None = None) -> list[tuple]:
        return _sites(view, match_islands(view, set(taken), misses))

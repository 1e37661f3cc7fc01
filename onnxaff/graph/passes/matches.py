"""Pattern matches (kind, region, params) as sites: what the three pattern passes share."""

from __future__ import annotations

from onnxaff.graph.site import Site
from onnxaff.graph.view import GraphView


def as_sites(view: GraphView, matches) -> list[tuple]:
    out = []
    for kind, cand, params in matches:
        exit_node = cand.nodes[-1]
        out.append((view.order[exit_node], Site(
            index=-1, id=view.base_id(exit_node, cand.exit), kind=kind, input=cand.entry, output=cand.exit,
            op_types=[view.nodes[i].op_type for i in cand.nodes], nodes=[view.node_label(i) for i in cand.nodes],
            params=params, node_indices=list(cand.nodes))))
    return out

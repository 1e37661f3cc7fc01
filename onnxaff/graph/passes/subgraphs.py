"""Pass: the If/Loop/Scan subgraphs (graph/subsites.py), handed back as bodies for discovery to run on whole
(graph.sites.find_sites), ids prefixed with where they live; one level deep is observed."""

from __future__ import annotations

from onnxaff.graph.subsites import SUBGRAPH_OPS, bodies
from onnxaff.graph.view import GraphView

_STANDARD = ("", "ai.onnx")


class SubgraphSites:
    """(forward position of the control node, Body) for each subgraph of a node no earlier pass took, then before
    else. It records no refusals: a subgraph's regions are nodes of another view than the `misses` describe."""

    name = "subgraphs"

    def find(self, view: GraphView, taken: set[int], layout: str, misses: list | None = None) -> list[tuple]:
        return [(view.order[i], body) for i, node in enumerate(view.nodes)
                if i not in taken and node.op_type in SUBGRAPH_OPS and node.domain in _STANDARD
                for body in bodies(view, i)]

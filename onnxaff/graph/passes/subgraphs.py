"""Pass: the sites of If/Loop/Scan subgraphs (graph/subsites.py): the whole discovery run on each branch and body,
ids prefixed with where they live; one level deep is observed."""

from __future__ import annotations

from collections.abc import Callable

from onnxaff.graph.subsites import SUBGRAPH_OPS, subgraph_sites
from onnxaff.graph.view import GraphView

_STANDARD = ("", "ai.onnx")


class SubgraphSites:
    """`find_sites`: the whole discovery, run on each subgraph as on the main graph (graph.sites hands it in).
    It records no refusals: a subgraph's regions are nodes of another view than the `misses` describe."""

    name = "subgraphs"

    def __init__(self, find_sites: Callable):
        self.find_sites = find_sites

    def find(self, view: GraphView, taken: set[int], layout: str, misses: list | None = None) -> list[tuple]:
        found = []
        for i, node in enumerate(view.nodes):
            if i not in taken and node.op_type in SUBGRAPH_OPS and node.domain in _STANDARD:
                inner = subgraph_sites(view, i, layout, self.find_sites)
                found += [(view.order[i] + (k + 1) / 1000.0, site) for k, site in enumerate(inner)]
        return found

"""Passes: what lives inside a node rather than beside it: the sites of If/Loop/Scan subgraphs (graph/subsites.py),
the gates of a recurrent node left whole, and the softmax of a fused attention node left fused (both skipped,
with the reason: their tensors never leave the node)."""

from __future__ import annotations

from collections.abc import Callable

from onnxaff.graph.expand import attention
from onnxaff.graph.passes.single_nodes import SINGLE_NODE_KINDS
from onnxaff.graph.recurrent import RECURRENT_OPS, gates
from onnxaff.graph.site import Site
from onnxaff.graph.subsites import SUBGRAPH_OPS, subgraph_sites
from onnxaff.graph.view import GraphView

_STANDARD = ("", "ai.onnx")


class SubgraphSites:
    """`find_sites`: the whole discovery, run on each subgraph as on the main graph (graph.sites hands it in)."""

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


class WholeRecurrentGates:
    name = "recurrent nodes left whole"

    def find(self, view: GraphView, taken: set[int], layout: str, misses: list | None = None) -> list[tuple]:
        found = []
        for i, node in enumerate(view.nodes):
            if i in taken or node.op_type not in RECURRENT_OPS or node.domain not in _STANDARD:
                continue
            found += [(view.order[i] + k / 1000.0, Site(
                index=-1, id=g.id, kind=SINGLE_NODE_KINDS.get(g.op, g.activation.lower()), input=node.input[0],
                output=node.output[0] if node.output else "", op_types=[node.op_type], nodes=[view.node_label(i)],
                node_indices=[i], status="skipped",
                reason=f"a gate inside a {node.op_type} node that could not be unrolled (the warnings say why)"))
                for k, g in enumerate(gates(node))]
        return found


class FusedAttention:
    name = "fused attention left fused"

    def find(self, view: GraphView, taken: set[int], layout: str, misses: list | None = None) -> list[tuple]:
        found = []
        for i, node in enumerate(view.nodes):
            if i in taken or not attention.is_fused(node):
                continue
            why = attention.refusal(node, attention.Types(view.graph), view.opset or 1)
            why = why or "the model was not expanded (load it with load_model)"
            found.append((view.order[i], Site(
                index=-1, id=f"{attention.label(node)}/softmax", kind="softmax", input=node.input[0],
                output=node.output[0], op_types=[node.op_type], nodes=[view.node_label(i)], status="skipped",
                reason=f"inside a fused {node.op_type}: {why}",
                node_indices=[i])))
        return found

"""Pass: the softmax of a fused attention node the rewrite (graph/expand/attention.py) left fused: listed, skipped,
with the reason the rewrite gives."""

from __future__ import annotations

from onnxaff.graph.expand import attention
from onnxaff.graph.site import Site
from onnxaff.graph.view import GraphView


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

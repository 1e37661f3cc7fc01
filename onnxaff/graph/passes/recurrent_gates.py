"""Pass: the gates of an LSTM/GRU/RNN node that could not be unrolled (graph/expand/recurrent.py says why): listed,
skipped, under the ids they have when unrolled."""

from __future__ import annotations

from onnxaff.graph.passes.single_nodes import SINGLE_NODE_KINDS
from onnxaff.graph.recurrent import RECURRENT_OPS, gates
from onnxaff.graph.site import Site
from onnxaff.graph.view import GraphView

_STANDARD = ("", "ai.onnx")


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

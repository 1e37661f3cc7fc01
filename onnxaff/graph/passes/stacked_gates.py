"""Pass: an activation applied step by step to an unrolled recurrent gate (torch's exported LSTM/GRU loops, or
graph/expand/recurrent.py's unrolling), its steps' inputs and outputs stacked: one site, X and Y the stacks."""

from __future__ import annotations

from onnxaff.graph.passes.single_nodes import single_kind
from onnxaff.graph.site import Site
from onnxaff.graph.stacked import find_stacks
from onnxaff.graph.view import GraphView


class StackedGates:
    name = "stacked gates"

    def find(self, view: GraphView, taken: set[int], layout: str, misses: list | None = None) -> list[tuple]:
        found = []
        for s in find_stacks(view, single_kind):
            if taken.intersection(s.steps):
                continue
            x, y = view.nodes[s.x_concat].output[0], view.nodes[s.y_concat].output[0]
            found.append((view.order[s.y_concat], Site(
                index=-1, id=view.base_id(s.y_concat, y), kind=s.kind, input=x, output=y,
                op_types=[view.nodes[j].op_type for j in s.steps], nodes=[view.node_label(j) for j in s.steps],
                params=s.params, node_indices=list(s.steps))))
        return found

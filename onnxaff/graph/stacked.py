"""Stacked sites: one activation applied step by step, its steps' inputs and outputs each concatenated.

An unrolled recurrent node (`graph/expand/recurrent.py`) applies each gate's activation once per time step:
one node per step, the next step reading its output. Listed one by one they would be T sites of B rows each,
for one function with one set of weights. When a Concat joins the outputs of same-kind activation nodes and
another Concat (same axis) joins exactly their inputs, in the same order, the pair is one site: X the stacked
inputs, Y the stacked outputs, rows every (batch, step). Y is still exactly the activation of X, elementwise.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import onnx

from onnxaff.graph.view import GraphView


@dataclass(frozen=True)
class Stack:
    """The activation nodes (in step order), the two Concats, and what the nodes compute."""

    steps: tuple[int, ...]
    x_concat: int
    y_concat: int
    kind: str
    params: dict


def _axis(node: onnx.NodeProto) -> int | None:
    return next((a.i for a in node.attribute if a.name == "axis"), None)


def find_stacks(view: GraphView, classify: Callable) -> list[Stack]:
    """Every stacked activation; `classify(view, i)` is discovery's (kind, params) of a single node, or None."""
    stacks = []
    for i, node in enumerate(view.nodes):
        if node.op_type != "Concat" or node.domain not in ("", "ai.onnx") or not node.input:
            continue
        steps = [view.producer.get(t) for t in node.input]
        if any(j is None for j in steps) or len(set(steps)) != len(steps):
            continue
        ops = {view.nodes[j].op_type for j in steps}
        kinds = [classify(view, j) for j in steps]
        if len(ops) != 1 or kinds[0] is None or any(k != kinds[0] for k in kinds):
            continue
        sources = [view.nodes[j].input[0] for j in steps]
        x_concat = next((c for c in view.consumers.get(sources[0], []) if view.nodes[c].op_type == "Concat"
                         and list(view.nodes[c].input) == sources and _axis(view.nodes[c]) == _axis(node)), None)
        if x_concat is not None:
            stacks.append(Stack(tuple(steps), x_concat, i, kinds[0][0], kinds[0][1]))
    return stacks

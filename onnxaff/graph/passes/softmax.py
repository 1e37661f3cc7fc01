"""Pass: decomposed Softmax / LogSoftmax (graph/patterns/softmax.py): Exp → ReduceSum → Div (→ Log → Sub), with or
without the max-subtraction; X is the input before it, `params.axis` the reduced axis."""

from __future__ import annotations

from onnxaff.graph.passes.matches import as_sites
from onnxaff.graph.patterns import match_softmax
from onnxaff.graph.view import GraphView


class DecomposedSoftmax:
    name = "decomposed softmax"

    def find(self, view: GraphView, taken: set[int], layout: str, misses: list | None = None) -> list[tuple]:
        return as_sites(view, match_softmax(view, set(taken), misses))

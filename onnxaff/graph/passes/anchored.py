"""Pass: the exporters' forms found around an anchor op (Erf, Sigmoid, Clip, ...) and checked numerically against
each rule of graph/patterns/ (GELU, SiLU, HardSwish, Mish, ReLU6, Softsign)."""

from __future__ import annotations

from onnxaff.graph.passes.matches import as_sites
from onnxaff.graph.patterns import match_anchored
from onnxaff.graph.view import GraphView


class AnchoredRules:
    name = "anchored rules"

    def find(self, view: GraphView, taken: set[int], layout: str, misses: list | None = None) -> list[tuple]:
        return as_sites(view, match_anchored(view, set(taken), misses))

"""Pass: every elementwise island between one tensor and another (graph/patterns/islands.py), named from the
function library or kind `elementwise`; affine islands are none (graph/patterns/affine.py)."""

from __future__ import annotations

from onnxaff.graph.passes.matches import as_sites
from onnxaff.graph.patterns import match_islands
from onnxaff.graph.view import GraphView


class ElementwiseIslands:
    name = "elementwise islands"

    def find(self, view: GraphView, taken: set[int], layout: str, misses: list | None = None) -> list[tuple]:
        return as_sites(view, match_islands(view, set(taken), misses))

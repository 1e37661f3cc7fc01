"""Pass: ReLUs the quantizer folded into a QuantizeLinear (graph/absorbed.py). It runs before the patterns,
which would read a clamping Q → DQ pair as the identity inside an island."""

from __future__ import annotations

from onnxaff.graph import absorbed, qdq
from onnxaff.graph.site import Site
from onnxaff.graph.view import GraphView


class AbsorbedRelus:
    name = "absorbed ReLUs"

    def find(self, view: GraphView, taken: set[int], layout: str, misses: list | None = None) -> list[tuple]:
        return [(view.order[a["exit"]], _site(view, a)) for a in absorbed.find(view, taken)]


def _site(view: GraphView, a: dict) -> Site:
    params = {"absorbed_by": view.nodes[a["nodes"][0]].op_type, "max": a["max"]}
    if a["skipped"] is None:
        params["quantized"] = {"y": qdq.params_of(view, view.nodes[a["nodes"][0]])}
    return Site(index=-1, id=view.base_id(a["exit"], a["y"]), kind="relu", input=a["x"], output=a["y"],
                op_types=[view.nodes[j].op_type for j in a["nodes"]], nodes=[view.node_label(j) for j in a["nodes"]],
                params=params, node_indices=list(a["nodes"]), status="skipped" if a["skipped"] else "ok",
                reason=a["skipped"] or "")

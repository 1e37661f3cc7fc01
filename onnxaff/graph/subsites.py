"""Sites inside If branches and Loop/Scan bodies: each a `Body` that discovery (graph.sites.find_sites) runs on
with the subgraph's own index, as at top level, then `adopt`s into the enclosing graph.

A subgraph reads the outer scope's tensors by name, so its index (`ScopedView`) falls back to the outer view
for their constants, shapes and staticness. Its sites get ids `<node>/<then|else|body>/<id>` and a `scope`
(the control node's index and the graph attribute) that `graph/subrewrite.py` uses to thread their features
out. One level deep is observed; deeper sites are listed, skipped with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import onnx

from onnxaff.graph.view import GraphView

SUBGRAPH_OPS = {"If", "Loop", "Scan"}
_SHORT = {"then_branch": "then", "else_branch": "else", "body": "body"}


class ScopedView(GraphView):
    """A subgraph's index that sees the enclosing graph's constants, shapes and weights."""

    def __init__(self, graph: onnx.GraphProto, outer: GraphView):
        # Set before GraphView's own __init__, which already reads constants (CastLike's type-only reads).
        self.outer = outer
        self.local = ({o for node in graph.node for o in node.output if o} | {t.name for t in graph.initializer}
                      | {i.name for i in graph.input})
        super().__init__(graph, opset=outer.opset)
        self.initializers = {**outer.initializers, **self.initializers}

    def constant(self, name: str):
        if name in self.local:
            return super().constant(name)
        return self.outer.constant(name)

    def scalar(self, name: str):
        if name in self.local:
            return super().scalar(name)
        return self.outer.scalar(name)

    @cached_property
    def value_types(self) -> dict:
        return {**self.outer.value_types, **GraphView.value_types.func(self)}

    @cached_property
    def static(self) -> set[str]:
        static = (self.outer.static - self.local) | {t.name for t in self.graph.initializer}
        for i in sorted(range(len(self.nodes)), key=self.order.__getitem__):
            node = self.nodes[i]
            if node.op_type in ("Shape", "Size") or all(n in static for n in node.input if n):
                static.update(n for n in node.output if n)
        return static


def depth(view: GraphView) -> int:
    return 0 if not isinstance(view, ScopedView) else 1 + depth(view.outer)


@dataclass(frozen=True)
class Body:
    """Graph attribute `attr` of node `node` of `outer`: a graph whose sites discovery finds on `view`, its own
    index, as it finds the main graph's."""

    outer: GraphView
    node: int
    attr: onnx.AttributeProto
    view: ScopedView

    @property
    def where(self) -> str:
        return f"{self.outer.node_label(self.node)}/{_SHORT.get(self.attr.name, self.attr.name)}"

    def adopt(self, sites: list) -> list:
        """The sites discovery found in this body, as sites of the enclosing graph: ids prefixed with where they
        live, scoped to the control node, skipped where their features cannot be threaded out."""
        node = self.outer.nodes[self.node]
        where, scope = self.where, (self.node, self.attr.name, node.op_type)
        for site in sites:
            site.id = f"{where}/{site.id}"
            site.node_indices = []  # positions in the subgraph: no main-graph node is claimed
            if site.scope is None:
                site.scope = scope
                site.params = {**site.params, "inside": {"op": node.op_type, "graph": self.attr.name}}
                _observable(site, where)
                if site.ok and (why := _unsteady(self.outer, node, self.attr.g)) is not None:
                    site.status, site.reason = "skipped", f"inside a {node.op_type} body ({where}): {why}"
            else:
                nest(site, scope)
        return sites


def bodies(view: GraphView, i: int) -> list[Body]:
    """Node i's subgraphs, then before else."""
    attrs = sorted(view.nodes[i].attribute, key=lambda a: a.name != "then_branch")
    return [Body(view, i, a, ScopedView(a.g, view)) for a in attrs if a.type == onnx.AttributeProto.GRAPH]


def _dims(vi: onnx.ValueInfoProto) -> list | None:
    t = vi.type.tensor_type
    if not t.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in t.shape.dim]


def _unsteady(view: GraphView, node: onnx.NodeProto, body: onnx.GraphProto) -> str | None:
    """Why a body's per-iteration features cannot be stacked as scan outputs (every iteration must give the same
    shape), None when they can: a Loop whose carried state may change shape between iterations (an
    autoregressive decode growing its sequence), a Scan of opset 8 (its outputs are batch-major)."""
    if node.op_type == "Scan" and (view.opset or 0) < 9:
        return "Scan of opset 8 (batch-major scan outputs) is not observed"
    if node.op_type != "Loop":
        return None
    carried = len(node.input) - 2
    for vin, vout in zip(body.input[2:2 + carried], body.output[1:1 + carried], strict=False):
        a, b = _dims(vin), _dims(vout)
        if a is None or b is None or len(a) != len(b) or any(x is None or x != y for x, y in zip(a, b, strict=True)):
            return f"its carried state {vin.name} may change shape between iterations"
    return None


def _observable(site, where: str) -> None:
    """Skip what the threading cannot carry: a nested scope, a tensor of unknown or partly symbolic shape."""
    op = site.scope[2]
    if not site.ok:
        if site.unknown_rank:  # no probe run reaches into a subgraph: not a rank a probe could settle
            site.reason = f"unknown rank inside a {op} subgraph ({where})"
        return
    shape = site.input_shape or []
    if any(not isinstance(d, int) for d in shape[1:]) or any(not isinstance(d, int) for d in
                                                               (site.output_shape or [])[1:]):
        site.status = "skipped"
        site.reason = f"inside a {op} subgraph ({where}): only sites of static feature shape are observed there"


def nest(site, outer_scope: tuple) -> None:
    """A site of a subgraph inside a subgraph: listed, not observed."""
    site.status = "skipped"
    site.reason = f"inside a subgraph nested in a {outer_scope[2]} ({site.id.rsplit('/', 1)[0]}): " \
                  "only sites one level deep are observed"

"""Sites inside If branches and Loop/Scan bodies: discovery on the subgraph's own index, as at top level.

A subgraph reads the outer scope's tensors by name, so its index (`ScopedView`) falls back to the outer view
for their constants, shapes and staticness. Its sites get ids `<node>/<then|else|body>/<id>` and a `scope`
(the control node's index and the graph attribute) that `graph/subrewrite.py` uses to thread their features
out. One level deep is observed; deeper sites are listed, skipped with the reason.
"""

from __future__ import annotations

from collections.abc import Callable
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


def subgraph_sites(view: GraphView, i: int, layout: str, find_sites: Callable) -> list:
    """The sites of node i's subgraphs, in their own forward order, ids prefixed with where they live; `find_sites`
    (graph.sites' own, which calls this) finds each subgraph's sites as it finds the main graph's."""
    node = view.nodes[i]
    found = []
    for attr in sorted(node.attribute, key=lambda a: a.name != "then_branch"):  # then before else
        if attr.type != onnx.AttributeProto.GRAPH:
            continue
        inner = ScopedView(attr.g, view)
        where = f"{view.node_label(i)}/{_SHORT.get(attr.name, attr.name)}"
        for site in find_sites(inner, layout, follow_batch=False):
            site.id = f"{where}/{site.id}"
            site.node_indices = []  # positions in the subgraph: no main-graph node is claimed
            if site.scope is None:
                site.scope = (i, attr.name, node.op_type)
                site.params = {**site.params, "inside": {"op": node.op_type, "graph": attr.name}}
                _observable(site, where)
                if site.ok and (why := _unsteady(view, node, attr.g)) is not None:
                    site.status, site.reason = "skipped", f"inside a {node.op_type} body ({where}): {why}"
            else:
                nest(site, (i, attr.name, node.op_type))
            found.append(site)
    return found


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

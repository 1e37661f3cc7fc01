"""A subgraph site's features threaded out of its If, Loop or Scan as extra outputs of the control node.

The reduction runs inside the subgraph (the same nodes `GraphBuilder.features` appends at top level). An If's
branches must give as many outputs as the node has: the branch holding the site adds its [rows, D] features,
the other an empty [0, D] placeholder, so the rows come only from the batches that took the branch (an If
takes one branch per batch, not per example). A Loop or Scan body adds them as scan outputs, stacked per
iteration by the node into [iterations, rows, D] and flattened outside to [iterations × rows, D].
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnxaff.graph.subsites import ScopedView


def _graph_attr(node: onnx.NodeProto, name: str) -> onnx.GraphProto:
    return next(a.g for a in node.attribute if a.name == name)


def observe(builder, site, reduce: str, prefix: str, dim: int | None, scoped: dict) -> tuple[str, str, tuple]:
    """Main-graph output names carrying the site's X and Y features (nodes added in place), and whether each
    is float64."""
    from onnxaff.graph.reduction import GraphBuilder

    index, attr, op = site.scope
    node = builder.model.graph.node[index]
    graph = _graph_attr(node, attr)
    key = (index, attr)
    if key not in scoped:
        scoped[key] = GraphBuilder(builder.model, ScopedView(graph, builder.view))
    inner = scoped[key]
    doubles = tuple(inner.view.elem_type(t) == TensorProto.DOUBLE for t in (site.input, site.output))
    start = len(inner.new_nodes)
    names = [inner.features(t, site.side(s), reduce, f"{prefix}.{s}") for s, t in (("x", site.input),
                                                                                   ("y", site.output))]
    graph.node.extend(inner.new_nodes[start:])
    outs = []
    for side, name, double in zip(("x", "y"), names, doubles, strict=True):
        elem = TensorProto.DOUBLE if double else TensorProto.FLOAT
        # A shared reduction (X of one site is Y of another) is output once per site: names must be unique.
        out_inner = inner.node("Identity", [name], f"{prefix}.{side}.out")
        graph.node.append(inner.new_nodes.pop())
        graph.output.append(helper.make_tensor_value_info(out_inner, elem, [None, dim]))
        outer = builder.namer.fresh(f"{prefix}.{side}.{op.lower()}")
        node.output.append(outer)
        if op == "If":
            other = _graph_attr(node, "else_branch" if attr == "then_branch" else "then_branch")
            _placeholder(other, builder.namer.fresh(f"{prefix}.{side}.empty"), elem, dim)
            outs.append(outer)
            continue
        if op == "Scan":
            for a in node.attribute:
                if a.name in ("scan_output_axes", "scan_output_directions"):
                    a.ints.append(0)
        outs.append(builder.node("Flatten", [outer], f"{prefix}.{side}", axis=2))
    return outs[0], outs[1], doubles


def _placeholder(graph: onnx.GraphProto, name: str, elem: int, dim: int | None) -> None:
    """An empty [0, D] output: the branch that does not hold the site contributes no rows."""
    dtype = helper.tensor_dtype_to_np_dtype(elem)
    value = numpy_helper.from_array(np.zeros((0, dim or 1), dtype=dtype), name)
    graph.node.append(helper.make_node("Constant", [], [name], name=name, value=value))
    graph.output.append(helper.make_tensor_value_info(name, elem, [0, dim]))

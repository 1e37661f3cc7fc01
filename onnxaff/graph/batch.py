"""Where the batch axis of every tensor is, followed from the graph inputs (docs/sites.md, "The batch axis").

A site reduces its tensors to one row per example, so it must know which axis holds the examples: a model
that works on [S, N, E] inside (PyTorch's default attention layout) has them on axis 1, and taking axis 0
would make rows of sequence positions that mix the examples. The axis is followed node by node in forward
order (Transpose, Reshape, Squeeze/Unsqueeze, Split/Concat, broadcasting, MatMul/Gemm, ...); an op that
combines the examples of a batch (a reduction, a normalisation or a product over the batch axis, a
training-mode BatchNormalization) marks everything it reaches, since scores there depend on the batch size.
"""

from __future__ import annotations

import numpy as np
import onnx

from onnxaff.graph.batchops import ELEMENTWISE, FRONT, HANDLERS, READS_NO_VALUES, Axis, Lost, Mixed, attr, combine
from onnxaff.graph.view import GraphView

__all__ = ["FRONT", "Axis", "BatchFlow", "Lost", "Mixed", "batch_axis", "propagated_shapes"]


class BatchFlow:
    """The batch axis of each tensor of one graph (`state`: Axis, Lost, Mixed, or None for a batch-free one)."""

    def __init__(self, view: GraphView, inputs: dict[str, int | None]):
        self.view = view
        self.states: dict[str, object] = {name: None if axis is None else Axis(axis) for name, axis in inputs.items()}
        for i in sorted(range(len(view.nodes)), key=view.order.__getitem__):
            node = view.nodes[i]
            got = [self.states.get(t) for t in node.input]
            if not any(got) or node.op_type in READS_NO_VALUES:
                continue
            out = combine(got) if any(isinstance(s, (Lost, Mixed)) for s in got) else self._follow(node, got)
            for name in node.output:
                if name:
                    self.states[name] = out

    def state(self, tensor: str):
        return self.states.get(tensor)

    def rank(self, name: str) -> int | None:
        shape = self.view.shape(name)
        return None if shape is None else len(shape)

    def ints(self, node, key: str, index: int) -> list[int] | None:
        value = attr(node, key)
        if value is None and len(node.input) > index and node.input[index]:
            const = self.view.constant(node.input[index])
            value = None if const is None else np.asarray(const).reshape(-1).tolist()
        return None if value is None else [int(v) for v in value]

    def _follow(self, node, got: list):
        op, label = node.op_type, node.name or f"{node.op_type} {node.output[0]}"
        handler = HANDLERS.get(op) if node.domain in ("", "ai.onnx") else None
        out = handler(self, node, got) if handler else None
        if out is not None:
            return out
        if op in ELEMENTWISE and node.domain in ("", "ai.onnx"):
            out = self._broadcast(node, got)
            if out is not None:
                return out
        if all(s == FRONT for s in got if s is not None):
            return FRONT  # an op not followed here keeps a leading batch where it finds one (as every site did)
        return Lost(label, f"{op} is not followed with the batch on another axis")

    def _broadcast(self, node, got: list):
        """Elementwise with numpy broadcasting: each input's batch axis aligned from the right."""
        r = self.rank(node.output[0])
        found = set()
        for name, s in zip(node.input, got, strict=False):
            if s is None:
                continue
            ri = self.rank(name)
            if r is None or ri is None:
                if s != FRONT:
                    return None
                found.add(FRONT)
                continue
            found.add(Axis(s.axis + r - ri, s.outer))
        if len(found) == 1:
            return found.pop()
        return Lost(node.name or node.op_type, "its inputs carry the batch on different axes")


def batch_symbols(view: GraphView, axes: dict[str, int | None] | None = None) -> set:
    """The symbolic dims that are the batch: each graph input's at its batch axis (`axes`, 0 for the others)."""
    out = set()
    for name in view.graph_inputs:
        shape, axis = view.shape(name), (axes or {}).get(name, 0)
        if shape and axis is not None and -len(shape) <= axis < len(shape) and isinstance(shape[axis], str) \
                and shape[axis] != "?":
            out.add(shape[axis])
    return out


def batch_axis(site) -> int:
    """The axis a site's tensors hold the examples on (graph.sites.place_batch): its reduction moves it first."""
    return int(site.params.get("batch_axis", 0))


SMALL = 64  # elements: constants that may be shapes are kept for the data propagation, larger weights emptied


def propagated_shapes(view: GraphView) -> dict[str, list]:
    """Shapes with onnx's data propagation (a Reshape to a shape computed by Shape → Gather → Concat gets its
    dims), on a copy of the graph whose large weights are left empty; {} when inference fails."""
    graph = onnx.GraphProto()
    _light_copy(view.graph, graph)
    domains = {n.domain for n in graph.node} - {"", "ai.onnx"}
    opsets = [onnx.helper.make_opsetid("", view.opset or 17)] + [onnx.helper.make_opsetid(d, 1) for d in domains]
    model = onnx.helper.make_model(graph, opset_imports=opsets)
    try:
        inferred = onnx.shape_inference.infer_shapes(model, data_prop=True).graph
    except Exception:
        return {}
    out = {}
    for vi in [*inferred.value_info, *inferred.output, *inferred.input]:
        if vi.type.tensor_type.HasField("shape"):
            out[vi.name] = [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?")
                            for d in vi.type.tensor_type.shape.dim]
    return out


def _light_copy(source: onnx.GraphProto, graph: onnx.GraphProto) -> None:
    for field in ("node", "input", "output", "sparse_initializer"):  # no value_info: inferred again
        getattr(graph, field).extend(getattr(source, field))
    graph.name = source.name
    for t in source.initializer:
        if int(np.prod(t.dims)) <= SMALL:
            graph.initializer.append(t)
        else:
            graph.initializer.append(onnx.TensorProto(name=t.name, data_type=t.data_type, dims=t.dims))

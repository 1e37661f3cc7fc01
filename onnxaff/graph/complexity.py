"""Model complexity: parameters, multiply-accumulates, depth (the signature's `model.stats`). Pure onnx."""

from __future__ import annotations

import math
from collections.abc import Callable

import onnx

from onnxaff.graph.batch import batch_symbols
from onnxaff.graph.infer import with_inputs
from onnxaff.graph.sites import Site
from onnxaff.graph.view import GraphView

WEIGHTED_OPS = {"Conv", "ConvTranspose", "Gemm", "MatMul", "ConvInteger", "MatMulInteger", "QLinearConv",
                "QLinearMatMul", "Einsum"}
_FLOAT = {onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16}


def _numel(dims) -> int | None:
    if dims is None or not all(isinstance(d, int) and d >= 0 for d in dims):
        return None
    return math.prod(dims)


def _static(dims, batch: set):
    """Dims with the batch's symbol counted as 1 (MACs are per example); None where another dim is unknown (a
    symbolic height read as 1 counted EfficientNet-Lite0 116 times low)."""
    if dims is None:
        return None
    out = [1 if d in batch else d for d in dims]
    return out if all(isinstance(d, int) and d >= 0 for d in out) else None


def count_parameters(model: onnx.ModelProto, view: GraphView | None = None) -> int:
    """Elements of floating-point initializers and Constant tensors (shape constants are not weights),
    and of float ConstantOfShape outputs: onnx's light test models generate their weights that way.
    view: the model's index when the caller has one (`LoadedModel.view`)."""
    view = view if view is not None else GraphView(model.graph)
    total = 0
    for t in model.graph.initializer:
        if t.data_type in _FLOAT:
            total += math.prod(t.dims)
    for node in model.graph.node:
        if node.op_type == "Constant":
            for a in node.attribute:
                if a.name == "value" and a.t.data_type in _FLOAT:
                    total += math.prod(a.t.dims)
        elif node.op_type == "ConstantOfShape":
            value = next((a.t for a in node.attribute if a.name == "value"), None)
            if value is not None and value.data_type in _FLOAT:
                total += _numel(view.shape(node.output[0])) or 0
    return int(total)


def _node_macs(view: GraphView, node: onnx.NodeProto, batch: set) -> int | None:
    op = node.op_type
    if op in ("Conv", "ConvTranspose"):
        w = _static(view.shape(node.input[1]), batch)
        if w is None:
            return None
        if op == "Conv":
            out = _numel(_static(view.shape(node.output[0]), batch))
            return None if out is None else out * math.prod(w[1:])  # per output: Cin/g · kernel
        inp = _numel(_static(view.shape(node.input[0]), batch))
        return None if inp is None else inp * (w[1] * math.prod(w[2:]))  # per input: Cout/g · kernel
    if op == "Gemm":
        a = _static(view.shape(node.input[0]), batch)
        out = _static(view.shape(node.output[0]), batch)
        if a is None or out is None:
            return None
        trans_a = next((x.i for x in node.attribute if x.name == "transA"), 0)
        k = a[0] if trans_a else a[1]
        return math.prod(out) * k
    if op == "MatMul":
        a = _static(view.shape(node.input[0]), batch)
        out = _static(view.shape(node.output[0]), batch)
        if a is None or out is None:
            return None
        return math.prod(out) * a[-1]
    return 0


def _is_weighted(view: GraphView, node: onnx.NodeProto) -> bool:
    if node.op_type not in WEIGHTED_OPS:
        return False
    if node.op_type == "MatMul":  # attention's Q·Kᵀ multiplies two activations: not a layer
        return any(view.constant(n) is not None or n in view.initializers for n in node.input[:2])
    return True


def count_macs(view: GraphView, batch: set) -> tuple[int, list[str]]:
    """MACs per example and the nodes whose count is unknown (a dim neither known nor the batch's symbol)."""
    macs, unknown = 0, []
    for i, node in enumerate(view.nodes):
        m = _node_macs(view, node, batch)
        if m is None:
            unknown.append(view.node_label(i))
        else:
            macs += m
    return macs, unknown


def model_stats(model: onnx.ModelProto, sites: list[Site], view: GraphView | None = None,
                batch: set | None = None, fed: Callable[[], dict | None] | None = None) -> dict:
    """Parameters, MACs and depths of a model; view: its index when the caller has one (`LoadedModel.view`).

    batch: the symbols of the batch axes (default: each input's axis 0). Where another dim is symbolic (a height,
    a sequence length), `fed()` gives the shape of one example as the run feeds it, input name -> dims with the
    batch axis 1: the MACs are counted on the graph's shapes for it (a node still unknown is listed, never counted
    on a dim read as 1); without it those nodes are listed in `macs_unknown_nodes` and left out."""
    view = view if view is not None else GraphView(model.graph)
    macs, unknown = count_macs(view, batch_symbols(view) if batch is None else batch)
    shapes = fed() if unknown and fed is not None else None
    fixed = with_inputs(model, shapes) if shapes else None
    if fixed is not None:
        macs, unknown = count_macs(GraphView(fixed.graph, opset=view.opset), set())
    exits = {s.node_indices[-1] for s in sites if s.node_indices}
    weighted = {i for i, n in enumerate(view.nodes) if _is_weighted(view, n)}
    return {
        "parameters": count_parameters(model, view),
        "macs": int(macs),
        "gflops": round(macs / 1e9, 6),
        "flops_convention": "multiply-accumulates of Conv/ConvTranspose/Gemm/MatMul per example (1 MAC = 1 FLOP, "
                            "as torchvision's GFLOPS), on the shapes the run fed",
        "macs_unknown_nodes": unknown,
        "depth_sites": _longest(view, exits),
        "depth_weighted_layers": _longest(view, weighted),
        "weighted_layers": len(weighted),
    }


def _longest(view: GraphView, marked: set[int]) -> int:
    """Most marked nodes on any path through the graph (the DAG's longest weighted path)."""
    best = {}
    for n in sorted(range(len(view.nodes)), key=view.order.__getitem__):
        preds = [best[p] for p in view.predecessors[n]]
        best[n] = (max(preds) if preds else 0) + (1 if n in marked else 0)
    return int(max(best.values(), default=0))


__all__ = ["count_macs", "count_parameters", "model_stats"]

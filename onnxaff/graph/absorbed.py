"""ReLUs a quantizer folded into the quantization: the clamp at 0 a QuantizeLinear performs is the ReLU.

onnxruntime's `quantize_static` removes a Relu (or Clip(0, ·)) whose output it quantizes asymmetrically: the
calibrated range starts at 0, so the zero point is the integer type's minimum (0 for uint8, −128 for int8)
and quantizing clamps every negative value to 0. The float model's `Conv → Relu` becomes `Conv → Q → DQ`.
Such a Q is a ReLU when what it reads can be negative: it is produced by a linear op (Conv, Gemm, MatMul, Add,
a normalisation ...) of data, and is not non-negative by construction (`bounds`: a pooled ReLU, x·x, tanh(x) + 1
inside a GELU, whose calibrated ranges also start at 0). Each is a
site of kind `relu`, X the float tensor the Q reads and Y the DQ's output, with `params.absorbed_by`.
A degenerate calibration puts the zero point at the minimum too, whatever the data, and is no clamp: an
infinite (or non-finite, or sub-normal, or zero) scale, as a −3.4e38 mask's overflowing range gives, and the
zero-width range (scale 1, zero point 0) of a tensor the data does not reach (`data_free`: a zero-initialised
BatchNormalization, zero weights).

In QOperator files the clamp sits inside a QLinearConv / QLinearMatMul / QGemm whose output zero point is the
minimum: no float tensor exists before the clamp, so the ReLU is listed as skipped with that reason.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from onnxaff.graph import qdq
from onnxaff.graph.view import GraphView

# Ops whose output can be negative though their inputs are not: a clamp after them removes something.
LINEAR = {"Conv", "ConvTranspose", "Gemm", "MatMul", "Add", "Sub", "Mul", "Sum", "Einsum", "BatchNormalization",
          "InstanceNormalization", "LayerNormalization", "FusedConv", "FusedGemm", "FusedMatMul"}
# Bounds whatever the input.
_RANGE = {"Relu": (0.0, np.inf), "Sigmoid": (0.0, 1.0), "HardSigmoid": (0.0, 1.0), "Softmax": (0.0, 1.0),
          "Tanh": (-1.0, 1.0), "Erf": (-1.0, 1.0), "Softsign": (-1.0, 1.0), "Exp": (0.0, np.inf),
          "Softplus": (0.0, np.inf), "Abs": (0.0, np.inf), "Sqrt": (0.0, np.inf), "ReduceL2": (0.0, np.inf),
          "ReduceL1": (0.0, np.inf), "ReduceSumSquare": (0.0, np.inf), "Shape": (0.0, np.inf), "Size": (0.0, np.inf)}
# Within their data input's bounds (pooling, moving and copying values, averaging).
_KEEP = {"MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "Reshape", "Transpose", "Flatten",
         "Squeeze", "Unsqueeze", "Identity", "Resize", "Upsample", "Slice", "Gather", "Split", "Expand", "Tile",
         "DepthToSpace", "SpaceToDepth", "Cast", "ReduceMean", "ReduceMax", "ReduceMin"}
_UNBOUNDED = (-np.inf, np.inf)
# QOperator ops and the index of their output zero point.
_QOPERATOR_ZP = {"QLinearConv": 7, "QLinearMatMul": 7, "QGemm": 8}
_STANDARD = ("", "ai.onnx")
_MAX_DEPTH = 24
_TINY, _FLOAT32_MAX = float(np.finfo(np.float32).tiny), float(np.finfo(np.float32).max)
_ZEROS_READ = 1 << 22  # weights read to see whether they are all zeros: at most this many values
# Ops whose output is its bias alone when the (constant) multiplier input is all zeros: a zero-initialised
# BatchNormalization (LeViT's residual branches), a layer with zero weights. Input index of the multiplier, the bias.
_BIASED = {"BatchNormalization": (1, 2), "InstanceNormalization": (1, 2), "LayerNormalization": (1, 2),
           "Conv": (1, 2), "ConvTranspose": (1, 2), "Gemm": (1, 2), "MatMul": (1, None), "Mul": (1, None)}


def clamp_range(view: GraphView, node, zp_index: int = 2, scale_index: int = 1) -> tuple[float, float] | None:
    """(0, the top of the range) when the node quantizes with one scale and the zero point at its type's minimum."""
    zp_name = node.input[zp_index] if len(node.input) > zp_index else ""
    if zp_name:
        zp = view.constant(zp_name)
        if zp is None or zp.size != 1 or not np.issubdtype(zp.dtype, np.integer):
            return None
        info = np.iinfo(zp.dtype)
    else:  # no zero point: uint8 and 0 (or the type `output_dtype` names, zero point 0)
        dtype = next((a.i for a in node.attribute if a.name == "output_dtype"), 0) or TensorProto.UINT8
        np_type = helper.tensor_dtype_to_np_dtype(dtype)
        if not np.issubdtype(np_type, np.integer):
            return None
        info, zp = np.iinfo(np_type), np.zeros((), np_type)
    scale = view.constant(node.input[scale_index]) if len(node.input) > scale_index else None
    if scale is None or scale.size != 1 or int(zp.ravel()[0]) != info.min:
        return None
    top = float(scale.ravel()[0]) * (info.max - info.min)
    # a scale below float32's smallest normal (0 included) or not finite, or a top that is not, is no clamp: a
    # zero-width calibrated range, or one of −3.4e38 whose width overflowed to an infinite scale (zero point then
    # at the minimum whatever the data); onnxruntime's quantizer itself reads a scale below it as no range
    if not _TINY <= float(scale.ravel()[0]) < np.inf or not top <= _FLOAT32_MAX:
        return None
    return 0.0, float(np.float32(top))


def bounds(view: GraphView, tensor: str, depth: int = 0) -> tuple[float, float]:
    """An interval the tensor's values lie in by construction (a ReLU's, tanh(x) + 1, x·x, a pooled sigmoid)."""
    c = view.constant(tensor)
    if c is not None:
        c = np.asarray(c, np.float64)
        return (float(c.min()), float(c.max())) if c.size else _UNBOUNDED
    p = view.producer.get(tensor)
    if p is None or depth > _MAX_DEPTH:
        return _UNBOUNDED
    node, op = view.nodes[p], view.nodes[p].op_type
    if op in _RANGE:
        return _RANGE[op]
    if (flat := data_free(view, node)) is not None:
        return flat
    args = [bounds(view, t, depth + 1) for t in node.input if t]
    if op in _KEEP and args:
        return args[0]
    if op == "DequantizeLinear":
        zero_at_min = (clamp_range(view, node) is not None if len(node.input) > 2 and node.input[2]
                       else view.elem_type(node.input[0]) in (TensorProto.UINT8, TensorProto.UINT16))
        q = view.producer.get(node.input[0])
        lo, hi = (bounds(view, view.nodes[q].input[0], depth + 1) if q is not None and view.nodes[q].op_type == qdq.Q
                  else _UNBOUNDED)  # a Q → DQ pair: what was quantized, but for rounding
        return (max(lo, 0.0), hi) if zero_at_min else (lo, hi)  # q ≥ its type's minimum = the zero point
    if op == "Clip" and args:
        lo, hi = args[0]
        return max(lo, args[1][0] if len(args) > 1 else -np.inf), min(hi, args[2][1] if len(args) > 2 else np.inf)
    if op in ("Add", "Sum") and args:
        return sum(a[0] for a in args), sum(a[1] for a in args)
    if op == "Sub" and len(args) == 2:
        return args[0][0] - args[1][1], args[0][1] - args[1][0]
    if op == "Neg" and args:
        return -args[0][1], -args[0][0]
    if op in ("Concat", "Max", "Min", "Mean", "Pad") and args:
        return min(a[0] for a in args), max(a[1] for a in args)
    if op == "Mul" and len(args) == 2:
        if node.input[0] == node.input[1]:  # a square
            lo, hi = args[0]
            return (0.0 if lo <= 0 <= hi else min(lo * lo, hi * hi)), max(lo * lo, hi * hi)
        products = [0.0 if a == 0 or b == 0 else a * b for a in args[0] for b in args[1]]  # 0·∞ is 0 here
        return min(products), max(products)
    return _UNBOUNDED


def data_free(view: GraphView, node) -> tuple[float, float] | None:
    """The range of a node's output that the data does not reach: its bias (or 0) where what multiplies the data is
    a constant of zeros; None otherwise. A quantizer calibrates it to a zero-width range (scale 1, zero point 0:
    the minimum of uint8), which is no clamp."""
    where = _BIASED.get(node.op_type)
    if where is None:
        return None
    k, bias = where
    if not any(_zeros(view, t) for t in (node.input[k:k + 1] if node.op_type != "Mul" else node.input[:2])):
        return None
    name = node.input[bias] if bias is not None and len(node.input) > bias else ""
    b = view.constant(name) if name else np.zeros(1)
    if b is None:
        return None  # a computed bias
    beta = next((a.f for a in node.attribute if a.name == "beta"), 1.0) if node.op_type == "Gemm" else 1.0
    b = np.asarray(b, np.float64) * beta if b.size else np.zeros(1)
    return float(b.min()), float(b.max())


def _zeros(view: GraphView, name: str) -> bool:
    """Whether a constant (inline, or a DequantizeLinear of one) holds zeros only; read without keeping a copy."""
    p = view.producer.get(name)
    dq = view.nodes[p] if p is not None and view.nodes[p].op_type == qdq.DQ else None
    stored = view.initializers.get(dq.input[0] if dq is not None else name)
    if stored is None:
        c = view.constant(name) if dq is None else None
        return c is not None and c.size > 0 and not np.any(c)
    if stored.data_location == TensorProto.EXTERNAL or int(np.prod(stored.dims)) > _ZEROS_READ:
        return False
    values = numpy_helper.to_array(stored)
    if dq is None:
        return values.size > 0 and not np.any(values)
    zero = view.constant(dq.input[2]) if len(dq.input) > 2 and dq.input[2] else np.zeros(1, values.dtype)
    if zero is None or not values.size:
        return False
    return bool(np.all(values == zero.ravel()[0])) if zero.size == 1 else not np.any(zero) and not np.any(values)


def find(view: GraphView, claimed: set[int]) -> list[dict]:
    """Each absorbed ReLU of the graph: {x, y, nodes (Q and DQ indices), exit (the DQ), max, skipped}."""
    found, seen = [], set()
    for i in sorted(range(len(view.nodes)), key=view.order.__getitem__):
        node = view.nodes[i]
        if i in claimed or node.domain not in _STANDARD or node.op_type != qdq.Q or not node.output:
            continue
        x = node.input[0]
        p = view.producer.get(x)
        rng = clamp_range(view, node)
        if (rng is None or p is None or x in seen or x in view.static or view.nodes[p].op_type not in LINEAR
                or data_free(view, view.nodes[p]) is not None or bounds(view, x)[0] >= 0):
            continue
        dqs = [c for c in view.consumers.get(node.output[0], []) if view.nodes[c].op_type == qdq.DQ
               and view.nodes[c].domain in _STANDARD and c not in claimed]
        seen.add(x)
        if not dqs:  # integer ops read it (a QOperator node after an expanded QLinearAdd): Y is never float
            found.append({"x": x, "y": node.output[0], "nodes": [i], "exit": i, "max": rng[1],
                          "skipped": "a ReLU absorbed into QuantizeLinear by quantization, whose output only integer "
                                     "ops read: no float tensor after the clamp to observe"})
            continue
        # Dedicated pairs (one Q per consumer) quantize the same X: one site, all of them its nodes.
        qs = [q for q in view.consumers.get(x, []) if view.nodes[q].op_type == qdq.Q and q not in claimed
              and clamp_range(view, view.nodes[q]) is not None]
        nodes = sorted({*qs, i, *(d for q in qs for d in view.consumers.get(view.nodes[q].output[0], [])
                                  if view.nodes[d].op_type == qdq.DQ)}, key=view.order.__getitem__)
        found.append({"x": x, "y": view.nodes[dqs[0]].output[0], "nodes": nodes, "exit": dqs[0], "max": rng[1],
                      "skipped": None})
    for i, node in enumerate(view.nodes):
        k = _QOPERATOR_ZP.get(node.op_type)
        if k is None or i in claimed or not node.output or clamp_range(view, node, k, k - 1) is None:
            continue
        found.append({"x": node.input[0], "y": node.output[0], "nodes": [i], "exit": i,
                      "max": clamp_range(view, node, k, k - 1)[1],
                      "skipped": f"a ReLU absorbed into {node.op_type} by quantization (its output's zero point is "
                                 "the type's minimum): no float tensor before the clamp to observe"})
    return found

"""Constant folding for site discovery: what a graph computes from constants alone is a value.

Function expansions (ONNX's own `_expanded` bodies, `onnx.inliner`, function-inlining exporters)
spell every constant as `CastLike(Constant, x)`, `Sqrt(2)`, `Div(1, alpha)` or `ConstantOfShape`;
folded, `Max(x, CastLike(0, x))` reads as `Max(x, 0)`. Casts between float types keep the value in
float64: discovery identifies the function, not its rounding to the model's precision.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

from onnxaff.foundations.dtypes import BFLOAT16
from onnxaff.graph import elementwise

# Constants exporters write into activations (√2, 1/√2, √(2/π), GELU-tanh's 0.044715 and its product with
# √(2/π), 1/6, QuickGELU's 1.702, 2/√π, SELU's α, γ and αγ, ln 2). A half-precision constant that is one of
# them rounded is read as it (`exact_half`): the model cannot tell the two apart, and float16's √2 alone moves
# a GELU by 1e-4, ten times what tells GELU from its tanh approximation.
_EXPORTED = np.array([np.sqrt(2.0), 0.5 * np.sqrt(2.0), np.sqrt(2.0 / np.pi), 0.044715, 0.044715 * np.sqrt(2.0 / np.pi),
                      1.0 / 6.0, 1.702, 2.0 / np.sqrt(np.pi), 1.0507009873554805, 1.6732632423543772,
                      1.0507009873554805 * 1.6732632423543772, np.log(2.0)])
_HALF = tuple(d for d in (np.dtype(np.float16), BFLOAT16) if d is not None)
_SNAP_SIZE = 64  # scalars and short vectors; weights stay as stored

# Folded results larger than this stay unknown (never scalars or per-channel slopes worth having).
MAX_FOLDED_SIZE = 1 << 16
_SHAPE_OPS = {"Identity", "Reshape", "Unsqueeze", "Squeeze", "Flatten", "Expand"}


def as_float64(value: np.ndarray) -> np.ndarray:
    """Float types numpy does not know as numbers (bfloat16, float8 via ml_dtypes) read as float64."""
    if value.dtype == bool or np.issubdtype(value.dtype, np.number):
        return value
    try:
        return value.astype(np.float64)
    except (TypeError, ValueError):
        return value


def exact_half(value: np.ndarray) -> np.ndarray:
    """A float16/bfloat16 constant in float64, each value that rounds an exported constant (±) read as that one."""
    if value.dtype not in _HALF or value.size > _SNAP_SIZE:
        return value
    rounded = _EXPORTED.astype(value.dtype).astype(np.float64)
    out = value.astype(np.float64)
    for i, v in enumerate(out.reshape(-1)):
        hit = np.flatnonzero(rounded == abs(v)) if v != 0 else ()
        if len(hit):
            out.reshape(-1)[i] = np.copysign(_EXPORTED[hit[0]], v)
    return out


def fold_node(view, node: onnx.NodeProto) -> np.ndarray | None:
    """The value of the node's first output when every operand it reads is a constant, else None. `view`: anything
    with `constant(name)` and `elem_type(name)` (graph.constants.ConstantValues, or a GraphView)."""
    try:
        return _fold(view, node)
    except (KeyError, ValueError, TypeError, IndexError, OverflowError, MemoryError):
        return None  # a malformed constant: discovery goes on without it


def _fold(view, node: onnx.NodeProto) -> np.ndarray | None:
    if node.domain not in ("", "ai.onnx") or not node.output:
        return None
    op = node.op_type
    if op == "ConstantOfShape":
        shape = view.constant(node.input[0]) if node.input else None
        if shape is None or int(np.prod(shape)) > MAX_FOLDED_SIZE:
            return None
        fill = next((numpy_helper.to_array(a.t) for a in node.attribute if a.name == "value"), np.zeros(1, np.float32))
        return np.full([int(d) for d in shape], as_float64(fill).reshape(-1)[0])
    if op == "CastLike":  # the second operand only lends its type
        value = view.constant(node.input[0])
        return None if value is None else _cast(value, view.elem_type(node.input[1]))
    if op == "Cast":
        value = view.constant(node.input[0])
        to = next((a.i for a in node.attribute if a.name == "to"), onnx.TensorProto.FLOAT)
        return None if value is None else _cast(value, to)
    if op in _SHAPE_OPS:
        value = view.constant(node.input[0]) if node.input else None
        if value is None:
            return None
        if op == "Identity" or value.size == 1:
            return value.reshape(()) if op != "Identity" else value
        return None  # reshaping a tensor needs its target shape; scalars are all discovery reads
    if op in ("QuantizeLinear", "DequantizeLinear"):
        from onnxaff.graph import qdq

        out = qdq.fold(view, node)
        return out if out is None or out.size <= MAX_FOLDED_SIZE else None
    if op not in elementwise.OPS:
        return None
    args = []
    for name in node.input:
        if not name:
            args.append(None)
            continue
        value = view.constant(name)
        if value is None:
            return None
        args.append(as_float64(value))
    if not args or all(a is None for a in args):
        return None
    try:
        with np.errstate(all="ignore"):
            out = np.asarray(elementwise.evaluate(view, node, args))
    except (KeyError, ValueError, TypeError):
        return None
    return out if out.size <= MAX_FOLDED_SIZE else None


def _cast(value: np.ndarray, to: int) -> np.ndarray:
    value = as_float64(value)
    if to in (onnx.TensorProto.UNDEFINED, onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16,
              onnx.TensorProto.BFLOAT16):
        return value.astype(np.float64) if value.dtype != bool else value.astype(np.float64)
    try:
        return value.astype(onnx.helper.tensor_dtype_to_np_dtype(to))
    except (TypeError, ValueError, KeyError):
        return value

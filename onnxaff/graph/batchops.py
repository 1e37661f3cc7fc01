"""How each op moves the batch axis (graph/batch.py follows it through a graph): one rule per op, given the
states of its inputs, returns its outputs' state, or None where the generic rules of BatchFlow decide."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx


@dataclass(frozen=True)
class Axis:
    """The examples lie on `axis`; `outer` > 1: merged after other dims of that axis (rows would not be examples)."""

    axis: int
    outer: int = 1


@dataclass(frozen=True)
class Lost:
    """The axis could not be followed (`node`, `why`)."""

    node: str
    why: str


@dataclass(frozen=True)
class Mixed:
    """The examples were combined by `node` (`why`): whatever it reaches depends on the batch size."""

    node: str
    why: str


FRONT = Axis(0)
READS_NO_VALUES = {"Shape", "Size", "ConstantOfShape", "EyeLike"}  # their outputs hold no example
REDUCE_OPS = {"ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
              "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare", "ArgMax", "ArgMin"}
# Ops that read axis 0 as the batch and axis 1 as channels: the examples must lie on axis 0.
BATCH_FIRST_OPS = {"Conv", "ConvTranspose", "ConvInteger", "QLinearConv", "MaxPool", "AveragePool", "LpPool",
                   "GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool", "LRN", "InstanceNormalization",
                   "GroupNormalization", "DepthToSpace", "SpaceToDepth", "Resize", "Upsample", "RoiAlign"}
ELEMENTWISE = {
    "Add", "Sub", "Mul", "Div", "Pow", "Neg", "Abs", "Exp", "Log", "Sqrt", "Reciprocal", "Erf", "Tanh", "Sigmoid",
    "HardSigmoid", "Softplus", "Softsign", "Relu", "LeakyRelu", "PRelu", "Elu", "Selu", "Celu", "Gelu", "Mish",
    "HardSwish", "ThresholdedRelu", "Clip", "Min", "Max", "Sum", "Mean", "Identity", "Cast", "CastLike", "Dropout",
    "Where", "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor", "Not", "Sign",
    "Floor", "Ceil", "Round", "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh",
    "Atanh", "Mod", "IsNaN", "IsInf", "BitShift", "QuantizeLinear", "DequantizeLinear", "BatchNormalization",
    "Expand",
}


def attr(node, name, default=None):
    return next((onnx.helper.get_attribute_value(a) for a in node.attribute if a.name == name), default)


def combine(got: list):
    """What a node passes on from inputs of which one is Lost or Mixed: the examples mixed first."""
    return next((s for s in got if isinstance(s, Mixed)), None) or next(s for s in got if isinstance(s, Lost))


def _label(node) -> str:
    return node.name or f"{node.op_type} {node.output[0]}"


def _transpose(flow, node, got):
    s, rank = got[0], flow.rank(node.input[0])
    perm = attr(node, "perm")
    if perm is None:
        if rank is None:
            return None
        perm = list(range(rank))[::-1]
    return Axis(list(perm).index(s.axis), s.outer) if s.axis in perm else None


def _product(dims) -> int | None:
    return int(np.prod(dims)) if all(isinstance(d, int) for d in dims) else None


def _reshape(flow, node, got):
    """Reshape keeps the flattened order: the product of everything before the examples is unchanged, and it
    finds the output axis they start on; an unknown dim there leaves the axis unfollowed."""
    s = got[0]
    if s == FRONT:
        return FRONT  # nothing before the examples: they still lead the first axis
    shape_in, shape_out = flow.view.shape(node.input[0]), flow.view.shape(node.output[0])
    if shape_in is None or shape_out is None:
        return Lost(_label(node), "a Reshape to a shape not known before the run")
    before = _product(shape_in[:s.axis])
    if before is None:
        return Lost(_label(node), "a Reshape after dims not known before the run")
    before *= s.outer
    lead = 1
    for j, d in enumerate(shape_out):
        if isinstance(d, int) and lead * d <= before:
            lead *= d
            continue
        if isinstance(d, int) or before % lead:
            break
        return Axis(j, before // lead)
    return Lost(_label(node), "a Reshape that splits the batch axis")


def _flatten(flow, node, got):
    s, rank = got[0], flow.rank(node.input[0])
    if s == FRONT:
        return FRONT
    if rank is None:
        return None
    axis = int(attr(node, "axis", 1)) % rank if rank else 0
    shape = flow.view.shape(node.input[0])
    start = 0 if s.axis < axis else axis
    before = _product(shape[start:s.axis])
    return None if before is None else Axis(0 if s.axis < axis else 1, before * s.outer)


def _squeeze(flow, node, got):
    s = got[0]
    axes = flow.ints(node, "axes", 1)
    rank = flow.rank(node.input[0])
    if axes is None or rank is None:
        return None
    axes = [a % rank for a in axes]
    if s.axis in axes:
        return Lost(_label(node), "a Squeeze of the batch axis")
    return Axis(s.axis - sum(a < s.axis for a in axes), s.outer)


def _unsqueeze(flow, node, got):
    s = got[0]
    axes, rank = flow.ints(node, "axes", 1), flow.rank(node.output[0])
    if axes is None or rank is None:
        return None
    kept = [a for a in range(rank) if a not in {x % rank for x in axes}]
    return Axis(kept[s.axis], s.outer) if s.axis < len(kept) else None


def _reduce(flow, node, got):
    s, rank = got[0], flow.rank(node.input[0])
    if node.op_type in ("ArgMax", "ArgMin"):
        axes = [int(attr(node, "axis", 0))]
    else:
        axes = flow.ints(node, "axes", 1)
    if not axes and attr(node, "noop_with_empty_axes", 0):
        return s
    if axes is None and len(node.input) > 1 and node.input[1]:
        return None  # axes computed at run time
    if not axes:
        return Mixed(_label(node), f"{node.op_type} over every axis, the batch's too")
    if rank is None:  # negative axes cannot be placed: the generic rule decides
        return Mixed(_label(node), f"{node.op_type} over the batch axis") if s.axis in axes else None
    axes = [a % rank for a in axes]
    if s.axis in axes:
        return Mixed(_label(node), f"{node.op_type} over the batch axis")
    if attr(node, "keepdims", 1):
        return s
    return Axis(s.axis - sum(a < s.axis for a in axes), s.outer)


def _normalise(flow, node, got):
    """Softmax, LogSoftmax, Hardmax, LayerNormalization: the axes normalised must not hold the examples."""
    s, rank = got[0], flow.rank(node.input[0])
    if s is None or rank is None:
        return None if s is None or s == FRONT else Lost(_label(node), "a normalisation of unknown rank")
    layer = node.op_type == "LayerNormalization"
    axis = int(attr(node, "axis", -1 if layer or (flow.view.opset or 13) >= 13 else 1)) % rank
    if s.axis == axis or ((layer or (flow.view.opset or 13) < 13) and s.axis >= axis):
        return Mixed(_label(node), f"{node.op_type} over the batch axis")
    return s


def _batch_norm(flow, node, got):
    if got[0] is not None and (attr(node, "training_mode", 0) or sum(bool(o) for o in node.output) > 1):
        return Mixed(_label(node), "BatchNormalization in training mode: it normalises with the batch's statistics")
    return None  # elementwise per channel


def _batch_first(flow, node, got):
    if got[0] is not None and got[0] != FRONT:
        return Mixed(_label(node), f"{node.op_type} reads axis 0 as the batch, the examples are on axis {got[0].axis}")
    return FRONT if got[0] is not None else None


def _matmul(flow, node, got):
    ra, rb, r = flow.rank(node.input[0]), flow.rank(node.input[1]), flow.rank(node.output[0])
    if None in (ra, rb, r):
        return None
    found = set()
    a, b = got[0], got[1] if len(got) > 1 else None
    if a is not None:
        if ra == 1 or a.axis == ra - 1:
            return Mixed(_label(node), "MatMul over the batch axis")
        found.add(Axis(a.axis if rb == 1 else a.axis + r - ra, a.outer))
    if b is not None:
        if rb == 1 or b.axis == rb - 2:
            return Mixed(_label(node), "MatMul over the batch axis")
        found.add(Axis(r - 1 if b.axis == rb - 1 else b.axis + r - rb, b.outer))
    return found.pop() if len(found) == 1 else Mixed(_label(node), "MatMul pairs examples with examples")


def _gemm(flow, node, got):
    found = set()
    for k, (s, trans) in enumerate(zip(got[:2], (attr(node, "transA", 0), attr(node, "transB", 0)), strict=True)):
        if s is None:
            continue
        free = trans if k == 0 else 1 - trans  # A's rows are axis 0 (1 transposed), B's columns axis 1 (0 transposed)
        if s.axis != free:
            return Mixed(_label(node), "Gemm over the batch axis")
        found.add(Axis(k, s.outer))
    if len(got) > 2 and got[2] is not None:
        return None if got[2] != FRONT or found - {FRONT} else FRONT
    return found.pop() if len(found) == 1 else Mixed(_label(node), "Gemm pairs examples with examples")


def _concat(flow, node, got):
    rank = flow.rank(node.output[0])
    states = {s for s in got if s is not None}
    if rank is None or len(states) != 1:
        return None
    s = states.pop()
    return Lost(_label(node), "a Concat along the batch axis") if int(attr(node, "axis", 0)) % rank == s.axis else s


def _split(flow, node, got):
    rank, s = flow.rank(node.input[0]), got[0]
    if rank is None or s is None:
        return None
    return Lost(_label(node), "a Split along the batch axis") if int(attr(node, "axis", 0)) % rank == s.axis else s


def _gather(flow, node, got):
    data, indices = got[0], got[1] if len(got) > 1 else None
    rank, ri = flow.rank(node.input[0]), flow.rank(node.input[1])
    if rank is None or ri is None:
        return None
    axis = int(attr(node, "axis", 0)) % rank if rank else 0
    if data is not None and indices is not None:
        return Mixed(_label(node), "a Gather of examples by examples")
    if data is not None:
        if data.axis == axis:
            return Mixed(_label(node), "a Gather along the batch axis")
        return Axis(data.axis if data.axis < axis else data.axis - 1 + ri, data.outer)
    return Axis(axis + indices.axis, indices.outer)


HANDLERS = {
    "Transpose": _transpose, "Reshape": _reshape, "Flatten": _flatten, "Squeeze": _squeeze,
    "Unsqueeze": _unsqueeze, "Softmax": _normalise, "LogSoftmax": _normalise, "Hardmax": _normalise,
    "LayerNormalization": _normalise, "BatchNormalization": _batch_norm, "MatMul": _matmul, "Gemm": _gemm,
    "Concat": _concat, "Split": _split, "Gather": _gather,
    **{op: _reduce for op in REDUCE_OPS}, **{op: _batch_first for op in BATCH_FIRST_OPS},
}

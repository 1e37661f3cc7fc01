"""Op families and the bounded walks that block finders share, all on a GraphView."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from onnxaff.graph import flow
from onnxaff.graph.view import GraphView

# A linear map of one data tensor by constant weights.
PROJECTIONS = {
    "MatMul", "Gemm", "Einsum", "FusedMatMul", "MatMulNBits", "MatMulInteger", "QLinearMatMul",
    "DynamicQuantizeMatMul", "MatMulIntegerToFloat",
}
# Fused attention nodes: the ones that project their input themselves, and the ones given Q, K, V.
FUSED_ON_INPUT = {"Attention", "PackedAttention", "QAttention", "LongformerAttention"}  # com.microsoft
FUSED_ON_QKV = {
    "MultiHeadAttention", "GroupQueryAttention", "PackedMultiHeadAttention", "DecoderMaskedMultiHeadAttention",
    "SparseAttention",
}  # com.microsoft; ai.onnx Attention (opset 23) also takes projected Q, K, V
# Ops that mix features with learned weights: a residual branch holds at least one (or an activation).
MIXING = PROJECTIONS | FUSED_ON_INPUT | FUSED_ON_QKV | {
    "Conv", "ConvTranspose", "ConvInteger", "QLinearConv", "NhwcConv", "FusedConv", "LSTM", "GRU", "RNN",
}
# Ops that only move or retype values.
VALUE_PRESERVING = {"Identity", "Cast", "Dropout"}
LAYOUT = VALUE_PRESERVING | {"Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten"}
# From Q, K or V up to their projection: head split, scaling, bias, rotary embedding, KV-cache concat.
TO_PROJECTION = LAYOUT | {"Gather", "Split", "Slice", "Concat", "Mul", "Div", "Add", "Sub", "Neg", "Expand", "Tile"}
MAX_WALK = 64  # nodes visited per upward or downward search: blocks are local structures


def single_user(view: GraphView, name: str) -> int | None:
    """The one node that reads the values of `name` (Shape readers aside)."""
    return view.single_consumer(name, values_only=True)


def between(view: GraphView, src: str, dst: str) -> set[int]:
    """Nodes on some path from `src` to `dst`, where a fused sum also leads to the LayerNorm computed from it."""
    return flow.between(view, src, dst, also=view.fused_sums.get(src, ()))


def is_projection(view: GraphView, i: int) -> bool:
    node = view.nodes[i]
    return node.op_type in PROJECTIONS and len(view.data_inputs(i)) == 1 and bool(node.output)


def bias_add(view: GraphView, name: str) -> int | None:
    """The Add that only adds a constant to `name`, when it is its single user."""
    c = single_user(view, name)
    if c is None or view.op(c) != "Add" or view.data_inputs(c) != [name]:
        return None
    return c


def through_bias(view: GraphView, name: str, key: int) -> tuple[str, int]:
    b = bias_add(view, name)
    return (view.nodes[b].output[0], b) if b is not None else (name, key)


def walk_up(view: GraphView, starts: Iterable[str], step: Callable[[int], list[str]]) -> None:
    """Depth-first up the graph from `starts`, at most MAX_WALK tensors: step(producer) says where to go on."""
    stack, seen = list(starts), set()
    while stack and len(seen) < MAX_WALK:
        t = stack.pop()
        if t in seen:
            continue
        seen.add(t)
        p = view.producer.get(t)
        if p is not None:
            stack.extend(step(p))


def projection_source(view: GraphView, name: str) -> str | None:
    """The one tensor that `name` is a projection of (through head split, scale, bias, RoPE), else None.

    Paths that end without a projection (a graph input such as position ids, a cache) are
    ignored; two different projected tensors, or none, give None.
    """
    found: set[str] = set()

    def step(p: int) -> list[str]:
        if is_projection(view, p):
            found.update(view.data_inputs(p))
            return []
        return view.data_inputs(p) if view.op(p) in TO_PROJECTION else []

    walk_up(view, [name], step)
    return next(iter(found)) if len(found) == 1 else None


def extend(view: GraphView, x: str, out: str) -> tuple[str, str]:
    """Move a block's ends across layout ops that only the block uses (module boundaries)."""
    inside = between(view, x, out)
    for _ in range(16):
        p = view.producer.get(x)
        if p is None or x in view.graph_outputs or view.op(p) not in LAYOUT:
            break
        data = view.data_inputs(p)
        if len(data) != 1 or not set(view.consumers.get(x, [])) <= inside:
            break
        x = data[0]
        inside = between(view, x, out)
    for _ in range(16):
        c = single_user(view, out)
        if c is None or view.op(c) not in LAYOUT or view.data_inputs(c) != [out]:
            break
        out = view.nodes[c].output[0]
    return x, out


def dims_compatible(a: list | None, b: list | None) -> bool:
    """Same rank and equal wherever both dims are known integers (symbolic dims match anything)."""
    if a is None or b is None or len(a) != len(b):
        return False
    return all(not (isinstance(x, int) and isinstance(y, int)) or x == y for x, y in zip(a, b, strict=True))

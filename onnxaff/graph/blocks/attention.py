"""Attention blocks: a Softmax between Q·Kᵀ and the product with V, or one fused attention node."""

from __future__ import annotations

from dataclasses import dataclass, field

from onnxaff.graph.blocks.block import Found
from onnxaff.graph.blocks.walk import (
    FUSED_ON_INPUT,
    FUSED_ON_QKV,
    LAYOUT,
    between,
    is_projection,
    projection_source,
    single_user,
    through_bias,
    walk_up,
)
from onnxaff.graph.view import GraphView

# Between the scores product and the Softmax (scale, mask); between the Softmax and the product with V.
_SCORE_OPS = {"Mul", "Div", "Add", "Sub", "Where", "Cast", "Identity", "Reshape", "Max", "Min", "Clip"}
_WEIGHT_OPS = {"Dropout", "Cast", "Identity", "Reshape", "Where"}
_PAIR_PRODUCTS = {"MatMul", "Einsum"}  # Q·Kᵀ and weights·V: products of two data tensors


@dataclass
class Core:
    """Where attention weights are made and applied: a Softmax between two products, or a fused node."""

    anchor: int
    qkv: list[str]  # tensors to trace back to their projections
    source: str | None  # the input, when the node projects it itself
    out: str  # weights applied to V, heads not merged yet
    form: str
    score_nodes: set[int] = field(default_factory=set)  # Q·Kᵀ to Softmax: scale, mask


def attention_cores(view: GraphView) -> list[Core]:
    cores = []
    for i, node in enumerate(view.nodes):
        if not node.output or not node.output[0]:
            continue
        if node.domain == "com.microsoft" and node.op_type in FUSED_ON_INPUT and node.input and node.input[0]:
            cores.append(Core(i, [], node.input[0], node.output[0], f"com.microsoft.{node.op_type}"))
        elif (node.domain == "com.microsoft" and node.op_type in FUSED_ON_QKV) or view.op(i) == "Attention":
            cores.append(Core(i, [n for n in node.input[:3] if n], None, node.output[0], view.op(i)))
        elif view.op(i) == "Softmax":
            scores, values = _scores_product(view, i), _values_product(view, i)
            if scores is None or values is None:
                continue
            q, k = view.data_inputs(scores)
            v = view.data_inputs(values)[1]
            cores.append(Core(i, [q, k, v], None, view.nodes[values].output[0], "decomposed",
                              between(view, view.nodes[scores].output[0], node.output[0])))
    return cores


def attention_blocks(view: GraphView, cores: list[Core]) -> list[Found]:
    found: dict[tuple[str, str], Found] = {}
    for core in cores:
        params: dict = {"form": core.form}
        source = core.source
        if source is None:
            sources = [projection_source(view, t) for t in core.qkv]
            if sources[0] is None:
                if core.form == "decomposed":
                    continue  # Q is no projection of anything: not a self-attention layer
                source = core.qkv[0]  # a fused node fed without visible projections
            else:
                source = sources[0]
                memory = sorted({s for s in sources[1:] if s and s != source})
                if memory:
                    params["cross_attention_memory"] = memory
        proj = _out_projection(view, core.out)
        params["out_projection"] = proj is not None
        out, key = proj if proj is not None else (core.out, core.anchor)
        blk = found.get((source, out))
        if blk is None:
            found[(source, out)] = Found("attention", source, out, key, params | {"cores": 1})
        else:  # one softmax per head, merged by Concat before the output projection
            blk.params["cores"] += 1
    return list(found.values())


def _scores_product(view: GraphView, softmax: int) -> int | None:
    """The nearest MatMul/Einsum of two data tensors upstream of a Softmax, through scale and mask ops."""
    best: list[int] = []

    def step(p: int) -> list[str]:
        if view.op(p) in _PAIR_PRODUCTS and len(view.data_inputs(p)) == 2:
            if not best or view.order[p] > view.order[best[0]]:
                best[:] = [p]
            return []
        return view.data_inputs(p) if view.op(p) in _SCORE_OPS else []

    walk_up(view, view.data_inputs(softmax), step)
    return best[0] if best else None


def _values_product(view: GraphView, softmax: int) -> int | None:
    """The MatMul/Einsum that applies the attention weights to V (weights as its first operand)."""
    t = view.nodes[softmax].output[0]
    for _ in range(8):
        users = view.value_users(t)
        for c in users:  # other users (weights averaged over heads for need_weights) are allowed
            data = view.data_inputs(c)
            if view.op(c) in _PAIR_PRODUCTS and len(data) == 2 and data[0] == t:
                return c
        steps = [c for c in users if view.op(c) in _WEIGHT_OPS]
        if len(steps) != 1:
            return None
        t = view.nodes[steps[0]].output[0]
    return None


def _out_projection(view: GraphView, name: str) -> tuple[str, int] | None:
    """(output, key node) of the projection after the heads are merged (Transpose/Reshape/Concat)."""
    t = name
    for _ in range(16):
        c = single_user(view, t)
        if c is None:
            return None
        if is_projection(view, c) and view.data_inputs(c) == [t]:
            return through_bias(view, view.nodes[c].output[0], c)
        if view.op(c) not in LAYOUT | {"Concat"}:
            return None
        t = view.nodes[c].output[0]
    return None

"""LSTM, GRU and RNN nodes unrolled over their (static) sequence length, so that their gates become sites.

A recurrent node applies its gate activations inside itself, step after step; no site rule sees into it. Unrolled
(one cell per step, `cells.py`), each gate's activation is a node per step, and its steps' inputs and outputs are
stacked (`Concat` along the rows) into one tensor each: discovery (`graph/stacked.py`) takes the pair as one site
whose rows are every (batch, time) step, named after the node, direction and gate (`lstm1/forward/f`). The
node's own outputs (Y, Y_h, Y_c) are computed by the unrolled graph under their names. A node whose sequence
length is not static, or whose activation is no standard single op, is left whole and its gates are listed as
skipped sites.
"""

from __future__ import annotations

import onnx
from onnx import helper

from onnxaff.graph.expand.cells import Direction, gru_step, lstm_step, rnn_step
from onnxaff.graph.expand.emit import Emitter
from onnxaff.graph.recurrent import RECURRENT_OPS, attr, directions, gates, node_label

NAME = "recurrent"
_GATE_COUNT = {"LSTM": 4, "GRU": 3, "RNN": 1}


def apply(model: onnx.ModelProto) -> list[str]:
    """Unroll every recurrent node of the main graph it can; a note for each, unrolled or left whole."""
    found = [i for i, n in enumerate(model.graph.node) if n.op_type in RECURRENT_OPS and n.domain in ("", "ai.onnx")]
    if not found:
        return []
    try:  # shapes only: no weights are read
        inferred = onnx.shape_inference.infer_shapes(model).graph
    except Exception:
        inferred = model.graph
    types = {v.name: v.type.tensor_type for v in (*inferred.input, *inferred.value_info, *inferred.output)}
    opset = next((int(o.version) for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)
    notes = []
    for index in reversed(found):  # from the last, so earlier positions stay valid
        node = model.graph.node[index]
        why = _refusal(node, types, opset)
        if why:
            notes.append(f"{node.op_type} {node_label(node)} left whole ({why}): its gates are listed as skipped")
            continue
        steps = _unroll(model, index, node, types, opset)
        notes.append(f"{node.op_type} {node_label(node)} unrolled over its {steps} time steps: its gates are sites")
    return notes[::-1]


def _dims(types: dict, name: str) -> list | None:
    t = types.get(name)
    if t is None or not t.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim]


def _hidden(node: onnx.NodeProto, types: dict) -> int | None:
    size = attr(node, "hidden_size")
    if size:
        return int(size)
    dims = _dims(types, node.input[2])
    return dims[2] if dims and len(dims) == 3 else None


def _refusal(node: onnx.NodeProto, types: dict, opset: int) -> str | None:
    dims = _dims(types, node.input[0])
    steps = dims[1 if attr(node, "layout", 0) else 0] if dims and len(dims) == 3 else None
    if not steps:
        return "its sequence length is not static"
    if opset < 9:
        return f"opset {opset}: the unrolled form needs opset 9 or later"
    if _hidden(node, types) is None:
        return "its hidden size is unknown"
    if types.get(node.input[0]) is None or types[node.input[0]].elem_type == 0:
        return "its input's type is unknown"
    odd = sorted({g.activation for g in gates(node) if g.op is None})
    if odd:
        return f"activation {', '.join(odd)} is no standard single op"
    return None


def _unroll(model: onnx.ModelProto, index: int, node: onnx.NodeProto, types: dict, opset: int) -> int:
    op, layout = node.op_type, attr(node, "layout", 0)
    x, w, r, b, seq, init_h, init_c, peep = (list(node.input) + [""] * 8)[:8]
    hidden, count = _hidden(node, types), _GATE_COUNT[op]
    em = Emitter(model, node_label(node), opset, types[x].elem_type)
    if layout:
        x = em.op("Transpose", [x], perm=[1, 0, 2])
        init_h = init_h and em.op("Transpose", [init_h], perm=[1, 0, 2])
        init_c = init_c and em.op("Transpose", [init_c], perm=[1, 0, 2])
    steps = _dims(types, node.input[0])[1 if layout else 0]
    xs = [em.take(x, t, 0) for t in range(steps)]
    zero_state = None
    if not init_h or (op == "LSTM" and not init_c):
        batch = em.op("Gather", [em.op("Shape", [xs[0]]), em.ints([0])], axis=0)
        shape = em.op("Concat", [batch, em.ints([hidden])], axis=0)
        zero_state = em.op("ConstantOfShape", [shape], value=helper.make_tensor("value", em.elem_type, [1], [0]))
    lengths = seq and em.op("Reshape", [em.op("Cast", [seq], to=onnx.TensorProto.INT64), em.ints([-1, 1])])
    zero = em.scalar(0.0) if seq else None
    clip = attr(node, "clip")
    all_gates = gates(node)
    outputs: dict = {"Y": [], "Y_h": [], "Y_c": []}
    for k, direction in enumerate(directions(node)):
        d = _direction(em, node, k, direction, all_gates, (w, r, b, peep), hidden, count)
        d.clip = float(clip) if clip is not None else None
        state = (em.take(init_h, k) if init_h else zero_state,)
        if op == "LSTM":
            state += (em.take(init_c, k) if init_c else zero_state,)
        ys: dict = {}
        for t in (range(steps) if direction == "forward" else reversed(range(steps))):
            if op == "LSTM":
                new = lstm_step(d, xs[t], state, bool(attr(node, "input_forget", 0)))
            elif op == "GRU":
                new = gru_step(d, xs[t], state, bool(attr(node, "linear_before_reset", 0)))
            else:
                new = rnn_step(d, xs[t], state)
            if lengths:  # past a sequence's end: the state is held, Y is 0
                mask = em.op("Greater", [lengths, em.ints(t)])
                state = tuple(em.op("Where", [mask, n, s]) for n, s in zip(new, state, strict=True))
                ys[t] = em.op("Where", [mask, new[0], zero])
            else:
                state, ys[t] = new, new[0]
        _stack(em, d)
        outputs["Y"].append(em.op("Concat", [em.unsqueeze(ys[t], 0) for t in range(steps)], axis=0))
        outputs["Y_h"].append(state[0])
        outputs["Y_c"].append(state[-1])
    _outputs(em, node, outputs, layout)
    em.install(index)
    return steps


def _direction(em: Emitter, node: onnx.NodeProto, k: int, direction: str, all_gates: list, weights: tuple,
               hidden: int, count: int) -> Direction:
    """Direction k's W, R, B and P, sliced from the node's inputs in the graph."""
    w, r, b, peep = weights
    mine = {g.gate: g for g in all_gates if g.direction == direction}
    d = Direction(em, hidden, em.op("Transpose", [em.take(w, k)]), em.op("Transpose", [em.take(r, k)]), mine)
    wb = rb = None
    if b:
        both = em.take(b, k)
        wb, rb = em.slice(both, 0, count * hidden, 0), em.slice(both, count * hidden, 2 * count * hidden, 0)
    if node.op_type == "GRU":
        d.w_bias = wb
        parts = (d.part(d.r_t, 0, 1, 2), d.part(d.r_t, 2, 1))
        d.gru = parts + ((d.part(rb, 0, 0, 2), d.part(rb, 2, 0)) if rb else (None, None))
    else:
        d.w_bias = em.op("Add", [wb, rb]) if b else None
    if peep and node.op_type == "LSTM":
        p = em.take(peep, k)
        d.peep = tuple(d.part(p, j, 0) for j in range(3))
    return d


def _stack(em: Emitter, d: Direction) -> None:
    """Each gate's steps stacked along the rows: [T·B, H] inputs and outputs, the pair discovery reads."""
    stacked: set = set()  # a clip's stacked outputs are its activation's stacked inputs: one Concat
    for key, (xs, ys) in d.seen.items():
        if tuple(xs) not in stacked:
            em.op("Concat", xs, name=f"{key}:x", out=f"{key}:x", axis=0)
        em.op("Concat", ys, name=key, out=key, axis=0)
        stacked |= {tuple(xs), tuple(ys)}


def _outputs(em: Emitter, node: onnx.NodeProto, outputs: dict, layout: int) -> None:
    """Y [T, D, B, H], Y_h and Y_c [D, B, H] (layout 1: batch first) under the node's own output names."""
    for slot, (key, axis, perm) in enumerate((("Y", 1, [2, 0, 1, 3]), ("Y_h", 0, [1, 0, 2]), ("Y_c", 0, [1, 0, 2]))):
        name = node.output[slot] if slot < len(node.output) else ""
        if not name:
            continue
        value = em.op("Concat", [em.unsqueeze(v, axis) for v in outputs[key]], axis=axis)
        if layout:
            value = em.op("Transpose", [value], perm=perm)
        em.nodes.append(helper.make_node("Identity", [value], [name], name=em.fresh(f"{em.prefix}/{key}", node=True)))

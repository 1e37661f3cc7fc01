"""One time step of LSTM, GRU and RNN in standard ops, as ONNX's operator definitions write them.

Each gate's activation is its own node, applied to that step's pre-activation; `Direction` keeps every step's
input and output of it, which the expansion stacks into the gate's site.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from onnxaff.graph.expand.emit import Emitter
from onnxaff.graph.recurrent import Gate


@dataclass
class Direction:
    """One direction's weights, wired in-graph from the node's inputs, and what its gates saw."""

    em: Emitter
    hidden: int
    w_t: str  # W of this direction, transposed: [input, gates·H]
    r_t: str  # R of this direction, transposed: [H, gates·H]
    gates: dict  # gate letter -> Gate
    w_bias: str | None = None
    r_bias: str | None = None
    peep: tuple | None = None  # LSTM: (Pi, Po, Pf)
    clip: float | None = None
    gru: tuple | None = None  # GRU: R's (z, r) and h columns, and their recurrent biases
    seen: dict = field(default_factory=dict)  # site id -> ([step inputs], [step outputs])

    def part(self, x: str, k: int, axis: int = 1, width: int = 1) -> str:
        return self.em.slice(x, k * self.hidden, (k + width) * self.hidden, axis)

    def linear(self, x: str, w_t: str, bias: str | None) -> str:
        y = self.em.op("MatMul", [x, w_t])
        return self.em.op("Add", [y, bias]) if bias else y

    def act(self, letter: str, x: str, clip: bool = True) -> str:
        """The gate's activation of one step's pre-activation (clipped first when the node says so)."""
        gate: Gate = self.gates[letter]
        if self.clip is not None and clip:
            clipped = self.em.clip(x, self.clip)
            self._record(f"{gate.id}/clip", x, clipped)
            x = clipped
        y = self.em.op(gate.op, [x], name=f"{gate.id}/{gate.op}", **gate.attrs)
        self._record(gate.id, x, y)
        return y

    def _record(self, key: str, x: str, y: str) -> None:
        xs, ys = self.seen.setdefault(key, ([], []))
        xs.append(x)
        ys.append(y)


def lstm_step(d: Direction, x: str, state: tuple, input_forget: bool) -> tuple:
    """(h, c) -> (h', c'): gates i, o, f, c in W's order; peepholes read c (i, f) and c' (o)."""
    em, (h, c) = d.em, state
    s = em.op("Add", [d.linear(x, d.w_t, d.w_bias), d.linear(h, d.r_t, d.r_bias)])
    pre_i, pre_o, pre_f, pre_c = (d.part(s, k) for k in range(4))
    if d.peep is not None:
        pre_i = em.op("Add", [pre_i, em.op("Mul", [d.peep[0], c])])
        pre_f = em.op("Add", [pre_f, em.op("Mul", [d.peep[2], c])])
    i = d.act("i", pre_i)
    f = None if input_forget else d.act("f", pre_f)
    g = d.act("g", pre_c)
    if f is None:  # input_forget: f = 1 − i, so c' = c + i ⊙ (g − c)
        c_new = em.op("Add", [c, em.op("Mul", [i, em.op("Sub", [g, c])])])
    else:
        c_new = em.op("Add", [em.op("Mul", [f, c]), em.op("Mul", [i, g])])
    if d.peep is not None:
        pre_o = em.op("Add", [pre_o, em.op("Mul", [d.peep[1], c_new])])
    o = d.act("o", pre_o)
    # onnxruntime clips the gates' inputs, not the cell state that h's activation reads
    h_new = em.op("Mul", [o, d.act("h", c_new, clip=False)])
    return h_new, c_new


def gru_step(d: Direction, x: str, state: tuple, linear_before_reset: bool) -> tuple:
    """(h,) -> (h',): gates z, r, h in W's order; h' = g + z ⊙ (h − g), which is (1 − z) ⊙ g + z ⊙ h."""
    em, (h,) = d.em, state
    r_zr, r_h, b_zr, b_h = d.gru
    gx = d.linear(x, d.w_t, d.w_bias)
    gh = d.linear(h, r_zr, b_zr)
    s = em.op("Add", [d.part(gx, 0, width=2), gh])
    z = d.act("z", d.part(s, 0))
    r = d.act("r", d.part(s, 1))
    if linear_before_reset:
        recur = em.op("Mul", [r, d.linear(h, r_h, b_h)])
    else:
        recur = d.linear(em.op("Mul", [r, h]), r_h, b_h)
    g = d.act("g", em.op("Add", [d.part(gx, 2), recur]))
    return (em.op("Add", [g, em.op("Mul", [z, em.op("Sub", [h, g])])]),)


def rnn_step(d: Direction, x: str, state: tuple) -> tuple:
    """(h,) -> (h',): one activation of the input's and the state's projections."""
    s = d.em.op("Add", [d.linear(x, d.w_t, d.w_bias), d.linear(state[0], d.r_t, d.r_bias)])
    return (d.act("h", s),)

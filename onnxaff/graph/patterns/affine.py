"""Whether an island is affine (y = a + b·x per position), decided so that where probes fall cannot fool it.

An affine island is no site. Two ways to decide, the exact one first:

- **From its ops**: an island of Add/Sub/Neg/Sum/Mean, Mul and Div by constants, casts between float types and
  Q → DQ pairs (evaluated as the identity) carries one pair (a, b) per position through its nodes, exactly as the
  float64 constants say. A product of two terms that both vary with x, a division by such a term, or any other op
  ends the derivation: the probes decide.
- **On probes spread over scales** (0 and ±m·10^k for k from −8 to 8): every probe's slope from g(0) must equal
  the best-determined one to 1e-9 of the rounding both carry (the sum of |t| over the island's tensors at those
  probes, over their distance). A bend of that relative height anywhere between 1e-8 and 5e8 is seen, and no
  slope is taken over a tiny step: a secant test on a grid with points 1e-16 apart divided rounding by that step
  and called PaddlePaddle's `Mul(x, 1.43) → Add(0.59)` non-linear.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from onnx import TensorProto

# 0 and ±m·10^k: well apart at every scale, so no slope divides rounding by a tiny step.
SPREAD = np.unique(np.concatenate([[0.0]] + [s * m * 10.0 ** np.arange(-8, 9) for s in (-1.0, 1.0)
                                              for m in (1.0, 1.7, 3.1, 5.3)]))
# Far above float64 rounding through a few ops (1e-16 … 1e-13), far below any bend an activation makes.
RTOL = 1e-9
_FLOATS = {TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.BFLOAT16}
_ZERO = int(np.searchsorted(SPREAD, 0.0))


class Verdict(NamedTuple):
    """Affine or not, how that was decided (`ops` or `probes`), and the line where it is one."""

    affine: bool
    how: str
    a: np.ndarray | None = None
    b: np.ndarray | None = None
    why: str = ""

    @property
    def reason(self) -> str:
        if not self.affine:
            return self.why
        line = f"y = {_short(self.a)} + {_short(self.b)}·x"
        if self.how == "ops":
            return f"affine, {line}: derived exactly from its ops (sums, and products and quotients by constants)"
        return (f"affine, {line}: equal to that line to {RTOL:g} of its rounding on {SPREAD.size} probes from "
                f"±{SPREAD[SPREAD > 0][0]:g} to ±{SPREAD[-1]:g}")


def _short(v: np.ndarray) -> str:
    flat = np.unique(np.asarray(v, np.float64).ravel())
    if flat.size == 1:
        return f"{flat[0]:.7g}"
    return f"[{flat.min():.4g} … {flat.max():.4g}] ({np.asarray(v).size} positions)"


def from_ops(view, entry: str, nodes, consts: dict[str, np.ndarray]) -> Verdict | None:
    """The exact (a, b) of the island's exit, or None where an op is not a sum, scale or cast of x."""
    env: dict[str, tuple[np.ndarray, np.ndarray]] = {entry: (np.zeros(()), np.ones(()))}

    def term(name: str):
        if name in env:
            return env[name]
        c = consts.get(name)
        return None if c is None else (np.asarray(c, np.float64), np.zeros(()))

    out = None
    for i in nodes:
        node = view.nodes[i]
        names = node.input[:1] if node.op_type == "CastLike" else [n for n in node.input if n]
        args = [term(n) for n in names]
        if any(t is None for t in args):
            return None
        out = _step(view, node, args)
        if out is None:
            return None
        env[node.output[0]] = out
    if out is None:
        return None
    a, b = np.broadcast_arrays(*out)
    return Verdict(True, "ops", a, b)


def _step(view, node, args):
    """(a, b) of one node's output from its operands' (a, b); None where the result is not affine for sure."""
    op = node.op_type
    if op in ("Identity", "QuantizeLinear", "DequantizeLinear"):  # Q and DQ only as a pair: the identity
        return args[0]
    if op == "Cast":
        return args[0] if _attr_int(node, "to") in _FLOATS else None  # to an integer: a rounding
    if op == "CastLike":
        return args[0] if view.elem_type(node.input[1]) in _FLOATS else None
    if op == "Neg":
        return -args[0][0], -args[0][1]
    if op in ("Add", "Sum", "Mean"):
        a, b = sum(t[0] for t in args), sum(t[1] for t in args)
        return (a / len(args), b / len(args)) if op == "Mean" else (a, b)
    if op == "Sub" and len(args) == 2:
        return args[0][0] - args[1][0], args[0][1] - args[1][1]
    if op in ("Mul", "Div") and len(args) == 2:
        (a1, b1), (a2, b2) = args
        if op == "Mul":
            if np.any((b1 != 0) & (b2 != 0)):
                return None  # x² does not vanish here
            return a1 * a2, a1 * b2 + a2 * b1
        if np.any(b2 != 0) or np.any(a2 == 0):
            return None  # a quotient by x, or by zero
        return a1 / a2, b1 / a2
    return None


def _attr_int(node, name: str) -> int | None:
    return next((a.i for a in node.attribute if a.name == name), None)


def on_probes(g: np.ndarray, magnitude: np.ndarray | None = None) -> Verdict:
    """Affinity of g = f(SPREAD) (rows the probes, columns the positions), to RTOL of the rounding it carries.

    Every probe's slope from g(0) must equal the best-determined one (where rounding over the distance is least)
    within both slopes' rounding. `magnitude`: at each probe, the sum of |t| over the tensors the island computes
    on its way, its rounding scale (x − 1e4 + 1e4 rounds at 1e4's ulp, not at x's); |g| where not given.
    """
    g = np.asarray(g, np.float64).reshape(len(SPREAD), -1)
    m = np.abs(g) if magnitude is None else np.asarray(magnitude, np.float64).reshape(g.shape)
    ok = np.all(np.isfinite(g) & np.isfinite(m), axis=1)
    if ok.sum() < 3:
        return Verdict(False, "probes", why="not finite on the probes")
    anchor = _ZERO if ok[_ZERO] else int(np.flatnonzero(ok)[np.argmin(np.abs(SPREAD[ok]))])  # 0 a pole: x·x/x
    rest = ok.copy()
    rest[anchor] = False
    dx = (SPREAD[rest] - SPREAD[anchor])[:, None]
    slopes = (g[rest] - g[anchor]) / dx
    rounding = (m[rest] + m[anchor]) / np.abs(dx)
    best = np.argmin(rounding, axis=0)
    cols = np.arange(g.shape[1])
    b, b_rounding = slopes[best, cols], rounding[best, cols]
    excess = np.abs(slopes - b) / (RTOL * (rounding + b_rounding))
    with np.errstate(invalid="ignore"):
        excess = np.where(slopes == b, 0.0, excess)
    k, col = np.unravel_index(np.argmax(excess), excess.shape)
    x0, a = SPREAD[anchor], g[anchor] - b * SPREAD[anchor]
    if excess[k, col] > 1.0:
        x = float(SPREAD[rest][k])
        return Verdict(False, "probes", why=f"bends: the slope from {x0:g} to {x:g} is {float(slopes[k, col]):.9g}, "
                       f"the best-determined one {float(b[col]):.9g}")
    return Verdict(True, "probes", a, b)

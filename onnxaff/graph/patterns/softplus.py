"""Softplus with a β, log(1 + exp(βx))/β, as PyTorch exports nn.Softplus(beta): Mul(x, β) → Softplus → Div(·, β).

Its region reaches one step above the anchor, to the x that β scales (`Region(before=1)`); the other rules' regions
start at the anchor's input. β = 1 is plain softplus, left to the single node and the islands as before.
"""

import numpy as np

from onnxaff.graph.patterns.rule import PROBE, Miss, Region, Rule, close_to, deviation

LN2 = float(np.log(2.0))


def _classify(f) -> dict | Miss:
    # log(1 + exp(βx))/β at x = 0 is ln 2/β: read β off one probe, then demand agreement everywhere.
    at_zero = float(f(np.array([0.0]))[0])
    if not at_zero > 0.0:
        return Miss("softplus", "f(0) = {:.6g} is not positive: no ln 2/β to read β from", (at_zero,))
    beta = LN2 / at_zero
    values, reference = f(PROBE), np.logaddexp(0.0, beta * PROBE) / beta
    if not close_to(values, reference):
        return deviation("softplus", f"log(1+exp({beta:.6g}x))/{beta:.6g}", PROBE, values, reference)
    if abs(beta - 1.0) <= 1e-4:
        return Miss("softplus", "β = {:.6g} is plain softplus (the node or the island names it)", (beta,))
    return {"beta": float(np.float32(beta))}


RULES = [Rule("softplus", frozenset({"Softplus", "Exp"}), _classify, "log(1+exp(βx))/β, β ≠ 1", Region(before=1))]

"""x·Sigmoid(βx): SiLU (β = 1), QuickGELU (β = 1.702) and Swish-β (PaddlePaddle's swish)."""

import numpy as np

from onnxaff.graph import special
from onnxaff.graph.patterns.rule import PROBE, Miss, Rule, close_to, deviation

QUICK_GELU_BETA = 1.702


def _classify(f, kind: str) -> dict | Miss:
    # x·σ(βx) at x = 1 is σ(β): read β off one probe, then demand agreement everywhere.
    at_one = float(f(np.array([1.0]))[0])
    if not 0.0 < at_one < 1.0:
        return Miss(kind, "f(1) = {:.6g} is outside (0, 1): no σ(β) to read β from", (at_one,))
    beta = float(special.logit(at_one))
    if beta <= 0:
        return Miss(kind, "β = {:.6g} read from f(1) is not positive", (beta,))
    values, reference = f(PROBE), PROBE * special.expit(beta * PROBE)
    if not close_to(values, reference):
        return deviation(kind, f"x·σ({beta:.6g}x)", PROBE, values, reference)
    return {"beta": round(beta, 6)}


def _exact(kind, target):
    def classify(f):
        params = _classify(f, kind)
        if isinstance(params, Miss):
            return params
        if abs(params["beta"] - target) > 1e-4:
            return Miss(kind, "x·σ(βx) with β = {:.6g}, not {:g}", (params["beta"], target),
                        abs(params["beta"] - target))
        return {}

    return classify


def _other(f):
    params = _classify(f, "swish")
    if isinstance(params, Miss):
        return params
    if min(abs(params["beta"] - 1.0), abs(params["beta"] - QUICK_GELU_BETA)) <= 1e-4:
        return Miss("swish", "β = {:.6g} is named (silu or quick_gelu)", (params["beta"],))
    return params


RULES = [
    Rule("silu", frozenset({"Sigmoid"}), _exact("silu", 1.0), "x·σ(x), SiLU / Swish-1"),
    Rule("quick_gelu", frozenset({"Sigmoid"}), _exact("quick_gelu", QUICK_GELU_BETA), "x·σ(1.702x)"),
    Rule("swish", frozenset({"Sigmoid"}), _other, "x·σ(βx) with another β"),
]

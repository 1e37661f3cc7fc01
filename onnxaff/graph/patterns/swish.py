"""x·Sigmoid(βx): SiLU (β = 1), QuickGELU (β = 1.702) and Swish-β (PaddlePaddle's swish)."""

import numpy as np

from onnxaff.graph import special
from onnxaff.graph.patterns.rule import PROBE, Rule, close_to

QUICK_GELU_BETA = 1.702


def _classify(f):
    # x·σ(βx) at x = 1 is σ(β): read β off one probe, then demand agreement everywhere.
    at_one = float(f(np.array([1.0]))[0])
    if not 0.0 < at_one < 1.0:
        return None
    beta = float(special.logit(at_one))
    if beta <= 0 or not close_to(f(PROBE), PROBE * special.expit(beta * PROBE)):
        return None
    return {"beta": round(beta, 6)}


def _exact(target):
    def classify(f):
        params = _classify(f)
        if params is None or abs(params["beta"] - target) > 1e-4:
            return None
        return {}

    return classify


def _other(f):
    params = _classify(f)
    if params is None or min(abs(params["beta"] - 1.0), abs(params["beta"] - QUICK_GELU_BETA)) <= 1e-4:
        return None
    return params


RULES = [
    Rule("silu", frozenset({"Sigmoid"}), _exact(1.0), "x·σ(x), SiLU / Swish-1"),
    Rule("quick_gelu", frozenset({"Sigmoid"}), _exact(QUICK_GELU_BETA), "x·σ(1.702x)"),
    Rule("swish", frozenset({"Sigmoid"}), _other, "x·σ(βx) with another β"),
]

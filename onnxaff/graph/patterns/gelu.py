"""GELU as exporters decompose it: erf form and tanh approximation, 0.5 anywhere in the product."""

import numpy as np

from onnxaff.graph import special
from onnxaff.graph.patterns.rule import reference_rule


def gelu_erf(x):
    return 0.5 * x * (1.0 + special.erf(x / np.sqrt(2.0)))


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x**3)))


RULES = [
    reference_rule("gelu", {"Erf"}, gelu_erf, "x·Φ(x) via Erf (PyTorch below opset 20, TF)"),
    reference_rule("gelu_tanh", {"Tanh"}, gelu_tanh, "tanh approximation of GELU"),
]

"""Mish decomposed: x·tanh(softplus(x)), with softplus as a node or as log(1+exp(x))."""

import numpy as np

from onnxaff.graph.patterns.rule import reference_rule


def mish(x):
    return x * np.tanh(np.logaddexp(0.0, x))


RULES = [reference_rule("mish", {"Softplus", "Exp"}, mish, "x·tanh(softplus(x))")]

"""Softsign decomposed: x / (1 + |x|), as the TorchScript exporter writes it."""

import numpy as np

from onnxaff.graph.patterns.rule import reference_rule


def softsign(x):
    return x / (1.0 + np.abs(x))


RULES = [reference_rule("softsign", {"Abs"}, softsign, "x/(1+|x|)")]

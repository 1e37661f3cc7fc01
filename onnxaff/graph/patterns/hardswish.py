"""HardSwish decomposed: x·HardSigmoid(x), x·Clip(x+3,0,6)/6, x·Relu6(x+3)/6, Min/Max clamps."""

import numpy as np

from onnxaff.graph.patterns.rule import reference_rule


def hardswish(x):
    return x * np.clip(x + 3.0, 0.0, 6.0) / 6.0


RULES = [
    reference_rule(
        "hardswish", {"HardSigmoid", "Clip", "Relu", "Min", "Max"}, hardswish, "x·relu6(x+3)/6 in any form"
    ),
]

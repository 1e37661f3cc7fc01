"""ReLU6 from two clamps: Min(Max(x,0),6), Max(Min(x,6),0), Min(Relu(x),6). (A lone Clip is a single node.)"""

import numpy as np

from onnxaff.graph.patterns.rule import reference_rule


def relu6(x):
    return np.clip(x, 0.0, 6.0)


RULES = [reference_rule("relu6", {"Min", "Max", "Relu"}, relu6, "ReLU6 as Min/Max clamps", {"min": 0.0, "max": 6.0})]

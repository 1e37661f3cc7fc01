"""Elementwise ONNX ops in numpy (float64): how discovery evaluates islands and folds constants."""

from __future__ import annotations

import functools

import numpy as np

from onnxaff.graph import special

# Activation ops that are sites on their own; an island holds at most one of them (two in a row are
# two sites, not one composite).
ACTIVATION_OPS = {
    "Relu", "LeakyRelu", "PRelu", "Elu", "Selu", "Celu", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh",
    "Softplus", "Softsign", "Gelu", "Mish", "ThresholdedRelu", "Swish",
}
COMPARISONS = {"Less", "Greater", "LessOrEqual", "GreaterOrEqual", "Equal"}
OPS = ACTIVATION_OPS | COMPARISONS | {
    "Add", "Sub", "Mul", "Div", "Pow", "Neg", "Abs", "Exp", "Log", "Sqrt", "Reciprocal", "Erf", "Clip", "Min",
    "Max", "Sum", "Mean", "Identity", "Cast", "CastLike", "Where", "Not", "And", "Or", "Sign", "Sin", "Cos",
    "Atan", "Sinh", "Cosh", "Asinh", "Floor", "Ceil", "Round",
}
# Ops that only rescale, shift or retype: an island made of these alone is affine.
_UNARY = {
    "Neg": np.negative, "Abs": np.abs, "Exp": np.exp, "Sqrt": np.sqrt, "Erf": special.erf, "Tanh": np.tanh,
    "Sigmoid": special.expit, "Sign": np.sign, "Sin": np.sin, "Cos": np.cos, "Atan": np.arctan, "Sinh": np.sinh,
    "Cosh": np.cosh, "Asinh": np.arcsinh, "Floor": np.floor, "Ceil": np.ceil, "Round": np.round,
    "Not": np.logical_not, "Softsign": lambda a: a / (1.0 + np.abs(a)), "Relu": lambda a: np.maximum(a, 0.0),
    "Softplus": lambda a: np.logaddexp(0.0, a), "Identity": lambda a: a, "Cast": lambda a: a,
    "CastLike": lambda a: a,
}
_BINARY = {
    "Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide, "Pow": np.power,
    "Less": np.less, "Greater": np.greater, "LessOrEqual": np.less_equal, "GreaterOrEqual": np.greater_equal,
    "Equal": np.equal, "And": np.logical_and, "Or": np.logical_or,
}


def attr(node, name, default):
    for a in node.attribute:
        if a.name == name:
            if a.type == a.STRING:
                return a.s.decode()
            return a.f if a.type == a.FLOAT else a.i if a.type == a.INT else default
    return default


def clip_bounds(view, node) -> tuple[float | None, float | None]:
    """Clip's min/max: attributes before opset 11, optional inputs after; None where absent."""
    lo = hi = None
    for a in node.attribute:
        if a.name == "min":
            lo = a.f
        elif a.name == "max":
            hi = a.f
    if len(node.input) > 1 and node.input[1]:
        lo = view.scalar(node.input[1])
        if lo is None:
            raise ValueError("non-constant clip bound")
    if len(node.input) > 2 and node.input[2]:
        hi = view.scalar(node.input[2])
        if hi is None:
            raise ValueError("non-constant clip bound")
    return lo, hi


def evaluate(view, node, args: list):
    """The node's first output from its operands (numpy arrays or None for absent optional inputs)."""
    op = node.op_type
    a = args[0]
    if op in ("QuantizeLinear", "DequantizeLinear"):
        return a  # asked only of a Q → DQ pair (onnxaff.graph.qdq): the identity but for rounding
    if op in _UNARY:
        if op in ("Cast", "CastLike") and a.dtype == bool:
            return a.astype(np.float64)
        return _UNARY[op](a)
    if op in _BINARY:
        return _BINARY[op](args[0], args[1])
    if op == "Log":
        return np.log(a)
    if op == "Reciprocal":
        return 1.0 / a
    if op == "HardSigmoid":
        return np.clip(attr(node, "alpha", 0.2) * a + attr(node, "beta", 0.5), 0.0, 1.0)
    if op == "HardSwish":
        return a * np.clip(a / 6.0 + 0.5, 0.0, 1.0)
    if op == "LeakyRelu":
        return np.where(a < 0, attr(node, "alpha", 0.01) * a, a)
    if op == "PRelu":
        return np.where(a < 0, args[1] * a, a)
    if op == "Elu":
        alpha = attr(node, "alpha", 1.0)
        return np.where(a < 0, alpha * np.expm1(np.minimum(a, 0.0)), a)
    if op == "Celu":
        alpha = attr(node, "alpha", 1.0)
        return np.maximum(a, 0.0) + np.minimum(0.0, alpha * np.expm1(np.minimum(a, 0.0) / alpha))
    if op == "Selu":
        alpha, gamma = attr(node, "alpha", 1.67326319217681884765625), attr(node, "gamma", 1.05070102214813232421875)
        return gamma * np.where(a <= 0, alpha * np.expm1(np.minimum(a, 0.0)), a)
    if op == "ThresholdedRelu":
        return np.where(a > attr(node, "alpha", 1.0), a, 0.0)
    if op == "Mish":
        return a * np.tanh(np.logaddexp(0.0, a))
    if op == "Swish":
        return a * special.expit(attr(node, "alpha", 1.0) * a)
    if op == "Gelu":
        if attr(node, "approximate", "none") == "tanh":
            return 0.5 * a * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (a + 0.044715 * a**3)))
        return 0.5 * a * (1.0 + special.erf(a / np.sqrt(2.0)))
    if op == "Clip":
        lo, hi = clip_bounds(view, node)
        return np.clip(a, -np.inf if lo is None else lo, np.inf if hi is None else hi)
    if op == "Min":
        return functools.reduce(np.minimum, args)
    if op in ("Max",):
        return functools.reduce(np.maximum, args)
    if op == "Sum":
        return functools.reduce(np.add, args)
    if op == "Mean":
        return functools.reduce(np.add, args) / len(args)
    if op == "Where":
        return np.where(args[0], args[1], args[2])
    raise KeyError(op)

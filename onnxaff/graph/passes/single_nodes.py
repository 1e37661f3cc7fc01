"""Pass: activation nodes (Relu, LeakyRelu, ..., Softmax, a Clip or Max/Min against constants, onnxruntime's contrib
Gelu/FastGelu/QuickGelu), each a site of its own with its attributes (schema defaults filled in) as params.

As for islands, only a map of floating-point data is a site: a Clip of int64 position indices, or a Clip(min=0) of
a padding size computed from Shape, is index or shape arithmetic, not a layer's non-linearity."""

from __future__ import annotations

import numpy as np
import onnx

from onnxaff.graph.elementwise import clip_bounds
from onnxaff.graph.patterns.islands import maps_float_data
from onnxaff.graph.site import Site
from onnxaff.graph.view import GraphView

# Single-node activations: op type -> kind. Min, Max and Clip are classified by their constants.
SINGLE_NODE_KINDS = {
    "Relu": "relu", "LeakyRelu": "leaky_relu", "PRelu": "prelu", "Elu": "elu", "Selu": "selu",
    "Celu": "celu", "Sigmoid": "sigmoid", "HardSigmoid": "hard_sigmoid", "HardSwish": "hardswish",
    "Tanh": "tanh", "Softplus": "softplus", "Softsign": "softsign", "Gelu": "gelu", "Mish": "mish",
    "ThresholdedRelu": "thresholded_relu", "Softmax": "softmax", "LogSoftmax": "log_softmax",
    "Swish": "swish", "Clip": "clip", "Min": "clamp_max", "Max": "clamp_min",
}
# onnxruntime's contrib fusions, found in models saved after ORT optimisation.
CONTRIB_KINDS = {"Gelu": "gelu", "FastGelu": "gelu_tanh", "QuickGelu": "quick_gelu"}


# Attributes whose schema default is part of the function: a site states them whether written or not.
_DEFAULTED = {"LeakyRelu", "Elu", "Selu", "Celu", "HardSigmoid", "ThresholdedRelu", "Softmax", "LogSoftmax"}


def _schema_defaults(op: str, opset: int | None) -> dict:
    try:
        schema = onnx.defs.get_schema(op, opset or onnx.defs.onnx_opset_version(), "")
    except onnx.defs.SchemaError:
        return {}
    out = {}
    for name, a in schema.attributes.items():
        if a.default_value.type in (onnx.AttributeProto.FLOAT, onnx.AttributeProto.INT):
            out[name] = onnx.helper.get_attribute_value(a.default_value)
    return out


def single_kind(view: GraphView, i: int) -> tuple[str, dict] | None:
    node = view.nodes[i]
    if node.domain == "com.microsoft":
        kind = CONTRIB_KINDS.get(node.op_type)
        if kind is None or len([n for n in node.input if n]) != 1:
            return None  # a bias input is split off first (graph/expand/fused.py)
        if node.op_type == "QuickGelu":  # x·σ(αx), α = 1.702 unless set: named as a Swish node is
            return _swish_kind(next((a.f for a in node.attribute if a.name == "alpha"), 1.702))
        return kind, {}
    if node.domain not in ("", "ai.onnx") or node.op_type not in SINGLE_NODE_KINDS:
        return None
    op = node.op_type
    params: dict = _schema_defaults(op, view.opset) if op in _DEFAULTED else {}
    for a in node.attribute:
        if a.type in (onnx.AttributeProto.FLOAT, onnx.AttributeProto.INT, onnx.AttributeProto.STRING):
            value = onnx.helper.get_attribute_value(a)
            params[a.name] = value.decode() if isinstance(value, bytes) else value
    if op == "Gelu":
        return ("gelu_tanh" if params.get("approximate") == "tanh" else "gelu"), {}
    if op == "Swish":  # x·σ(αx): named as the decomposed forms are
        return _swish_kind(params.get("alpha", 1.0))
    if op == "PRelu":
        slope = view.constant(node.input[1]) if len(node.input) > 1 else None
        if slope is None or slope.size > 4096:
            return "prelu", {}
        return "prelu", {"slope": np.float32(slope).astype(np.float64).tolist()}
    if op == "Clip":
        try:
            lo, hi = clip_bounds(view, node)
        except ValueError:
            return "clip", {}
        if (lo is None and hi is None) or (lo is not None and hi is not None and lo >= hi):
            return None  # the identity, or a constant: no non-linearity
        if lo == 0.0 and hi == 6.0:
            return "relu6", {"min": 0.0, "max": 6.0}
        if lo == 0.0 and hi is None:
            return "relu", {}
        return "clip", {"min": lo, "max": hi}
    if op in ("Min", "Max"):
        # A clamp against a scalar; Min/Max of two activations (maxout) is not a site.
        tensors = [n for n in node.input if n and view.scalar(n) is None]
        consts = [view.scalar(n) for n in node.input if n and view.scalar(n) is not None]
        if len(tensors) != 1 or len(consts) != 1:
            return None
        if op == "Max" and consts[0] == 0.0:
            return "relu", {}
        return SINGLE_NODE_KINDS[op], {"bound": consts[0]}
    return SINGLE_NODE_KINDS[op], params


def _swish_kind(alpha: float) -> tuple[str, dict]:
    beta = round(float(alpha), 6)
    if abs(beta - 1.0) <= 1e-4:
        return "silu", {}
    return ("quick_gelu", {}) if abs(beta - 1.702) <= 1e-4 else ("swish", {"beta": beta})


def _source_input(view: GraphView, i: int) -> str:
    node = view.nodes[i]
    tensors = [n for n in node.input if n and view.scalar(n) is None]
    return tensors[0] if tensors else node.input[0]


class SingleNodes:
    name = "single nodes"

    def find(self, view: GraphView, taken: set[int], layout: str, misses: list | None = None) -> list[tuple]:
        found = []
        for i, node in enumerate(view.nodes):
            if i in taken:
                continue
            hit = single_kind(view, i)
            if hit is None or not node.output or not node.output[0]:
                continue
            kind, params = hit
            source = _source_input(view, i)
            if not maps_float_data(view, source, node.output[0]):
                continue
            found.append((view.order[i], Site(
                index=-1, id=view.base_id(i, node.output[0]), kind=kind, input=source,
                output=node.output[0], op_types=[node.op_type], nodes=[view.node_label(i)], params=params,
                node_indices=[i])))
        return found

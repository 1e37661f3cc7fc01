"""Ops onnxruntime defines in the standard domain, which onnx's checker has no schema for.

onnxruntime's T5 optimizer writes `SimplifiedLayerNormalization` in the default domain, and models exported before
opset 17 may hold onnxruntime's own `LayerNormalization` there; onnxruntime runs both, onnx's checker refuses
them. Such a model is checked as a copy with those nodes moved to a domain of their own (which the checker leaves
alone), so that everything else in it is still checked; the model itself is not changed.
"""

from __future__ import annotations

import onnx

# name -> the opset from which ONNX has a schema of its own (then the checker judges the node).
STANDARD_OPS = {"SimplifiedLayerNormalization": 10**6, "LayerNormalization": 17}
_ASIDE = "onnxaff.onnxruntime_standard"


def _opset(model: onnx.ModelProto) -> int:
    return next((int(i.version) for i in model.opset_import if i.domain in ("", "ai.onnx")), 1)


def found(model: onnx.ModelProto) -> set[str]:
    """The onnxruntime standard-domain ops of the main graph that the checker does not know at the model's opset."""
    opset = _opset(model)
    return {n.op_type for n in model.graph.node
            if n.domain in ("", "ai.onnx") and opset < STANDARD_OPS.get(n.op_type, -1)}


def set_aside(model: onnx.ModelProto) -> onnx.ModelProto | None:
    """A copy of the model with those ops in a domain of their own, for the checker; None when it holds none."""
    ops = found(model)
    if not ops:
        return None
    copy = onnx.ModelProto.FromString(model.SerializeToString())
    for node in copy.graph.node:
        if node.domain in ("", "ai.onnx") and node.op_type in ops:
            node.domain = _ASIDE
    copy.opset_import.append(onnx.helper.make_opsetid(_ASIDE, 1))
    return copy

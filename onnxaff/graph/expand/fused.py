"""onnxruntime's fused contrib nodes that hide an activation's input: bias and activation split back out.

`BiasGelu(x, b)` and `FastGelu(x, b)` compute the GELU of x + b, a tensor no graph holds; `FusedConv` and
`FusedGemm` apply their `activation` to a Conv's or Gemm's result that no graph holds either. Each is written
back as the sum (an `Add`) or the layer, then the activation on its own (`com.microsoft.Gelu`/`FastGelu` with
one input, or the standard activation op), so the activation's X is a tensor of the graph that the augmented
model can observe. The last node keeps the fused node's name and output: the site's id and Y stay the same.
"""

from __future__ import annotations

import onnx
from onnx import helper

from onnxaff.graph.names import Namer, graph_names

NAME = "fused"
MS = "com.microsoft"
# FusedConv's activation_params, in order, as the standard op's attributes (onnxruntime's fused_activation).
_CONV_PARAMS = {"LeakyRelu": ("alpha",), "HardSigmoid": ("alpha", "beta"), "Elu": ("alpha",), "Clip": ("min", "max")}
# FusedGemm's activation_alpha/beta/gamma as the standard op reads them (its ElementWiseRangedTransform).
_GEMM_PARAMS = {"LeakyRelu": ("alpha",), "Elu": ("alpha",), "Selu": ("alpha", "gamma"), "ThresholdedRelu": ("alpha",),
                "HardSigmoid": ("alpha", "beta"), "Celu": ("alpha",)}
_PLAIN = {"Relu", "Tanh", "Sigmoid", "Softplus", "Softsign"}
_GEMM_PREFIX = "activation_"


def _opset(model: onnx.ModelProto) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)


def _attrs(node: onnx.NodeProto) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _activation(model, names: Namer, op: str, params: dict, x: str, node: onnx.NodeProto) -> list[onnx.NodeProto]:
    """The standard activation node `op(x)` into the fused node's output (Clip's bounds as inputs from opset 11)."""
    out, name = node.output[0], node.name or names.fresh(f"{node.op_type}/{op}")
    if op != "Clip" or _opset(model) < 11:
        return [helper.make_node(op, [x], [out], name=name, **params)]
    inputs = [x]
    for bound in ("min", "max"):
        if bound in params:
            t = names.fresh(f"{name}.{bound}")
            model.graph.initializer.append(helper.make_tensor(t, onnx.TensorProto.FLOAT, [], [float(params[bound])]))
            inputs.append(t)
        else:
            inputs.append("")
    return [helper.make_node("Clip", inputs, [out], name=name)]


def _split(model, names: Namer, node: onnx.NodeProto) -> tuple[list[onnx.NodeProto] | None, str]:
    """Nodes computing `node` with its activation apart, or (None, why not) where it stays fused."""
    attrs = _attrs(node)
    label = node.name or node.op_type
    if node.op_type in ("BiasGelu", "FastGelu"):
        if len(node.input) < 2 or not node.input[1]:
            return None, ""  # no bias: already one activation of one tensor
        total = names.fresh(f"{label}.input_plus_bias")
        act = "Gelu" if node.op_type == "BiasGelu" else "FastGelu"
        add = helper.make_node("Add", list(node.input[:2]), [total], name=names.fresh(f"{label}/Add"))
        return [add, helper.make_node(act, [total], [node.output[0]], name=node.name, domain=MS)], ""
    act = attrs.pop("activation", b"")
    act = act.decode() if isinstance(act, bytes) else act
    if not act:
        return None, ""  # no activation: a linear layer, nothing hidden
    if node.op_type == "FusedConv":
        values = list(attrs.pop("activation_params", []))
        keys = _CONV_PARAMS.get(act, ())
        if act not in _PLAIN and act not in _CONV_PARAMS:
            return None, f"{label}: FusedConv with activation {act} left fused (no standard op computes it)"
        params = dict(zip(keys, values, strict=False))
        inputs, extra = list(node.input[:3]), node.input[3] if len(node.input) > 3 else ""
    else:
        if act not in _PLAIN and act not in _GEMM_PARAMS:
            return None, f"{label}: FusedGemm with activation {act} left fused (no standard op computes it)"
        params = {k: attrs[_GEMM_PREFIX + k] for k in _GEMM_PARAMS.get(act, ()) if _GEMM_PREFIX + k in attrs}
        inputs, extra = list(node.input[:3]), ""
    attrs = {k: v for k, v in attrs.items() if not k.startswith("activation")}
    pre = names.fresh(f"{label}.pre_activation")
    layer_out = names.fresh(f"{label}.layer") if extra else pre
    nodes = [helper.make_node(node.op_type[len("Fused"):], inputs, [layer_out], name=names.fresh(f"{label}/layer"),
                              **attrs)]
    if extra:  # FusedConv's Z: the activation of conv + Z
        nodes.append(helper.make_node("Add", [layer_out, extra], [pre], name=names.fresh(f"{label}/Add")))
    return nodes + _activation(model, names, act, params, pre, node), ""


def apply(model: onnx.ModelProto) -> list[str]:
    """Split every fused activation of the main graph in place; notes for what was split or left fused."""
    graph, names = model.graph, None
    nodes, split, notes = [], 0, []
    for node in graph.node:
        if node.domain != MS or node.op_type not in ("BiasGelu", "FastGelu", "FusedConv", "FusedGemm"):
            nodes.append(node)
            continue
        names = names or Namer(graph_names(graph))
        new, why = _split(model, names, node)
        if new is None:
            nodes.append(node)
            notes += [why] if why else []
            continue
        nodes += new
        split += 1
    if split:
        del graph.node[:]
        graph.node.extend(nodes)
        notes.insert(0, f"{split} fused onnxruntime node(s) (BiasGelu, FastGelu with bias, FusedConv, FusedGemm) "
                        "split into the layer or sum and the activation, so the activation's input is observed")
    return notes

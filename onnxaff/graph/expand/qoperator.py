"""onnxruntime's QOperator activations rewritten as DequantizeLinear → float op → QuantizeLinear.

`quantize_static` in QOperator format leaves com.microsoft QLinearSigmoid, QLinearLeakyRelu and QLinearSoftmax,
and splits decomposed activations (SiLU, Mish, GELU) over QLinearMul and QLinearAdd: integer tensors in and out,
no float tensor a site could read. Each such node becomes DQ of each input (with its own scale and zero point),
the float op, and Q with the node's output scale and zero point: onnxruntime computes them so (a lookup table
built the same way, or float arithmetic then requantisation), so outputs agree to the quantisation step. A
tensor dequantized twice with the same parameters is dequantized once, so a SiLU's Sigmoid and Mul read one X;
the Q → DQ pairs between the rewritten nodes are then what discovery sees through (onnxaff.graph.qdq).
"""

from __future__ import annotations

import onnx
from onnx import helper

NAME = "qoperator"
_MS = "com.microsoft"
# op -> (float op, number of quantized inputs)
_OPS = {"QLinearSigmoid": ("Sigmoid", 1), "QLinearLeakyRelu": ("LeakyRelu", 1), "QLinearSoftmax": ("Softmax", 1),
        "QLinearMul": ("Mul", 2), "QLinearAdd": ("Add", 2)}


def apply(model: onnx.ModelProto) -> list[str]:
    graph = model.graph
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    found = [n for n in graph.node if n.domain == _MS and n.op_type in _OPS]
    if not found:
        return []
    if opset < 13:  # DequantizeLinear without an axis, Softmax of another meaning: kept, and said so
        return [f"kept {len(found)} QOperator activation node(s) of this opset {opset} model: no sites found in them"]
    taken = {name for n in graph.node for name in (*n.input, *n.output)}
    dequantized: dict[tuple, str] = {}  # (tensor, scale, zero point) -> its float tensor, made earlier
    nodes: list[onnx.NodeProto] = []
    rewritten: dict[str, int] = {}
    kept: list[str] = []
    for node in graph.node:
        if node.op_type == "DequantizeLinear" and node.domain in ("", "ai.onnx"):
            dequantized.setdefault(tuple(node.input[:3]), node.output[0])
        if node.domain != _MS or node.op_type not in _OPS:
            nodes.append(node)
        elif not _expandable(node):
            kept.append(node.name or node.output[0])
            nodes.append(node)
        else:
            nodes += _rewrite(node, dequantized, taken)
            rewritten[node.op_type] = rewritten.get(node.op_type, 0) + 1
    del graph.node[:]
    graph.node.extend(nodes)
    notes = [f"kept QOperator nodes {', '.join(kept)} (a Softmax of opset below 13, or absent inputs): no sites"]
    if rewritten:
        done = ", ".join(f"{op} ×{n}" for op, n in sorted(rewritten.items()))
        notes.append(f"rewrote onnxruntime's QOperator nodes ({done}) as DequantizeLinear → float op → QuantizeLinear: "
                     "their sites' X and Y are dequantized tensors, equal to onnxruntime's to the quantisation step")
    return notes[0 if kept else 1:]


def _expandable(node) -> bool:
    op, count = _OPS[node.op_type]
    if op == "Softmax" and next((a.i for a in node.attribute if a.name == "opset"), 13) < 13:
        return False  # Softmax before opset 13 flattens to 2-D: kept rather than guessed
    return len(node.input) >= 3 * count + 1 and all(node.input[:3 * count + 1])


def _fresh(name: str, taken: set[str]) -> str:
    k, out = 0, name
    while out in taken:
        k += 1
        out = f"{name}_{k}"
    taken.add(out)
    return out


def _rewrite(node, dequantized: dict, taken: set[str]) -> list[onnx.NodeProto]:
    op, count = _OPS[node.op_type]
    base = node.name or node.output[0]
    out: list[onnx.NodeProto] = []
    floats = []
    for k in range(count):
        key = tuple(node.input[3 * k:3 * k + 3])
        if key not in dequantized:
            dequantized[key] = _fresh(f"{key[0]}_dequantized", taken)
            out.append(helper.make_node("DequantizeLinear", list(key), [dequantized[key]], name=f"{base}_dq{k}"))
        floats.append(dequantized[key])
    y = _fresh(f"{node.output[0]}_float", taken)
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute if a.name in ("alpha", "axis")}
    out.append(helper.make_node(op, floats, [y], name=f"{base}_float", **attrs))
    out.append(helper.make_node("QuantizeLinear", [y, *node.input[3 * count:3 * count + 2]], [node.output[0]],
                                name=f"{base}_q"))
    return out

"""Residual blocks: an Add (or fused SkipLayerNormalization) of a stream and a branch that derive from one tensor."""

from __future__ import annotations

from onnxaff.graph.blocks.block import Found
from onnxaff.graph.blocks.walk import LAYOUT, MIXING, VALUE_PRESERVING, between, dims_compatible
from onnxaff.graph.flow import common_source
from onnxaff.graph.fused_sums import SKIP_NORMS
from onnxaff.graph.view import GraphView


def residual_blocks(view: GraphView, site_nodes: set[int], score_nodes: set[int]) -> list[Found]:
    found = []
    for i, node in enumerate(view.nodes):
        fused = node.domain == "com.microsoft" and node.op_type in SKIP_NORMS
        if not fused and (view.op(i) not in ("Add", "Sum") or i in site_nodes or i in score_nodes):
            continue  # Adds inside an activation pattern, or adding a mask to attention scores
        if not node.output or not node.output[0]:
            continue
        data = view.data_inputs(i)
        out = node.output[0]
        if fused:  # input + skip (+ constant bias); the sum itself only when output 3 is exported
            data = [t for t in node.input[:2] if t and t not in view.static]
            out = node.output[3] if len(node.output) > 3 and node.output[3] else out
        if len(data) < 2:
            continue  # a bias add, or x + x
        out_shape = view.shape(out)
        if out_shape is not None and any(
            (shape := view.shape(t)) is not None and not dims_compatible(shape, out_shape) for t in data
        ):
            continue  # an operand is broadcast: a mask or a per-channel term, not a stream plus a branch
        src = common_source(view, data)
        if src is None:
            continue  # two unrelated streams (embeddings of two inputs, a mask)
        inside = between(view, src, out)
        if not any(j != i and (view.nodes[j].op_type in MIXING or j in site_nodes) for j in inside):
            continue  # x + f(x) with f only reshaping or scaling: rotary embeddings, not a block
        params = _shortcut(view, src, data)
        if fused:
            params["fused"] = view.op(i)
            params["normalized_output"] = out == node.output[0]  # LayerNorm(sum): the sum is not exported
        found.append(Found("residual", src, out, i, params))
    return found


def _shortcut(view: GraphView, src: str, data: list[str]) -> dict:
    """The skip path: the operand that is src itself, or src through value-preserving ops only
    ('identity'), or through reshapes/transposes ('layout': the exporter moved the stream's
    transpose onto both paths, so src has another layout than the output); else 'projection'."""
    paths = {t: {view.nodes[j].op_type for j in between(view, src, t)} for t in data}
    shortcut, skip = "projection", min(data, key=lambda t: len(between(view, src, t)))
    for kind, ops in (("identity", VALUE_PRESERVING), ("layout", LAYOUT)):
        hit = [t for t in data if paths[t] <= ops]
        if hit:
            shortcut, skip = kind, hit[0]
            break
    return {"shortcut": shortcut, "skip": skip, "branches": [t for t in data if t != skip]}

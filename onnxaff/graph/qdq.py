"""Quantized models as discovery reads them: Q→DQ pairs are transparent, and a site says it is quantized.

`quantize_static` (QDQ format) puts QuantizeLinear → DequantizeLinear after every quantized tensor, so a SiLU
reads Sigmoid → Q → DQ → Mul and its Sigmoid alone would be named. A pair of one scale and zero point is the
identity up to one rounding step: patterns evaluate it as the identity (the function, not its rounding, names
a site), never begin a region on one pair (X is what the activation reads, the dequantized tensor) nor end one
on it, and do not count it against the region size limits. The site's `params.quantized` records the scale and zero
point of the DQ its X comes from and of the Q its Y goes to, so a reader knows X and Y carry that noise.
"""

from __future__ import annotations

import numpy as np

Q, DQ = "QuantizeLinear", "DequantizeLinear"
_STANDARD = ("", "ai.onnx")


def pairs(view) -> frozenset[int]:
    """Q read by one DQ alone, both with one scale and zero point (what `GraphView.qdq_pairs` keeps)."""
    found: set[int] = set()
    for i, q in enumerate(view.nodes):
        if q.op_type != Q or q.domain not in _STANDARD or not q.output or q.output[0] in view.graph_outputs:
            continue
        users = view.consumers.get(q.output[0], [])
        if len(users) != 1:
            continue
        d = view.nodes[users[0]]
        if d.op_type == DQ and d.domain in _STANDARD and d.input[0] == q.output[0] and _same(view, q, d):
            found.update((i, users[0]))
    return frozenset(found)


def _same(view, q, d) -> bool:
    """Same scale and zero point (the same names, or equal constants), same axis: DQ undoes Q but for rounding."""
    if _axis(q) != _axis(d):
        return False
    for k in (1, 2):
        a, b = (q.input[k] if len(q.input) > k else ""), (d.input[k] if len(d.input) > k else "")
        if a == b:
            continue
        va, vb = (view.constant(a) if a else None), (view.constant(b) if b else None)
        if va is None or vb is None or not np.array_equal(va, vb):
            return False
    return True


def _axis(node) -> int:
    return next((a.i for a in node.attribute if a.name == "axis"), 1)


def opens_on_pair(view, entry: str, nodes) -> bool:
    """Whether a region begins inside a pair: its entry is a Q's (integer) output, or one Q of the region reads it.

    Two or more Qs reading the entry are dedicated pairs (`DedicatedQDQPair`: one per consumer), whose branches
    meet only at the float tensor before them: X is that tensor, and each branch reads it rounded.
    """
    p = view.producer.get(entry)
    if p is not None and p in view.qdq_pairs and view.nodes[p].op_type == Q:
        return True
    return sum(i in view.qdq_pairs and view.nodes[i].op_type == Q and view.nodes[i].input[0] == entry
               for i in nodes) == 1


def quantization(view, x: str, y: str) -> dict:
    """{"x": {scale, zero_point}} when X is a DQ's output (or pairs read it), {"y": ...} when a Q reads Y."""
    out = {}
    p = view.producer.get(x)
    before = next((c for c in view.consumers.get(x, []) if c in view.qdq_pairs and view.nodes[c].op_type == Q), None)
    if p is not None and view.nodes[p].op_type == DQ:
        out["x"] = params_of(view, view.nodes[p])
    elif before is not None:  # dedicated pairs: X is the float tensor each branch reads rounded
        out["x"] = params_of(view, view.nodes[before])
    q = next((c for c in view.consumers.get(y, []) if view.nodes[c].op_type == Q), None)
    if q is not None:
        out["y"] = params_of(view, view.nodes[q])
    return out


def params_of(view, node) -> dict:
    def value(k, default):
        v = view.constant(node.input[k]) if len(node.input) > k and node.input[k] else default
        if v is None:
            return None
        v = np.asarray(v)
        return v.item() if v.size == 1 else v.tolist()

    scale = value(1, None)
    return {"scale": float(np.float32(scale)) if isinstance(scale, float) else scale, "zero_point": value(2, 0)}


def fold(view, node) -> np.ndarray | None:
    """QuantizeLinear / DequantizeLinear of constants (quantized weights and constants), per tensor or per axis."""
    x = view.constant(node.input[0])
    scale = view.constant(node.input[1]) if len(node.input) > 1 and node.input[1] else None
    zp_name = node.input[2] if len(node.input) > 2 else ""
    zp = view.constant(zp_name) if zp_name else np.zeros((), np.uint8)
    if x is None or scale is None or zp is None:
        return None
    if scale.size > 1:  # per axis: scale and zero point along `axis`
        shape = [1] * x.ndim
        shape[_axis(node) % x.ndim] = scale.size
        scale, zp = scale.reshape(shape), (zp.reshape(shape) if zp.size > 1 else zp)
    scale, zpf = np.asarray(scale, np.float64), np.asarray(zp).astype(np.float64)
    if node.op_type == DQ:
        return (np.asarray(x).astype(np.float64) - zpf) * scale
    info = np.iinfo(zp.dtype) if np.issubdtype(zp.dtype, np.integer) else None
    q = np.rint(np.asarray(x, np.float64) / scale) + zpf
    return (np.clip(q, info.min, info.max) if info is not None else q).astype(zp.dtype)

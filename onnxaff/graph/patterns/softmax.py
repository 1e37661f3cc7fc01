"""Softmax and LogSoftmax decomposed: [x - ReduceMax(x)] → Exp → ReduceSum → Div, or Sub(·, Log(sum)).

ONNX's own function bodies, opset-12 exports and hand-written attention all spell it this way. The
max-subtraction is optional; ReduceSum's axes come from its attribute or (opset 13+) its input, and
the site's axis is that one reduced axis, as the single node's `axis` is.
"""

from __future__ import annotations

import numpy as np

from onnxaff.graph.patterns.region import Candidate
from onnxaff.graph.patterns.rule import Miss
from onnxaff.graph.view import GraphView


def _axes(view: GraphView, node) -> list[int] | None:
    for a in node.attribute:
        if a.name == "axes":
            return list(a.ints)
    if len(node.input) > 1 and node.input[1]:
        value = view.constant(node.input[1])
        return None if value is None else [int(v) for v in np.asarray(value).reshape(-1)]
    return None


def _keepdims(node) -> bool:
    return next((a.i for a in node.attribute if a.name == "keepdims"), 1) == 1


def _only(view: GraphView, tensor: str, users: set[int]) -> bool:
    return tensor not in view.graph_outputs and set(view.consumers.get(tensor, [])) == users


def _producer(view: GraphView, tensor: str, op: str) -> int | None:
    i = view.producer.get(tensor)
    if i is None or view.nodes[i].op_type != op or view.nodes[i].domain not in ("", "ai.onnx"):
        return None
    return i


def match_softmax(view: GraphView, claimed: set[int],
                  misses: list[tuple[str, Candidate, Miss]] | None = None) -> list[tuple[str, Candidate, dict]]:
    """Softmaxes from each Exp; with `misses`, why an Exp starts none."""
    found = []

    def refuse(e: int, why: str, *args) -> None:
        if misses is not None:
            node = view.nodes[e]
            misses.append(("softmax", Candidate(node.input[0], node.output[0], (e,)), Miss("softmax", why, args)))

    for e, node in enumerate(view.nodes):
        if node.op_type != "Exp" or node.domain not in ("", "ai.onnx") or e in claimed:
            continue
        t, ex = node.input[0], node.output[0]
        users = view.consumers.get(ex, [])
        sums = [j for j in users if view.nodes[j].op_type == "ReduceSum" and view.nodes[j].input[0] == ex]
        if len(sums) != 1 or not _keepdims(view.nodes[sums[0]]):
            refuse(e, "its output has no single ReduceSum with keepdims=1" if len(sums) != 1
                   else "its ReduceSum drops the reduced axis (keepdims=0)")
            continue
        r = sums[0]
        axes, s = _axes(view, view.nodes[r]), view.nodes[r].output[0]
        if axes is None or len(axes) != 1:
            refuse(e, "its ReduceSum reduces {} axes, not one", "unknown" if axes is None else len(axes))
            continue
        nodes, y, kind = [e, r], None, None
        div = [j for j in users if view.nodes[j].op_type == "Div" and list(view.nodes[j].input) == [ex, s]]
        if div and _only(view, ex, {r, div[0]}) and _only(view, s, {div[0]}):
            kind, y = "softmax", view.nodes[div[0]].output[0]
            nodes.append(div[0])
        else:
            log = view.single_consumer(s)
            if _only(view, ex, {r}) and log is not None and view.nodes[log].op_type == "Log":
                sub = view.single_consumer(view.nodes[log].output[0])
                if sub is not None and list(view.nodes[sub].input) == [t, view.nodes[log].output[0]]:
                    kind, y = "log_softmax", view.nodes[sub].output[0]
                    nodes += [log, sub]
        if kind is None:
            refuse(e, "the Exp and its sum make neither Div(exp, sum) nor Sub(x, Log(sum)), or are read elsewhere")
            continue
        x = t
        sub = _producer(view, t, "Sub")
        if sub is not None:
            mx = _producer(view, view.nodes[sub].input[1], "ReduceMax")
            if mx is not None and view.nodes[mx].input[0] == view.nodes[sub].input[0] and _keepdims(view.nodes[mx]):
                max_axes = _axes(view, view.nodes[mx])
                inner = {e} if kind == "softmax" else {e, nodes[-1]}
                if max_axes == axes and _only(view, view.nodes[mx].output[0], {sub}) and _only(view, t, inner):
                    x = view.nodes[sub].input[0]
                    nodes += [mx, sub]
        if claimed.intersection(nodes):
            refuse(e, "overlaps a softmax found earlier")
            continue
        cand = Candidate(x, y, tuple(sorted(nodes, key=view.order.__getitem__)))
        found.append((kind, cand, {"axis": axes[0]}))
        claimed.update(nodes)
    return found

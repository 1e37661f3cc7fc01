"""What the graph says about the values its inputs may take, as plain data for the data layer (which never
reads graphs): an integer input that indexes an embedding table of V rows takes [0, V) (a Gather's, or the word,
segment or position table of onnxruntime's fused EmbedLayerNormalization); a mask-like input is all ones (a
synthetic source pads it only when asked).

`input_hints(view)` -> {input name: {"range": [low, high]}} or {input name: {"mask": True}}.
"""

from __future__ import annotations

import numpy as np
from onnx import helper

from onnxaff.graph.view import GraphView

# Ops that carry index values through unchanged (their first input): the indices reach the Gather as they are.
_CARRY = {"Cast", "Unsqueeze", "Squeeze", "Reshape", "Flatten", "Identity", "Expand"}
# onnxruntime's fused embeddings gather like a Gather: index input -> its table (word, segment, position ids).
_EMBED = {"EmbedLayerNormalization": {0: 2, 1: 4, 8: 3}}


def input_hints(view: GraphView) -> dict[str, dict]:
    hints: dict[str, dict] = {}
    kinds = {name: _kind(view, name) for name in view.graph_inputs}
    for name, kind in kinds.items():
        if kind == "i":
            bounds = _index_bounds(view, name)
            if bounds is not None:
                hints[name] = {"range": list(bounds)}
    ids = [view.shape(n) for n, k in kinds.items() if k == "i" and "mask" not in n.lower()]
    for name, kind in kinds.items():
        shape = view.shape(name)
        if "mask" in name.lower() and kind and kind in "ibf" and shape and len(shape) > 1 and shape in ids:
            hints[name] = {"mask": True}
    return hints


def _kind(view: GraphView, name: str) -> str:
    """numpy's kind letter of the input's element type: i/u integer, b bool, f float, '' unknown."""
    try:
        kind = np.dtype(helper.tensor_dtype_to_np_dtype(view.elem_type(name))).kind
    except (KeyError, TypeError, ValueError):
        return ""
    return "i" if kind == "u" else kind


def _index_bounds(view: GraphView, name: str) -> tuple[int, int] | None:
    """[low, high) that keeps every Gather on a constant table the input reaches in bounds (None: reaches none)."""
    low, high, found = 0, None, False
    todo, seen = [(name, 0)], set()
    while todo:
        tensor, offset = todo.pop()
        if (tensor, offset) in seen:
            continue
        seen.add((tensor, offset))
        for c in view.consumers.get(tensor, []):
            node = view.nodes[c]
            tables = _tables(view, node, tensor)
            if tables:
                found = True
                for rows in tables:
                    low, high = max(low, -offset), rows - offset if high is None else min(high, rows - offset)
                continue
            if node.domain not in ("", "ai.onnx") or not node.output:
                continue
            if node.op_type in _CARRY and node.input[0] == tensor:
                todo.append((node.output[0], offset))
            elif node.op_type in ("Add", "Sub") and len(node.input) == 2 and tensor in node.input:
                first = node.input[0] == tensor
                step = view.scalar(node.input[1] if first else node.input[0])
                if step is None or not float(step).is_integer() or (node.op_type == "Sub" and not first):
                    continue  # a data-dependent or fractional shift, or constant − ids: not followed
                todo.append((node.output[0], offset + (int(step) if node.op_type == "Add" else -int(step))))
    if not found or high is None or low >= high:
        return None
    return low, high


def _tables(view: GraphView, node, tensor: str) -> list[int]:
    """The row counts of the constant tables that node indexes with tensor (a Gather's indices, or the ids of
    onnxruntime's EmbedLayerNormalization)."""
    if node.domain in ("", "ai.onnx") and node.op_type == "Gather" and node.output:
        rows = _rows(view, node) if len(node.input) > 1 and node.input[1] == tensor else None
        return [] if rows is None else [rows]
    if node.domain != "com.microsoft" or node.op_type not in _EMBED:
        return []
    found = []
    for index, table in _EMBED[node.op_type].items():
        if index < len(node.input) and node.input[index] == tensor and table < len(node.input) and node.input[table]:
            shape = _static_shape(view, node.input[table])
            if shape and len(shape) == 2 and isinstance(shape[0], int) and shape[0] > 0:
                found.append(shape[0])
    return found


def _static_shape(view: GraphView, table: str) -> list | None:
    if table not in view.static:
        return None
    return list(view.initializers[table].dims) if table in view.initializers else view.shape(table)


def _rows(view: GraphView, node) -> int | None:
    """The size of a constant Gather table along the gathered axis."""
    shape = _static_shape(view, node.input[0])
    if not shape:
        return None
    axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
    if not -len(shape) <= axis < len(shape):
        return None
    rows = shape[axis]
    return rows if isinstance(rows, int) and rows > 0 else None

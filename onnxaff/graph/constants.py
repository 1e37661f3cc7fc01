"""The values a graph fixes at export time: initializers, Constant nodes and what folds from them, cached."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

from onnxaff.graph.fold import as_float64, exact_half, fold_node
from onnxaff.graph.index import GraphIndex

# Ops that only reshape or retype a value: a constant stays a constant through them.
_VALUE_PRESERVING = {"Identity", "Cast", "Reshape", "Unsqueeze", "Squeeze", "Flatten", "Expand"}


class ConstantValues:
    """One graph's folded constants (GraphView.constant and .scalar read them)."""

    def __init__(self, view: GraphIndex):
        self.view = view
        self._cache: dict[str, np.ndarray | None] = {}
        self._depth = 0

    def value(self, name: str) -> np.ndarray | None:
        """The value of a tensor fixed at export time (initializer, Constant node, or a reshape of one)."""
        if name in self._cache:
            return self._cache[name]
        if self._depth > 256:  # folding recurses up the graph; a chain this long holds no constant worth it
            return None
        self._depth += 1
        try:
            value = self._compute_constant(name)
        finally:
            self._depth -= 1
        self._cache[name] = value
        return value

    def _compute_constant(self, name: str) -> np.ndarray | None:
        if not name:
            return None
        if name in self.view.initializers:
            tensor = self.view.initializers[name]
            if tensor.data_location == onnx.TensorProto.EXTERNAL:
                return None  # weights left on disk are never scalars worth reading here
            return exact_half(numpy_helper.to_array(tensor))
        i = self.view.producer.get(name)
        if i is None:
            return None
        node = self.view.nodes[i]
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
            return _constant_node_value(node)
        if node.op_type in _VALUE_PRESERVING and node.input:
            inner = self.value(node.input[0])
            if inner is not None and inner.size == 1:
                return inner.reshape(())
        return fold_node(self, node)  # the folder reads operands through `constant` and `elem_type` below

    def constant(self, name: str) -> np.ndarray | None:
        return self.value(name)

    def elem_type(self, name: str) -> int:
        return self.view.elem_type(name)

    def scalar(self, name: str) -> float | None:
        value = self.value(name)
        value = None if value is None else as_float64(value)
        if value is None or value.size != 1 or not np.issubdtype(value.dtype, np.number):
            return None
        return float(value.reshape(()))


def _constant_node_value(node: onnx.NodeProto) -> np.ndarray | None:
    for attr in node.attribute:
        if attr.name == "value":
            if attr.t.data_location == onnx.TensorProto.EXTERNAL:
                return None
            return exact_half(numpy_helper.to_array(attr.t))
        if attr.name == "value_float":
            return np.array(attr.f, dtype=np.float32)
        if attr.name == "value_floats":
            return np.array(list(attr.floats), dtype=np.float32)
        if attr.name == "value_int":
            return np.array(attr.i, dtype=np.int64)
        if attr.name == "value_ints":
            return np.array(list(attr.ints), dtype=np.int64)
    return None

"""Writing standard ONNX nodes into a model being expanded: fresh names, and the ops whose form the opset decides."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from onnxaff.graph.names import Namer, graph_names


class Emitter:
    """Collects new nodes (to replace one node in place) and the small int64/scalar constants they read."""

    def __init__(self, model: onnx.ModelProto, prefix: str, opset: int, elem_type: int):
        g = model.graph
        self.graph, self.prefix, self.opset, self.elem_type = g, prefix, opset, elem_type
        # Nodes and tensors are named apart.
        self.names = {False: Namer(graph_names(g, nodes=False)), True: Namer({n.name for n in g.node})}
        self.nodes: list[onnx.NodeProto] = []
        self.constants: list[onnx.TensorProto] = []

    def fresh(self, base: str, node: bool = False) -> str:
        """A node name (`node`) or a tensor name not used yet (onnxaff.graph.names.Namer)."""
        return self.names[node].fresh(base)

    def op(self, op: str, inputs: list[str], name: str | None = None, out: str | None = None, **attrs) -> str:
        """One node; its output's name. `name` and `out` ask for a node and a tensor name (made unique)."""
        base = name or f"{self.prefix}/{op}"
        result = self.fresh(out or base)
        self.nodes.append(helper.make_node(op, inputs, [result], name=self.fresh(base, node=True), **attrs))
        return result

    def ints(self, values) -> str:
        array = np.array(values, dtype=np.int64)
        name = self.fresh(f"{self.prefix}/const")
        self.constants.append(numpy_helper.from_array(array, name))
        return name

    def scalar(self, value: float) -> str:
        dtype = helper.tensor_dtype_to_np_dtype(self.elem_type)
        name = self.fresh(f"{self.prefix}/const")
        self.constants.append(numpy_helper.from_array(np.array(value, dtype=dtype), name))
        return name

    def slice(self, x: str, start: int, end: int, axis: int) -> str:
        if self.opset < 10:
            return self.op("Slice", [x], starts=[start], ends=[end], axes=[axis])
        return self.op("Slice", [x, self.ints([start]), self.ints([end]), self.ints([axis])])

    def squeeze(self, x: str, axis: int) -> str:
        if self.opset < 13:
            return self.op("Squeeze", [x], axes=[axis])
        return self.op("Squeeze", [x, self.ints([axis])])

    def unsqueeze(self, x: str, axis: int) -> str:
        if self.opset < 13:
            return self.op("Unsqueeze", [x], axes=[axis])
        return self.op("Unsqueeze", [x, self.ints([axis])])

    def take(self, x: str, k: int, axis: int = 0) -> str:
        """x's k-th slice along `axis`, that axis dropped (a direction of W, R, B; a time step of X)."""
        return self.squeeze(self.slice(x, k, k + 1, axis), axis)

    def clip(self, x: str, bound: float) -> str:
        if self.opset < 11:
            return self.op("Clip", [x], min=-bound, max=bound)
        return self.op("Clip", [x, self.scalar(-bound), self.scalar(bound)])

    def install(self, index: int) -> None:
        """Replace graph.node[index] by the collected nodes, keeping the graph's order topological."""
        nodes = list(self.graph.node)
        nodes[index:index + 1] = self.nodes
        del self.graph.node[:]
        self.graph.node.extend(nodes)
        self.graph.initializer.extend(self.constants)

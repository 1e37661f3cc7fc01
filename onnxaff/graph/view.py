"""A read-only index over one ONNX graph: producers, consumers, constants, shapes, forward order, data flow.

Built once per loaded model (`LoadedModel.view`) and shared by site, pair and block discovery, stages,
statistics and rewriting: every derived index (topological order, folded constants) is computed once. The
structure (who makes and reads each tensor, order, shapes, data flow) is GraphIndex's (index.py); the view adds
what reads constant values: folded constants and Q → DQ pairs.
"""

from __future__ import annotations

from functools import cached_property

import numpy as np
import onnx

from onnxaff.graph import qdq
from onnxaff.graph.constants import ConstantValues
from onnxaff.graph.index import GraphIndex


class GraphView(GraphIndex):
    """Everything site discovery and rewriting ask of a graph, computed once."""

    def __init__(self, graph: onnx.GraphProto, opset: int | None = None):
        super().__init__(graph, opset)
        self._constants = ConstantValues(self)
        self._drop_type_only_reads()

    def _drop_type_only_reads(self) -> None:
        """CastLike(constant, t) reads only t's type (onnxscript's constants): no reader of t's value, so that an
        island around t stays closed."""
        for i, node in enumerate(self.nodes):
            if node.op_type == "CastLike" and len(node.input) > 1 and node.input[1] and \
                    self.constant(node.input[0]) is not None:
                self.consumers[node.input[1]].remove(i)

    # -- constants ---------------------------------------------------------------------------
    def constant(self, name: str) -> np.ndarray | None:
        """The value of a tensor fixed at export time (initializer, Constant node, or a reshape of one)."""
        return self._constants.value(name)

    def scalar(self, name: str) -> float | None:
        """A constant's one number as a float, None for anything else."""
        return self._constants.scalar(name)

    @cached_property
    def qdq_pairs(self) -> frozenset[int]:
        """The nodes of every Q → DQ pair, which discovery sees through (onnxaff.graph.qdq)."""
        return qdq.pairs(self)


def iter_tensors(graph: onnx.GraphProto):
    """Every TensorProto a graph holds (initializers, Constant values), subgraphs included."""
    yield from graph.initializer
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.TENSOR:
                yield attr.t
            elif attr.type == onnx.AttributeProto.GRAPH:
                yield from iter_tensors(attr.g)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for g in attr.graphs:
                    yield from iter_tensors(g)

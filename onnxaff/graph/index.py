"""The structural index of one graph: producers, consumers, shapes, forward order, data flow, no constant value.

GraphView (view.py) is this index with the graph's folded constants and Q → DQ pairs added; the data-flow walks
(`flow.py`) and the constant folder (`constants.py`) read only this part, so they import it from below the view.
"""

from __future__ import annotations

import heapq
from functools import cached_property

import onnx

from onnxaff.graph.fused_sums import skip_sums

# Ops that read only their input's shape: what they compute is static even from a data tensor.
SHAPE_ONLY = {"Shape", "Size"}
DEFAULT_DOMAINS = ("", "ai.onnx")


class GraphIndex:
    """Who makes and who reads each tensor of one graph, in what order, from which data: computed once."""

    def __init__(self, graph: onnx.GraphProto, opset: int | None = None):
        self.graph = graph
        self.opset = opset  # the default domain's, where a caller knows it
        self.nodes = list(graph.node)
        self.producer: dict[str, int] = {}
        self.consumers: dict[str, list[int]] = {}
        for i, node in enumerate(self.nodes):
            for name in node.output:
                if name:
                    self.producer[name] = i
            for name in node.input:
                if name:
                    self.consumers.setdefault(name, []).append(i)
        self.initializers = {t.name: t for t in graph.initializer}
        self.graph_inputs = [i.name for i in graph.input if i.name not in self.initializers]
        self.graph_outputs = {o.name for o in graph.output}

    # -- order -------------------------------------------------------------------------------
    @cached_property
    def predecessors(self) -> list[list[int]]:
        """Node index -> the nodes producing its inputs, each once, in input order."""
        out = []
        for i, node in enumerate(self.nodes):
            found = []
            for name in node.input:
                j = self.producer.get(name)
                if j is not None and j != i and j not in found:
                    found.append(j)
            out.append(found)
        return out

    @cached_property
    def order(self) -> dict[int, int]:
        """Node index -> position in the forward pass (forward_order below)."""
        return forward_order(self.predecessors)

    # -- shapes ------------------------------------------------------------------------------
    @cached_property
    def value_types(self) -> dict[str, onnx.TypeProto]:
        types = {}
        for vi in list(self.graph.input) + list(self.graph.value_info) + list(self.graph.output):
            if vi.type.HasField("tensor_type"):
                types[vi.name] = vi.type
        for name, tensor in self.initializers.items():
            types.setdefault(name, onnx.helper.make_tensor_type_proto(tensor.data_type, list(tensor.dims)))
        return types

    def shape(self, name: str) -> list[int | str] | None:
        """Dims (int, symbolic name, or '?') or None when even the rank is unknown."""
        tp = self.value_types.get(name)
        if tp is None or not tp.tensor_type.HasField("shape"):
            return None
        dims: list[int | str] = []
        for d in tp.tensor_type.shape.dim:
            if d.HasField("dim_value"):
                dims.append(int(d.dim_value))
            elif d.HasField("dim_param") and d.dim_param:
                dims.append(d.dim_param)
            else:
                dims.append("?")
        return dims

    def elem_type(self, name: str) -> int:
        tp = self.value_types.get(name)
        return tp.tensor_type.elem_type if tp is not None else onnx.TensorProto.UNDEFINED

    def value_users(self, name: str) -> list[int]:
        """Consumers that read values, not only the shape."""
        return [c for c in self.consumers.get(name, []) if self.nodes[c].op_type not in SHAPE_ONLY]

    def single_consumer(self, name: str, values_only: bool = False) -> int | None:
        """The one node reading `name` (with values_only, Shape/Size readers aside), unless it is a graph output."""
        users = self.value_users(name) if values_only else self.consumers.get(name, [])
        if len(users) != 1 or name in self.graph_outputs:
            return None
        return users[0]

    def op(self, i: int) -> str:
        """Op type, qualified by domain outside the default one (com.microsoft.Attention)."""
        node = self.nodes[i]
        return node.op_type if node.domain in DEFAULT_DOMAINS else f"{node.domain}.{node.op_type}"

    def node_label(self, i: int) -> str:
        return self.nodes[i].name or f"{self.nodes[i].op_type}#{i}"

    def base_id(self, i: int, output: str) -> str:
        """A site's or block's id before deduplication: the node's name, else op type and output tensor."""
        return self.nodes[i].name or f"{self.nodes[i].op_type}:{output}"

    # -- data flow ---------------------------------------------------------------------------
    @cached_property
    def static(self) -> set[str]:
        """Tensors that depend on no graph input: weights, constants, what is computed from them or from Shape."""
        static = set(self.initializers)
        for i in sorted(range(len(self.nodes)), key=self.order.__getitem__):
            node = self.nodes[i]
            if node.op_type in SHAPE_ONLY or all(n in static for n in node.input if n):
                static.update(n for n in node.output if n)
        return static

    @cached_property
    def fused_sums(self) -> dict[str, list[str]]:
        """Sum (output 3) of a fused SkipLayerNormalization -> its other outputs, which the node computes from it."""
        return skip_sums(self.nodes)

    @cached_property
    def fused_sum_of(self) -> dict[str, str]:
        return {o: total for total, outs in self.fused_sums.items() for o in outs}

    def data_inputs(self, i: int) -> list[str]:
        """The node's inputs that depend on a graph input, each once, in input order."""
        out: list[str] = []
        for n in self.nodes[i].input:
            if n and n not in self.static and n not in out:
                out.append(n)
        return out

    def parents(self, name: str) -> list[str]:
        """The data tensors `name` is computed from."""
        if name in self.fused_sum_of:
            return [self.fused_sum_of[name]]
        p = self.producer.get(name)
        return [] if p is None else self.data_inputs(p)

    def tensor_order(self, name: str) -> int:
        """Forward position of a tensor's producer (×2: a fused sum comes before its normalised form)."""
        p = self.producer.get(name)
        return -1 if p is None else 2 * self.order[p] + (name in self.fused_sum_of)


def forward_order(predecessors: list[list[int]]) -> dict[int, int]:
    """Node index -> position in the forward pass (topological, ties by position in the file).

    Kahn's algorithm taking the lowest ready index first (networkx's lexicographical order, without the
    0.07 s of importing networkx on every command)."""
    n = len(predecessors)
    children: list[list[int]] = [[] for _ in range(n)]
    waiting = [len(p) for p in predecessors]
    for i, preds in enumerate(predecessors):
        for j in preds:
            children[j].append(i)
    ready = [i for i in range(n) if waiting[i] == 0]
    ordered = []
    while ready:
        i = heapq.heappop(ready)
        ordered.append(i)
        for c in children[i]:
            waiting[c] -= 1
            if waiting[c] == 0:
                heapq.heappush(ready, c)
    if len(ordered) < n:  # a cyclic graph is invalid ONNX; keep file order
        ordered = list(range(n))
    return {i: k for k, i in enumerate(ordered)}

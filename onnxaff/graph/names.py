"""Names a rewrite may give new nodes and tensors: every name a graph already uses, and fresh ones beside them."""

from __future__ import annotations

import onnx


def graph_names(graph: onnx.GraphProto, nodes: bool = True, subgraphs: bool = False) -> set[str]:
    """Every tensor name of `graph` (inputs, outputs, value infos, initializers, what nodes read and write), with
    node names when `nodes`, and its subgraphs' names too when `subgraphs` (an inlined body must collide with
    none of them)."""
    names = {t.name for t in graph.initializer} | {v.name for v in (*graph.input, *graph.output, *graph.value_info)}
    for node in graph.node:
        names.update((*node.input, *node.output))
        if nodes:
            names.add(node.name)
        if subgraphs:
            for attr in node.attribute:
                for sub in (attr.g,) if attr.type == onnx.AttributeProto.GRAPH else attr.graphs:
                    names |= graph_names(sub, nodes, subgraphs)
    return names


class Namer:
    """Fresh names: `base`, else `base<sep>k` for the first k ≥ 2 not taken. Each base keeps the last k tried
    (names are only ever added), so naming n things of one base costs n, not n²: unrolling a 1000-step LSTM
    took 160 s with a search restarted at 2."""

    def __init__(self, taken: set[str], sep: str = "."):
        self.taken, self.sep = taken, sep
        self._next: dict[str, int] = {}

    def fresh(self, base: str) -> str:
        name, k = base, self._next.get(base, 1)
        if k > 1:
            name = f"{base}{self.sep}{k}"
        while name in self.taken:
            k += 1
            name = f"{base}{self.sep}{k}"
        self._next[base] = k
        self.taken.add(name)
        return name

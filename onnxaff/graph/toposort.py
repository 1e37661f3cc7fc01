"""Put a graph's nodes in an order onnx's checker accepts: producers before readers, subgraphs too.

onnxruntime sorts a graph itself, so models with nodes out of order run (onnxconverter_common's float16
converter writes such models, and hand-edited graphs are often left so); the checker refuses them, and
onnxaff's walks read the node list as a forward order. Sorting changes no value the graph computes.
"""

from __future__ import annotations

import heapq

import onnx


def _needs(node: onnx.NodeProto) -> set[str]:
    """Every name the node reads, its subgraphs' outer-scope names included."""
    names = {n for n in node.input if n}
    for attr in node.attribute:
        for sub in (attr.g, *attr.graphs) if attr.type in (onnx.AttributeProto.GRAPH,
                                                            onnx.AttributeProto.GRAPHS) else ():
            inner = {i.name for i in sub.input} | {t.name for t in sub.initializer}
            for sub_node in sub.node:
                names |= _needs(sub_node) - inner
                inner |= set(sub_node.output)
    return names


def sort_graph(graph: onnx.GraphProto, apply: bool = True) -> bool:
    """Sort `graph` (and its subgraphs) in place, stably; True when some node moved (or would, without `apply`).

    Nodes whose inputs no node and no graph input makes (a broken graph) keep their place at the end,
    so that the checker names the problem.
    """
    moved = False
    for node in graph.node:
        for attr in node.attribute:
            for sub in (attr.g, *attr.graphs) if attr.type in (onnx.AttributeProto.GRAPH,
                                                                onnx.AttributeProto.GRAPHS) else ():
                moved |= sort_graph(sub, apply)
    known = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    made = {o: i for i, node in enumerate(graph.node) for o in node.output if o}
    waits = [{made[n] for n in _needs(node) if n in made and n not in known} for node in graph.node]
    readers: dict[int, list[int]] = {}
    for i, deps in enumerate(waits):
        for d in deps:
            readers.setdefault(d, []).append(i)
    ready = [i for i, deps in enumerate(waits) if not deps]
    heapq.heapify(ready)
    order = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for r in readers.get(i, ()):
            waits[r].discard(i)
            if not waits[r]:
                heapq.heappush(ready, r)
    placed = set(order)
    order += [i for i in range(len(graph.node)) if i not in placed]
    if order == list(range(len(graph.node))) or not apply:
        return moved or order != list(range(len(graph.node)))
    nodes = [onnx.NodeProto() for _ in order]
    for new, i in zip(nodes, order, strict=True):
        new.CopyFrom(graph.node[i])
    del graph.node[:]
    graph.node.extend(nodes)
    return True

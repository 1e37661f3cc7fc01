"""Walks over a graph's data flow: the nearest common source of tensors, the nodes between two tensors."""

from __future__ import annotations

import heapq
from collections.abc import Iterable

from onnxaff.graph.index import GraphIndex


def common_source(view: GraphIndex, tensors: list[str], steps: int = 20000) -> str | None:
    """The latest tensor (in forward order) that every one of `tensors` derives from, or None.

    Walks the data ancestors in decreasing forward order, so when a tensor is popped every
    path to it from the start tensors is known: the first one reached from all of them is the
    nearest common ancestor.
    """
    full = (1 << len(tensors)) - 1
    mask: dict[str, int] = {}
    for k, t in enumerate(tensors):
        mask[t] = mask.get(t, 0) | (1 << k)
    heap = [(-view.tensor_order(t), t) for t in mask]
    heapq.heapify(heap)
    for _ in range(steps):
        if not heap:
            return None
        _, t = heapq.heappop(heap)
        m = mask[t]
        if m == full:
            return t
        for u in view.parents(t):
            if u not in mask:
                mask[u] = m
                heapq.heappush(heap, (-view.tensor_order(u), u))
            else:
                mask[u] |= m
    return None

def between(view: GraphIndex, src: str, dst: str, also: Iterable[str] = ()) -> set[int]:
    """Nodes on some path from tensor `src` (or one of `also`) to tensor `dst`, shape computations included."""
    end = view.producer.get(dst)
    if end is None:
        return set()
    hi = view.order[end]  # a node after `dst`'s producer cannot lead to it
    fwd: set[int] = set()
    stack = [c for t in (src, *also) for c in view.consumers.get(t, []) if view.order[c] <= hi]
    while stack:
        n = stack.pop()
        if n in fwd:
            continue
        fwd.add(n)
        for o in view.nodes[n].output:
            stack.extend(c for c in view.consumers.get(o, []) if view.order[c] <= hi and c not in fwd)
    if end not in fwd:
        return set()
    inside: set[int] = set()
    stack = [end]
    while stack:
        n = stack.pop()
        if n in inside or n not in fwd:
            continue
        inside.add(n)
        for name in view.nodes[n].input:
            p = view.producer.get(name)
            if p is not None and p not in inside:
                stack.append(p)
    return inside

"""Where a site sits in its network: its own nodes and a few levels of the data flow before and after them.

Recorded in each site's signature entry (`neighbourhood`) so that a report can draw it without the model. Only
data edges are walked (weights, constants and shape computations are left out: they would crowd the drawing
and say nothing about where the activation sits), and every level is capped so that a site reading a tensor
that a hundred nodes share costs the file a few hundred bytes, not the hundred names.
"""

from __future__ import annotations

from onnxaff.graph.view import GraphView

LEVELS = 2  # producers of producers, consumers of consumers
PER_LEVEL = 5  # nodes kept at each level before and after the site
OWN = 8  # the site's own nodes kept (a block may hold hundreds): the first and last in forward order


def neighbourhood(view: GraphView, own: list[int], levels: int = LEVELS, per_level: int = PER_LEVEL) -> dict | None:
    """{"nodes": [{"name", "op", "at"}], "edges": [[from, to]], "omitted": n}: `at` is 0 for the site's own nodes,
    -1, -2 for the levels before, 1, 2 after; edges index `nodes` along the data flow; `omitted` counts the
    nodes the caps left out. None without nodes to start from."""
    own = sorted(set(own), key=view.order.__getitem__)
    if not own:
        return None
    omitted = max(0, len(own) - OWN)
    if omitted:
        own = own[:OWN // 2] + own[-(OWN // 2):]
    at = dict.fromkeys(own, 0)
    for step, walk in ((-1, _before), (1, _after)):
        frontier = own
        for level in range(1, levels + 1):
            found = [j for j in dict.fromkeys(j for i in frontier for j in walk(view, i)) if j not in at]
            omitted += max(0, len(found) - per_level)
            frontier = sorted(found, key=view.order.__getitem__)[::step][:per_level][::step]
            at.update(dict.fromkeys(frontier, step * level))
    kept = sorted(at, key=view.order.__getitem__)
    pos = {i: k for k, i in enumerate(kept)}
    edges = sorted({(pos[j], pos[i]) for i in kept for j in _before(view, i) if j in pos})
    return {"nodes": [{"name": view.node_label(i), "op": view.op(i), "at": at[i]} for i in kept],
            "edges": [list(e) for e in edges], "omitted": omitted}


def _before(view: GraphView, i: int) -> list[int]:
    """The nodes producing node i's data inputs."""
    return [view.producer[t] for t in view.data_inputs(i) if t in view.producer]


def _after(view: GraphView, i: int) -> list[int]:
    """The nodes reading node i's outputs as values (Shape and Size readers aside)."""
    return [c for t in view.nodes[i].output if t for c in view.value_users(t)]


def site_neighbourhood(view: GraphView, site) -> dict | None:
    """A site's neighbourhood: from its own nodes; for a site inside a subgraph, from the node that holds the
    subgraph (its nodes are not the main graph's); else from the producer of its output."""
    if getattr(site, "scope", None) is not None:
        own = [site.scope[0]]
    else:
        own = list(site.node_indices) or ([view.producer[site.output]] if site.output in view.producer else [])
    return neighbourhood(view, own)

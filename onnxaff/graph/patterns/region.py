"""Candidate regions for decomposed activations, and a numpy evaluator to test what they compute.

A decomposed activation is a small elementwise subgraph with one entry tensor x, one exit tensor y,
scalar constants and nothing else. Structure only proposes candidates around an anchor op
(Erf, Sigmoid, Clip, ...); a candidate is accepted when evaluating it on probe points reproduces a
known activation. That makes matching independent of operand order, of where the 0.5 sits, of
Div-by-√2 versus Mul-by-1/√2, and of constants being initializers or Constant nodes. Each rule says where its
candidates lie around the anchor (`rule.Region`); this module walks the graph for it and knows no rule.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from onnxaff.graph import elementwise, qdq
from onnxaff.graph.patterns.rule import AT_ANCHOR, Region, Rule
from onnxaff.graph.view import GraphView

# Elementwise ops a pattern may be made of, with numpy definitions (float64, scalar constants).
EVALUABLE = {
    "Add", "Sub", "Mul", "Div", "Pow", "Neg", "Abs", "Exp", "Log", "Sqrt", "Reciprocal",
    "Erf", "Tanh", "Sigmoid", "HardSigmoid", "Softplus", "Relu", "Clip", "Min", "Max",
    "Identity", "Cast",
}
MAX_REGION_NODES = 16
_MAX_ENTRY_SEARCH = 12
# Ops of one variable operand and constants: a gate's scaling (0.5·x), a rule's steps above its anchor (βx).
_SCALING = ("Mul", "Div", "Add", "Sub", "Neg", "Identity")


@dataclass(frozen=True)
class Candidate:
    entry: str
    exit: str
    nodes: tuple[int, ...]  # node indices, forward order


def _eval_node(view: GraphView, node, args: list[np.ndarray | None]) -> np.ndarray:
    return elementwise.evaluate(view, node, args)


def region_nodes(view: GraphView, entry: str, exit: str) -> tuple[int, ...] | None:
    """Nodes between entry and exit, or None unless they form a closed elementwise island.

    Closed means: every operand is the entry, a scalar constant, or made inside the region, and
    nothing made inside (except the exit) is used outside or is a graph output.
    """
    if entry == exit:
        return None
    found: set[int] = set()
    stack = [exit]
    seen_tensors = set()
    while stack:
        t = stack.pop()
        if t == entry or t in seen_tensors:
            continue
        seen_tensors.add(t)
        i = view.producer.get(t)
        if i is None:
            return None  # a graph input or initializer other than the entry
        node = view.nodes[i]
        if node.op_type == "Constant":
            continue
        if (node.op_type not in EVALUABLE and i not in view.qdq_pairs) or node.domain not in ("", "ai.onnx"):
            return None
        found.add(i)
        if len(found - view.qdq_pairs) > MAX_REGION_NODES:
            return None
        for name in node.input:
            if not name or name == entry:
                continue
            if name in view.initializers or (
                view.producer.get(name) is not None and view.nodes[view.producer[name]].op_type == "Constant"
            ):
                if view.scalar(name) is None:
                    return None
                continue
            if view.scalar(name) is not None:  # e.g. Reshape of a scalar constant
                continue
            stack.append(name)
    if not found or qdq.opens_on_pair(view, entry, found):
        return None
    for i in found:
        for out in view.nodes[i].output:
            if out == exit:
                continue
            if out in view.graph_outputs:
                return None
            if any(c not in found for c in view.consumers.get(out, [])):
                return None
    return tuple(sorted(found, key=view.order.__getitem__))


def evaluator(view: GraphView, cand: Candidate) -> Callable[[np.ndarray], np.ndarray]:
    """f(x) computed by the candidate region, elementwise, in float64."""

    def f(x: np.ndarray) -> np.ndarray:
        env = {cand.entry: np.asarray(x, dtype=np.float64)}
        for i in cand.nodes:
            node = view.nodes[i]
            args = []
            for name in node.input:
                if not name:
                    args.append(None)
                elif name in env:
                    args.append(env[name])
                else:
                    args.append(np.float64(view.scalar(name)))
            with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
                env[node.output[0]] = np.asarray(_eval_node(view, node, args), dtype=np.float64)
        return env[cand.exit]

    return f


def _entry_candidates(view: GraphView, start: str) -> list[str]:
    """Tensors upstream of `start` through elementwise ops: where the activation may begin."""
    found = [start]
    frontier = [start]
    visited_nodes = 0
    while frontier and visited_nodes < _MAX_ENTRY_SEARCH:
        t = frontier.pop(0)
        i = view.producer.get(t)
        if i is None or (view.nodes[i].op_type not in EVALUABLE and i not in view.qdq_pairs):
            continue
        visited_nodes += 1
        for name in view.nodes[i].input:
            if name and view.scalar(name) is None and name not in found:
                found.append(name)
                frontier.append(name)
    return found


def _upstream(view: GraphView, name: str, steps: int) -> list[str]:
    """`name` and the tensors it is made from by at most `steps` scaling steps (a Q → DQ pair is no step; a region
    opening inside one is refused by `region_nodes`), nearest first."""
    found, taken = [name], 0
    while taken < steps:
        i = view.producer.get(name)
        if i is None:
            break
        node = view.nodes[i]
        paired = i in view.qdq_pairs
        if node.op_type not in _SCALING and not paired:
            break
        others = [n for n in node.input if n and view.scalar(n) is None]
        if len(others) != 1:
            break
        name, taken = others[0], taken + (not paired)
        found.append(name)
    return found


def _scaled_source(view: GraphView, name: str, entries: list[str]) -> str | None:
    """If `name` is an entry times/plus constants (e.g. the 0.5·x of a GELU), that entry."""
    return next((t for t in _upstream(view, name, 3) if t in entries), None)


def candidates(view: GraphView, anchor: int, region: Region = AT_ANCHOR) -> list[Candidate]:
    """Plausible (entry, exit) pairs around an anchor node where `region` puts them, longest first.

    Longest first (each exit, farthest first, with its farthest entry first), so a ReLU6 inside a HardSwish is not
    taken for the whole; a chain never ends on an Identity or Cast, so the site's output is the activation's own
    tensor.
    """
    node = view.nodes[anchor]
    sources = [name for name in node.input if name and view.scalar(name) is None]
    if len(sources) != 1 or len(node.output) != 1:
        return []
    source = sources[0]
    above = _upstream(view, source, region.before)
    entries = _entry_candidates(view, source)
    pairs: list[tuple[list[str], str]] = []
    gate_entry: str | None = None
    cur = node.output[0]
    pairs.append((above, cur))
    steps = 0
    while steps < region.after:
        nxt = view.single_consumer(cur)
        if nxt is None:
            break
        n = view.nodes[nxt]
        if (n.op_type not in EVALUABLE and nxt not in view.qdq_pairs) or len(n.output) != 1:
            break
        steps += nxt not in view.qdq_pairs
        others = [name for name in n.input if name and name != cur and view.scalar(name) is None]
        if others:
            # The gate: x·g(x), or x/g(x) as in softsign's x/(1+|x|).
            gates = n.op_type == "Mul" or (n.op_type == "Div" and n.input[1] == cur)
            if not gates or len(others) != 1 or gate_entry is not None:
                break
            gate_entry = _scaled_source(view, others[0], entries)
            if gate_entry is None:
                break
        cur = n.output[0]
        if n.op_type not in ("Identity", "Cast") and nxt not in view.qdq_pairs:
            pairs.append(([gate_entry] if gate_entry else above, cur))
    out = []
    for starts, exit in reversed(pairs):
        for entry in reversed(starts):
            nodes = region_nodes(view, entry, exit)
            if nodes is not None and anchor in nodes:
                out.append(Candidate(entry, exit, nodes))
    return out


def proposals(view: GraphView, anchor: int, rules: list[Rule]) -> list[tuple[Candidate, list[Rule]]]:
    """Each candidate around `anchor` with the rules whose region proposes it (in the order of `rules`).

    The regions in the order their first rule comes; a candidate two regions propose is listed once, where first.
    With one region (the built-in rules') this is `candidates` with every rule on each.
    """
    regions = list(dict.fromkeys(r.region for r in rules))
    found: dict[tuple[str, str], tuple[Candidate, set[Region]]] = {}
    for region in regions:
        for cand in candidates(view, anchor, region):
            found.setdefault((cand.entry, cand.exit), (cand, set()))[1].add(region)
    return [(cand, [r for r in rules if r.region in by]) for cand, by in found.values()]

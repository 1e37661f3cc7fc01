"""Anchor-free elementwise islands: any region of elementwise ops between one tensor and another.

Walking back from each elementwise node (the exit), the region grows by the producer of its latest
open operand until one tensor feeds it all (the entry); each such (entry, exit) whose inner tensors
stay inside is a candidate. Evaluated on probe points it is named from `library` (an outer function
wins over the one inside it: CELU over its ELU, taken on the original input) or, when it is non-affine
and names nothing, it is a site of kind `elementwise`. What islands leave alone: affine regions,
regions of algebra only (Pow, Sqrt, Div: the arithmetic of normalisations and attention scaling),
two activations in a row (two sites), single activation nodes (their own attributes say more) and a
lone unnamed op (an Exp decoding box sizes, a Log in a loss): an unnamed site takes two ops or more.
"""

from __future__ import annotations

import numpy as np

from onnxaff.graph import elementwise
from onnxaff.graph.fold import as_float64
from onnxaff.graph.patterns import library
from onnxaff.graph.patterns.region import Candidate
from onnxaff.graph.view import GraphView

MAX_ISLAND_NODES = 24
MAX_CONSTANT_SIZE = 4096
_PASS_THROUGH = {"Identity", "Cast", "CastLike"}
_ALGEBRA = _PASS_THROUGH | {"Add", "Sub", "Mul", "Div", "Pow", "Sqrt", "Reciprocal", "Neg", "Sum", "Mean"}
_SINGLE_NODE_SITES = elementwise.ACTIVATION_OPS | {"Clip", "Min", "Max"}


class Islands:
    """Candidate islands of one graph, their functions, and the choice among them."""

    def __init__(self, view: GraphView, claimed: set[int]):
        self.view, self.claimed = view, claimed
        self._var: dict[int, list[str] | None] = {}

    def variable_inputs(self, i: int) -> list[str] | None:
        """The non-constant operands of an elementwise node, or None when the node is no island op."""
        if i in self._var:
            return self._var[i]
        node, view = self.view.nodes[i], self.view
        result = None
        if node.op_type in elementwise.OPS and node.domain in ("", "ai.onnx") and node.output and node.output[0]:
            names = node.input[:1] if node.op_type == "CastLike" else node.input
            consts = [view.constant(n) for n in names if n]
            if all(c is None or c.size <= MAX_CONSTANT_SIZE for c in consts):
                result = [n for n, c in zip([n for n in names if n], consts, strict=True) if c is None] or None
        self._var[i] = result
        return result

    def candidates(self, exit_node: int) -> list[Candidate]:
        """(entry, exit) regions ending at exit_node, innermost first."""
        view = self.view
        region, frontier = {exit_node}, set(self.variable_inputs(exit_node) or [])
        out = []
        while frontier:
            if len(frontier) == 1:
                entry = next(iter(frontier))
                nodes = self._closed(entry, region, view.nodes[exit_node].output[0])
                if nodes is not None:
                    out.append(Candidate(entry, view.nodes[exit_node].output[0], nodes))
            if len(region) >= MAX_ISLAND_NODES:
                break
            t = max(frontier, key=lambda n: view.order.get(view.producer.get(n, -1), -1))
            p = view.producer.get(t)
            if p is None or p in self.claimed or p in region or self.variable_inputs(p) is None:
                break
            region.add(p)
            frontier.discard(t)
            frontier.update(self.variable_inputs(p))
        return out

    def _closed(self, entry: str, region: set[int], exit: str) -> tuple[int, ...] | None:
        view = self.view
        for i in region:
            for out in view.nodes[i].output:
                if out and out != exit and (out in view.graph_outputs or any(
                        c not in region for c in view.consumers.get(out, []))):
                    return None
        return tuple(sorted(region, key=view.order.__getitem__))

    def function(self, cand: Candidate):
        """f(x) of the island on a probe vector, shape (P, positions): constants may vary by position."""
        view = self.view
        consts = {}
        for i in cand.nodes:
            node = view.nodes[i]
            names = node.input[:1] if node.op_type == "CastLike" else node.input
            for n in names:
                if n and n != cand.entry and view.producer.get(n) not in cand.nodes:
                    consts[n] = as_float64(view.constant(n))
        ndim = max((c.ndim for c in consts.values()), default=0)
        shape = np.broadcast_shapes(*(c.shape for c in consts.values())) if consts else ()

        def f(x: np.ndarray) -> np.ndarray:
            env = {cand.entry: np.asarray(x, dtype=np.float64).reshape((-1,) + (1,) * ndim)}
            for i in cand.nodes:
                node = view.nodes[i]
                args = [None if not n else env[n] if n in env else consts.get(n) for n in node.input]
                if node.op_type == "CastLike":
                    args = args[:1]
                with np.errstate(all="ignore"):
                    env[node.output[0]] = np.asarray(elementwise.evaluate(view, node, args))
            y = env[cand.exit]
            return np.broadcast_to(y, (len(x),) + tuple(shape)).reshape(len(x), -1)

        return f, tuple(shape)

    def describe(self, cand: Candidate) -> tuple[str, dict] | None:
        """('affine', {}), a named (kind, params), ('elementwise', {}) or None (not a number function)."""
        try:  # constants that do not broadcast, a Clip with a tensor bound...: not a function of x alone
            f, shape = self.function(cand)
            g = f(library.WIDE)
        except (KeyError, ValueError, TypeError, IndexError):
            return None
        if g.dtype == bool or not np.issubdtype(g.dtype, np.number):
            return None
        g = g.astype(np.float64)
        if library.is_affine(g):
            return "affine", {}
        if np.array_equal(g, np.broadcast_to(g[:, :1], g.shape), equal_nan=True):
            hit = library.identify(g[:, 0], lambda x: f(x)[:, 0])
        else:
            hit = library.identify_columns(g, shape)
        return hit or ("elementwise", {})


def _ops(view: GraphView, cand: Candidate) -> list[str]:
    return [view.nodes[i].op_type for i in cand.nodes]


def match_islands(view: GraphView, claimed: set[int]) -> list[tuple[str, Candidate, dict]]:
    """Named islands first (largest first), then unnamed non-affine ones, none overlapping `claimed`."""
    isl = Islands(view, claimed)
    exits = [i for i in sorted(range(len(view.nodes)), key=view.order.__getitem__, reverse=True)
             if i not in claimed and isl.variable_inputs(i) is not None
             and view.nodes[i].op_type not in _PASS_THROUGH]
    named, unnamed, dead = [], [], set()
    for i in exits:
        described = []
        for cand in isl.candidates(i):
            ops = _ops(view, cand)
            if sum(op in elementwise.ACTIVATION_OPS for op in ops) > 1:
                break
            d = isl.describe(cand)
            if d is not None:
                described.append((cand, d, ops))
        if described and described[-1][1][0] == "affine" and not set(described[-1][2]) <= _ALGEBRA:
            # Non-linear parts that cancel (Clip with min > max: a constant) make no non-linearity.
            dead.update(described[-1][0].nodes)
            continue
        # Named: the outermost name, taken as far in as that same name and parameters reach.
        pick = None
        for cand, (kind, params), _ in reversed(described):
            if kind in ("affine", "elementwise"):
                if pick is not None:
                    break
                continue
            if pick is not None and (kind, params) != pick[1:]:
                break
            pick = (cand, kind, params)
        if pick is not None:
            ops = _ops(view, pick[0])
            if len(ops) > 1 or ops[0] not in _SINGLE_NODE_SITES:
                named.append(pick)
            continue
        # Unnamed: the innermost non-affine region; single activation nodes are their own sites.
        for cand, (kind, params), ops in described:
            if kind == "elementwise":
                core = [op for op in ops if op not in _PASS_THROUGH]
                if len(core) >= 2 and not set(core) & _SINGLE_NODE_SITES and not set(core) <= _ALGEBRA:
                    unnamed.append((cand, kind, params))
                break
    found = []
    taken = set(claimed) | dead
    for group in (named, unnamed):
        for cand, kind, params in sorted(group, key=lambda p: -len(p[0].nodes)):
            if taken.isdisjoint(cand.nodes):
                taken.update(cand.nodes)
                found.append((kind, cand, params))
    return found

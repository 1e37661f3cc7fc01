"""Anchor-free elementwise islands: any region of elementwise ops between one tensor and another.

Walking back from each elementwise node (the exit), the region grows by the producer of its latest
open operand until one tensor feeds it all (the entry); each such (entry, exit) whose inner tensors
stay inside is a candidate. Evaluated on probe points it is named from `library` (an outer function
wins over the one inside it: CELU over its ELU, taken on the original input) or, when it is non-affine
and names nothing, it is a site of kind `elementwise`. What islands leave alone: affine regions,
what maps no floating-point data (integer, boolean, shape or weight arithmetic), algebra beside a
reduction (Pow, Sqrt, Div: the arithmetic of normalisations), two activations in a row (two sites),
single activation nodes (their own attributes say more) and a lone unnamed op other than algebra (an Exp
decoding box sizes, a Log in a loss). A polynomial between two layers (x + 0.1·x², x·x) is a site.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from onnxaff.graph import elementwise, qdq
from onnxaff.graph.fold import as_float64
from onnxaff.graph.patterns import affine, library
from onnxaff.graph.patterns.region import Candidate
from onnxaff.graph.patterns.rule import Miss
from onnxaff.graph.view import GraphView

MAX_ISLAND_NODES = 16
MAX_CONSTANT_SIZE = 4096
PASS_THROUGH = {"Identity", "Cast", "CastLike", qdq.Q, qdq.DQ}  # Q and DQ only as a pair (variable_inputs)
_ALGEBRA = PASS_THROUGH | {"Add", "Sub", "Mul", "Div", "Pow", "Sqrt", "Reciprocal", "Neg", "Sum", "Mean"}
_SINGLE_NODE_SITES = elementwise.ACTIVATION_OPS | {"Clip", "Min", "Max"}
_FLOATS = {TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.UNDEFINED}
# Ops that average or pool over positions: algebra next to them is a normalisation's (LayerNorm's square before
# its ReduceMean, the Sqrt(var + eps) after), not an activation.
_REDUCING = {"GlobalAveragePool", "GlobalLpPool", "LpNormalization"}


def data_path(view: GraphView, cand: Candidate) -> bool:
    """A floating-point map of data: the entry derives from a graph input through computation (not from weights or
    a Shape), and the entry and exit are float (unknown types pass). Integer, boolean and shape islands are none."""
    return maps_float_data(view, cand.entry, cand.exit)


def maps_float_data(view: GraphView, entry: str, exit_: str) -> bool:
    """data_path for any entry and exit tensors (a single activation node's too)."""
    return entry not in view.static and view.elem_type(entry) in _FLOATS and view.elem_type(exit_) in _FLOATS


def _reducing(view: GraphView, i: int | None) -> bool:
    return i is not None and (view.nodes[i].op_type.startswith("Reduce") or view.nodes[i].op_type in _REDUCING)


def normalisation(view: GraphView, cand: Candidate, steps: int = 4) -> bool:
    """Algebra read from a reduction or into one, a few algebra ops away: a normalisation's arithmetic
    (LayerNorm's square and its Sqrt(var + eps), RMSNorm's reciprocal, an L2 norm)."""
    up, down = [cand.entry], [cand.exit]
    for _ in range(steps):
        producers = [view.producer.get(t) for t in up]
        consumers = [c for t in down for c in view.consumers.get(t, [])]
        if any(_reducing(view, i) for i in producers + consumers):
            return True
        up = [n for i in producers if i is not None and view.nodes[i].op_type in _ALGEBRA for n in view.nodes[i].input
              if n and view.constant(n) is None]
        down = [n for i in consumers if view.nodes[i].op_type in _ALGEBRA for n in view.nodes[i].output if n]
    return False


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
        island_op = node.op_type in elementwise.OPS or i in view.qdq_pairs
        if island_op and node.domain in ("", "ai.onnx") and node.output and node.output[0]:
            names = node.input[:1] if node.op_type == "CastLike" else node.input
            consts = [view.constant(n) for n in names if n]
            if all(c is None or c.size <= MAX_CONSTANT_SIZE for c in consts):
                result = [n for n, c in zip([n for n in names if n], consts, strict=True) if c is None] or None
        self._var[i] = result
        return result

    def candidates(self, exit_node: int) -> list[Candidate]:
        """(entry, exit) regions ending at exit_node, innermost first, with at most one activation op.

        The region grows by the latest producer first, so a node's consumers are in it before the node
        is: once a node's output leaves the region, no larger region is closed either.
        """
        view = self.view
        exit = view.nodes[exit_node].output[0]
        added = [exit_node]  # reverse forward order
        region, frontier = {exit_node}, set(self.variable_inputs(exit_node) or [])
        activations = view.nodes[exit_node].op_type in elementwise.ACTIVATION_OPS
        out = []
        while frontier:
            if len(frontier) == 1 and not qdq.opens_on_pair(view, next(iter(frontier)), region):
                out.append(Candidate(next(iter(frontier)), exit, tuple(reversed(added))))
            if len(region - view.qdq_pairs) >= MAX_ISLAND_NODES:
                break
            t = max(frontier, key=lambda n: view.order.get(view.producer.get(n, -1), -1))
            p = view.producer.get(t)
            if p is None or p in self.claimed or p in region or self.variable_inputs(p) is None:
                break
            if any(out in view.graph_outputs or any(c not in region for c in view.consumers.get(out, []))
                   for out in view.nodes[p].output if out):
                break  # an inner tensor read outside
            if view.nodes[p].op_type in elementwise.ACTIVATION_OPS:
                if activations:
                    break  # two activations in a row are two sites
                activations = True
            region.add(p)
            added.append(p)
            frontier.discard(t)
            frontier.update(self.variable_inputs(p))
        return out

    def _consts(self, entry: str, nodes) -> dict[str, np.ndarray]:
        view, inside = self.view, set(nodes)
        consts = {}
        for i in nodes:
            node = view.nodes[i]
            for n in (node.input[:1] if node.op_type == "CastLike" else node.input):
                if n and n != entry and view.producer.get(n) not in inside:
                    consts[n] = as_float64(view.constant(n))
        return consts

    def _run(self, entry: str, nodes, consts: dict, x: np.ndarray) -> dict[str, np.ndarray]:
        """Every tensor of `nodes` (forward order) from x at the entry; x along a new leading axis."""
        view = self.view
        ndim = max((c.ndim for c in consts.values()), default=0)
        env = {entry: np.asarray(x, dtype=np.float64).reshape((-1,) + (1,) * ndim)}
        with np.errstate(all="ignore"):
            for i in nodes:
                node = view.nodes[i]
                args = [None if not n else env[n] if n in env else consts.get(n) for n in node.input]
                env[node.output[0]] = np.asarray(
                    elementwise.evaluate(view, node, args[:1] if node.op_type == "CastLike" else args))
        return env

    @staticmethod
    def _columns(y: np.ndarray, n: int) -> np.ndarray:
        return np.broadcast_to(y, (n,) + y.shape[1:]).reshape(n, -1)

    def function(self, cand: Candidate):
        """f(x) of the island on a probe vector, shape (P, positions): constants may vary by position."""
        consts = self._consts(cand.entry, cand.nodes)

        def f(x: np.ndarray) -> np.ndarray:
            return self._columns(self._run(cand.entry, cand.nodes, consts, x)[cand.exit], len(x))

        return f

    def values(self, cands: list[Candidate]) -> dict[Candidate, np.ndarray | None]:
        """Each candidate on the probe points; one forward run per entry serves all its exits."""
        by_entry: dict[str, list[Candidate]] = {}
        for c in cands:
            by_entry.setdefault(c.entry, []).append(c)
        out: dict[Candidate, np.ndarray | None] = {}
        for entry, group in by_entry.items():
            nodes = sorted({i for c in group for i in c.nodes}, key=self.view.order.__getitem__)
            try:  # constants that do not broadcast, a Clip with a tensor bound...: not a function of x alone
                env = self._run(entry, nodes, self._consts(entry, nodes), library.WIDE)
                out.update((c, self._columns(env[c.exit], len(library.WIDE))) for c in group)
            except (KeyError, ValueError, TypeError, IndexError):
                out.update((c, None) for c in group)
        return out

    def affine(self, cand: Candidate) -> affine.Verdict:
        """Whether the island is a + b·x per position: derived from its ops where they allow, else on probes."""
        consts = self._consts(cand.entry, cand.nodes)
        exact = affine.from_ops(self.view, cand.entry, cand.nodes, consts)
        if exact is not None:
            return exact
        n = len(affine.SPREAD)
        env = self._run(cand.entry, cand.nodes, consts, affine.SPREAD)
        with np.errstate(all="ignore"):
            magnitude = sum(np.abs(self._columns(np.asarray(t, np.float64), n)) for t in env.values())
        return affine.on_probes(self._columns(np.asarray(env[cand.exit], np.float64), n), magnitude)

    def name(self, cand: Candidate, g: np.ndarray, misses: list[Miss] | None = None) -> tuple[str, dict] | None:
        """The named function (kind, params) the island computes, or None (affine functions name none);
        each library entry's refusal goes to `misses` when given."""
        if g.shape[1] == 1 or np.array_equal(g, np.broadcast_to(g[:, :1], g.shape), equal_nan=True):
            return library.identify(g[:, 0], lambda x: self.function(cand)(x)[:, 0], misses)
        try:
            shape = np.broadcast_shapes(*(c.shape for c in self._consts(cand.entry, cand.nodes).values()))
        except ValueError:
            if misses is not None:
                misses.append(Miss("prelu", "its per-position constants do not broadcast together"))
            return None
        return library.identify_columns(g, shape if int(np.prod(shape)) == g.shape[1] else (g.shape[1],), misses)


def _ops(view: GraphView, cand: Candidate) -> list[str]:
    return [view.nodes[i].op_type for i in cand.nodes]


def match_islands(view: GraphView, claimed: set[int],
                  misses: list[tuple[str, Candidate, Miss]] | None = None) -> list[tuple[str, Candidate, dict]]:
    """Named islands first (largest first), then unnamed non-affine ones, none overlapping `claimed`.

    With `misses`, every refusal is recorded with its region (what `sites` explains); the result is the same.
    """
    isl = Islands(view, claimed)
    exits = [i for i in sorted(range(len(view.nodes)), key=view.order.__getitem__, reverse=True)
             if i not in claimed and isl.variable_inputs(i) is not None
             and view.nodes[i].op_type not in PASS_THROUGH]
    per_exit = {i: isl.candidates(i) for i in exits}
    values = isl.values([c for cands in per_exit.values() for c in cands])
    for c, g in values.items():
        usable = g is not None and g.size and np.issubdtype(g.dtype, np.number)
        values[c] = g.astype(np.float64) if usable else None
    verdicts: dict[Candidate, affine.Verdict] = {}

    def is_affine(c: Candidate) -> bool:  # computed only where asked: most candidates never are
        if c not in verdicts:
            verdicts[c] = isl.affine(c)
        return verdicts[c].affine

    def refuse(c: Candidate, why: str, *args) -> None:
        if misses is not None:
            misses.append(("island", c, Miss("island", why, args)))

    named, unnamed, dead = [], [], set()
    for i in exits:
        for c in per_exit[i]:
            if values[c] is None:
                refuse(c, "not a function of its entry alone (constants that do not broadcast, a tensor bound)")
        for c in per_exit[i]:
            if values[c] is not None and not data_path(view, c):
                refuse(c, "maps no floating-point data (an integer, boolean or shape tensor, or weights): no site")
        cands = [c for c in per_exit[i] if values[c] is not None and data_path(view, c)]
        if cands and is_affine(cands[-1]) and not set(_ops(view, cands[-1])) <= _ALGEBRA:
            # Non-linear parts that cancel (Clip with min > max: a constant) make no non-linearity.
            dead.update(cands[-1].nodes)
            refuse(cands[-1], "its non-linear parts cancel, so neither it nor its ops are sites: {}",
                   verdicts[cands[-1]].reason)
            continue
        # Named: the outermost name, taken as far in as that same name and parameters reach.
        pick = None
        for cand in reversed(cands):
            tried = None if misses is None else []
            hit = isl.name(cand, values[cand], tried)
            if tried:
                misses.extend(("library", cand, m) for m in tried)
            if hit is not None and is_affine(cand):  # a line far from 0 is within the library's tolerance of a
                refuse(cand, "would be {} to the library's tolerance, but is a line: {}",  # bound: no name
                       hit[0], verdicts[cand].reason)
                hit = None
            if hit is None:
                if pick is not None:
                    break
                continue
            if pick is not None and hit != pick[1:]:
                break
            pick = (cand, *hit)
        if pick is not None:
            # A lone op is the single-node pass's (Relu, Max(x, 0)) or no site (|x| is a leaky ReLU of -1).
            if len([op for op in _ops(view, pick[0]) if op not in PASS_THROUGH]) >= 2:
                named.append(pick)
            else:
                refuse(pick[0], "computes {} but is a lone op: the single-node pass's, or no site", pick[1])
            continue
        # Unnamed: the innermost non-affine region; single activation nodes are their own sites.
        for cand in cands:
            if not is_affine(cand):
                core = [op for op in _ops(view, cand) if op not in PASS_THROUGH]
                algebra = set(core) <= _ALGEBRA  # a polynomial, x²: a site unless a normalisation's
                if algebra and not np.isfinite(values[cand]).all():
                    refuse(cand, "names nothing and is algebra that is not finite on the probe points ({}): a "
                           "division by zero, no activation", "+".join(core))
                elif ((len(core) >= 2 or algebra) and not set(core) & _SINGLE_NODE_SITES
                        and not (algebra and normalisation(view, cand))):
                    unnamed.append((cand, "elementwise", {}))
                else:
                    _refuse_unnamed(refuse, cand, core)
                break
        else:
            if cands and misses is not None:  # the largest island ending here is a + b·x: what `--explain` shows
                misses.append(("affine", cands[-1], Miss("affine", verdicts[cands[-1]].reason)))
    found = []
    taken = set(claimed) | dead
    for group in (named, unnamed):
        for cand, kind, params in sorted(group, key=lambda p: -len(p[0].nodes)):
            if taken.isdisjoint(cand.nodes):
                taken.update(cand.nodes)
                found.append((kind, cand, params))
            else:
                refuse(cand, "would be {} but overlaps a site taken first (a larger island or an earlier pass)", kind)
    return found


def _refuse_unnamed(refuse, cand: Candidate, core: list[str]) -> None:
    """Why the innermost non-affine island names nothing and is still no `elementwise` site."""
    if set(core) <= _ALGEBRA:
        refuse(cand, "names nothing and is algebra next to a reduction ({}): a normalisation's arithmetic",
               "+".join(core))
    elif len(core) < 2:
        refuse(cand, "names nothing and is a lone op ({}): an unnamed site takes two ops or more", "+".join(core))
    else:
        refuse(cand, "names nothing and holds {}, a site of its own: an unnamed island takes no activation op",
               "+".join(sorted(set(core) & _SINGLE_NODE_SITES)))

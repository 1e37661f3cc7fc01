"""W2² between two uniform clouds of n rows: the dense assignment, and an exact sparse one that scales.

Both return the optimal assignment's cost (the same number to rounding); they differ in what they hold:

- `dense`: scipy's `linear_sum_assignment` on the n×n matrix of squared distances: 8n² bytes (2.1 GB at
  n = 16,384) and a cubic solver. Refused in one line when the matrix does not fit in the memory available.
- `sparse`: the assignment restricted to candidate edges (each row's k nearest columns, each column's nearest row
  in each strip of rows (the k best kept), and the rows' own pairing i ↔ i, so a full matching always exists),
  solved exactly on that graph
  (scipy's `min_weight_full_bipartite_matching`, LAPJVsp), then *certified* on the whole matrix: dual
  potentials u of the sparse optimum (shortest paths in its residual graph) and their c-transform
  v_j = min_i (c_ij − u_i), computed in row strips, give the lower bound Σu + Σv ≤ W2²·n of every assignment
  (LP duality). If the matched cost exceeds it by more than the rounding tolerance, the edges that violate the
  bound join the graph and the sparse problem is solved again. The returned cost is therefore the exact optimum
  (to rounding, like the dense one), never an approximation; memory is O(n·k + strip·n), time O(n²d) per pass
  over the full matrix (the kNN pass and one certification pass per round) plus the sparse solve. The passes
  multiply in float32 under a rigorous error bound (`_Strips`); what it leaves in doubt is redone in float64.

`choose(n, d, transport)` names the solver a chunk gets: `auto` takes `dense` up to `DENSE_MAX_ROWS` rows, and
above them while its matrix takes at most half the memory available; `sparse` only where it would not fit
(docs/metrics.md, "The affinity score"; benchmarks/transport_bench.py measured both). Why dense first: it was
as fast or faster wherever it fits, and the sparse solver's matching can take minutes on peaked clouds (a
softmax site's near-one-hot rows: scipy's LAPJVsp on a few thousand candidate edges).
"""

from __future__ import annotations

import numpy as np

from onnxaff.metrics import available_bytes

TRANSPORTS = ("auto", "dense", "sparse")
# auto: the dense solver up to this many rows (its matrix is 134 MB there) whatever the memory says, above them
# while the matrix takes at most DENSE_MEMORY_SHARE of the memory available; the certified sparse one beyond.
DENSE_MAX_ROWS = 4096
DENSE_MEMORY_SHARE = 0.5
# One pass of the sparse path over the n² pairs: float32 products (per pair and feature) and the selections and
# masks on each pair (benchmarks/RESULTS.md, a quiet 2-core box).
SPARSE_SECONDS_PER_PASS_ROW2_DIM = 6e-11
SPARSE_SECONDS_PER_PASS_ROW2 = 2e-8
NEIGHBOURS = 16  # candidate edges per row and per column before certification
STRIP_BYTES = 64 * 2**20  # one strip of the full cost matrix in the certification passes
MAX_ROUNDS = 60
DOUBT_SHARE = 1 / 64  # entries left in doubt by float32 past which a strip is recomputed in float64
PER_COLUMN = 32  # violating edges a certification pass adds per column (the worst ones)
TOLERANCE = 1e-12  # per-row slack of the certificate, relative to the largest squared row norm (rounding)


def available_memory() -> int | None:
    """What a run may still allocate (onnxaff.foundations.memory: MemAvailable within `ulimit -v`), None where
    unknown."""
    return available_bytes()


def dense_bytes(n: int) -> int:
    """Peak extra memory of the dense path: the float64 cost matrix (scipy's solver works in place on it)."""
    return 8 * n * n


def check_dense_fits(n: int) -> None:
    need, free = dense_bytes(n), available_memory()
    if free is not None and need > free:
        raise MemoryError(f"the dense assignment on {n:,} rows needs {need / 1e9:.3g} GB for its cost matrix and "
                          f"{free / 1e9:.3g} GB is available: use transport=sparse (exact, certified) or "
                          "smaller chunks")


def choose(n: int, d: int, transport: str) -> str:
    """The method `transport` takes for n rows of d features (d ≤ 1: a sort, named 'sorted')."""
    if transport not in TRANSPORTS:
        raise ValueError(f"transport must be one of {', '.join(TRANSPORTS)}, not {transport!r}")
    if d <= 1:
        return "sorted"
    if transport == "auto":
        return "dense" if n <= DENSE_MAX_ROWS or dense_fits(n) else "sparse"
    return transport


def dense_fits(n: int) -> bool:
    """The dense matrix takes at most DENSE_MEMORY_SHARE of the memory available (unknown: it is assumed not to)."""
    free = available_memory()
    return free is not None and dense_bytes(n) <= DENSE_MEMORY_SHARE * free


def _matched_cost(a: np.ndarray, b: np.ndarray, cols: np.ndarray) -> float:
    """Mean ‖a_i − b_cols[i]‖² from differences (the expanded form loses digits when the clouds nearly coincide)."""
    total = 0.0
    step = max(1, STRIP_BYTES // (8 * a.shape[1]))
    for s in range(0, len(a), step):
        diff = a[s:s + step] - b[cols[s:s + step]]
        total += float(np.einsum("ij,ij->", diff, diff))
    return total / len(a)


# --- the certified sparse assignment ---

U32 = 2.0**-24  # float32's unit roundoff


class _Strips:
    """The full cost matrix c_ij = ‖a_i‖² + ‖b_j‖² − 2 a_i·b_j one strip of rows at a time (never all of it), its
    products in float32 (twice as fast as float64) with a rigorous bound on their error: for any summation
    order, |fl32(a_i·b_j) − a_i·b_j| ≤ (γ_d + 3u)‖a_i‖‖b_j‖, γ_d = du/(1 − du), u = 2⁻²⁴ (rounding the inputs to
    float32 and the products' sum; Higham, Accuracy and Stability, §3.1). Where the bound leaves an entry in
    doubt, the caller recomputes it in float64 from differences."""

    def __init__(self, a: np.ndarray, b: np.ndarray):
        self.a, self.b = a, b
        self.aa, self.bb = np.einsum("ij,ij->i", a, a), np.einsum("ij,ij->i", b, b)
        self.na, self.nb = np.sqrt(self.aa), np.sqrt(self.bb)
        d = a.shape[1]
        self.exact = max(float(self.aa.max()), float(self.bb.max())) > 1e30 or d * U32 > 0.01  # float32 unsafe
        self.a32, self.b32 = (None, None) if self.exact else (a.astype(np.float32), b.astype(np.float32))
        self.bound = 0.0 if self.exact else 2.02 * (d * U32 / (1 - d * U32) + 3 * U32)
        self.step = max(1, min(len(a), STRIP_BYTES // (8 * len(b))))

    def __iter__(self):
        """(start, stop, costs as float64, error bound of each entry: an s × n array, or 0.0 when exact)."""
        for s in range(0, len(self.a), self.step):
            e = min(s + self.step, len(self.a))
            if self.exact:
                c = self.a[s:e] @ self.b.T
                err = 0.0
            else:
                c = (self.a32[s:e] @ self.b32.T).astype(np.float64)
                err = self.bound * np.multiply.outer(self.na[s:e], self.nb)
            c *= -2.0
            c += self.aa[s:e, None]
            c += self.bb[None, :]
            yield s, e, c, err


def _candidates(strips: _Strips, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Candidate edges (rows, cols): each row's k nearest columns, and for each column the nearest row of each
    strip, the k best of those kept (approximate nearest rows; certification finds whatever they miss)."""
    n = len(strips.b)
    rows_near = np.empty((len(strips.a), k), dtype=np.int64)
    best_i, best_v = [], []
    for s, e, c, _ in strips:
        rows_near[s:e] = np.argpartition(c, k - 1, axis=1)[:, :k] if k < c.shape[1] else np.arange(n)
        i = np.argmin(c, axis=0)
        best_i.append(i + s)
        best_v.append(c[i, np.arange(n)])
    best_i, best_v = np.array(best_i), np.array(best_v)
    if len(best_i) > k:
        keep = np.argpartition(best_v, k - 1, axis=0)[:k]
        best_i = np.take_along_axis(best_i, keep, axis=0)
    cols = np.broadcast_to(np.arange(n), best_i.shape)
    return (np.concatenate([np.repeat(np.arange(len(strips.a)), rows_near.shape[1]), best_i.ravel()]),
            np.concatenate([rows_near.ravel(), cols.ravel()]))


def _edge_costs(a: np.ndarray, b: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    out = np.empty(len(rows))
    step = max(1, STRIP_BYTES // (8 * a.shape[1]))
    for s in range(0, len(rows), step):
        diff = a[rows[s:s + step]] - b[cols[s:s + step]]
        out[s:s + step] = np.einsum("ij,ij->i", diff, diff)
    return out


def _potentials(rows, cols, cost, match, n, tol):
    """Dual potentials (u, v) of an optimal matching on the sparse graph: u_i + v_j ≤ c_ij on every edge, with
    equality on the matched ones. v = shortest distances to the columns in the residual graph (row i → column j
    along an unmatched edge at c_ij, column match[i] → row i at −c_i,match[i], every row reached at 0 from a
    source), u_i = c_i,match[i] − v_match[i]. Bellman–Ford, vectorised over the edges; an update smaller than
    tol is rounding and ends it (a matching optimal to rounding leaves no cycle more negative than that)."""
    matched = cols == match[rows]
    cm = np.empty(n)
    cm[rows[matched]] = cost[matched]
    free_cost = np.where(matched, np.inf, cost)
    order = np.argsort(cols, kind="stable")
    starts = np.flatnonzero(np.r_[True, np.diff(cols[order]) != 0])
    col_of_seg = cols[order][starts]
    rows_o, cost_o = rows[order], free_cost[order]
    p_row = np.zeros(n)
    p_col = np.full(n, np.inf)
    for _ in range(4 * n + 8):
        new_col = np.full(n, np.inf)
        new_col[col_of_seg] = np.minimum.reduceat(p_row[rows_o] + cost_o, starts)
        new_col = np.minimum(new_col, p_col)
        new_row = np.minimum(0.0, new_col[match] - cm)
        changed = np.any(new_col < p_col - tol) or np.any(new_row < p_row - tol)
        p_col, p_row = new_col, new_row
        if not changed:
            break
    return cm - p_col[match], p_col


def _violations(a, b, strips: _Strips, u, v, match, tol, per_column: int):
    """The c-transform check of the whole matrix: (edges (rows, cols, exact costs) with c_ij − u_i − v_j < −tol,
    at most per_column of the worst per column; Σ_j (v_j − min_i (c_ij − u_i)), the certificate's gap).

    An entry is cleared when its float32 cost minus its error bound still leaves no violation; the others (the
    matched and dual-tight edges, near-ties) are recomputed in float64 from differences."""
    n = len(b)
    deficit = np.zeros(n)  # v_j − min_i (c_ij − u_i), clipped at 0
    found_r, found_c, found_x, found_rc = [], [], [], []
    for s, e, c, err in strips:
        c -= u[s:e, None]
        c -= v[None, :]
        c -= err
        doubt = c < -tol
        doubt[np.arange(e - s), match[s:e]] = False  # matched: c − u − v = 0 by construction
        if np.count_nonzero(doubt) > DOUBT_SHARE * doubt.size:  # cheaper as one float64 product for the strip
            c = a[s:e] @ b.T
            c *= -2.0
            c += strips.aa[s:e, None] + strips.bb[None, :] - u[s:e, None] - v[None, :]
            doubt = c < -tol
            doubt[np.arange(e - s), match[s:e]] = False
            r, j = np.nonzero(doubt)
            rc = c[r, j]  # float64 to rounding, as the dense path's matrix
            r = r + s
            bad = rc < -tol
            r, j, rc = r[bad], j[bad], rc[bad]
            exact = _edge_costs(a, b, r, j)
        else:
            r, j = np.nonzero(doubt)
            if not len(r):
                continue
            r = r + s
            exact = _edge_costs(a, b, r, j)
            rc = exact - u[r] - v[j]
            bad = rc < -tol
            r, j, rc, exact = r[bad], j[bad], rc[bad], exact[bad]
        if not len(r):
            continue
        np.minimum.at(deficit, j, rc)
        found_r.append(r)
        found_c.append(j)
        found_x.append(exact)
        found_rc.append(rc)
    gap = -float(deficit.sum()) / n
    if not found_r:
        return (np.empty(0, np.int64),) * 2 + (np.empty(0),), gap
    r, j, x, rc = (np.concatenate(z) for z in (found_r, found_c, found_x, found_rc))
    order = np.lexsort((rc, j))  # by column, worst first
    j_sorted = j[order]
    first = np.searchsorted(j_sorted, j_sorted, side="left")
    rank = np.arange(len(order)) - first
    pick = order[rank < per_column]
    return (r[pick], j[pick], x[pick]), gap


def sparse_w2(a: np.ndarray, b: np.ndarray, neighbours: int = NEIGHBOURS) -> tuple[float, dict]:
    """Exact W2² by a certified sparse assignment (module docstring). Returns (cost, facts): rounds, edges, gap
    (matched cost − the certified lower bound, per row), passes (over the full cost matrix)."""
    from scipy.sparse import csr_array
    from scipy.sparse.csgraph import min_weight_full_bipartite_matching

    n = len(a)
    k = min(neighbours, n)
    # Costs are differences: moving both clouds by one vector changes none, and puts the norms the tolerance and
    # the float32 bounds are relative to at the clouds' spread (an offset of 1e6 had loosened them to a 9 % error).
    centre = np.concatenate([a, b]).mean(axis=0)
    a, b = a - centre, b - centre
    strips = _Strips(a, b)
    tol = TOLERANCE * float(strips.aa.max() + strips.bb.max())
    cand_r, cand_c = _candidates(strips, k)
    ident = np.arange(n)
    # The pairing i ↔ i makes a full matching certain; i + 1 → i gives every column a second row, so that every
    # column is reached in the residual graph (finite potentials).
    extra_r, extra_c = np.concatenate([ident, (ident + 1) % n]), np.concatenate([ident, ident])
    key = np.unique(np.concatenate([cand_r, extra_r]) * n + np.concatenate([cand_c, extra_c]))
    rows, cols = key // n, key % n
    cost = _edge_costs(a, b, rows, cols)
    passes, gap = 1, np.inf
    for _ in range(MAX_ROUNDS):
        offset = 1.0 + float(cost.max())  # LAPJVsp reads a zero weight as no edge: shift them all (same optimum)
        graph = csr_array((cost + offset, (rows, cols)), shape=(n, n))
        _, match = min_weight_full_bipartite_matching(graph)
        u, v = _potentials(rows, cols, cost, match, n, tol / 16)
        (new_r, new_c, new_x), gap = _violations(a, b, strips, u, v, match, tol, PER_COLUMN)
        passes += 1
        if gap <= tol or not len(new_r):
            break
        rows, cols, cost = np.concatenate([rows, new_r]), np.concatenate([cols, new_c]), np.concatenate([cost, new_x])
    else:
        raise ArithmeticError(f"the sparse assignment on {n:,} rows was not certified (gap {gap:.3g} per row after "
                              f"{MAX_ROUNDS} rounds); use transport=dense")
    if gap > tol:
        raise ArithmeticError(f"the sparse assignment on {n:,} rows was not certified (gap {gap:.3g} per row, "
                              "no violating edge left to add); use transport=dense")
    return _matched_cost(a, b, match), {"rounds": passes - 1, "edges": len(rows), "gap": gap, "passes": passes}

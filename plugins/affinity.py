"""The affinity score (Bouniot et al., CVPR 2025, eq. 5) and its Ledoit–Wolf variant.

ρ_aff = 1 − sqrt(W2²(T#P_X, P_Y) / (2 tr Σ_Y)) where T is the optimal-transport map between the
Gaussian fits of X and Y and W2² is the exact OT cost between the two point clouds. ρ = 1 when Y is
an affine image of X through a symmetric positive definite map; it uses the distributions, not the
pairing of rows.

Both covariances have the form Σ = c·XcᵀXc + α·I (unbiased: c = 1/(n−1), α = ε; Ledoit–Wolf with shrinkage
s: c = (1−s)/n, α = sμ + ε), which is what lets one chunk cost O(n²d + n³) instead of O(d³) when d > 2n
(`_span_problem`), and both variants of a chunk share XcᵀXc and YcᵀYc when n ≥ d (`_map_problem`).
"""

from __future__ import annotations

import threading

import numpy as np

from onnxaff.metrics import Chunk, Metric, Needs
from onnxaff_plugins.linalg import (
    AFFINITY_SECONDS_PER_ROW2_DIM,
    EPS,
    as_rows,
    ledoit_wolf_shrinkage,
    lower_gram,
    psd_inv_sqrt,
    psd_inv_sqrt_parts,
    psd_sqrt,
    squared_distances,
    times_lower,
    times_lower_t,
)
from onnxaff_plugins.transport import (
    SPARSE_SECONDS_PER_PASS_ROW2,
    SPARSE_SECONDS_PER_PASS_ROW2_DIM,
    TRANSPORTS,
    check_dense_fits,
    choose,
    sparse_w2,
)

METHODS = ("auto", "direct", "map", "span")
MAP_ROWS_PER_DIM = 1.0  # auto forms the d×d map from n ≥ d rows on (benchmarks/RESULTS.md, issue 40)
SHRINKAGES = ("none", "ledoit_wolf")


def affine_ot_map(sigma_x: np.ndarray, sigma_y: np.ndarray, eps: float = EPS) -> np.ndarray:
    """A = S (S Σ_X S)^{-1/2} S with S = Σ_Y^{1/2}; A = 0 for a constant output (tr Σ_Y ≤ 2ε·d).

    The literal formula, as a d×d matrix; `affinity_score` applies the same map to rows more cheaply.
    """
    d = sigma_y.shape[0]
    if np.trace(sigma_y) <= 2.0 * eps * d:
        return np.zeros_like(sigma_y)
    s = psd_sqrt(sigma_y)
    return s @ psd_inv_sqrt(s @ sigma_x @ s) @ s


def exact_w2_squared(a: np.ndarray, b: np.ndarray) -> float:
    """Exact OT cost between two uniform clouds of equal size: an assignment problem.

    The matched costs are recomputed as ‖a_i − b_j‖² from differences: the expanded form used for the whole
    cost matrix loses digits to cancellation exactly where they matter, when the clouds nearly coincide (ρ ≈ 1,
    where ρ depends on the square root of this cost).
    """
    if a.shape[1] == 1:  # on the line the sorted matching is optimal (monotone rearrangement): O(n log n)
        diff = np.sort(a[:, 0]) - np.sort(b[:, 0])
        return float(np.dot(diff, diff) / len(diff))
    from scipy.optimize import linear_sum_assignment  # 0.1 s of import: only for clouds off the line

    rows, cols = linear_sum_assignment(squared_distances(a, b))
    diff = a[rows] - b[cols]
    return float(np.einsum("ij,ij->", diff, diff) / len(rows))


SHARED_BYTES = 128 * 2**20  # per scoring thread: the most the kept chunk's shared work may take (see `_ChunkWork`)


class _ChunkWork:
    """What every variant computes alike from one chunk: centred rows, their squared norms and, when asked for,
    the Gram matrices of Y (direct and map paths) and of X (map path) and the QR coordinates (span path).

    The metrics of a chunk run one after the other on one scoring thread (affinity, then affinity_lw), each on its
    own copy of the chunk, so `_chunk_work` finds a chunk again by content (exact equality of X and Y) among the
    last one this thread scored (the variants of a chunk follow each other), if its work is at most SHARED_BYTES
    once the first variant is done: the second skips the centring, the Gram matrices or the O(n²d) QR. Only one
    is kept: more held 128 MB on MobileNetV2's two scoring threads for no hit. Once R exists the centred rows
    are let go (the span path reads R alone, and they are recomputed, to the same bits, if another path asks):
    at n = 512, d = 11008 the work is then 98 MB instead of 188, and sharing it takes the two metrics from 3.3
    to 1.9 CPU s (benchmarks/RESULTS.md, issue 40).
    The numbers are the same bit for bit as computing them again.
    """

    def __init__(self, x: np.ndarray, y: np.ndarray):
        self.x, self.y = x, y
        self._xc = self._yc = self._gram_x = self._gram_y = self._r = self._xx = None
        self.yy = float(np.einsum("ij,ij->", self.yc, self.yc))

    @property
    def xx(self) -> float:
        """‖Xc‖², read by the relative ε alone (so not made for the default metrics)."""
        if self._xx is None:
            self._xx = float(np.einsum("ij,ij->", self.xc, self.xc))
        return self._xx

    @property
    def xc(self) -> np.ndarray:
        if self._xc is None:
            self._xc = self.x - self.x.mean(axis=0)
        return self._xc

    @property
    def yc(self) -> np.ndarray:
        if self._yc is None:
            self._yc = self.y - self.y.mean(axis=0)
        return self._yc

    @property
    def gram_x(self) -> np.ndarray:
        if self._gram_x is None:
            self._gram_x = self.xc.T @ self.xc
        return self._gram_x

    @property
    def gram_y(self) -> np.ndarray:
        if self._gram_y is None:
            self._gram_y = self.yc.T @ self.yc
        return self._gram_y

    @property
    def r(self) -> np.ndarray:
        if self._r is None:
            self._r = _span_r(self.xc, self.yc)
            self._xc = self._yc = None
        return self._r

    def nbytes(self) -> int:
        held = (self.x, self.y, self._xc, self._yc, self._gram_x, self._gram_y, self._r)
        return sum(a.nbytes for a in held if a is not None)

    def matches(self, x: np.ndarray, y: np.ndarray) -> bool:
        return (x.shape == self.x.shape and y.shape == self.y.shape and np.array_equal(x, self.x)
                and np.array_equal(y, self.y))


def _span_r(xc: np.ndarray, yc: np.ndarray) -> np.ndarray:
    """R of the Householder QR of [Ycᵀ Xcᵀ] (d × 2n): see `_span_problem`."""
    # numpy's LAPACK, not scipy's faster-alone geqrt: two OpenBLAS pools in one chunk spin against each other.
    return np.linalg.qr(np.concatenate([yc, xc]).T, mode="r")


_recent = threading.local()


def _chunk_work(x: np.ndarray, y: np.ndarray) -> _ChunkWork:
    """This chunk's shared work, found again if this thread scored the same rows last (see `_ChunkWork`)."""
    work = getattr(_recent, "work", None)
    if work is not None and work.matches(x, y):
        return work
    # Keep the rows as given when nothing can change them (a read-only chunk owning its memory), else a copy.
    own = [a if not a.flags.writeable and a.base is None else a.copy() for a in (x, y)]
    _recent.work = work = _ChunkWork(*own)  # in place of the older one
    return work


def _keep_within_budget(work: _ChunkWork) -> None:
    """Forget `work` if, now that a variant is done with it, it holds more than SHARED_BYTES."""
    if getattr(_recent, "work", None) is work and work.nbytes() > SHARED_BYTES:
        _recent.work = None


def _scales(xc: np.ndarray, d: int, eps: float, shrinkage: str, gram: np.ndarray | None = None) -> tuple[float, float]:
    """(c, α) with Σ = c·XcᵀXc + α·I for centred rows `xc` (in any orthonormal coordinates of R^d); `gram`: XcᵀXc
    where a path holds it already (Ledoit–Wolf reads its Frobenius norm)."""
    n = xc.shape[0]
    if shrinkage == "ledoit_wolf":
        s, mu = ledoit_wolf_shrinkage(xc, d, gram)
        return (1.0 - s) / n, s * mu + eps
    return 1.0 / (n - 1), eps


class _Root:
    """Any L with L Lᵀ = Σ: Cholesky (a fraction of an eigendecomposition), the symmetric root if Σ is singular.

    L (Lᵀ Σ_X L)^{+1/2} Lᵀ = S (S Σ_X S)^{+1/2} S for every such L: L = S·Q with Q orthogonal, and Lᵀ Σ_X L =
    Qᵀ (S Σ_X S) Q has the same eigenvalues (hence the same floor or cutoff) and rotated eigenvectors. Products with a
    triangular L use trmm and lauum (half, a third of the work of a general product).
    """

    def __init__(self, sigma: np.ndarray):
        try:
            self.factor, self.lower = np.linalg.cholesky(sigma), True
        except np.linalg.LinAlgError:  # Σ_Y singular to working precision: ε = 0, or ε below the data's rounding
            self.factor, self.lower = psd_sqrt(sigma), False

    def right(self, a: np.ndarray) -> np.ndarray:
        """a · L"""
        return times_lower(a, self.factor) if self.lower else a @ self.factor

    def right_t(self, a: np.ndarray) -> np.ndarray:
        """a · Lᵀ"""
        return times_lower_t(a, self.factor) if self.lower else a @ self.factor.T

    def left(self, a: np.ndarray) -> np.ndarray:
        """L · a"""
        return times_lower_t(np.ascontiguousarray(a.T), self.factor).T if self.lower else self.factor @ a

    def left_t(self, a: np.ndarray) -> np.ndarray:
        """Lᵀ · a"""
        return times_lower(np.ascontiguousarray(a.T), self.factor).T if self.lower else self.factor.T @ a

    def gram(self) -> np.ndarray:
        """Lᵀ L"""
        return lower_gram(self.factor) if self.lower else self.factor.T @ self.factor


def _inv_sqrt_rows(b: np.ndarray, lt_l: np.ndarray, cx: float, ax: float, dim: int, floor: float) -> np.ndarray:
    """Rows b·(Lᵀ Σ_X L)^{+1/2} for b = Xc·L, where Lᵀ Σ_X L = cx·bᵀb + ax·LᵀL; xc·A is that times Lᵀ.

    A itself (d×d) is never formed. floor: α_X·α_Y, below which Lᵀ Σ_X L has no eigenvalue; at 0 (ε = 0), dim sets
    the pinv cutoff as on the full d×d matrix (see `psd_inv_sqrt_parts`).
    """
    m = cx * (b.T @ b) + ax * lt_l
    v, inv = psd_inv_sqrt_parts(m, dim, floor)
    return ((b @ v) * inv) @ v.T


def _shifted(gram: np.ndarray, c: float, a: float) -> np.ndarray:
    """c·gram + a·I, a new array: a covariance Σ = c·XcᵀXc + α·I from its Gram matrix (see `_scales`)."""
    sigma = c * gram
    sigma[np.diag_indices(len(sigma))] += a
    return sigma


def _direct_problem(work: _ChunkWork, d, eps, shrinkage):
    """Mapped X rows and Y rows (both centred) in R^d, with d×d covariances: O(nd² + d³). eps: (ε_X, ε_Y)."""
    xc, yc = work.xc, work.yc
    cx, ax = _scales(xc, d, eps[0], shrinkage)
    cy, ay = _scales(yc, d, eps[1], shrinkage, work.gram_y)
    root = _Root(_shifted(work.gram_y, cy, ay))
    rows = _inv_sqrt_rows(root.right(xc), root.gram(), cx, ax, d, ax * ay)
    return root.right_t(rows), yc


def _map_problem(work: _ChunkWork, d, eps, shrinkage):
    """The direct path's rows through A = L (Lᵀ Σ_X L)^{+1/2} Lᵀ formed as a d×d matrix: cheaper when n ≳ d.

    Per metric the direct path makes five n×d×d products (x·L, bᵀb, b·V, ·Vᵀ, ·Lᵀ); this one makes one (xc·A) and
    d×d×d ones (Σ_X·L, Lᵀ·(Σ_X L), L·V, the symmetric A), from XcᵀXc computed once per chunk for every variant (and
    read by Ledoit–Wolf): 10–35 % less CPU per chunk from n ≈ d rows on, about even at n = d/2 (benchmarks/RESULTS.md,
    issue 40). Lᵀ Σ_X L is the same matrix as the direct path's cx·bᵀb + ax·LᵀL, hence the same eigenvalues and
    the same floor.
    """
    xc, yc = work.xc, work.yc
    cx, ax = _scales(xc, d, eps[0], shrinkage, work.gram_x)
    cy, ay = _scales(yc, d, eps[1], shrinkage, work.gram_y)
    root = _Root(_shifted(work.gram_y, cy, ay))
    m = root.left_t(root.right(_shifted(work.gram_x, cx, ax)))  # Lᵀ Σ_X L
    v, inv = psd_inv_sqrt_parts(m, d, ax * ay)
    return _mapped_rows(xc, root.left(v), inv), yc


def _mapped_rows(xc: np.ndarray, lv: np.ndarray, inv: np.ndarray) -> np.ndarray:
    """xc·A with A = (L V) diag(inv) (L V)ᵀ, formed as half·halfᵀ (symmetric to the last bit)."""
    half = lv * np.sqrt(inv)
    return xc @ (half @ half.T)


def _span_problem(work: _ChunkWork, d, eps, shrinkage):
    """The same mapped rows and Y rows, in orthonormal coordinates of V = span(centred Y rows, centred X rows).

    Why it is exact: V has dimension k ≤ 2n; on V⊥ both Σ_X = α_X·I and Σ_Y = α_Y·I, so V and V⊥ are invariant
    under Σ_X, Σ_Y, S, S Σ_X S and its pseudo-inverse root, hence under A. The centred X rows lie in V, so
    xc·A only needs A on V, i.e. the k×k problem with Σ|_V = c·CᵀC + α·I_k (C: the rows' coordinates); on V⊥,
    where A would act as a multiple of I, there is nothing to map. All pairwise distances between mapped X rows
    and Y rows are distances in V, so W2² is unchanged too; tr Σ_Y still counts α_Y on all d dimensions (the
    caller uses d, not k).

    With ε > 0 every eigenvalue of S Σ_X S is ≥ α_X·α_Y (Σ_X ≥ α_X·I and S² ≥ α_Y·I), the one it has on V⊥: the
    paths invert it without a cutoff where the eigensolver resolves it, eigenvalues computed below that floor raised
    to it, and cut it as pinv does where not (`psd_inv_sqrt_parts`). With ε = 0 (floor 0) the direct path's
    cutoff is d·eps·λ_max over R^d; λ_max is the largest eigenvalue on V, and d (not k) reproduces the same cutoff
    on V.

    Coordinates come from Householder QR of [Ycᵀ Xcᵀ] (d × 2n; R only, O(dn²)): backward stable, no rank decision
    (the Gram matrix would be cheaper, but its rounding costs ρ ≈ 1 about half its digits, as ρ goes with the
    square root of W2²), and with Y first Σ_Y|_V is block diagonal: an n×n block, then α_Y·I. R's rows beyond
    the rank of V (centring leaves rank ≤ 2n − 2) hold ~0 coordinates: like directions of V⊥, harmless. If
    d < 2n the coordinates are just a rotation of R^d.
    """
    n = work.x.shape[0]
    r = work.r  # min(d, 2n) × 2n upper trapezoidal (the rows are centred already); the centred rows are let go
    ycoord, xcoord = r[:, :n].T, r[:, n:].T  # rows in the coordinates; Y rows vanish beyond column n
    k = r.shape[0]
    m = min(n, k)
    cx, ax = _scales(xcoord, d, eps[0], shrinkage)
    cy, ay = _scales(ycoord, d, eps[1], shrinkage)
    # Σ_Y|_V = diag(cy·Y1ᵀY1 + ay·I_m, ay·I_{k−m}), so L = diag(L1, √ay·I): applied block by block.
    y1 = ycoord[:, :m]
    l1, root_ay = _Root(_shifted(y1.T @ y1, cy, ay)), np.sqrt(ay)
    b = np.empty((n, k))
    b[:, :m] = l1.right(np.ascontiguousarray(xcoord[:, :m]))
    b[:, m:] = root_ay * xcoord[:, m:]
    lt_l = np.zeros((k, k))
    lt_l[:m, :m] = l1.gram()
    lt_l[np.arange(m, k), np.arange(m, k)] = ay
    # Every eigenvalue of S Σ_X S is ≥ α_X·α_Y, the one it has on V⊥: include it in the max like the full matrix.
    rows = _inv_sqrt_rows(b, lt_l, cx, ax, d, ax * ay)
    rows[:, :m] = l1.right_t(np.ascontiguousarray(rows[:, :m]))
    rows[:, m:] *= root_ay
    return rows, ycoord


def affinity_score(x: np.ndarray, y: np.ndarray, eps: float = EPS, shrinkage: str = "none",
                   method: str = "auto", relative_eps: bool = False, transport: str = "dense") -> float:
    """ρ_aff of one chunk of paired rows.

    relative_eps: the regulariser is ε times the mean variance (tr S/d) of each side instead of the paper's
    absolute ε, so ρ does not depend on the activations' scale (a ReLU without bias scores the same at any
    scale); a constant output is then one whose total variance is below 1e-12 of its mean squared row norm.
    method: "direct" works with d×d covariances, O(nd² + d³); "map" too, forming the d×d map (one n·d² product
    with the rows instead of five); "span" works in the span of the centred rows, dimension k ≤ 2n, O(n²d + n³);
    all give the same ρ up to rounding. "auto" takes "span" when 2n < d, "map" when n ≥ d, else "direct".
    transport: how W2² is solved (onnxaff_plugins.transport): "dense" (scipy's assignment on the n×n matrix),
    "sparse" (certified exact on candidate edges, O(n·k) memory), "auto" (sparse only where the dense matrix would
    not fit); the same number to rounding.
    """
    x, y = as_rows(x), as_rows(y)
    if x.shape[0] != y.shape[0]:
        raise ValueError(f"X has {x.shape[0]} rows and Y {y.shape[0]}")
    if x.shape[1] != y.shape[1]:
        raise ValueError(f"affinity needs equal feature dimensions (X: {x.shape[1]}, Y: {y.shape[1]})")
    if x.shape[0] < 2:
        raise ValueError("affinity needs at least 2 rows")
    if shrinkage not in SHRINKAGES:
        raise ValueError(f"shrinkage must be one of {SHRINKAGES}, not {shrinkage!r}")
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, not {method!r}")
    solver = choose(x.shape[0], x.shape[1], transport)
    n, d = x.shape
    work = _chunk_work(x, y)  # shared with the other variants scoring this chunk
    # Distances are translation invariant: mapped = xc·A + m_Y against y is xc·A against yc.
    yy = work.yy
    scale = n - 1 if shrinkage == "none" else n
    if relative_eps:
        eps_x = eps * work.xx / scale / d
        eps_y = eps * yy / scale / d
        constant = yy <= 1e-12 * float(np.einsum("ij,ij->", y, y))
    else:
        eps_x = eps_y = eps
        constant = False
    # tr Σ_Y over all d dimensions (Ledoit–Wolf shrinkage keeps the trace of the biased S).
    tr_sigma_y = yy / scale + eps_y * d
    try:
        if constant or tr_sigma_y <= 2.0 * eps_y * d:  # constant output: A = 0, every row maps to m_Y
            w2 = yy / n
        else:
            if method == "auto":
                method = "span" if 2 * n < d else "map" if n >= MAP_ROWS_PER_DIM * d else "direct"
            problem = {"span": _span_problem, "map": _map_problem, "direct": _direct_problem}[method]
            a, b = problem(work, d, (eps_x, eps_y), shrinkage)
            if solver == "sparse":
                w2 = sparse_w2(a, b)[0]
            else:
                if solver == "dense":
                    check_dense_fits(n)
                w2 = exact_w2_squared(a, b)
    finally:
        _keep_within_budget(work)
    if tr_sigma_y == 0.0:  # an all-zero output with a relative ε: nothing to transport
        return 1.0 if w2 == 0.0 else 0.0
    return float(1.0 - np.sqrt(w2 / (2.0 * tr_sigma_y)))


class Affinity(Metric):
    """The affinity score; its parameters select the variants (affinity_lw and affinity_rel are presets)."""

    name = "affinity"
    description = "affinity score: 1 − W2(affine OT of X, Y)/sqrt(2 tr Σ_Y), per chunk (Bouniot et al. 2025)"
    higher_is_more_linear = True
    range = (0.0, 1.0)
    needs = Needs.CHUNK
    equal_dims = True
    default = 0
    rows_per_dim = 4  # docs/statistics.md; Ledoit–Wolf needs 32
    regularised = True
    protocols = ("paper", "width")  # with its default parameters (paper: the official formula)

    def __init__(self, eps: float = EPS, shrinkage: str = "none", relative_eps: bool = False, method: str = "auto",
                 transport: str = "auto"):
        if not eps >= 0:
            raise ValueError(f"eps must be 0 or more, not {eps!r}")
        if shrinkage not in SHRINKAGES:
            raise ValueError(f"shrinkage must be one of {', '.join(SHRINKAGES)}, not {shrinkage!r}")
        if method not in METHODS:
            raise ValueError(f"method must be one of {', '.join(METHODS)}, not {method!r}")
        if transport not in TRANSPORTS:
            raise ValueError(f"transport must be one of {', '.join(TRANSPORTS)}, not {transport!r}")
        self.eps, self.shrinkage, self.relative_eps, self.method = eps, shrinkage, relative_eps, method
        self.transport = transport
        if shrinkage == "ledoit_wolf":
            self.rows_per_dim = 32
        self.regularised = not relative_eps  # a relative ε scales with the data: tiny activations do not drown
        self.estimator = ("Ledoit–Wolf shrunk covariances" if shrinkage == "ledoit_wolf" else "plain covariances") + (
            ", ε relative to the mean variance" if relative_eps else "")

    def chunk_seconds(self, rows: int, dx: int, dy: int) -> tuple[float, str] | None:
        solver = choose(rows, max(dx, dy), self.transport)
        if solver == "sorted":
            return None  # on the line the matching is a sort
        if solver == "sparse":
            dim = min(max(dx, dy), 2 * rows)  # the span path's coordinates
            seconds = 2 * rows**2 * (SPARSE_SECONDS_PER_PASS_ROW2 + SPARSE_SECONDS_PER_PASS_ROW2_DIM * dim)
            return seconds, "the sparse assignment's passes over the rows' pairs (at least two)"
        return AFFINITY_SECONDS_PER_ROW2_DIM * rows**2 * max(dx, dy), "the exact assignment (its n²·D distances)"

    def caveat(self, rows: int, dx: int, dy: int) -> str | None:
        """Which solver gave W2² where it is not the dense assignment (the signature says how each number was made)."""
        if choose(rows, max(dx, dy), self.transport) != "sparse":
            return None
        why = (f"transport=auto: the dense matrix of {rows:,} rows would not fit in the memory available"
               if self.transport == "auto" else "transport=sparse")
        return f"W2² by the certified sparse assignment ({why}): the exact optimum to rounding (docs/metrics.md)"

    def compute(self, chunk: Chunk) -> float:
        return affinity_score(chunk.x, chunk.y, eps=self.eps, shrinkage=self.shrinkage, method=self.method,
                              relative_eps=self.relative_eps, transport=self.transport)


class AffinityLedoitWolf(Affinity):
    name = "affinity_lw"
    protocols = ()
    description = "affinity score with Ledoit–Wolf shrunk covariances (the reference's 'corrected'; d ≥ n)"
    default = None  # it needs 32·D rows a chunk, eight times the default protocol's (docs/statistics.md)

    def __init__(self, eps: float = EPS, shrinkage: str = "ledoit_wolf", relative_eps: bool = False,
                 method: str = "auto", transport: str = "auto"):
        super().__init__(eps, shrinkage, relative_eps, method, transport)


class AffinityRelative(Affinity):
    name = "affinity_rel"
    protocols = ()
    description = "affinity score with ε relative to each covariance's mean variance: independent of the scale"
    default = None

    def __init__(self, eps: float = EPS, shrinkage: str = "none", relative_eps: bool = True, method: str = "auto",
                 transport: str = "auto"):
        super().__init__(eps, shrinkage, relative_eps, method, transport)

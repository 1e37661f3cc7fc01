"""affinity_bc: the affinity score with its finite-sample bias extrapolated away (docs/statistics.md, issue 29).

The paper's estimator (`affinity_score`) of one chunk of n rows reads high when n is not many times d: the
Gaussian fits and the exact assignment fit the sample, and the squared distance it rests on,
D = W2²/(2 tr Σ_Y) (ρ = 1 − √D), is short by about κ·d/n of itself (κ ≈ 0.4 on full-rank sites, less on
low-rank ones). affinity_bc scores the chunk, its two halves and its four quarters (one fixed random partition
of the rows), fits D(m) = a + b/m + c/m² through the three mean D's and reports ρ = 1 − √a (a clipped to [0, 1]):
Richardson extrapolation in 1/n, which needs no knowledge of d or of the spectrum. `order=2` uses the halves
only (a + b/m). The chunk's own score is `affinity`'s number exactly; the sub-chunks are scored the same way.
"""

from __future__ import annotations

import math

import numpy as np

from onnxaff.metrics import Chunk, Metric, Needs
from onnxaff_plugins.affinity import METHODS, affinity_score
from onnxaff_plugins.linalg import AFFINITY_SECONDS_PER_ROW2_DIM, EPS, as_rows

ORDERS = (2, 3)
SEED = 20261204  # the fixed partition of a chunk's rows: a chunk scores the same every time


def _parts(n: int, k: int, seed: int) -> list[np.ndarray]:
    """k disjoint row sets of sizes ⌊n/k⌋ or ⌈n/k⌉: a seeded random permutation dealt out round-robin.

    Random, not contiguous: a chunk's rows may be ordered (positions of one image, consecutive frames).
    """
    perm = np.random.default_rng(seed).permutation(n)
    return [np.sort(perm[i::k]) for i in range(k)]


def squared_distance(x: np.ndarray, y: np.ndarray, eps: float = EPS, method: str = "auto") -> float:
    """D = W2²/(2 tr Σ_Y) of `affinity_score` (ρ = 1 − √D), from its ρ: exact, (1 − ρ)² inverts it."""
    return (1.0 - affinity_score(x, y, eps=eps, method=method)) ** 2


def extrapolate(h: np.ndarray, values: np.ndarray) -> float:
    """The intercept a of the polynomial in h of degree len(h) − 1 through (h_j, values_j): Richardson."""
    return float(np.linalg.solve(np.vander(np.asarray(h, float), increasing=True), np.asarray(values, float))[0])


def min_rows(order: int) -> int:
    return 2 * 2 ** (order - 1)  # every sub-chunk needs 2 rows


def affinity_bc_score(x: np.ndarray, y: np.ndarray, eps: float = EPS, order: int = 3, method: str = "auto",
                      seed: int = SEED) -> float:
    """Bias-corrected ρ_aff of one chunk: Richardson extrapolation to n → ∞ of D = (1 − ρ)² over sub-chunks.

    D at the chunk (n rows), averaged over its 2 halves, and (order 3) over its 4 quarters; h = the mean 1/m of
    each level's sub-chunk sizes (1/n, 2/n, 4/n when 4 divides n); a + b·h (+ c·h²) through the points, ρ = 1 − √a
    with a clipped to [0, 1].
    """
    x, y = as_rows(x), as_rows(y)
    if order not in ORDERS:
        raise ValueError(f"order must be one of {ORDERS}, not {order!r}")
    n = x.shape[0]
    if n != y.shape[0]:
        raise ValueError(f"X has {n} rows and Y {y.shape[0]}")
    need = min_rows(order)
    if n < need:
        raise ValueError(f"affinity_bc (order {order}) needs at least {need} rows (2 per sub-chunk), not {n}")
    h, dist = [1.0 / n], [squared_distance(x, y, eps, method)]
    for level in range(1, order):
        parts = _parts(n, 2**level, seed + level)
        h.append(float(np.mean([1.0 / len(p) for p in parts])))
        dist.append(float(np.mean([squared_distance(x[p], y[p], eps, method) for p in parts])))
    a = min(max(extrapolate(np.array(h), np.array(dist)), 0.0), 1.0)
    return float(1.0 - math.sqrt(a))


class AffinityBC(Metric):
    """The affinity score, bias-corrected by Richardson extrapolation in 1/n over the chunk's halves and quarters."""

    name = "affinity_bc"
    description = ("bias-corrected affinity score: Richardson extrapolation in 1/n of (1 − ρ_aff)² over the chunk, "
                   "its halves and quarters (docs/statistics.md)")
    higher_is_more_linear = True
    range = (0.0, 1.0)
    needs = Needs.CHUNK
    equal_dims = True
    default = None
    min_rows = 8  # order 3's four quarters of 2 rows each (an instance of order 2 needs 4)
    rows_per_dim = 2  # docs/statistics.md: |bias| < 0.05 from n ≥ 2d on the study's grid (every site, GELU included)
    regularised = True

    def __init__(self, eps: float = EPS, order: int = 3, method: str = "auto"):
        if not eps >= 0:
            raise ValueError(f"eps must be 0 or more, not {eps!r}")
        if order not in ORDERS:
            raise ValueError(f"order must be 2 or 3, not {order!r}")
        self.estimator = f"bias-corrected (Richardson extrapolation in 1/n, order {order})"
        if method not in METHODS:
            raise ValueError(f"method must be one of {', '.join(METHODS)}, not {method!r}")
        self.eps, self.order, self.method = eps, order, method
        self.min_rows = min_rows(order)  # 2 rows in each of its 2**(order - 1) sub-chunks

    def chunk_seconds(self, rows: int, dx: int, dy: int) -> tuple[float, str] | None:
        if max(dx, dy) <= 1:
            return None
        share = sum(2**level * (0.5**level) ** 2 for level in range(self.order))  # 1 + 1/2 (+ 1/4)
        return (AFFINITY_SECONDS_PER_ROW2_DIM * share * rows**2 * max(dx, dy),
                "the exact assignments (their n²·D distances)")

    def compute(self, chunk: Chunk) -> float:
        return affinity_bc_score(chunk.x, chunk.y, eps=self.eps, order=self.order, method=self.method)

"""When a score means something: confidence intervals over chunks and the finite-sample flags.

The numbers behind the rules (rows per chunk a site of dimension d needs) come from
benchmarks/finite_sample_study.py; docs/statistics.md has the study, the rules and the measured coverage. The
warning lines that sum the flags up over a signature's sites are the analysis layer's (onnxaff.analysis.flagwarnings).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from scipy.special import stdtrit

from onnxaff import defaults
from onnxaff.metrics.dispatch import serving
from onnxaff.metrics.rank import FLOAT32_EPS, rank_verdict, relative_singular_values

HALVES = 4  # half-samples of a chunk (coverage and cost: docs/statistics.md, "Confidence intervals")


def t975(df: int) -> float:
    """Student's t 0.975 quantile: scipy.special's (what scipy.stats.t.ppf calls, the same value for every df
    checked, 1-4999), without importing scipy.stats, which costs every command 0.2 s."""
    return float(stdtrit(df, 0.975))


def mean_ci(values) -> tuple[float, float]:
    """95 % Student-t interval for the expected chunk score from k ≥ 2 chunk scores (chunk-to-chunk spread only)."""
    v = np.asarray(values, dtype=np.float64)
    k = len(v)
    if k < 2:
        raise ValueError("mean_ci needs at least 2 chunk scores")
    half = float(t975(k - 1) * v.std(ddof=1) / math.sqrt(k))
    m = float(v.mean())
    return m - half, m + half


def half_sample_rows(n: int, halves: int = HALVES, seed: int = defaults.SEED) -> list[np.ndarray]:
    """The rows of `halves` random halves of an n-row chunk (sorted), the same ones every run."""
    rng = np.random.default_rng(seed)
    return [np.sort(rng.choice(n, n // 2, replace=False)) for _ in range(halves)]


def half_sample_ci(fn: Callable[[np.ndarray, np.ndarray], float], x: np.ndarray, y: np.ndarray,
                   halves: int = HALVES, seed: int = defaults.SEED) -> tuple[float, float, float]:
    """(score, lo, hi): the 95 % interval a run gives a one-chunk score (`entry_ci` over `half_sample_rows`).

    Why halves: for a smooth statistic of n rows, a random half's score differs from the whole chunk's by a
    variance close to the whole chunk's own sampling variance (exact for a mean: σ²/(n/2) − σ²/n = σ²/n), so the
    spread of `halves` random halves (around their own mean, so the halves' larger bias does not count) estimates
    the chunk's sd without a second chunk; ± t_{halves−1} of it around the chunk's score.
    """
    full = float(fn(x, y))
    scores = [float(fn(x[rows], y[rows])) for rows in half_sample_rows(x.shape[0], halves, seed)]
    lo, hi = entry_ci([full], scores)
    return full, lo, hi


# --- flags ---

EPS_RATIO = 1e-3  # ε over the mean variance from which the absolute ε moves the affinity (3e-3: ≤ 3e-4, docs)
RANK_TEST_MAX_D = 512  # the rank test costs O(nd² + d³) a chunk: 25 s at d = 2048, n = 4096 on 2 cores
RANK_FLAGS = ("rank_deficient", "rank_ambiguous")

# The rows per chunk each metric needs, and which chunk properties matter to it, are the metric's own
# declarations (rows_per_dim, regularised, rank_sensitive: onnxaff.metrics.Metric), from
# benchmarks/finite_sample_study.py and docs/statistics.md.


def rows_needed(per_dim: float | None, d: int) -> int:
    """Rows per chunk a site of dimension d needs under a metric's rows_per_dim (None: n > d only)."""
    return d + 1 if per_dim is None else max(d + 1, int(math.ceil(per_dim * d)))


def chunk_scale(x: np.ndarray, y: np.ndarray) -> float | None:
    """The smaller of X's and Y's mean variance (tr S/d) over one chunk; None when every Y column is constant.

    What an absolute ε is compared with (`eps_dominated`): kept per site as the minimum over its chunks, so
    each metric's own ε is judged against it."""
    n = x.shape[0]
    if (np.ptp(y, axis=0) == 0).all():
        return None
    xc, yc = x - x.mean(axis=0), y - y.mean(axis=0)
    var_x = float(np.einsum("ij,ij->", xc, xc)) / max(n - 1, 1) / x.shape[1]
    var_y = float(np.einsum("ij,ij->", yc, yc)) / max(n - 1, 1) / y.shape[1]
    return min(var_x, var_y)


def eps_dominated(eps: float, scale: float | None) -> bool:
    return scale is not None and eps >= EPS_RATIO * scale


def chunk_diagnostics(x: np.ndarray, y: np.ndarray, rank: bool = True, rounding: float = FLOAT32_EPS) -> set[str]:
    """Properties of one chunk that make some scores meaningless: constant output, rank-deficient X (or one whose
    rank two correct reductions could decide differently: `rank_ambiguous`). Whether an ε dominates is each
    metric's own question, weighed against the chunk_scale kept beside these (`metric_flags`).

    rank=False skips the O(nd²) rank test (the caller runs it only when a rank-sensitive metric is asked);
    `rounding`, the features' (Chunk.rounding), which sets r2's cutoff (onnxaff.metrics.rank).
    """
    found = set()
    n, d = x.shape
    const_y = np.ptp(y, axis=0) == 0
    if const_y.any():
        found.add("constant_output")
    if not rank:
        return found
    xc = x - x.mean(axis=0)
    sd = np.sqrt((xc * xc).mean(axis=0))
    live = sd > 0
    if n > d and live.any() and d <= RANK_TEST_MAX_D:  # n ≤ d: rank-deficient by construction (`few_rows`)
        z = xc[:, live] / sd[live]
        found |= _gram_rank(z.T @ z, rounding)
    elif not live.any():
        found.add("rank_deficient")
    return found


def moments_rank(cov_x: np.ndarray, rounding: float) -> set[str] | None:
    """The rank flags of the pooled X (r2_pooled's correlation matrix), or None past RANK_TEST_MAX_D."""
    d = cov_x.shape[0]
    if d > RANK_TEST_MAX_D:
        return None
    sd = np.sqrt(np.clip(np.diag(cov_x), 0.0, None))
    live = sd > 0
    if not live.any():
        return {"rank_deficient"}
    return _gram_rank(cov_x[np.ix_(live, live)] / np.outer(sd[live], sd[live]), rounding)


def _gram_rank(gram: np.ndarray, rounding: float) -> set[str]:
    """The rank flags from a Gram (or correlation) matrix of standardised X: its eigenvalues are the squared
    singular values, judged by r2's cutoff with a float64 Gram's floor (onnxaff.metrics.rank)."""
    w = np.linalg.eigvalsh(gram)
    return rank_verdict(relative_singular_values(w), rounding, gram_dim=w.size)


def metric_flags(metric, rows: int, d: int, partial: bool, seen: set[str], scale: float | None = None) -> list[str]:
    """The flags of one metric entry, in a fixed order; empty when nothing is wrong.

    `scale`: the site's smallest chunk variance (chunk_scale), against which a regularised metric's own ε (its
    declared `eps`) is judged; None where no chunk had a live output (then no ε can dominate)."""
    how = serving(metric)
    flags = []
    if how.row_rule and rows < rows_needed(metric.rows_per_dim, d):
        flags.append("few_rows")
    if partial and how.site_chunks:
        flags.append("partial")
    if metric.regularised and metric.eps is not None and eps_dominated(metric.eps, scale):
        flags.append("eps_dominated")
    if metric.rank_sensitive:
        flags += [f for f in RANK_FLAGS if f in seen]
    if "constant_output" in seen:
        flags.append("constant_output")
    return flags


def entry_ci(values: list[float], halves: list[float] | None,
             bounds: tuple[float, float] = (-math.inf, math.inf), method: str = "auto") -> list[float] | None:
    """ci95 of a chunk metric's reported mean: over chunks, or from the half-samples of the (first) chunk; clipped
    to the metric's declared range (`bounds`): a t interval is symmetric and reached past R²'s 1 ([0.99871,
    1.00110] on one site), where no score can lie.

    method "half" (AnalysisConfig.intervals): the halves' spread stands for the chunk sd whatever the number k of
    chunks, mean ± t_{H−1} · sd_halves/√k (over chunks when the first chunk had no halves); otherwise the halves
    count only for a single chunk (k = 1 gives the same interval either way)."""
    have_halves = halves is not None and len(halves) >= 2
    if values and have_halves and (method == "half" or len(values) == 1):
        h = float(t975(len(halves) - 1) * np.std(halves, ddof=1)) / math.sqrt(len(values))
        m = float(np.mean(values)) if len(values) > 1 else values[0]
        lo, hi = m - h, m + h
    elif len(values) >= 2:
        lo, hi = mean_ci(values)
    else:
        return None
    return clip_interval(lo, hi, bounds)


def clip_interval(lo: float, hi: float, bounds: tuple[float, float]) -> list[float]:
    """[lo, hi] within [bounds]; still lo ≤ hi when the whole interval lies past one bound."""
    a, b = float(bounds[0]), float(bounds[1])
    return [min(max(float(lo), a), b), max(min(float(hi), b), a)]

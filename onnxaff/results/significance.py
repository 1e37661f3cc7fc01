"""How far a correlation over a few models can be trusted: a permutation p-value and a bootstrap interval of r.

Both are of Pearson's r between a statistic and the accuracy. The p-value is two-sided, the share of orderings
of the accuracies whose |r| is at least the observed |r|: over all n! orderings when n <= EXACT_MAX (exact),
else over DRAWS seeded random ones, counting the observed ordering ((hits + 1) / (DRAWS + 1), as
scipy.stats.permutation_test does). The interval is the 2.5 and 97.5 percentiles of r over RESAMPLES seeded
resamples of the models with replacement (resamples where all x or all y are equal have no r and are left out).
"""

from __future__ import annotations

import itertools
import math

import numpy as np

EXACT_MAX = 8  # 8! = 40,320 orderings
DRAWS = 10_000
RESAMPLES = 4_000
SEED = 0
FEW_MODELS = 10  # fewer: a warning
_TIES = 1e-12  # relative: an ordering whose |r| equals the observed one up to rounding counts as extreme


def _scaled(v) -> np.ndarray:
    v = np.asarray(v, dtype=np.float64)
    top = np.abs(v).max() if v.size else 0.0
    return v / top if top > 0 else v


def _rows_r(xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
    """Pearson r of each row pair of xs and ys ([k, n]); nan where a row is constant."""
    xc = xs - xs.mean(axis=1, keepdims=True)
    yc = ys - ys.mean(axis=1, keepdims=True)
    den = np.sqrt((xc * xc).sum(axis=1) * (yc * yc).sum(axis=1))
    with np.errstate(invalid="ignore", divide="ignore"):
        r = (xc * yc).sum(axis=1) / den
    r[~(den > 0)] = np.nan
    return np.clip(r, -1.0, 1.0)


def permutation_p(x, y, seed: int = SEED, draws: int = DRAWS) -> tuple[float, str, int]:
    """(two-sided p-value of Pearson r, "exact" or "monte_carlo", orderings used); nan when x or y is constant."""
    x, y = _scaled(x), _scaled(y)
    n = x.size
    exact = n <= EXACT_MAX
    if np.ptp(x) == 0 or np.ptp(y) == 0:
        return float("nan"), "exact" if exact else "monte_carlo", 0
    observed = abs(float(_rows_r(x[None], y[None])[0]))
    if exact:
        orders = np.array(list(itertools.permutations(range(n))), dtype=np.intp)
    else:
        orders = np.random.default_rng(seed).permuted(np.tile(np.arange(n), (draws, 1)), axis=1)
    r = np.abs(_rows_r(np.broadcast_to(x, orders.shape), y[orders]))
    hits = int(np.sum(r >= observed * (1 - _TIES)))
    if exact:
        return hits / len(orders), "exact", len(orders)
    return (hits + 1) / (draws + 1), "monte_carlo", draws


def bootstrap_ci(x, y, seed: int = SEED, resamples: int = RESAMPLES) -> tuple[list[float] | None, int]:
    """(the percentile 95 % interval of Pearson r over resamples of the pairs, resamples that had an r)."""
    x, y = _scaled(x), _scaled(y)
    if x.size < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return None, 0
    idx = np.random.default_rng(seed).integers(0, x.size, size=(resamples, x.size))
    r = _rows_r(x[idx], y[idx])
    r = r[np.isfinite(r)]
    if r.size == 0:
        return None, 0
    lo, hi = np.percentile(r, [2.5, 97.5])
    return [float(lo), float(hi)], int(r.size)


def significance(x, y) -> dict:
    """A correlation table entry's p-value and interval (see the module's docstring)."""
    p, method, orderings = permutation_p(x, y)
    ci, used = bootstrap_ci(x, y)
    return {"p_value": p, "p_method": method, "orderings": orderings, "r_ci95": ci, "bootstrap_resamples": used}


def method_text(*sizes: int) -> str:
    """How the p-values over tables of these numbers of models were computed, for the reports (groups of
    several sizes may mix both methods: each table's own is in its `p_method`)."""
    exact = [n for n in sizes if n <= EXACT_MAX]
    drawn = f"Monte Carlo permutation test, {DRAWS:,} seeded random orderings (seed {SEED})"
    if not exact:
        return drawn
    if len(exact) == len(sizes) == 1:
        return f"exact permutation test over all {math.factorial(exact[0]):,} orderings of the {exact[0]} models"
    text = f"exact permutation test over all n! orderings where a table has n ≤ {EXACT_MAX} models"
    return text if len(exact) == len(sizes) else f"{text}, else {drawn}"


BOOTSTRAP_TEXT = (f"r's 95 % interval: percentile bootstrap, {RESAMPLES:,} seeded resamples of the models "
                  f"(seed {SEED}; resamples with a constant column left out)")


def few_models_warning(n: int) -> str | None:
    if n >= FEW_MODELS:
        return None
    return (f"only {n} models: a correlation over fewer than {FEW_MODELS} is weak evidence; read its p-value "
            "and interval, not R² alone")

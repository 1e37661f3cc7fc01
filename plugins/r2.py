"""R² of the best linear map X → Y (with intercept), averaged over output dimensions."""

from __future__ import annotations

import numpy as np

from onnxaff.collect import Moments
from onnxaff.linalg import as_rows
from onnxaff.metrics import Chunk, Metric


def _fit(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Least-squares W, b of Y ≈ XW + b (minimum-norm when X is rank-deficient)."""
    mx, my = x.mean(axis=0), y.mean(axis=0)
    w, *_ = np.linalg.lstsq(x - mx, y - my, rcond=None)
    return w, my - mx @ w


def _r2(y: np.ndarray, pred: np.ndarray, reference_mean: np.ndarray) -> float:
    ss_tot = ((y - reference_mean) ** 2).sum(axis=0)
    keep = ss_tot > 0
    if not keep.any():
        raise ValueError("R² is undefined for a constant output")
    ss_res = ((y - pred) ** 2).sum(axis=0)
    return float(np.mean(1.0 - ss_res[keep] / ss_tot[keep]))


def r2_in_sample(x: np.ndarray, y: np.ndarray) -> float:
    x, y = as_rows(x), as_rows(y)
    w, b = _fit(x, y)
    return _r2(y, x @ w + b, y.mean(axis=0))


def r2_held_out(train: Chunk, test: Chunk) -> float:
    """Fit on one chunk, score on the next (against the test chunk's own mean)."""
    w, b = _fit(as_rows(train.x), as_rows(train.y))
    x, y = as_rows(test.x), as_rows(test.y)
    return _r2(y, x @ w + b, y.mean(axis=0))


# Features come out of float32 inference: a direction of the (standardised) Σ_X whose standard deviation is
# below d·eps(float32) of the largest one's is at the rounding level of the features themselves.
FLOAT32_NOISE = float(np.finfo(np.float32).eps)


def r2_pooled(m: Moments) -> float:
    """From moments: residual covariance Σ_Y − Σ_YX Σ_X⁺ Σ_XY; R²_j = 1 − res_jj/(Σ_Y)_jj.

    Σ_X⁺ drops eigenvalues under (d·eps32)²·λ_max of the correlation matrix of X. A rank-deficient Σ_X
    (common: a stem conv's channels are mixes of a few signals) otherwise has eigenvalues at 1e-14 of the
    largest, pure rounding, and inverting them let 1e-16 changes of the moments move R² by 1e-4. The cutoff
    is taken after scaling each X feature to unit variance (R² does not change under it): on Σ_X itself it
    would drop every feature far smaller than the largest, real signals included. Constant features carry
    nothing and are left out.
    """
    sx, sy, sxy = m.cov_x(), m.cov_y(), m.cov_xy()
    var = np.diag(sy)
    keep = var > 0
    if not keep.any():
        raise ValueError("R² is undefined for a constant output")
    sd = np.sqrt(np.clip(np.diag(sx), 0.0, None))
    live = sd > 0
    corr = sx[np.ix_(live, live)] / np.outer(sd[live], sd[live])
    cross = sxy[live] / sd[live, None]
    w, v = np.linalg.eigh(corr)
    keep_dirs = w > (corr.shape[0] * FLOAT32_NOISE) ** 2 * max(w[-1], 0.0) if w.size else w > 0
    proj = cross.T @ v[:, keep_dirs]
    res = sy - (proj / w[keep_dirs]) @ proj.T
    return float(np.mean(1.0 - np.diag(res)[keep] / var[keep]))


class R2(Metric):
    name = "r2"
    description = "in-sample R² of the least-squares affine map X → Y per chunk (the reference's)"
    range = (0.0, 1.0)
    needs = "chunk"

    def compute(self, chunk: Chunk) -> float:
        return r2_in_sample(chunk.x, chunk.y)

    def caveat(self, rows, dx, dy):
        if dx + 1 >= rows:
            return f"in-sample R² is trivially 1: d + 1 = {dx + 1} ≥ {rows} rows per chunk; see r2_heldout"
        return None


class R2HeldOut(Metric):
    name = "r2_heldout"
    description = "R² of the affine map fitted on one chunk, scored on the next"
    range = (float("-inf"), 1.0)
    needs = "chunk_pair"

    def compute(self, pair: tuple[Chunk, Chunk]) -> float:
        return r2_held_out(*pair)


class R2Pooled(Metric):
    name = "r2_pooled"
    description = "R² of the best affine map X → Y from the pooled moments of all rows"
    range = (0.0, 1.0)
    needs = "moments"

    def compute(self, moments: Moments) -> float:
        return r2_pooled(moments)

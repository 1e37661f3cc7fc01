"""R² of the best linear map X → Y (with intercept), averaged over output dimensions."""

from __future__ import annotations

import numpy as np

from onnxaff.metrics import (
    FLOAT32_EPS,
    Chunk,
    ChunkPair,
    Metric,
    Moments,
    Needs,
    rank_cutoff,
    relative_singular_values,
)
from onnxaff_plugins.linalg import as_rows


def _fit(x: np.ndarray, y: np.ndarray, rounding: float = FLOAT32_EPS) -> tuple[np.ndarray, np.ndarray]:
    """Least-squares W, b of Y ≈ XW + b, minimum-norm over X's directions above the features' rounding.

    The same cutoff as `r2_pooled` (onnxaff.metrics.rank: rank_cutoff(rounding) of the largest singular value),
    on X with each feature scaled to unit spread (R² does not change under it; constant features carry
    nothing): a numerically rank-deficient X otherwise lets the fit chase rounding noise, and in-sample R² then
    moved with float rounding alone (0.71 vs 0.83 vs 0.66 on one stem site; 0.014–0.040 between onnxruntime's
    mean and a host mean while the cutoff ignored that a mean over P positions rounds sqrt(P) times more).
    """
    mx, my = x.mean(axis=0), y.mean(axis=0)
    xc = x - mx
    sd = np.sqrt((xc * xc).mean(axis=0))
    live = sd > 0
    w = np.zeros((x.shape[1], y.shape[1]))
    if live.any():
        z = xc[:, live] / sd[live]
        coef, *_ = np.linalg.lstsq(z, y - my, rcond=rank_cutoff(rounding))
        w[live] = coef / sd[live, None]
    return w, my - mx @ w


def _r2(y: np.ndarray, pred: np.ndarray, reference_mean: np.ndarray) -> float:
    """Mean over outputs of 1 − SS_res/SS_tot, constant outputs counted as scikit-learn's r2_score counts them.

    A constant output column (SS_tot = 0) scores 1 when predicted exactly and 0 otherwise; in-sample, a fit with
    an intercept predicts it exactly, so `r2_in_sample` equals LinearRegression().fit(X, Y).score(X, Y), the
    reference's call, with dead channels in Y. An output with every column constant stays an error.
    """
    ss_tot = ((y - reference_mean) ** 2).sum(axis=0)
    ss_res = ((y - pred) ** 2).sum(axis=0)
    constant = np.ptp(y, axis=0) == 0
    if constant.all():  # scikit-learn would say 1.0; an error tells the user the site's output is dead
        raise ValueError("R² is undefined for a constant output")
    out = np.where(constant, np.where(np.ptp(y - pred, axis=0) == 0, 1.0, 0.0), 0.0)
    keep = ~constant & (ss_tot > 0)
    out[keep] = 1.0 - ss_res[keep] / ss_tot[keep]
    return float(np.mean(out))


def r2_in_sample(x: np.ndarray, y: np.ndarray, rounding: float = FLOAT32_EPS) -> float:
    x, y = as_rows(x), as_rows(y)
    w, b = _fit(x, y, rounding)
    # A constant column is predicted exactly (its centred values are 0, so its weights are): use its own value.
    pred = np.where(np.ptp(y, axis=0) == 0, y, x @ w + b)
    return _r2(y, pred, y.mean(axis=0))


def r2_held_out(train: Chunk, test: Chunk) -> float:
    """Fit on one chunk, score on the next (against the test chunk's own mean)."""
    w, b = _fit(as_rows(train.x), as_rows(train.y), train.rounding)
    x, y = as_rows(test.x), as_rows(test.y)
    return _r2(y, x @ w + b, y.mean(axis=0))


def r2_pooled(m: Moments) -> float:
    """From moments: residual covariance Σ_Y − Σ_YX Σ_X⁺ Σ_XY; R²_j = 1 − res_jj/(Σ_Y)_jj.

    Σ_X⁺ drops eigenvalues under cutoff²·λ_max of the correlation matrix of X, the cutoff r2's
    (onnxaff.metrics.rank, from the moments' rounding, with the floor of a float64 Gram). A rank-deficient Σ_X
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
    keep_dirs = relative_singular_values(w) >= rank_cutoff(m.rounding, gram_dim=w.size) if w.size else w > 0
    proj = cross.T @ v[:, keep_dirs]
    res = sy - (proj / w[keep_dirs]) @ proj.T
    return float(np.mean(1.0 - np.diag(res)[keep] / var[keep]))


class R2(Metric):
    name = "r2"
    description = "in-sample R² of the least-squares affine map X → Y per chunk (the reference's)"
    range = (0.0, 1.0)
    needs = Needs.CHUNK
    rows_per_dim = 8
    rank_sensitive = True

    def compute(self, chunk: Chunk) -> float:
        return r2_in_sample(chunk.x, chunk.y, chunk.rounding)

    def caveat(self, rows, dx, dy):
        """With n ≤ d + 1 an affine map fits every row exactly when X's fitted directions span the rows, so the
        value says nothing about linearity. It is exactly 1 only then: X's dead features and its directions at
        rounding level (onnxaff.metrics.rank) are not fitted, and with them it reads below 1 (0.99981 on
        ResNet-18's layer4, whose dead channels leave fewer than n − 1 live directions)."""
        if dx + 1 >= rows:
            return (f"in-sample R² is no linearity measure here: with d + 1 = {dx + 1} ≥ {rows} rows per chunk an "
                    f"affine map fits every row (R² = 1) unless X's dead and rounding-level directions, which are not "
                    f"fitted, leave fewer than {rows - 1} (then R² < 1); see r2_heldout")
        return None


class R2HeldOut(Metric):
    name = "r2_heldout"
    description = "R² of the affine map fitted on one chunk, scored on the next"
    range = (float("-inf"), 1.0)
    needs = Needs.CHUNK_PAIR
    rank_sensitive = True

    def compute(self, pair: ChunkPair) -> float:
        return r2_held_out(*pair)


class R2Pooled(R2):
    """r2 from the pooled moments of all rows: one value per site, with r2's range, rows rule and rank flags; no
    caveat, as r2's speaks of the rows of one chunk."""

    name = "r2_pooled"
    description = "R² of the best affine map X → Y from the pooled moments of all rows"
    needs = Needs.MOMENTS
    default = None

    def compute(self, moments: Moments) -> float:
        return r2_pooled(moments)

    def caveat(self, rows, dx, dy):
        return None

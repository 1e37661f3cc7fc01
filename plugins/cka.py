"""Linear CKA (Kornblith et al. 2019) between a site's input and output features."""

from __future__ import annotations

import numpy as np

from onnxaff.metrics import Chunk, Metric, Moments, Needs
from onnxaff_plugins.linalg import as_rows


def linear_cka(x: np.ndarray, y: np.ndarray) -> float:
    """‖YcᵀXc‖²_F / (‖XcᵀXc‖_F ‖YcᵀYc‖_F), computed on whichever side (features or samples) is smaller."""
    x, y = as_rows(x), as_rows(y)
    xc, yc = x - x.mean(axis=0), y - y.mean(axis=0)
    if x.shape[0] < max(x.shape[1], y.shape[1]):  # Gram form: the same value, cheaper when d > n
        kx, ky = xc @ xc.T, yc @ yc.T
        num, dx, dy = np.sum(kx * ky), np.linalg.norm(kx), np.linalg.norm(ky)
    else:
        num = np.linalg.norm(yc.T @ xc) ** 2
        dx, dy = np.linalg.norm(xc.T @ xc), np.linalg.norm(yc.T @ yc)
    if dx == 0 or dy == 0:
        raise ValueError("CKA is undefined for a constant input or output")
    return float(num / (dx * dy))


def pooled_cka(m: Moments) -> float:
    sxy, sx, sy = m.cov_xy(), m.cov_x(), m.cov_y()
    dx, dy = np.linalg.norm(sx), np.linalg.norm(sy)
    if dx == 0 or dy == 0:
        raise ValueError("CKA is undefined for a constant input or output")
    return float(np.linalg.norm(sxy) ** 2 / (dx * dy))


class CKA(Metric):
    name = "cka"
    description = "linear CKA between X and Y, per chunk (Kornblith et al. 2019)"
    rows_per_dim = 8  # range [0, 1] and a Chunk per call: the Metric defaults

    def compute(self, chunk: Chunk) -> float:
        return linear_cka(chunk.x, chunk.y)


class CKAPooled(CKA):
    """cka from the pooled moments of all rows: one value per site, with cka's range, direction and rows rule."""

    name = "cka_pooled"
    description = "linear CKA from the pooled moments of all rows: ‖Σ_XY‖²/(‖Σ_X‖‖Σ_Y‖)"
    needs = Needs.MOMENTS
    default = None

    def compute(self, moments: Moments) -> float:
        return pooled_cka(moments)

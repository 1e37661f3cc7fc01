"""Float64 linear algebra shared by the metrics: PSD matrix roots and covariance estimators."""

from __future__ import annotations

import numpy as np

EPS = 1e-6  # the paper's regulariser added to every covariance


def as_rows(a: np.ndarray) -> np.ndarray:
    """An [n, d] float64 array (a 1-D array is n rows of one feature)."""
    a = np.asarray(a, dtype=np.float64)
    return a[:, None] if a.ndim == 1 else a


def _eigh_psd(m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    m = 0.5 * (m + m.T)  # exact symmetry before eigh: rounding in products breaks it
    w, v = np.linalg.eigh(m)
    return np.clip(w, 0.0, None), v


def psd_sqrt(m: np.ndarray) -> np.ndarray:
    """Symmetric square root of a PSD matrix (negative rounding noise in eigenvalues clamped to 0)."""
    w, v = _eigh_psd(m)
    return (v * np.sqrt(w)) @ v.T


def psd_inv_sqrt(m: np.ndarray) -> np.ndarray:
    """Pseudo-inverse square root: eigenvalues below d·eps·max are treated as zero, as pinv does."""
    w, v = _eigh_psd(m)
    cutoff = max(m.shape[0], 1) * np.finfo(np.float64).eps * (w.max() if w.size else 0.0)
    inv = np.zeros_like(w)
    keep = w > cutoff
    inv[keep] = 1.0 / np.sqrt(w[keep])
    return (v * inv) @ v.T


def covariance(x: np.ndarray) -> np.ndarray:
    """Unbiased sample covariance of rows, [d, d]."""
    x = as_rows(x)
    xc = x - x.mean(axis=0)
    return xc.T @ xc / (x.shape[0] - 1)


def ledoit_wolf(x: np.ndarray) -> tuple[np.ndarray, float]:
    """Ledoit–Wolf shrunk covariance and its shrinkage, as scikit-learn computes it.

    Biased empirical covariance S = XcᵀXc/n shrunk towards μI, μ = tr S/d, with
    shrinkage = min(β, δ)/δ where δ = ‖S − μI‖²_F/d and β = (1/n²)Σ_k‖x_k x_kᵀ − S‖²_F/d.
    """
    x = as_rows(x)
    n, d = x.shape
    xc = x - x.mean(axis=0)
    s = xc.T @ xc / n
    mu = np.trace(s) / d
    delta = (np.sum(s * s) - 2.0 * mu * np.trace(s) + d * mu * mu) / d
    x2 = xc * xc
    # Σ_k ‖x_k x_kᵀ‖²_F = Σ_k (Σ_i x_ki²)², and Σ_k ‖x_k x_kᵀ − S‖²_F = that − n‖S‖²_F.
    beta = (np.sum(x2.sum(axis=1) ** 2) / n - np.sum(s * s)) / (n * d)
    beta = min(beta, delta)
    shrinkage = 0.0 if delta == 0.0 else beta / delta
    return (1.0 - shrinkage) * s + shrinkage * mu * np.eye(d), float(shrinkage)


def squared_distances(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """‖a_i − b_j‖² for all pairs, float64, never negative."""
    d = (a * a).sum(axis=1)[:, None] + (b * b).sum(axis=1)[None, :] - 2.0 * (a @ b.T)
    return np.maximum(d, 0.0)

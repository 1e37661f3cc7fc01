"""Float64 linear algebra shared by the metrics: PSD matrix roots and covariance estimators."""

from __future__ import annotations

import numpy as np
from scipy.linalg import blas as _blas
from scipy.linalg import eigh as _scipy_eigh
from scipy.linalg import lapack as _lapack

EPS = 1e-6  # the paper's regulariser added to every covariance
# scipy's linear_sum_assignment on random clouds: 1.2 s for 1,024 rows, ~70 s for 4,096 (cubic; measured).
ASSIGNMENT_SECONDS_PER_ROW3 = 1.1e-9
# The affinity's dense chunk, CPU seconds over n²·D (its distances dominate; the assignment of a transported cloud
# to its image is far from the random worst case above): 1.2e-10 on ReLU6 rows, 3.0e-10 on independent clouds
# (n = 2,048 to 5,120, D = 512 to 1,280, 2 cores, 2026-12): the middle, so a 4·D-row chunk at D = 1,280 reads 7 s.
AFFINITY_SECONDS_PER_ROW2_DIM = 2e-10


def as_rows(a: np.ndarray) -> np.ndarray:
    """An [n, d] float64 array (a 1-D array is n rows of one feature)."""
    a = np.asarray(a, dtype=np.float64)
    return a[:, None] if a.ndim == 1 else a


def _eigh_psd(m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    m = 0.5 * (m + m.T)  # exact symmetry before eigh: rounding in products breaks it
    # LAPACK's divide and conquer (syevd, as numpy's eigh) on a temporary it may overwrite, without the
    # finiteness pass; 10-15 % less than numpy's eigh at d = 960 (benchmarks/RESULTS.md, issue 28).
    if m.shape[0] < 64:  # scipy's wrapper costs more than it saves on small matrices
        w, v = np.linalg.eigh(m)
    else:
        w, v = _scipy_eigh(m, driver="evd", overwrite_a=True, check_finite=False)
    return np.clip(w, 0.0, None), v


def times_lower(a: np.ndarray, lower: np.ndarray) -> np.ndarray:
    """a @ L for a lower-triangular L (a Cholesky factor): BLAS trmm, half the products of a general matmul.

    Works on the transposes (Lᵀ·aᵀ), which are Fortran-ordered views of the C-ordered arrays: no copy in."""
    return _blas.dtrmm(1.0, lower.T, a.T, side=0, lower=0, trans_a=0).T


def times_lower_t(a: np.ndarray, lower: np.ndarray) -> np.ndarray:
    """a @ Lᵀ for a lower-triangular L: trmm as `times_lower`."""
    return _blas.dtrmm(1.0, lower.T, a.T, side=0, lower=0, trans_a=1).T


def lower_gram(lower: np.ndarray) -> np.ndarray:
    """Lᵀ L for a lower-triangular L: LAPACK lauum (a third of the products of Lᵀ @ L), symmetric."""
    u, info = _lapack.dlauum(lower.T, lower=0)  # Lᵀ as an upper factor U: U·Uᵀ in the upper triangle
    if info != 0:  # pragma: no cover - only an invalid argument makes lauum fail
        raise np.linalg.LinAlgError(f"lauum failed ({info})")
    upper = np.triu(u)
    return upper + np.triu(upper, 1).T


def psd_sqrt(m: np.ndarray) -> np.ndarray:
    """Symmetric square root of a PSD matrix (negative rounding noise in eigenvalues clamped to 0)."""
    w, v = _eigh_psd(m)
    return (v * np.sqrt(w)) @ v.T


# floor / (eps·max) from which the floor is inverted rather than cut: the tests' chunks at n < d sit at 66-98,
# the random MLPs' ill-conditioned ones at 3.5e-15 to 1.2 (median).
RESOLVED = 16.0


def psd_inv_sqrt_parts(m: np.ndarray, dim: int | None = None, floor: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """Eigenvectors V and weights w with m^{-1/2} = V diag(w) Vᵀ (m^{+1/2}, the pseudo-inverse root, when floor = 0),
    so callers can apply it to rows without forming it.

    floor: a lower bound of m's eigenvalues known from how m was made (α_X·α_Y for S Σ_X S with ε > 0). Where the
    eigensolver resolves it (floor ≥ RESOLVED·eps·max: its eigenvalues err by about eps·max) m is inverted whole,
    those computed below the floor being rounding, raised to it: pinv's cutoff (dim·eps·max) zeroed hundreds of
    genuine eigenvalues of order ε² at n < d and moved ρ by up to 1.4e-8. Where it does not (activations of
    variance ≳ 1e2 at ε = 1e-6: random MLPs at 6x Glorot reach eps·max/floor = 3e14), inverting the unresolved
    eigenvalues would divide by rounding (ρ = −0.98 measured): they are cut as pinv cuts them, dim·eps·max with
    `dim` the full size for a caller that holds m on a subspace, as with floor = 0.
    """
    w, v = _eigh_psd(m)
    top = w.max() if w.size else 0.0
    if floor > 0.0 and floor >= RESOLVED * np.finfo(np.float64).eps * top:
        return v, 1.0 / np.sqrt(np.maximum(w, floor))
    dim = m.shape[0] if dim is None else dim
    cutoff = max(dim, 1) * np.finfo(np.float64).eps * max(top, floor)
    inv = np.zeros_like(w)
    keep = w > cutoff
    inv[keep] = 1.0 / np.sqrt(w[keep])
    return v, inv


def psd_inv_sqrt(m: np.ndarray) -> np.ndarray:
    """Pseudo-inverse square root: eigenvalues below d·eps·max are treated as zero, as pinv does."""
    v, inv = psd_inv_sqrt_parts(m)
    return (v * inv) @ v.T


def covariance(x: np.ndarray) -> np.ndarray:
    """Unbiased sample covariance of rows, [d, d]."""
    x = as_rows(x)
    xc = x - x.mean(axis=0)
    return xc.T @ xc / (x.shape[0] - 1)


def ledoit_wolf_shrinkage(xc: np.ndarray, d: int | None = None, gram: np.ndarray | None = None) -> tuple[float, float]:
    """Ledoit–Wolf shrinkage and target scale μ = tr S/d from centred rows, without forming S when d > n.

    Every term is an invariant of the Gram matrix, so `xc` may be the rows in any orthonormal coordinates of a
    subspace of R^d holding them (d: the full dimension, which μ and δ depend on). Cost O(n·k·min(n, k)), or
    O(n·k) given `gram` = XcᵀXc where the caller holds it.
    """
    n, k = xc.shape
    d = k if d is None else d
    if gram is None:
        gram = xc @ xc.T if n < k else xc.T @ xc  # ‖XcᵀXc‖_F = ‖XcXcᵀ‖_F: take the smaller one
    s_fro2 = np.sum(gram * gram) / (n * n)  # ‖S‖²_F
    row2 = (xc * xc).sum(axis=1)
    tr = row2.sum() / n
    mu = tr / d
    delta = (s_fro2 - 2.0 * mu * tr + d * mu * mu) / d
    # Σ_k ‖x_k x_kᵀ‖²_F = Σ_k (Σ_i x_ki²)², and Σ_k ‖x_k x_kᵀ − S‖²_F = that − n‖S‖²_F.
    beta = (np.sum(row2**2) / n - s_fro2) / (n * d)
    beta = min(beta, delta)
    shrinkage = 0.0 if delta == 0.0 else beta / delta
    return float(shrinkage), float(mu)


def ledoit_wolf(x: np.ndarray) -> tuple[np.ndarray, float]:
    """Ledoit–Wolf shrunk covariance and its shrinkage, as scikit-learn computes it.

    Biased empirical covariance S = XcᵀXc/n shrunk towards μI, μ = tr S/d, with
    shrinkage = min(β, δ)/δ where δ = ‖S − μI‖²_F/d and β = (1/n²)Σ_k‖x_k x_kᵀ − S‖²_F/d.
    """
    x = as_rows(x)
    n, d = x.shape
    xc = x - x.mean(axis=0)
    shrinkage, mu = ledoit_wolf_shrinkage(xc)
    return (1.0 - shrinkage) * (xc.T @ xc / n) + shrinkage * mu * np.eye(d), shrinkage


def squared_distances(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """‖a_i − b_j‖² for all pairs, float64, never negative (one product, no [n, m, d] temporary)."""
    out = a @ b.T
    out *= -2.0
    out += (a * a).sum(axis=1)[:, None]
    out += (b * b).sum(axis=1)[None, :]
    return np.maximum(out, 0.0, out=out)

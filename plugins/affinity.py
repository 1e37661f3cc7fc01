"""The affinity score (Bouniot et al., CVPR 2025, eq. 5) and its Ledoit–Wolf variant.

ρ_aff = 1 − sqrt(W2²(T#P_X, P_Y) / (2 tr Σ_Y)) where T is the optimal-transport map between the
Gaussian fits of X and Y and W2² is the exact OT cost between the two point clouds. ρ = 1 when Y is
an affine image of X through a symmetric positive definite map; it uses the distributions, not the
pairing of rows.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import linear_sum_assignment

from onnxaff.linalg import EPS, as_rows, covariance, ledoit_wolf, psd_inv_sqrt, psd_sqrt, squared_distances
from onnxaff.metrics import Chunk, Metric


def affine_ot_map(sigma_x: np.ndarray, sigma_y: np.ndarray, eps: float = EPS) -> np.ndarray:
    """A = S (S Σ_X S)^{-1/2} S with S = Σ_Y^{1/2}; A = 0 for a constant output (tr Σ_Y ≤ 2ε·d)."""
    d = sigma_y.shape[0]
    if np.trace(sigma_y) <= 2.0 * eps * d:
        return np.zeros_like(sigma_y)
    s = psd_sqrt(sigma_y)
    return s @ psd_inv_sqrt(s @ sigma_x @ s) @ s


def exact_w2_squared(a: np.ndarray, b: np.ndarray) -> float:
    """Exact OT cost between two uniform clouds of equal size: an assignment problem."""
    cost = squared_distances(a, b)
    rows, cols = linear_sum_assignment(cost)
    return float(cost[rows, cols].mean())


def affinity_score(x: np.ndarray, y: np.ndarray, eps: float = EPS, shrinkage: str = "none") -> float:
    x, y = as_rows(x), as_rows(y)
    if x.shape[0] != y.shape[0]:
        raise ValueError(f"X has {x.shape[0]} rows and Y {y.shape[0]}")
    if x.shape[1] != y.shape[1]:
        raise ValueError(f"affinity needs equal feature dimensions (X: {x.shape[1]}, Y: {y.shape[1]})")
    if x.shape[0] < 2:
        raise ValueError("affinity needs at least 2 rows")
    d = x.shape[1]
    if shrinkage == "ledoit_wolf":
        sigma_x, sigma_y = ledoit_wolf(x)[0], ledoit_wolf(y)[0]
    else:
        sigma_x, sigma_y = covariance(x), covariance(y)
    sigma_x = sigma_x + eps * np.eye(d)
    sigma_y = sigma_y + eps * np.eye(d)
    a = affine_ot_map(sigma_x, sigma_y, eps)
    mx, my = x.mean(axis=0), y.mean(axis=0)
    mapped = (x - mx) @ a.T + my
    w2 = exact_w2_squared(mapped, y)
    return float(1.0 - np.sqrt(w2 / (2.0 * np.trace(sigma_y))))


class Affinity(Metric):
    name = "affinity"
    description = "affinity score: 1 − W2(affine OT of X, Y)/sqrt(2 tr Σ_Y), per chunk (Bouniot et al. 2025)"
    higher_is_more_linear = True
    range = (0.0, 1.0)
    needs = "chunk"
    equal_dims = True

    def compute(self, chunk: Chunk) -> float:
        return affinity_score(chunk.x, chunk.y)


class AffinityLedoitWolf(Metric):
    name = "affinity_lw"
    description = "affinity score with Ledoit–Wolf shrunk covariances (the reference's 'corrected'; d ≥ n)"
    higher_is_more_linear = True
    range = (0.0, 1.0)
    needs = "chunk"
    equal_dims = True

    def compute(self, chunk: Chunk) -> float:
        return affinity_score(chunk.x, chunk.y, shrinkage="ledoit_wolf")

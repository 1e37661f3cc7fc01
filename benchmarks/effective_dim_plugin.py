"""Effective dimension of a site's features, for benchmarks/chunk_size_real.py's reading of n/d.

    onnxaff analyze MODEL --data DATA --plugin benchmarks/effective_dim_plugin.py \
        --metrics eff_dim_x,eff_dim_y,rank99_y,dead_y --chunk-size 2048 --limit 2048

eff_dim_x / eff_dim_y: the participation ratio (tr Σ)² / tr(Σ²) of the chunk's covariance of X / Y — d for a flat
spectrum, 1 for a single direction; the n/d that governs the affinity's finite-sample bias is closer to n over
this than over the nominal width. rank99_y: the leading eigen-directions of Σ_Y holding 99 % of
its trace. dead_y: the share of Y's features that are constant over the chunk.
"""

from __future__ import annotations

import numpy as np

from onnxaff.metrics import Chunk, Metric, Needs


def _gram(a: np.ndarray) -> np.ndarray:
    """The smaller of AᵀA and AAᵀ of the centred rows: the covariance's nonzero eigenvalues, times n."""
    a = np.asarray(a, np.float64)
    a = a - a.mean(axis=0)
    return a.T @ a if a.shape[1] <= a.shape[0] else a @ a.T


def participation_ratio(a: np.ndarray) -> float:
    g = _gram(a)
    tr, tr2 = float(np.trace(g)), float(np.sum(g * g))
    return tr * tr / tr2 if tr2 > 0 else 0.0


def rank_share(a: np.ndarray, share: float = 0.99) -> int:
    """How many of the covariance's leading eigen-directions hold `share` of its trace."""
    lam = np.sort(np.clip(np.linalg.eigvalsh(_gram(a)), 0, None))[::-1]
    total = lam.sum()
    return int(np.searchsorted(np.cumsum(lam), share * total) + 1) if total > 0 else 0


class EffDimX(Metric):
    name = "eff_dim_x"
    description = "participation ratio (tr Σ_X)²/tr(Σ_X²) of the chunk's X"
    higher_is_more_linear = None
    range = (0.0, float("inf"))
    needs = Needs.CHUNK

    def compute(self, chunk: Chunk) -> float:
        return participation_ratio(chunk.x)


class EffDimY(Metric):
    name = "eff_dim_y"
    description = "participation ratio (tr Σ_Y)²/tr(Σ_Y²) of the chunk's Y"
    higher_is_more_linear = None
    range = (0.0, float("inf"))
    needs = Needs.CHUNK

    def compute(self, chunk: Chunk) -> float:
        return participation_ratio(chunk.y)


class Rank99Y(Metric):
    name = "rank99_y"
    description = "leading eigen-directions of Σ_Y that hold 99 % of its trace"
    higher_is_more_linear = None
    range = (0.0, float("inf"))
    needs = Needs.CHUNK

    def compute(self, chunk: Chunk) -> float:
        return float(rank_share(chunk.y))


class DeadY(Metric):
    name = "dead_y"
    description = "share of Y's features constant over the chunk"
    higher_is_more_linear = None
    range = (0.0, 1.0)
    needs = Needs.CHUNK

    def compute(self, chunk: Chunk) -> float:
        y = np.asarray(chunk.y)
        return float(np.mean(y.max(axis=0) == y.min(axis=0)))

"""The reference code's cheap extras: change of sparsity and of histogram entropy from X to Y."""

from __future__ import annotations

import numpy as np

from onnxaff.metrics import Chunk, Metric, Needs

ENTROPY_BINS = 100


def sparsity(a: np.ndarray) -> float:
    """Share of entries that are zero up to 1e-6 of the chunk's largest magnitude."""
    scale = np.abs(a).max()
    return float(np.mean(np.abs(a) <= 1e-6 * scale)) if scale > 0 else 1.0


def histogram_entropy(a: np.ndarray, bins: int = ENTROPY_BINS) -> float:
    """Entropy (nats) of the histogram of all entries, bins spread over the chunk's own range."""
    counts, _ = np.histogram(a.ravel(), bins=bins)
    p = counts[counts > 0] / counts.sum()
    return float(-(p * np.log(p)).sum())


class SparsityChange(Metric):
    name = "sparsity_change"
    description = "sparsity(Y) − sparsity(X): share of zero entries gained through the site"
    higher_is_more_linear = None
    range = (-1.0, 1.0)
    needs = Needs.CHUNK

    def compute(self, chunk: Chunk) -> float:
        return sparsity(chunk.y) - sparsity(chunk.x)


class EntropyChange(Metric):
    name = "entropy_change"
    description = f"histogram entropy of Y minus that of X ({ENTROPY_BINS} bins over each chunk's range, nats)"
    higher_is_more_linear = None
    range = (-float(np.log(ENTROPY_BINS)), float(np.log(ENTROPY_BINS)))
    needs = Needs.CHUNK

    def compute(self, chunk: Chunk) -> float:
        return histogram_entropy(chunk.y) - histogram_entropy(chunk.x)

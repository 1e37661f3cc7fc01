"""Which directions of X are signal and which are rounding: the rank cutoff of r2, r2_pooled and the rank flags.

X's features are float32 values, usually means over P positions; such a mean carries about sqrt(P)·eps32 of
relative rounding (`Chunk.rounding`), and two correct reductions (onnxruntime's GlobalAveragePool, a host mean)
differ by that much. A direction of the standardised X whose singular value is at that level is rounding
noise: fitting it moved r2 of the shipped CNNs' stem sites by 0.014–0.040 between the two paths.

The numbers are measured (benchmarks/rank_spectra.py, docs/statistics.md "Rank cutoff"): on the shipped
models the two paths' standardised X differ by ‖ΔZ‖₂ ≤ 3.6·rounding·s₀ (the CNN stems, P = 784, d = 16), so by
Weyl's inequality no singular value moves by more than that; real directions lie at ≥ 41·rounding·s₀ (≥ 85
on the stems), the noise floor at ≤ 2.3 (graph) and ≤ 0.11 (host mean). NOISE bounds the move with a margin
of 2.2; the cutoff sits at twice NOISE, so a direction outside [cutoff − NOISE, cutoff + NOISE] (times
rounding·s₀) gets the same decision from either path, and one inside is flagged `rank_ambiguous`.
"""

from __future__ import annotations

import math

import numpy as np

FLOAT32_EPS = float(np.finfo(np.float32).eps)  # a Chunk's default rounding: unreduced float32 features
NOISE = 8.0  # how far two correct reductions move a singular value of standardised X, in rounding·s₀
CUTOFF = 2 * NOISE  # directions below CUTOFF·rounding·s₀ are not fitted
GRAM = 4.0  # eigenvalues of a float64 Gram matrix resolve s/s₀ down to about sqrt(d·eps64): stay 4× above it
_EPS64 = float(np.finfo(np.float64).eps)


def rank_cutoff(rounding: float, gram_dim: int = 0) -> float:
    """The relative singular value s/s₀ of standardised X below which a direction is rounding (lstsq's rcond).

    `gram_dim`: d when the caller takes eigenvalues of XᵀX (or of a covariance) rather than singular values
    of X; their own float64 rounding then sets a floor (above eps32-level cutoffs only for d ≳ 10⁴).
    """
    cut = CUTOFF * float(rounding)
    return max(cut, GRAM * math.sqrt(gram_dim * _EPS64)) if gram_dim else cut


def rank_verdict(relative: np.ndarray, rounding: float, gram_dim: int = 0) -> set[str]:
    """Flags from X's relative singular values s/s₀: `rank_deficient` when some direction falls under the
    cutoff, `rank_ambiguous` when one lies within NOISE·rounding of it (another correct reduction of the same
    data could decide it the other way)."""
    s = np.asarray(relative, dtype=np.float64)
    cut, band = rank_cutoff(rounding, gram_dim), NOISE * float(rounding)
    found = set()
    if (s < cut).any():
        found.add("rank_deficient")
    if (np.abs(s - cut) <= band).any():
        found.add("rank_ambiguous")
    return found


def relative_singular_values(eigenvalues: np.ndarray) -> np.ndarray:
    """s/s₀ from the eigenvalues of XᵀX (ascending, as eigh gives them); rounding-negative ones count as 0."""
    w = np.clip(np.asarray(eigenvalues, dtype=np.float64), 0.0, None)
    top = w.max() if w.size else 0.0
    return np.sqrt(w / top) if top > 0 else np.zeros_like(w)

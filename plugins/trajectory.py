"""Trajectory metrics of residual stages (`--blocks residual`; docs/metrics.md, after Gai & Zhang, arXiv 2102.09235).

A stage of L residual blocks moves each sample i along a track h⁰_i → h¹_i → … → h^L_i (the first
block's input, then every block's output). Two questions: is each track straight (line-shape score),
and does the stage as a whole move the samples the way the cheapest transport between the input and
output clouds would (optimal-transport score)? Everything is float64; `tracks` is a list of L + 1
arrays of one shape [n, ...] (rows = samples, trailing axes flattened into D).
"""

from __future__ import annotations

import math

import numpy as np

from onnxaff.metrics import Metric, Needs, Tracks
from onnxaff_plugins.linalg import ASSIGNMENT_SECONDS_PER_ROW3, squared_distances

# A sample whose net displacement is below this fraction of its path length has no usable LSS:
# the ratio would be infinite (a closed loop, or a sample that does not move) or past float64 resolution.
DEGENERATE_RTOL = 1e-12


def _stack(tracks) -> np.ndarray:
    """[L + 1, n, D] float64 from the list of per-block features, checked."""
    tracks = list(tracks)
    if len(tracks) < 2:
        raise ValueError(f"a trajectory needs at least h0 and h1, got {len(tracks)} array(s)")
    arrays = [np.asarray(h, dtype=np.float64) for h in tracks]
    shape = arrays[0].shape
    if len(shape) < 1 or shape[0] == 0:
        raise ValueError("tracks must hold at least one sample (rows = samples)")
    for k, a in enumerate(arrays):
        if a.shape != shape:
            raise ValueError(f"h{k} has shape {a.shape}, h0 has {shape}: a stage's tracks must share one shape")
    return np.stack([a.reshape(shape[0], -1) for a in arrays])


def line_shape_per_sample(tracks) -> np.ndarray:
    """LSS_i = Σ_l ‖h^{l+1}_i − h^l_i‖ / ‖h^L_i − h^0_i‖ per sample, NaN where undefined.

    Undefined (NaN): net displacement 0, or below DEGENERATE_RTOL × the path length — a sample that
    does not move, or comes back to where it started. Otherwise LSS_i ≥ 1 (triangle inequality),
    1 exactly for a track along one straight line in one direction.
    """
    h = _stack(tracks)
    path = np.linalg.norm(np.diff(h, axis=0), axis=2).sum(axis=0)
    net = np.linalg.norm(h[-1] - h[0], axis=1)
    out = np.full(net.shape, np.nan)
    ok = (net > 0) & (net > DEGENERATE_RTOL * path)
    out[ok] = path[ok] / net[ok]
    return out


def line_shape_score(tracks) -> float:
    """Mean LSS over the samples where it is defined (≥ 1; 1 = every track straight); NaN if none is.

    Undefined samples are left out of the mean, not counted as 1 or ∞: count them with
    `np.isnan(line_shape_per_sample(tracks)).sum()` (`trajectory_scores` reports the count).
    """
    per = line_shape_per_sample(tracks)
    ok = per[~np.isnan(per)]
    return float(ok.mean()) if ok.size else float("nan")


def ot_score(tracks) -> float:
    """OTS = W2²(h⁰, h^L) / mean_i ‖h^L_i − h⁰_i‖², in [0, 1]; NaN when no sample moves.

    onnxaff's own definition (docs/metrics.md), not a formula of the paper: W2² is the exact
    optimal-transport cost between the two uniform clouds {h⁰_i} and {h^L_i} (an assignment problem,
    scipy's linear_sum_assignment on squared distances, mean over the n pairs); the denominator is
    the cost of the transport the stage actually performs (sample i to its own output). The ratio
    is 1 when the stage moves every sample where optimal transport would (a map that is the gradient
    of a convex function: a translation, a positive scaling), and small when it shuffles the samples
    more than needed (0 for a pure permutation of the cloud). Only h⁰ and h^L enter; the assignment
    costs O(n³): chunk large n.
    """
    h = _stack(tracks)
    x, y = h[0], h[-1]
    moved = ((y - x) ** 2).sum(axis=1).mean()
    if moved == 0.0:
        return float("nan")
    from scipy.optimize import linear_sum_assignment  # 0.1 s of import, paid only where stages are scored

    rows, cols = linear_sum_assignment(squared_distances(x, y))
    # The assignment on the expanded distances; its cost recomputed from differences, exactly. The
    # stage's own pairing is one of the assignments, so W2² ≤ moved: min() only removes rounding.
    w2 = ((x[rows] - y[cols]) ** 2).sum(axis=1).mean()
    return float(min(w2 / moved, 1.0))


def trajectory_scores(tracks) -> dict:
    """Both scores of one stage with what a report needs: LSS mean/std over defined samples, counts."""
    tracks = list(tracks)
    per = line_shape_per_sample(tracks)
    ok = per[~np.isnan(per)]
    return {
        "lss": float(ok.mean()) if ok.size else float("nan"),
        "lss_std": float(ok.std()) if ok.size else float("nan"),
        "lss_excluded": int(per.size - ok.size),
        "ots": ot_score(tracks),
        "n": int(per.size),
        "blocks": len(tracks) - 1,
    }


class _StageScore(Metric):
    """A stage score from its tracks; a chunk where no example moves has no value (an error, not a number)."""

    needs = Needs.TRACKS
    stage_default = True  # residual stages get it when a run asks for no stage metric

    @staticmethod
    def score(tracks) -> float:  # pragma: no cover - each subclass sets its own
        raise NotImplementedError

    def compute(self, tracks: Tracks) -> float:
        value = self.score(tracks.arrays)
        if math.isnan(value):
            raise ValueError("no example of the chunk moves through the stage (the ratio is undefined)")
        return value


class LineShape(_StageScore):
    name = "lss"
    description = "line-shape score of a residual stage: Σ_l ‖h^{l+1}−h^l‖ / ‖h^L−h^0‖ per example, averaged"
    higher_is_more_linear = False  # 1 = a straight track
    range = (1.0, float("inf"))
    score = staticmethod(line_shape_score)


class OTScore(_StageScore):
    name = "ots"
    description = "optimal-transport score of a residual stage: W2²(h^0, h^L) / mean ‖h^L−h^0‖² (onnxaff's)"
    higher_is_more_linear = True  # 1 = the stage moves examples as the optimal transport map would
    range = (0.0, 1.0)
    score = staticmethod(ot_score)

    def chunk_seconds(self, rows: int, dx: int, dy: int) -> tuple[float, str] | None:
        return ASSIGNMENT_SECONDS_PER_ROW3 * rows**3, "the exact assignment (cubic in the rows)"

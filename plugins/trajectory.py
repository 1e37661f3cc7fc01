"""Trajectory metrics of residual stages (`--blocks residual`): how straight and how transport-like the
path of each example through a stage's blocks is. Definitions in onnxaff.trajectory."""

from __future__ import annotations

import math

from onnxaff.metrics import Metric, Tracks
from onnxaff.trajectory import line_shape_score, ot_score


class LineShape(Metric):
    name = "lss"
    description = "line-shape score of a residual stage: Σ_l ‖h^{l+1}−h^l‖ / ‖h^L−h^0‖ per example, averaged"
    higher_is_more_linear = False  # 1 = a straight track
    range = (1.0, float("inf"))
    needs = "tracks"

    def compute(self, tracks: Tracks) -> float:
        value = line_shape_score(tracks.arrays)
        if math.isnan(value):
            raise ValueError("no example of the chunk moves through the stage (the ratio is undefined)")
        return value


class OTScore(Metric):
    name = "ots"
    description = "optimal-transport score of a residual stage: W2²(h^0, h^L) / mean ‖h^L−h^0‖² (onnxaff's)"
    higher_is_more_linear = True  # 1 = the stage moves examples as the optimal transport map would
    range = (0.0, 1.0)
    needs = "tracks"

    def compute(self, tracks: Tracks) -> float:
        value = ot_score(tracks.arrays)
        if math.isnan(value):
            raise ValueError("no example of the chunk moves through the stage (the ratio is undefined)")
        return value

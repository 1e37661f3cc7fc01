"""The metric plugin API: everything a metric needs, and nothing else of the core.

A metric is a class with a few declared attributes and one `compute` method. Built-ins (plugins/) and
third-party metrics register the same way, through the `onnxaff.metrics` entry-point group; a single file
can also be loaded with `--plugin path.py`. docs/plugins.md has the whole interface; a complete plugin:

    import numpy as np
    from onnxaff.metrics import Chunk, Metric, Needs

    class MeanAbsChange(Metric):
        name = "mean_abs_change"
        description = "mean |Y − X| over a chunk (elementwise sites)"
        higher_is_more_linear = False
        range = (0.0, float("inf"))
        needs = Needs.CHUNK
        equal_dims = True

        def __init__(self, power: float = 1.0):  # --metrics mean_abs_change:power=2
            self.power = power

        def compute(self, chunk: Chunk) -> float:
            return float(np.mean(np.abs(chunk.y - chunk.x) ** self.power))
"""

from onnxaff.metrics.base import Metric
from onnxaff.metrics.loader import (
    ENTRY_POINT_GROUP,
    Registered,
    default_metrics,
    file_fingerprint,
    load_plugin_file,
    metric_info,
    primary_metric,
    registry,
    resolve,
    stage_metrics,
)
from onnxaff.metrics.output import plugin_output
from onnxaff.metrics.params import parse_spec, parse_value
from onnxaff.metrics.types import NEEDS, Chunk, ChunkPair, JvpStats, Moments, Needs, Tracks

__all__ = [
    "ENTRY_POINT_GROUP", "NEEDS", "Chunk", "ChunkPair", "JvpStats", "Metric", "Moments", "Needs", "Registered",
    "Tracks", "default_metrics", "file_fingerprint", "load_plugin_file", "metric_info", "parse_spec", "parse_value",
    "plugin_output", "primary_metric", "registry", "resolve", "stage_metrics",
]

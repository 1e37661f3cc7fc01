"""The metric plugin API: everything a metric needs, and nothing else of the core.

A metric is a class with a few declared attributes and one `compute` method. Built-ins (plugins/) and
third-party metrics register the same way, through the `onnxaff.metrics` entry-point group; a single file
can also be loaded with `--plugin path.py`. docs/plugins.md has the whole interface and a complete plugin.
Parameters are constructor keywords (`--metrics affinity:eps=1e-5`); `Needs` says which input compute() takes.
`check_metric(cls)` runs a metric through what the core relies on, for a plugin's own tests.
"""

from onnxaff.foundations.memory import available_bytes
from onnxaff.metrics.base import Metric
from onnxaff.metrics.check import CheckReport, MetricCheckError, check_metric
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
from onnxaff.metrics.rank import FLOAT32_EPS, rank_cutoff, rank_verdict, relative_singular_values
from onnxaff.metrics.types import NEEDS, Chunk, ChunkPair, JvpStats, Moments, Needs, Tracks

__all__ = [
    "ENTRY_POINT_GROUP", "FLOAT32_EPS", "NEEDS", "CheckReport", "Chunk", "ChunkPair", "JvpStats", "Metric",
    "MetricCheckError", "Moments", "Needs", "Registered", "Tracks", "available_bytes", "check_metric",
    "default_metrics", "file_fingerprint", "load_plugin_file", "metric_info", "parse_spec",
    "parse_value", "plugin_output", "primary_metric", "rank_cutoff", "rank_verdict", "registry",
    "relative_singular_values", "resolve", "stage_metrics",
]

"""How the core serves each kind of metric: one row per Needs, the only place that reads `needs`.

A row says which input a site (or a residual stage) builds for the metric, and when it is scored: per chunk
as the chunks arrive, per pair of consecutive chunks, once at the end from the pooled moments or the
Jacobian-vector sums, or per chunk of a residual stage; and which of the finite-sample rules apply to it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from onnxaff.metrics.base import Metric
from onnxaff.metrics.types import NEEDS, Chunk, ChunkPair, Needs, Tracks


@dataclass(frozen=True)
class Serving:
    chunk_input: Callable | None  # (chunk, previous chunk, tracks) -> the input, or None: nothing to score yet
    end_input: str | None  # "moments" or "jvp": scored once when the run ends, from what the site pooled
    stage: bool = False  # scored on residual stages (their tracks), never on sites
    site_chunks: bool = False  # scored on a site's chunks: chunk diagnostics and the partial flag apply
    half_samples: bool = False  # a one-chunk run gets its ci95 from half-samples of that chunk
    keeps_previous: bool = False  # holds the previous chunk (and the first one, for shard boundaries)
    row_rule: bool = False  # flagged few_rows below the metric's rows per dimension
    no_data: Callable | None = None  # (site state) -> why a run left it without a value, or None

    @property
    def pooled(self) -> bool:
        return self.end_input is not None


def _tracks(chunk: Chunk, previous, tracks: int | None):
    return Tracks(tuple(np.split(chunk.x, tracks, axis=1))) if tracks else None


SERVING: dict[Needs, Serving] = {
    Needs.CHUNK: Serving(lambda chunk, previous, tracks: chunk, None, site_chunks=True, half_samples=True,
                         row_rule=True),
    Needs.CHUNK_PAIR: Serving(lambda chunk, previous, tracks: None if previous is None else ChunkPair(previous, chunk),
                              None, site_chunks=True, keeps_previous=True, row_rule=True,
                              no_data=lambda st: "needs at least two chunks" if st.chunks < 2 else None),
    Needs.MOMENTS: Serving(None, "moments", row_rule=True),
    Needs.JVP: Serving(None, "jvp", no_data=lambda st: "needs batches of at least 2 examples"
                       if st.jvp is not None and st.jvp.short_batches else None),
    Needs.TRACKS: Serving(_tracks, None, stage=True),
}


def unserved(metric: Metric | type[Metric]) -> str | None:
    """Why no row serves a metric's declared `needs`, or None: the loader refuses such a metric when it loads."""
    if isinstance(metric.needs, str) and metric.needs in NEEDS:
        return None
    return f"declares unknown needs {metric.needs!r}; one of {', '.join(NEEDS)}"


def needs_of(metric: Metric | type[Metric]) -> Needs:
    """The kind of input a (served) metric declared."""
    return Needs(metric.needs)


def serving(metric: Metric | type[Metric]) -> Serving:
    return SERVING[needs_of(metric)]


def any_serving(metrics: list[Metric], attribute: str) -> bool:
    """Whether any of `metrics` is served with `attribute` set (e.g. keeps_previous)."""
    return any(getattr(serving(m), attribute) for m in metrics)


def stage_entry(info: dict) -> bool:
    """Whether a signature's metric entry (its `needs` text) scores residual stages rather than sites."""
    needs = info.get("needs") if isinstance(info, dict) else None
    return needs in NEEDS and SERVING[Needs(needs)].stage

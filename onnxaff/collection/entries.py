"""The signature entries of one site (or residual stage): each metric's status, mean, spread, flags, interval.

One call per finished SiteState (`site_metrics`, what assembly calls): it reads the state's finished parts once
(`Finished`) and builds every metric's entry from them alone; nothing here changes the state or reads it again.

An entry is a plain dict (`MetricEntry`) of the signature's score fields, which are declared once, with their JSON
kinds and defaults, in onnxaff.format.siteentry.ScoreEntry. This layer sits above the signature format and may not
import it, so it writes those keys and declares none: assembly builds each ScoreEntry from the dict with
`ScoreEntry.of`, which refuses a key the format does not declare (the first run that writes one fails there).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from onnxaff.collection.site_state import SiteState
from onnxaff.collection.stats import RANK_FLAGS, RANK_TEST_MAX_D, entry_ci, metric_flags, moments_rank
from onnxaff.metrics import Metric, plugin_output
from onnxaff.metrics.dispatch import serving

# One metric's entry: keys are onnxaff.format.siteentry.ScoreEntry's fields (the module docstring says why a dict).
MetricEntry = dict[str, Any]


@dataclass(frozen=True)
class Finished:
    """What the entries of a finished site read, read off its SiteState once (`of`): its parts' counts and scores,
    and per metric why it does not apply or got no value; the pooled X's rank flags found once a site. It holds the
    parts' own dicts, not copies: a finished state does not change."""

    rows: int
    dims: tuple[int, int] | None
    masked_rows: int
    nonfinite_rows: int
    dead: int
    scale: float | None
    seen: set[str]
    pooled_seen: set[str]  # `seen` with the pooled X's rank flags for the rank flags (see `of`)
    chunk_rows: int
    partial: bool
    intervals: str
    values: dict[str, list[float]]
    errors: dict[str, str]
    live: dict[str, list[float]]
    halves: dict[str, list[float]]
    jvp_nonfinite: int  # batches whose Jacobian-vector sums held NaN/Inf
    not_applicable: dict[str, str | None]
    no_data: dict[str, str | None]  # the dispatch table's reason a run left a metric without a value

    @classmethod
    def of(cls, st: SiteState, metrics: list[Metric]) -> Finished:
        observed, jvp = st.observed, st.pooled.jvp
        return cls(rows=observed.rows, dims=observed.dims, masked_rows=observed.masked_rows,
                   nonfinite_rows=observed.nonfinite_rows, dead=observed.dead, scale=observed.scale,
                   seen=observed.seen, pooled_seen=cls._pooled_seen(st, metrics), chunk_rows=st.schedule.chunk_rows,
                   partial=st.schedule.partial, intervals=st.intervals, values=st.scores.values,
                   errors=st.scores.errors, live=st.scores.live, halves=st.halved.halves,
                   jvp_nonfinite=0 if jvp is None else jvp.nonfinite_batches,
                   not_applicable={m.spec: st.not_applicable(m) for m in metrics},
                   no_data={m.spec: why(st) for m in metrics if (why := serving(m).no_data) is not None})

    @staticmethod
    def _pooled_seen(st: SiteState, metrics: list[Metric]) -> set[str]:
        """The chunks' `seen` with the rank flags of the pooled X in place of theirs, where a pooled rank-sensitive
        metric has a value to flag (once a site: an O(d³) test)."""
        moments, seen = st.pooled.moments, st.observed.seen
        if not (any(serving(m).pooled and m.rank_sensitive and st.scores.values.get(m.spec) for m in metrics)
                and moments is not None and moments.n >= 2
                and moments.dx <= RANK_TEST_MAX_D):  # past it the test is skipped: merge no moment tree for it
            return seen
        found = moments_rank(moments.total().cov_x(), st.observed.chunk_rounding)
        return seen if found is None else (seen - set(RANK_FLAGS)) | found


def site_metrics(st: SiteState, metrics: list[Metric]) -> dict[str, MetricEntry]:
    """The signature's `metrics` of a finished site or stage (docs/signature.md): the one way a state's entries
    are built."""
    return from_finished(Finished.of(st, metrics), metrics)


def metric_entry(st: SiteState, m: Metric) -> MetricEntry:
    """One metric's entry, as site_metrics builds it."""
    return site_metrics(st, [m])[m.spec]


def from_finished(f: Finished, metrics: list[Metric]) -> dict[str, MetricEntry]:
    """Every metric's entry from the finished parts alone (what site_metrics returns)."""
    return {m.spec: _entry(f, m) for m in metrics}


def _entry(f: Finished, m: Metric) -> MetricEntry:
    """What the signature says of `m` at this site (docs/signature.md)."""
    values = f.values.get(m.spec, [])
    out: MetricEntry = {"mean": None, "std": None, "chunks": len(values), "status": "ok"}
    if f.masked_rows:
        out["masked_rows"] = f.masked_rows
    if f.nonfinite_rows:
        out["status"] = "nonfinite"
    elif (reason := f.not_applicable[m.spec]) is not None:
        out.update(status="not_applicable", reason=reason)
    elif m.spec in f.errors:
        out.update(status="error", error=f.errors[m.spec])
    elif serving(m).end_input == "jvp" and (bad := f.jvp_nonfinite):
        out.update(status="nonfinite", reason=f"NaN/Inf in the Jacobian-vector sums of {bad} batch(es) (float32 "
                   "sums overflow from features near 1e19, or a finite difference met NaN): no value; the features "
                   "and the other metrics are not affected")
    elif not values:
        out["status"] = "no_data"
        if (reason := f.no_data.get(m.spec)) is not None:
            out["reason"] = reason
        elif f.masked_rows and not f.rows:
            out["reason"] = "masks left out every row (docs/metrics.md, masked positions)"
    if values and out["status"] == "ok":
        out.update(mean=float(np.mean(values)), std=float(np.std(values)), values=values)
        if f.partial and serving(m).site_chunks:
            out["partial"] = True
        if serving(m).pooled:
            out.update(chunks=0, std=None, pooled_rows=f.rows)
        if f.dead and f.dims:
            out["dead"] = [f.dead, f.dims[1]]
        if f.dims and (note := _caveat(f, m)):
            out["caveat"] = note
        out.update(flags_and_ci(f, m, values))
    return out


# A move smaller than this share of a metric's range is finer than what the default protocol resolves (its 4·D-row
# chunks read 0.014–0.022 above 16·D-row ones on the affinity's [0, 1], docs/statistics.md): the interval alone
# shrinks with every chunk, so hundreds of small chunks flagged a single dead channel of 16 that moved the score by
# 0.007 (the demo's CNN: 7 of 10 sites). A metric with an unbounded range is weighed by its interval alone.
DEAD_RESOLUTION = 0.01


def dead_resolution(bounds: tuple[float, float]) -> float:
    """DEAD_RESOLUTION of the metric's declared range (0.01 on [0, 1]); 0 where the range is unbounded."""
    width = bounds[1] - bounds[0]
    return DEAD_RESOLUTION * width if math.isfinite(width) else 0.0


def flags_and_ci(f: Finished, m: Metric, values: list[float]) -> dict:
    """`flags` (onnxaff.collection.stats.metric_flags) and `ci95` of an ok entry, the ci95 within the metric's range; a
    pooled rank-sensitive metric's rank flags come from the pooled X (the spectrum it inverts), not from single
    chunks."""
    pooled = serving(m).pooled
    rows = f.rows if pooled else (f.chunk_rows or f.rows)
    d = max(f.dims) if f.dims else 0
    seen = f.pooled_seen if pooled and m.rank_sensitive else f.seen
    flags = metric_flags(m, rows, d, f.partial, seen, f.scale)
    ci = None if pooled or f.intervals == "none" else entry_ci(values, f.halves.get(m.spec), m.range, f.intervals)
    if "constant_output" in flags and dead_within(f.live.get(m.spec), values, ci, dead_resolution(m.range)):
        flags.remove("constant_output")
    return {"flags": flags, "ci95": ci}


def dead_within(live: list[float] | None, values: list[float], ci: list[float] | None,
                resolution: float = DEAD_RESOLUTION) -> bool:
    """The dead output features move the score by no more than its interval, or than `resolution`: the chunk
    scored without them (`live`: [chunk index, score]) is that close to that chunk's own score. Without that
    score or an interval nothing is weighed, and the flag stays."""
    if live is None or ci is None or not 0 <= int(live[0]) < len(values):
        return False
    return abs(values[int(live[0])] - live[1]) <= max((ci[1] - ci[0]) / 2, resolution)


def _caveat(f: Finished, m: Metric) -> str | None:
    try:
        with plugin_output():
            note = m.caveat(f.chunk_rows or f.rows, *f.dims)
    except Exception as exc:
        return f"caveat() failed: {type(exc).__name__}: {exc}"
    return None if note is None else str(note)

"""The signature entry of one metric at one site (or residual stage): status, mean, spread, flags, interval.

Read from a finished SiteState; nothing here changes it.
"""

from __future__ import annotations

from typing import TypedDict

import numpy as np

from onnxaff.metrics import Metric, plugin_output
from onnxaff.metrics.dispatch import serving
from onnxaff.site_state import SiteState
from onnxaff.stats import RANK_FLAGS, RANK_TEST_MAX_D, entry_ci, metric_flags, moments_rank


class MetricEntry(TypedDict, total=False):
    """One metric at one site or stage in the signature (docs/signature.md; tests/test_docs.py holds them equal)."""

    mean: float | None
    std: float | None
    chunks: int
    status: str  # ok, error, not_applicable, no_data, nonfinite
    values: list[float]
    reason: str
    error: str
    partial: bool
    pooled_rows: int
    caveat: str
    flags: list[str]
    ci95: list[float] | None
    masked_rows: int
    dead: list[int]


def metric_entry(st: SiteState, m: Metric) -> MetricEntry:
    """What the signature says of `m` at this site (docs/signature.md)."""
    observed, values = st.observed, st.scores.values.get(m.spec, [])
    partial = st.schedule.partial
    out = MetricEntry(mean=None, std=None, chunks=len(values), status="ok")
    if observed.masked_rows:
        out["masked_rows"] = observed.masked_rows
    if observed.nonfinite_rows:
        out["status"] = "nonfinite"
    elif (reason := st.not_applicable(m)) is not None:
        out.update(status="not_applicable", reason=reason)
    elif m.spec in st.scores.errors:
        out.update(status="error", error=st.scores.errors[m.spec])
    elif serving(m).end_input == "jvp" and (bad := st.pooled.jvp.nonfinite_batches):
        out.update(status="nonfinite", reason=f"NaN/Inf in the Jacobian-vector sums of {bad} batch(es) (float32 "
                   "sums overflow from features near 1e19, or a finite difference met NaN): no value; the features "
                   "and the other metrics are not affected")
    elif not values:
        out["status"] = "no_data"
        why = serving(m).no_data
        if why is not None and (reason := why(st)) is not None:
            out["reason"] = reason
        elif observed.masked_rows and not observed.rows:
            out["reason"] = "masks left out every row (docs/metrics.md, masked positions)"
    if values and out["status"] == "ok":
        out.update(mean=float(np.mean(values)), std=float(np.std(values)), values=values)
        if partial and serving(m).site_chunks:
            out["partial"] = True
        if serving(m).pooled:
            out.update(chunks=0, std=None, pooled_rows=observed.rows)
        if observed.dead and observed.dims:
            out["dead"] = [observed.dead, observed.dims[1]]
        if observed.dims and (note := _caveat(st, m)):
            out["caveat"] = note
        out.update(flags_and_ci(st, m, values))
    return out


# A move smaller than this is finer than what the default protocol resolves (its 4·D-row chunks read 0.014–0.022
# above 16·D-row ones, docs/statistics.md): the interval alone shrinks with every chunk, so hundreds of small
# chunks flagged a single dead channel of 16 that moved the score by 0.007 (the demo's CNN: 7 of 10 sites).
DEAD_RESOLUTION = 0.01


def flags_and_ci(st: SiteState, m: Metric, values: list[float]) -> dict:
    """`flags` (onnxaff.stats.metric_flags) and `ci95` of an ok entry, the ci95 within the metric's range."""
    observed, pooled = st.observed, serving(m).pooled
    rows = observed.rows if pooled else (st.schedule.chunk_rows or observed.rows)
    d = max(observed.dims) if observed.dims else 0
    flags = metric_flags(m, rows, d, st.schedule.partial, _seen_by(st, m, pooled), observed.scale)
    ci = None if pooled or st.intervals == "none" else entry_ci(values, st.halved.halves.get(m.spec), m.range,
                                                                  st.intervals)
    if "constant_output" in flags and dead_within(st.scores.live.get(m.spec), values, ci):
        flags.remove("constant_output")
    return {"flags": flags, "ci95": ci}


def dead_within(live: list[float] | None, values: list[float], ci: list[float] | None) -> bool:
    """The dead output features move the score by no more than its interval, or than DEAD_RESOLUTION: the chunk
    scored without them (`live`: [chunk index, score]) is that close to that chunk's own score. Without that
    score or an interval nothing is weighed, and the flag stays."""
    if live is None or ci is None or not 0 <= int(live[0]) < len(values):
        return False
    return abs(values[int(live[0])] - live[1]) <= max((ci[1] - ci[0]) / 2, DEAD_RESOLUTION)


def _seen_by(st: SiteState, m: Metric, pooled: bool) -> set[str]:
    """What the flags of `m` read: a pooled rank-sensitive metric's rank flags come from the pooled X (the
    spectrum it inverts), not from single chunks."""
    moments = st.pooled.moments
    if not (pooled and m.rank_sensitive and moments is not None and moments.n >= 2
            and moments.dx <= RANK_TEST_MAX_D):  # past it the test is skipped: merge no moment tree for it
        return st.observed.seen
    found = moments_rank(moments.total().cov_x(), st.observed.chunk_rounding)
    return st.observed.seen if found is None else (st.observed.seen - set(RANK_FLAGS)) | found


def _caveat(st: SiteState, m: Metric) -> str | None:
    try:
        with plugin_output():
            note = m.caveat(st.schedule.chunk_rows or st.observed.rows, *st.observed.dims)
    except Exception as exc:
        return f"caveat() failed: {type(exc).__name__}: {exc}"
    return None if note is None else str(note)

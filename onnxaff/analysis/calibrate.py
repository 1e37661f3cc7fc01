"""The scoring jobs a dry run times (onnxaff.analysis.cost): every distinct (metric, rows, D) shape is known after
a first pass over the sites; of each metric's shapes at a row count (at a number of rows per feature, under
chunks of K·D rows) only ANCHORS are run (the smallest, the largest and the geometric middle of their widths),
the others read off a power law between the two timed neighbours. Timing every shape was 93 % of a dry run's time
on a chain of ten widths (docs/cost.md)."""

from __future__ import annotations

import math
import time

import numpy as np

from onnxaff.analysis.config import AnalysisConfig
from onnxaff.collection.chunks import readonly, width_multiple
from onnxaff.collection.observations import Observations
from onnxaff.collection.scoring import MetricScorer, default_workers
from onnxaff.collection.stats import HALVES
from onnxaff.metrics import Chunk
from onnxaff.metrics.dispatch import serving

JITTER = 0.1  # of each feature's spread, added to rows drawn again so no two rows of a timed chunk are equal
DECLARED_ABOVE = 5.0  # a job whose metric declares more seconds than this (chunk_seconds) is not run: declared
ANCHORS = 3  # shapes timed per (metric, rows): the smallest, the largest and the middle width


def between(timed: dict[int, float], size: int) -> float:
    """A job's seconds at `size` (dx + dy) from the timed sizes around it: t ∝ size^p between the two neighbours."""
    if size in timed:
        return timed[size]
    lo = max((s for s in timed if s < size), default=min(timed))
    hi = min((s for s in timed if s > size), default=max(timed))
    t_lo, t_hi = timed[lo], timed[hi]
    if lo == hi or t_lo <= 0 or t_hi <= 0:
        return t_lo if size < hi else t_hi
    return t_lo * (size / lo) ** (math.log(t_hi / t_lo) / math.log(hi / lo))


def anchors(sizes: list[int], k: int | None = None) -> list[int]:
    """The sizes to time: all of them up to k (ANCHORS), else the smallest, the largest and those nearest the
    geometric points between (in log size)."""
    k = ANCHORS if k is None else k
    sizes = sorted(set(sizes))
    if len(sizes) <= k:
        return sizes
    picked = {sizes[0], sizes[-1]}
    for j in range(1, k - 1):
        target = sizes[0] * (sizes[-1] / sizes[0]) ** (j / (k - 1))
        picked.add(min(sizes, key=lambda s: abs(math.log(s / target))))
    return sorted(picked)


class Jobs:
    """Scoring jobs timed on the site's own rows, on a scoring thread: with `timing` False the shapes are only
    noted (0 s); `anchors()` then times a few per (metric, rows), and with `timing` True every shape has its
    seconds, timed or read off its neighbours."""

    def __init__(self, config: AnalysisConfig):
        self.config = config
        self.timing = False
        self.shapes: dict[tuple, dict[int, tuple]] = {}  # (metric, rows, tracks) -> {dx + dy: (metric, st, key)}
        self.workers = default_workers() if config.chunk_workers is None else config.chunk_workers
        self.seconds: dict[tuple, float] = {}
        self.warm: set[str] = set()
        self.diagnostics = 0.0  # main-thread seconds of the chunk diagnostics (rank test, scale)
        self.working_bytes = 0
        self.notes: list[str] = []
        self.rng = np.random.default_rng(0)
        self.scorer = MetricScorer(0)

    def site_seconds(self, m, st, rows: int, chunks: int) -> float:
        """A metric's scoring at one site: its chunks (or chunk pairs), the half-samples a one-chunk interval
        takes, the end-of-data job on the pooled sums."""
        how = serving(m)
        if st.observed.nonfinite_rows or st.observed.dims is None:  # flagged (NaN/Inf) or no row kept: no scores
            return 0.0
        if how.pooled:
            return self._end(m, st) if self.timing else 0.0
        jobs = chunks - 1 if how.keeps_previous else chunks
        if jobs <= 0 or rows < 2:
            return 0.0
        seconds = jobs * self._chunk(m, st, rows)
        # HALVES halves of the first chunk: a run's only one (intervals "auto"), or every site's ("half")
        halves = {"auto": chunks == 1, "half": True}.get(self.config.intervals, False)
        if halves and how.half_samples and rows >= 8:
            seconds += HALVES * self._chunk(m, st, rows // 2)
        return seconds

    def diagnostic_seconds(self, st, rows: int, metrics) -> float:
        if st.observed.nonfinite_rows or st.observed.dims is None:  # flagged or nothing kept: no chunk is scored
            return 0.0
        key = ("diagnostics", rows, st.observed.dims)
        if key not in self.seconds:
            chunk = self._rows(st, rows)
            clock = time.perf_counter()
            Observations().note_chunk(chunk, rank=any(m.rank_sensitive for m in metrics))
            self.seconds[key] = time.perf_counter() - clock
        return self.seconds[key]

    def _chunk(self, m, st, rows: int) -> float:
        dx, dy = st.observed.dims
        key = (m.spec, rows, dx, dy, st.tracks)
        if key in self.seconds:
            return self.seconds[key]
        # a chunk's working set: the assignment's n×n costs, a few d×d matrices, the rows centred and mapped
        work = 8 * (3 * rows * rows + 6 * max(dx, dy) ** 2 + 4 * rows * (dx + dy))
        self.working_bytes = max(self.working_bytes, work)
        declared = m.chunk_seconds(rows, dx, dy)
        if declared is not None and declared[0] > DECLARED_ABOVE:
            self.notes.append(f"metric {m.spec}: {rows:,} rows of {dx:,} features not timed; declared "
                              f"{declared[0]:.0f} s a chunk ({declared[1]})")
            self.seconds[key] = float(declared[0])
            return self.seconds[key]
        # one law per metric and row count; under chunks of K·D rows, per metric and rows per feature
        per = round(rows / max(dx, dy), 2) if width_multiple(self.config.chunk_size) is not None else rows
        group = self.shapes.setdefault((m.spec, per, st.tracks), {})
        if not self.timing:
            group.setdefault(dx + dy, (m, st, key, rows))
            return 0.0
        self._time_anchors(group)
        self.seconds[key] = between({s: self.seconds[k] for s, (_, _, k, _) in group.items() if k in self.seconds},
                                    dx + dy)
        return self.seconds[key]

    def _time_anchors(self, group: dict[int, tuple]) -> None:
        for size in anchors(list(group)):
            m, st, key, rows = group[size]
            if key not in self.seconds:
                self.seconds[key] = self._run(m, st, rows)

    def _run(self, m, st, rows: int) -> float:
        chunk = self._rows(st, rows)
        build = serving(m).chunk_input
        if m.spec not in self.warm:  # its imports and first-call costs are the run's once, not every chunk's
            self.warm.add(m.spec)
            small = self._rows(st, min(rows, 16))
            self._time(m, build(small, small, st.tracks))
        return self._time(m, build(chunk, chunk, st.tracks))

    def _end(self, m, st) -> float:
        sample = st.pooled.inputs(st.observed.chunk_rounding).get(serving(m).end_input)
        return 0.0 if sample is None else self._time(m, sample)

    def _time(self, m, sample) -> float:
        clock = time.perf_counter()
        self.scorer.results(self.scorer.submit([(m, sample)]))
        return time.perf_counter() - clock

    def _rows(self, st, rows: int) -> Chunk:
        """`rows` rows of the site's own features: as fed, else drawn again from them with a little jitter."""
        got = [(p.chunk.x, p.chunk.y) for p in st.schedule.pending]
        rest = st.schedule.buffer.remainder()
        got += [rest] if rest is not None else []
        x, y = np.concatenate([a for a, _ in got]), np.concatenate([b for _, b in got])
        if x.shape[0] < rows:
            pick = self.rng.integers(x.shape[0], size=rows)
            x = x[pick] + JITTER * x.std(axis=0) * self.rng.standard_normal((rows, x.shape[1]))
            y = y[pick] + JITTER * y.std(axis=0) * self.rng.standard_normal((rows, y.shape[1]))
        return Chunk(readonly(x[:rows]), readonly(y[:rows]), st.observed.chunk_rounding)

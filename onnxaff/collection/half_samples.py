"""The first chunk's half-samples: what the interval reads when the site has one chunk (or always, under
intervals="half"), scored beside inference where the chunk count is known early, dropped once a second chunk makes
the interval one over chunks (onnxaff.collection.stats.entry_ci).

`HalfSamples` owns them (the chunk kept for them, their futures, their scores), saved under the names a checkpoint
has always had (`solo`, `halves`); the rules (`wanted`, `now`, `kept`) read plain values. SiteState says when.
"""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field

from onnxaff.collection.chunks import CHUNK, readonly
from onnxaff.collection.scoring import MetricScorer
from onnxaff.collection.stats import half_sample_rows
from onnxaff.foundations.statefields import saved, transient
from onnxaff.metrics import Chunk


def wanted(intervals: str, chunks: int) -> bool:
    """The interval reads the half-samples of the first chunk: always under "half", under "auto" when the site has
    one chunk (at the end of the data)."""
    return intervals == "half" or (intervals == "auto" and chunks == 1)


def now(intervals: str, chunk_size: int, expected_rows: int | None) -> bool:
    """Score them as soon as the first chunk is cut, beside inference: under "half", and under "auto" when the whole
    data will give the site exactly one chunk (a wrong prediction is caught either way: a second chunk drops them,
    and a one-chunk site without them gets them at the end of the data)."""
    rows = expected_rows
    return intervals == "half" or (intervals == "auto" and rows is not None and chunk_size <= rows < 2 * chunk_size)


def kept(intervals: str, chunks: int) -> bool:
    """The first chunk's halves count for a site of `chunks` chunks: when it has one, or always under "half"; a
    second chunk drops them otherwise, whether it is cut or comes from a merged slice."""
    return chunks == 1 or intervals == "half"


@dataclass
class HalfSamples:
    """`solo`: the first chunk while its half-samples may be needed; `halving`: the futures of their scores (one per
    half) while they are computed; `halves`: their scores (spec -> one a half, in half order)."""

    solo: Chunk | None = saved(None, **CHUNK)
    halves: dict[str, list[float]] = field(default_factory=dict)
    halving: list[tuple[Future, MetricScorer]] = transient(factory=list)

    def note(self, chunk: Chunk, chunks: int, intervals: str) -> None:
        """The site's chunk number `chunks` was cut: the first is kept for its halves; a later one drops them
        unless the interval still reads them (a prediction of one chunk was short)."""
        if chunks == 1:
            self.solo = chunk
        elif not kept(intervals, chunks) and (self.solo is not None or self.halving):
            for future, _ in self.halving:
                future.cancel()
            self.halving, self.solo, self.halves = [], None, {}

    def submit(self, jobs_of, scorer: MetricScorer) -> None:
        """Submit the half-samples of `solo` (seeded: onnxaff.collection.stats.half_sample_rows), one future per half so
        that idle scoring threads take them in parallel; `jobs_of(half)` gives a half's jobs."""
        solo = self.solo
        if solo is None or solo.n < 8 or self.halving:
            return
        for rows in half_sample_rows(solo.n):
            if jobs := jobs_of(Chunk(readonly(solo.x[rows]), readonly(solo.y[rows]), solo.rounding)):
                self.halving.append((scorer.submit(jobs), scorer))

    def collect(self, wait: bool, pending: list, scored: dict) -> None:
        """The half scores of the metrics that scored the chunk itself (`scored`: the site's values), in half order;
        then the chunk's rows are let go. Without `wait`, only once all are done and the chunk's own scores are in
        (none of `pending`, the chunks still being scored). A stop keeps `solo`, so its halves are scored again
        (at the end of the data, or of a resumed run)."""
        if not self.halving or (not wait and not (all(f.done() for f, _ in self.halving)
                                                 and not any(p.chunk is self.solo for p in pending))):
            return
        halving, self.halving = self.halving, []
        results = []
        for future, scorer in halving:
            if (got := scorer.results(future)) is None:
                return
            results += got
        for name, value, _ in results:
            if value is not None and name in scored:
                self.halves.setdefault(name, []).append(value)
        self.solo = None

    def release(self) -> None:
        """The data is over and nothing stopped the run: the chunk's rows are let go, its halves scored or not
        wanted."""
        self.solo = None

    def merge(self, other: HalfSamples, intervals: str, chunks: int, their_chunks: int) -> None:
        """The whole's, after the next slice (`chunks` and `their_chunks` each slice's): the halves of the slice
        holding the whole's first chunk (this one unless it has none), where the whole keeps them."""
        first = self if chunks else other
        keep = kept(intervals, chunks + their_chunks)
        self.solo, self.halves = (first.solo, first.halves) if keep else (None, {})

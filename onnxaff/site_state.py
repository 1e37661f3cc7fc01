"""What one run has collected for one site (or residual stage), and how it is saved and merged.

Its parts each do one job and save their own fields (onnxaff.statefields, one flat dict): the chunk schedule
(onnxaff.chunks), the pooled sums (onnxaff.pooled), what the features showed (onnxaff.observations) and the
scores (onnxaff.scores); the signature entry is read off it by onnxaff.entries.

A checkpoint and a shard part are both this state for every site. Merging the parts of consecutive,
chunk-aligned slices of the data gives the state of one run over all of it: chunk scores are concatenated
in order (bit for bit), pooled moments merge on a fixed block tree (bit for bit), NLC sums add in another
order (equal to rounding, ~1e-16 relative), and a chunk_pair metric scores the one pair that straddles each
boundary (the last chunk of a part with the first chunk of the next).

Metrics get read-only arrays (chunks, pairs, tracks, moments), so no metric can change what another one sees.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from onnxaff.chunks import ChunkSchedule, readonly
from onnxaff.collect import ChunkBuffer, JvpAccumulator
from onnxaff.entries import entry, not_applicable
from onnxaff.errors import OnnxaffError
from onnxaff.metrics import Chunk, ChunkPair, Metric
from onnxaff.metrics.dispatch import any_serving, serving
from onnxaff.observations import Observations
from onnxaff.pooled import Pooled
from onnxaff.scores import Scores
from onnxaff.scoring import MetricScorer
from onnxaff.statefields import from_state, part, to_state, transient
from onnxaff.stats import half_sample_rows


@dataclass
class SiteState:
    """`index`: the site's (None for a residual stage); `tracks`: a residual stage's track count (X is h⁰ … h^L
    side by side, Y empty); `finished`: the end-of-data scores are in (a state saved after it is not finished
    twice). `label` and `jvp_names` come from the run, not from a saved state."""

    index: int | None = None
    tracks: int | None = None
    finished: bool = False
    schedule: ChunkSchedule = part(ChunkSchedule)
    pooled: Pooled = part(Pooled)
    observed: Observations = part(Observations)
    scores: Scores = part(Scores)
    label: str = transient("")
    jvp_names: tuple[str, ...] | None = transient(None)
    intervals: str = transient("auto")  # the run's interval method (AnalysisConfig.intervals)

    @classmethod
    def open(cls, chunk_size: int, index: int | None = None, label: str = "", rounding: float | None = None,
             jvp: tuple[str, tuple[str, ...]] | None = None, tracks: int | None = None,
             intervals: str = "auto") -> SiteState:
        """A live collector; `jvp` = (form, output names) when the run feeds the site's NLC statistics."""
        st = cls(index=index, tracks=tracks, label=label, jvp_names=None if jvp is None else tuple(jvp[1]),
                 intervals=intervals)
        st.schedule.buffer = ChunkBuffer(chunk_size)
        st.observed.rounding = rounding
        if jvp is not None:
            st.pooled.jvp = JvpAccumulator(jvp[0])
        return st

    # what the dispatch table's `no_data` reasons and the assembly read
    chunks = property(lambda self: self.schedule.chunks)
    jvp = property(lambda self: self.pooled.jvp)

    def to_state(self) -> dict:
        """The collected state between batches (pending chunk scores are collected first; after a stop, the
        chunks not scored yet are saved as they are)."""
        self.collect()
        return to_state(self)

    @classmethod
    def from_state(cls, d: dict, **given) -> SiteState:
        """A saved state; `given`: what the run gives (label, jvp_names)."""
        return from_state(cls, d, **given)

    # --- the batch loop ---

    def add(self, x: np.ndarray, y: np.ndarray, metrics: list[Metric], scorer: MetricScorer, block: int = 0,
            missing: np.ndarray | None = None) -> None:
        """Rows of one batch; `block` numbers the shard unit the batch lies in (for exact pooled merges);
        `missing`: True for a row a mask left out (onnxaff.graph.masks), dropped here and counted."""
        if x.shape[0] != y.shape[0]:
            raise OnnxaffError(f"{self.label}: X gives {x.shape[0]} rows and Y {y.shape[0]}")
        if missing is not None and missing.any():
            self.observed.masked_rows += int(missing.sum())
            x, y = x[~missing], y[~missing]
        if not self.observed.note_rows(x, y) or not x.shape[0]:
            return  # a flagged site gets no number at all
        if any(serving(m).end_input == "moments" for m in metrics):  # d² float64 work per batch: only if asked
            self.pooled.add(x, y, block)
        for chunk in self.schedule.cut(x, y, self.observed.chunk_rounding):
            self.score(chunk, metrics, scorer)

    def add_jvp(self, n: int, arrays: list[np.ndarray]) -> None:
        if self.pooled.jvp is None or self.observed.nonfinite_rows:
            return
        if not self.pooled.add_jvp(n, dict(zip(self.jvp_names, arrays, strict=True))):
            self.observed.nonfinite_rows = max(self.observed.nonfinite_rows, 1)

    def score(self, chunk: Chunk, metrics: list[Metric], scorer: MetricScorer) -> None:
        if not self.tracks and any_serving(metrics, "site_chunks"):
            self.observed.note_chunk(chunk, rank=any(getattr(m, "rank_sensitive", False) for m in metrics))
            self.schedule.solo = chunk if self.schedule.chunks == 1 else None
        self._submit(chunk, self.schedule.previous, metrics, scorer)
        if any_serving(metrics, "keeps_previous"):  # a chunk per site is real memory: only when asked for
            self.schedule.keep(chunk)

    def _submit(self, chunk: Chunk, previous: Chunk | None, metrics: list[Metric], scorer: MetricScorer) -> None:
        jobs = []
        for m in metrics:
            build = serving(m).chunk_input
            if build is not None and not not_applicable(self, m) and (
                    sample := build(chunk, previous, self.tracks)) is not None:
                jobs.append((m, sample))
        self.schedule.submit(chunk, previous, jobs, scorer)

    def rescore(self, metrics: list[Metric], scorer: MetricScorer) -> None:
        """Score again the chunks a stopped run left unscored (they come before any new chunk)."""
        for chunk, previous in self.schedule.take_unscored():
            self._submit(chunk, previous, metrics, scorer)

    def collect(self) -> None:
        """Record the finished chunk scores in chunk order (gives up on a stop: see ChunkSchedule.collect)."""
        self.schedule.collect(self.scores.store)

    # --- the end of the data ---

    def finish(self, metrics: list[Metric], scorer: MetricScorer) -> None:
        """Score the partial chunk if it is all there is, collect the chunks, then the pooled metrics.

        A stop asked for meanwhile (a plugin's KeyboardInterrupt) raises KeyboardInterrupt: no number is
        left out silently.
        """
        if self.finished:
            return
        self.rescore(metrics, scorer)
        rest = None if self.observed.nonfinite_rows else self.schedule.remainder(self.observed.chunk_rounding)
        if rest is not None:
            self.score(rest, metrics, scorer)
        self.collect()
        _half_samples(self, metrics, scorer)
        inputs = {} if self.observed.nonfinite_rows else self.pooled.inputs(self.observed.chunk_rounding)
        jobs = [(m, inputs[serving(m).end_input]) for m in metrics
                if inputs.get(serving(m).end_input) is not None and not not_applicable(self, m)]
        if jobs and (results := scorer.results(scorer.submit(jobs))) is not None:
            self.scores.store(results)
        if self.schedule.unscored or scorer.stop:
            raise KeyboardInterrupt
        self.finished = True

    def entry(self, m: Metric) -> dict:
        return entry(self, m)

    # --- shards ---

    def merge(self, other: SiteState, metrics: list[Metric], scorer: MetricScorer) -> None:
        """Append the state of the next slice of the data (self covers the examples just before it)."""
        try:
            self.observed.merge(other.observed)
        except ValueError as exc:
            raise OnnxaffError(str(exc)) from None
        self.collect()  # chunks scored by an earlier merge come before this part's
        if self.schedule.unscored or other.schedule.unscored:  # never drop a chunk's scores silently
            raise OnnxaffError("a part holds chunks that were never scored (saved by a stopped run); run that "
                               "shard again")
        boundary = None
        mine, theirs = self.schedule, other.schedule
        if mine.previous is not None and theirs.first is not None and not self.observed.nonfinite_rows:
            pair = ChunkPair(mine.previous, theirs.first)
            jobs = [(m, pair) for m in metrics if serving(m).keeps_previous and not not_applicable(self, m)]
            if jobs and (boundary := scorer.results(scorer.submit(jobs))) is None:
                raise KeyboardInterrupt  # on a scoring thread, as every metric: a stuck one cannot hold Ctrl-C
        self.scores.append(other.scores, boundary)
        one_chunk = mine.chunks + theirs.chunks == 1
        self.scores.halves = (self.scores.halves or other.scores.halves) if one_chunk else {}
        mine.solo = (mine.solo or theirs.solo) if one_chunk else None
        self.pooled.merge(other.pooled)
        for x, y in mine.append(theirs):  # only a slice that is not chunk-aligned leaves rows behind
            for chunk in mine.cut(x, y, self.observed.chunk_rounding):
                self.score(chunk, metrics, scorer)
            self.collect()  # these chunks come after the part's own: record them now, in that order


def _half_samples(st: SiteState, metrics: list[Metric], scorer: MetricScorer) -> None:
    """A run with one chunk: score random halves of it, for that chunk's ci95 (onnxaff.stats.entry_ci).

    Through the scorer like every metric call (read-only inputs, validated values, Ctrl-C never held)."""
    solo = st.schedule.solo
    if st.schedule.chunks != 1 or solo is None or solo.n < 8 or st.intervals != "auto":
        if st.intervals != "auto":
            st.schedule.solo = None  # no half-samples asked for: the chunk need not be kept
        return
    halves = [Chunk(readonly(solo.x[i]), readonly(solo.y[i]), solo.rounding) for i in half_sample_rows(solo.n)]
    jobs = [(m, h) for m in metrics if serving(m).half_samples and not not_applicable(st, m)
            and m.spec in st.scores.values for h in halves]
    if jobs:
        if (results := scorer.results(scorer.submit(jobs))) is None:
            return  # stopped: the solo chunk stays, so a resumed run scores its halves
        st.scores.store_halves(results)
    st.schedule.solo = None

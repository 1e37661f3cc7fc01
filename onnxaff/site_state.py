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

from onnxaff import defaults
from onnxaff.chunks import ChunkSchedule
from onnxaff.collect import ChunkBuffer, JvpAccumulator
from onnxaff.entries import entry, not_applicable
from onnxaff.errors import OnnxaffError
from onnxaff.half_samples import HalfSamples
from onnxaff.metrics import Chunk, ChunkPair, Metric
from onnxaff.metrics.dispatch import any_serving, serving
from onnxaff.observations import Observations
from onnxaff.pooled import Pooled
from onnxaff.scores import Scores
from onnxaff.scoring import MetricScorer
from onnxaff.statefields import from_state, part, to_state, transient


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
    expected_rows: int | None = transient(None)  # the rows the whole data will give the site, None if unknown
    ending: bool = transient(False)  # the end-of-data jobs are submitted (start_finish)

    @classmethod
    def open(cls, chunk_size: int, index: int | None = None, label: str = "", rounding: float | None = None,
             jvp: tuple[str, tuple[str, ...]] | None = None, tracks: int | None = None,
             intervals: str = defaults.INTERVALS, expected_rows: int | None = None) -> SiteState:
        """A live collector; `jvp` = (form, output names) when the run feeds the site's NLC statistics;
        `expected_rows` lets a site that will have one chunk score its half-samples as soon as it has it."""
        st = cls(index=index, tracks=tracks, label=label, jvp_names=None if jvp is None else tuple(jvp[1]),
                 intervals=intervals, expected_rows=expected_rows)
        st.schedule.buffer = ChunkBuffer(chunk_size)
        st.observed.rounding = rounding
        if jvp is not None:
            st.pooled.jvp = JvpAccumulator(jvp[0])
        return st

    # what the dispatch table's `no_data` reasons and the assembly read
    chunks = property(lambda self: self.schedule.chunks)
    jvp = property(lambda self: self.pooled.jvp)
    # the first chunk's half-samples, as the interval method wants them
    halves = property(lambda self: HalfSamples(self.schedule, self.scores, self.intervals, self.expected_rows,
                                               self.jobs))

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
        self.pooled.add_jvp(n, dict(zip(self.jvp_names, arrays, strict=True)))  # non-finite: the NLC's entry says

    def score(self, chunk: Chunk, metrics: list[Metric], scorer: MetricScorer) -> None:
        if not self.tracks and any_serving(metrics, "site_chunks"):
            self.observed.note_chunk(chunk, rank=any(getattr(m, "rank_sensitive", False) for m in metrics))
            self.halves.note_solo(chunk)
            self.halves.note_dead(chunk, metrics, scorer)
        self._submit(chunk, self.schedule.previous, metrics, scorer)
        if any_serving(metrics, "keeps_previous"):  # a chunk per site is real memory: only when asked for
            self.schedule.keep(chunk)
        if self.schedule.chunks == 1 and self.halves.now():
            self.halves.submit(metrics, scorer)
        self.schedule.collect_done(self.scores.store)  # scored chunks let go of their rows
        self.halves.collect(wait=False)

    def jobs(self, metrics: list[Metric], make) -> list[tuple[Metric, object]]:
        """(metric, its input) for each metric that applies to the site and gets an input from make(metric)."""
        return [(m, x) for m in metrics if not not_applicable(self, m) and (x := make(m)) is not None]

    def _submit(self, chunk: Chunk, previous: Chunk | None, metrics: list[Metric], scorer: MetricScorer) -> None:
        build = {m: serving(m).chunk_input for m in metrics}
        self.schedule.submit(chunk, previous, self.jobs(metrics, lambda m: build[m] and build[m](
            chunk, previous, self.tracks)), scorer)

    def rescore(self, metrics: list[Metric], scorer: MetricScorer) -> None:
        """Score again the chunks a stopped run left unscored (they come before any new chunk)."""
        for chunk, previous in self.schedule.take_unscored():
            self._submit(chunk, previous, metrics, scorer)

    def collect(self) -> None:
        """Record the finished chunk scores in chunk order, then the half-sample scores (gives up on a stop: see
        ChunkSchedule.collect)."""
        self.schedule.collect(self.scores.store)
        self.halves.collect(wait=True)

    # --- the end of the data ---

    def start_finish(self, metrics: list[Metric], scorer: MetricScorer) -> None:
        """The end-of-data jobs submitted, none waited for (RunState.finish starts the next sites' beside this
        one's): the unscored and the partial chunk, and the half-samples a one-chunk site did not score yet."""
        if self.finished or self.ending:
            return
        self.ending = True
        self.rescore(metrics, scorer)
        rest = None if self.observed.nonfinite_rows else self.schedule.remainder(self.observed.chunk_rounding)
        if rest is not None:
            self.score(rest, metrics, scorer)
        if self.halves.wanted():
            self.halves.submit(metrics, scorer)

    def finish(self, metrics: list[Metric], scorer: MetricScorer) -> None:
        """Score the partial chunk if it is all there is, collect the chunks and their half-samples, then the
        pooled metrics.

        A stop asked for meanwhile (a plugin's KeyboardInterrupt) raises KeyboardInterrupt: no number is
        left out silently.
        """
        if self.finished:
            return
        self.start_finish(metrics, scorer)
        self.collect()
        if not scorer.stop:  # else the solo chunk stays, so a resumed run scores its halves
            self.schedule.solo = None
        inputs = {} if self.observed.nonfinite_rows else self.pooled.inputs(self.observed.chunk_rounding)
        jobs = self.jobs(metrics, lambda m: inputs.get(serving(m).end_input))
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
        SiteMerge(self, other, metrics, scorer).apply()


@dataclass
class SiteMerge:
    """One site's state over two consecutive, chunk-aligned slices of the data: `into` (the earlier slice) takes
    `part` (the next one), scores appended in chunk order, the pair across the boundary scored, the first chunk's
    halves kept where the interval reads them."""

    into: SiteState
    part: SiteState
    metrics: list[Metric]
    scorer: MetricScorer

    def apply(self) -> None:
        st, other = self.into, self.part
        try:
            st.observed.merge(other.observed)
        except ValueError as exc:
            raise OnnxaffError(str(exc)) from None
        st.collect()  # chunks scored by an earlier merge come before this part's
        if st.schedule.unscored or other.schedule.unscored:  # never drop a chunk's scores silently
            raise OnnxaffError("a part holds chunks that were never scored (saved by a stopped run); run that "
                               "shard again")
        st.scores.append(other.scores, self.boundary())
        self.keep_halves()
        st.pooled.merge(other.pooled)
        for x, y in st.schedule.append(other.schedule):  # only a slice that is not chunk-aligned leaves rows
            for chunk in st.schedule.cut(x, y, st.observed.chunk_rounding):
                st.score(chunk, self.metrics, self.scorer)
            st.collect()  # these chunks come after the part's own: record them now, in that order

    def boundary(self) -> list | None:
        """The scores of the pair across the boundary (the earlier slice's last chunk, the next one's first), for
        the metrics that read pairs; None when there is none."""
        st, mine, theirs = self.into, self.into.schedule, self.part.schedule
        if mine.previous is None or theirs.first is None or st.observed.nonfinite_rows:
            return None
        pair = ChunkPair(mine.previous, theirs.first)
        jobs = st.jobs(self.metrics, lambda m: pair if serving(m).keeps_previous else None)
        if jobs and (scores := self.scorer.results(self.scorer.submit(jobs))) is None:
            raise KeyboardInterrupt  # on a scoring thread, as every metric: a stuck one cannot hold Ctrl-C
        return scores if jobs else None

    def keep_halves(self) -> None:
        """The first chunk's halves count when the whole has one chunk, or always under intervals="half"."""
        st, other, mine, theirs = self.into, self.part, self.into.schedule, self.part.schedule
        if mine.chunks + theirs.chunks == 1 or st.intervals == "half":
            st.scores.halves = st.scores.halves if mine.chunks else other.scores.halves
            mine.solo = mine.solo if mine.chunks else theirs.solo
        else:
            st.scores.halves, mine.solo = {}, None

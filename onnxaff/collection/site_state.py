"""What one run has collected for one site (or residual stage), and how it is saved and merged.

Its parts each do one job and save their own fields (onnxaff.foundations.statefields, one flat dict): the chunk schedule
(onnxaff.collection.chunks), the pooled sums (onnxaff.collection.pooled), what the features showed
(onnxaff.collection.observations), the scores (onnxaff.collection.scores) and the first chunk's half-samples
(onnxaff.collection.half_samples); this class feeds them in order, says when the half-samples are scored, and merges
each part with the next slice's own. Once finished, its signature entries are read off it in one call
(onnxaff.collection.entries.site_metrics), which asks it nothing afterwards.

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
from onnxaff.collection.chunks import ChunkSchedule
from onnxaff.collection.collect import JvpAccumulator
from onnxaff.collection.half_samples import HalfSamples, now, wanted
from onnxaff.collection.observations import Observations
from onnxaff.collection.pooled import Pooled
from onnxaff.collection.scores import Scores
from onnxaff.collection.scoring import MetricScorer
from onnxaff.errors import OnnxaffError
from onnxaff.foundations.statefields import from_state, part, to_state, transient
from onnxaff.metrics import Chunk, Metric
from onnxaff.metrics.dispatch import any_serving, serving


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
    halved: HalfSamples = part(HalfSamples)
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
        return cls(index=index, tracks=tracks, schedule=ChunkSchedule.sized(chunk_size),
                   pooled=Pooled(jvp=None if jvp is None else JvpAccumulator(jvp[0])),
                   observed=Observations(rounding=rounding), label=label,
                   jvp_names=None if jvp is None else tuple(jvp[1]), intervals=intervals, expected_rows=expected_rows)

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

    def take_run(self, intervals: str, live: SiteState | None = None) -> None:
        """What the run gives a state read from a file: the interval method; on a resume, `live`'s (the prepared
        run's collector of the site) label, JVP output names, interval method, row promise and rounding."""
        self.intervals = intervals if live is None else live.intervals
        if live is not None:
            self.label, self.jvp_names, self.expected_rows = live.label, live.jvp_names, live.expected_rows
            self.observed.note_rounding(live.observed.rounding)

    def size_chunks(self, rows: int) -> None:
        """A site opened with 1-row chunks (a symbolic D) takes its chunk rows from its first batch's features."""
        self.schedule.size_chunks(rows)

    def forget_expected_rows(self) -> None:
        """A batch gave other rows than the shapes promised: the site's half-samples wait for the end."""
        self.expected_rows = None

    # --- the batch loop ---

    def add(self, x: np.ndarray, y: np.ndarray, metrics: list[Metric], scorer: MetricScorer, block: int = 0,
            missing: np.ndarray | None = None) -> None:
        """Rows of one batch; `block` numbers the shard unit the batch lies in (for exact pooled merges);
        `missing`: True for a row a mask left out (onnxaff.graph.masks), dropped here and counted."""
        if x.shape[0] != y.shape[0]:
            raise OnnxaffError(f"{self.label}: X gives {x.shape[0]} rows and Y {y.shape[0]}")
        if missing is not None and missing.any():
            self.observed.note_masked(int(missing.sum()))
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
            self.observed.note_chunk(chunk, rank=any(m.rank_sensitive for m in metrics))
            self.halved.note(chunk, self.schedule.chunks, self.intervals)
            self.scores.submit_live(chunk, self.schedule.chunks - 1, lambda c: self.jobs(  # dead outputs dropped
                metrics, lambda m: c if serving(m).half_samples else None), scorer)
        self._submit(chunk, self.schedule.previous, metrics, scorer)
        if any_serving(metrics, "keeps_previous"):  # a chunk per site is real memory: only when asked for
            self.schedule.keep(chunk)
        if self.schedule.chunks == 1 and now(self.intervals, self.schedule.buffer.size, self.expected_rows):
            self._submit_halves(metrics, scorer)
        self.schedule.collect_done(self.scores.store)  # scored chunks let go of their rows
        self.scores.collect_live(wait=False)
        self.halved.collect(False, self.schedule.pending, self.scores.values)

    def not_applicable(self, m: Metric) -> str | None:
        """Why `m` cannot score this site at all (None when it can)."""
        dims = self.observed.dims
        if m.equal_dims and dims and dims[0] != dims[1]:
            return f"needs equal feature dimensions (X: {dims[0]}, Y: {dims[1]})"
        if serving(m).end_input == "jvp" and self.pooled.jvp is None:
            return "Jacobian-vector products need float32/float64 tensors and the site's own nodes"
        return None

    def jobs(self, metrics: list[Metric], make) -> list[tuple[Metric, object]]:
        """(metric, its input) for each metric that applies to the site and gets an input from make(metric)."""
        return [(m, x) for m in metrics if not self.not_applicable(m) and (x := make(m)) is not None]

    def _submit(self, chunk: Chunk, previous: Chunk | None, metrics: list[Metric], scorer: MetricScorer) -> None:
        build = {m: serving(m).chunk_input for m in metrics}
        self.schedule.submit(chunk, previous, self.jobs(metrics, lambda m: build[m] and build[m](
            chunk, previous, self.tracks)), scorer)

    def rescore(self, metrics: list[Metric], scorer: MetricScorer) -> None:
        """Score again the chunks a stopped run left unscored (they come before any new chunk)."""
        for chunk, previous in self.schedule.take_unscored():
            self._submit(chunk, previous, metrics, scorer)

    def collect(self) -> None:
        """Record the finished chunk scores in chunk order, then the scores without dead outputs and the half-sample
        scores, waiting for them (gives up on a stop: see ChunkSchedule.collect)."""
        self.schedule.collect(self.scores.store)
        self.scores.collect_live(wait=True)
        self.halved.collect(True, self.schedule.pending, self.scores.values)

    def _submit_halves(self, metrics: list[Metric], scorer: MetricScorer) -> None:
        """Through the scorer like every metric call (read-only inputs, validated values, Ctrl-C never held)."""
        ms = [m for m, _ in self.jobs(metrics, lambda m: serving(m).half_samples or None)]
        if ms:
            self.halved.submit(lambda half: [(m, half) for m in ms], scorer)

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
        if wanted(self.intervals, self.schedule.chunks):
            self._submit_halves(metrics, scorer)

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
            self.halved.release()
        inputs = {} if self.observed.nonfinite_rows else self.pooled.inputs(self.observed.chunk_rounding)
        jobs = self.jobs(metrics, lambda m: inputs.get(serving(m).end_input))
        if jobs and (results := scorer.results(scorer.submit(jobs))) is not None:
            self.scores.store(results)
        if self.schedule.unscored or scorer.stop:
            raise KeyboardInterrupt
        self.finished = True

    # --- shards ---

    def merge(self, other: SiteState, metrics: list[Metric], scorer: MetricScorer) -> None:
        """Append the state of the next slice of the data (self covers the examples just before it): each part merges
        the next slice's own, the pair across the boundary is scored, and the first chunk's halves stay where the
        interval reads them."""
        try:
            self.observed.merge(other.observed)
        except ValueError as exc:
            raise OnnxaffError(str(exc)) from None
        self.collect()  # chunks scored by an earlier merge come before this part's
        if self.schedule.unscored or other.schedule.unscored:  # never drop a chunk's scores silently
            raise OnnxaffError("a part holds chunks that were never scored (saved by a stopped run); run that "
                               "shard again")
        self.scores.merge(other.scores, self._boundary(other, metrics, scorer))
        self.halved.merge(other.halved, self.intervals, self.schedule.chunks, other.schedule.chunks)
        self.pooled.merge(other.pooled)
        for x, y in self.schedule.append(other.schedule):  # only a slice that is not chunk-aligned leaves rows
            for chunk in self.schedule.cut(x, y, self.observed.chunk_rounding):
                self.score(chunk, metrics, scorer)
            self.collect()  # these chunks come after the part's own: record them now, in that order

    def _boundary(self, other: SiteState, metrics: list[Metric], scorer: MetricScorer) -> list | None:
        """The scores of the pair across the boundary (this slice's last chunk, the next one's first), for the
        metrics that read pairs; None when there is none."""
        pair = None if self.observed.nonfinite_rows else self.schedule.boundary(other.schedule)
        jobs = self.jobs(metrics, lambda m: pair if serving(m).keeps_previous else None)
        if jobs and (scores := scorer.results(scorer.submit(jobs))) is None:
            raise KeyboardInterrupt  # on a scoring thread, as every metric: a stuck one cannot hold Ctrl-C
        return scores if jobs else None

"""The half-samples of a site's first chunk: what its interval reads when the site has one chunk (or always, under
intervals="half"), scored beside inference where the chunk count is known early, dropped once a second chunk
makes the interval one over chunks (onnxaff.stats.entry_ci)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from onnxaff.chunks import ChunkSchedule
from onnxaff.metrics import Chunk, Metric
from onnxaff.metrics.dispatch import serving
from onnxaff.scores import Scores
from onnxaff.scoring import MetricScorer


@dataclass
class HalfSamples:
    """A site's schedule (its solo chunk and the half jobs) and scores (the half scores), the run's interval method,
    the rows the whole data will give it (None if unknown), and its jobs (SiteState.jobs: the metrics that apply)."""

    schedule: ChunkSchedule
    scores: Scores
    intervals: str
    expected_rows: int | None
    jobs: Callable[[list[Metric], Callable], list]

    def note_solo(self, chunk: Chunk) -> None:
        """The first chunk is kept for its half-samples; a second one drops them unless intervals="half"."""
        if self.schedule.chunks == 1:
            self.schedule.solo = chunk
        elif self.intervals != "half" and (self.schedule.solo is not None or self.schedule.halving):
            self.schedule.drop_halves()  # the interval is over chunks (a prediction of one chunk was short)
            self.scores.halves = {}

    def wanted(self) -> bool:
        """The interval reads the half-samples of the first chunk: always under "half", under "auto" when the site
        has one chunk (at the end of the data)."""
        return self.intervals == "half" or (self.intervals == "auto" and self.schedule.chunks == 1)

    def now(self) -> bool:
        """Score them as soon as the first chunk is cut, beside inference: under "half", and under "auto" when the
        whole data will give the site exactly one chunk (a wrong prediction is caught either way: a second chunk
        drops them, and a one-chunk site without them gets them at the end of the data)."""
        size, rows = self.schedule.buffer.size, self.expected_rows
        return self.intervals == "half" or (self.intervals == "auto" and rows is not None and size <= rows < 2 * size)

    def submit(self, metrics: list[Metric], scorer: MetricScorer) -> None:
        """Through the scorer like every metric call (read-only inputs, validated values, Ctrl-C never held)."""
        ms = [m for m, _ in self.jobs(metrics, lambda m: serving(m).half_samples or None)]
        if ms:
            self.schedule.submit_halves(lambda half: [(m, half) for m in ms], scorer)

    def note_dead(self, chunk: Chunk, metrics: list[Metric], scorer: MetricScorer) -> None:
        """The metrics that score a plain chunk score the site's first chunk with dead outputs without them, once
        (onnxaff.scores.Scores.submit_live; collected with the halves)."""
        self.scores.submit_live(chunk, self.schedule.chunks - 1, lambda c: self.jobs(
            metrics, lambda m: c if serving(m).half_samples else None), scorer)

    def collect(self, wait: bool) -> None:
        """The half-sample scores of the metrics that scored the chunk itself, in half order; then the chunk's rows
        are let go. Without `wait`, only when they are all done. The scores without dead outputs likewise."""
        self.scores.collect_live(wait)
        sched = self.schedule
        if not sched.halving or (not wait and not sched.halves_ready()):
            return
        if (results := sched.take_halves()) is None:
            return  # stopped: the solo chunk stays, so a resumed run scores its halves
        self.scores.store_halves([r for r in results if r[0] in self.scores.values])
        sched.solo = None

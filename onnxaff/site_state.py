"""What one run has collected for one site, and how it is saved, restored and merged.

A checkpoint and a shard part are both this state for every site. Merging the parts of consecutive,
chunk-aligned slices of the data gives the state of one run over all of it: chunk scores are concatenated
in order (bit for bit), pooled moments merge on a fixed block tree (bit for bit), NLC sums add in another
order (equal to rounding, ~1e-16 relative), and a chunk_pair metric scores the one pair that straddles each
boundary (the last chunk of a part with the first chunk of the next).

Metrics get read-only arrays (chunks, pairs, tracks, moments), so no metric can change what another one
sees. Chunks whose scores were not done when a run stopped (Ctrl-C while a metric is slow or stuck) are
kept as `unscored` and scored again first when the run continues.
"""

from __future__ import annotations

import dataclasses
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from onnxaff.collect import BlockMoments, ChunkBuffer, JvpAccumulator
from onnxaff.errors import OnnxaffError
from onnxaff.graph.rewrite import SiteOutputs
from onnxaff.graph.sites import Site
from onnxaff.metrics import Chunk, ChunkPair, JvpStats, Metric, Moments, plugin_output
from onnxaff.metrics.dispatch import any_serving, serving
from onnxaff.metrics.rank import FLOAT32_EPS
from onnxaff.scoring import ChunkScorer
from onnxaff.stats import (
    HALVES,
    RANK_FLAGS,
    RANK_TEST_MAX_D,
    chunk_diagnostics,
    chunk_scale,
    entry_ci,
    metric_flags,
    moments_rank,
)


def readonly(a: np.ndarray) -> np.ndarray:
    """A float64 view that refuses writes: a metric writing into its input raises instead of corrupting it."""
    v = np.asarray(a, np.float64).view()
    v.flags.writeable = False
    return v


def readonly_moments(m: Moments, rounding: float | None = None) -> Moments:
    """A copy of the pooled moments whose arrays are read-only views (the live ones stay untouched), with the
    site's rounding when given."""
    return dataclasses.replace(m, mean_x=readonly(m.mean_x), mean_y=readonly(m.mean_y), m_xx=readonly(m.m_xx),
                               m_yy=readonly(m.m_yy), m_xy=readonly(m.m_xy),
                               rounding=m.rounding if rounding is None else rounding)


def _least(a: float | None, b: float | None) -> float | None:
    return a if b is None else b if a is None else min(a, b)


def _chunk_state(c: Chunk | None) -> dict | None:
    return None if c is None else {"x": c.x, "y": c.y, "rounding": c.rounding}


def _chunk_from(d: dict | None) -> Chunk | None:
    return None if d is None else Chunk(readonly(d["x"]), readonly(d["y"]), d.get("rounding", FLOAT32_EPS))


class Pending(NamedTuple):
    """A chunk whose scores are being computed, with what is needed to score it again."""

    future: Future
    scorer: ChunkScorer
    chunk: Chunk
    previous: Chunk | None


@dataclass
class SiteState:
    """Everything collected for one site during a run (site/outputs are None for a merged part)."""

    site: Site | None
    outputs: SiteOutputs | None
    buffer: ChunkBuffer
    moments: BlockMoments | None = None
    values: dict[str, list[float]] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    rows: int = 0
    nonfinite_rows: int = 0
    chunks: int = 0
    chunk_rows: int = 0
    dims: tuple[int, int] | None = None
    first: Chunk | None = None  # for chunk_pair metrics across a shard boundary
    previous: Chunk | None = None  # for chunk_pair metrics
    jvp: JvpAccumulator | None = None
    pending: list[Pending] = field(default_factory=list)  # chunk scores still being computed, in chunk order
    unscored: list[tuple[Chunk, Chunk | None]] = field(default_factory=list)  # (chunk, previous) to score again
    partial: bool = False  # the one partial chunk was scored (no full chunk)
    finished: bool = False  # finish() done: a state saved after it (the final save) is not finished twice
    tracks: int | None = None  # a residual stage: X is h⁰ … h^L side by side, Y is empty
    seen: set[str] = field(default_factory=set)  # chunk properties behind the flags (onnxaff.stats)
    scale: float | None = None  # the smallest chunk variance (stats.chunk_scale): what each metric's ε is judged by
    solo: Chunk | None = None  # the first chunk, kept while it is the only one: a one-chunk ci95 needs its rows
    halves: dict[str, list[float]] = field(default_factory=dict)  # half-sample scores of a run's only chunk
    # The features' relative rounding (onnxaff.graph.rewrite.feature_rounding), which every Chunk and the Moments
    # carry to the metrics; None until known (a symbolic P is read off the first batch: `note_shapes`).
    rounding: float | None = None

    def __post_init__(self):
        if self.rounding is None and self.outputs is not None:
            self.rounding = self.outputs.rounding

    @property
    def chunk_rounding(self) -> float:
        return FLOAT32_EPS if self.rounding is None else self.rounding

    def note_rounding(self, rounding: float | None) -> None:
        """A batch's rounding (a symbolic P resolved from its shapes): the largest seen is kept, so a run whose
        batches differ in size cuts at the coarsest."""
        if rounding is not None:
            self.rounding = rounding if self.rounding is None else max(self.rounding, rounding)

    def add_jvp(self, n: int, arrays: list[np.ndarray]) -> None:
        if self.jvp is None or self.nonfinite_rows:
            return
        stats = dict(zip(self.outputs.jvp.names, arrays, strict=True))
        if not all(np.isfinite(a).all() for a in stats.values()):
            self.nonfinite_rows = max(self.nonfinite_rows, 1)
            return
        self.jvp.add(n, stats)

    def add(self, x: np.ndarray, y: np.ndarray, metrics: list[Metric], scorer: ChunkScorer, block: int = 0) -> None:
        """Rows of one batch; `block` numbers the shard unit the batch lies in (for exact pooled merges)."""
        if self.dims is None:
            self.dims = (x.shape[1], y.shape[1])
        if x.shape[0] != y.shape[0]:
            raise OnnxaffError(f"site {self.site.id}: X gives {x.shape[0]} rows and Y {y.shape[0]}")
        self.rows += x.shape[0]
        bad = ~(np.isfinite(x).all(axis=1) & np.isfinite(y).all(axis=1))
        if bad.any():
            self.nonfinite_rows += int(bad.sum())
        if self.nonfinite_rows:
            return  # a flagged site gets no number at all
        if any(serving(m).end_input == "moments" for m in metrics):  # d² float64 work per batch: only if asked
            if self.moments is None:
                self.moments = BlockMoments(*self.dims)
            self.moments.update(x, y, block)
        for cx, cy in self.buffer.add(x, y):
            self.score(cx, cy, metrics, scorer)

    def score(self, x: np.ndarray, y: np.ndarray, metrics: list[Metric], scorer: ChunkScorer) -> None:
        self.chunks += 1
        self.chunk_rows = x.shape[0]
        chunk = Chunk(readonly(x), readonly(y), self.chunk_rounding)
        if not self.tracks and any_serving(metrics, "site_chunks"):
            scale = chunk_scale(chunk.x, chunk.y)  # once a chunk: the diagnostics and the site's minimum
            # The rank test costs about what r2 costs a chunk: every chunk, when a metric it concerns is asked.
            rank = any(getattr(m, "rank_sensitive", False) for m in metrics)
            self.seen |= chunk_diagnostics(chunk.x, chunk.y, rank=rank, scale=scale, rounding=chunk.rounding)
            self.scale = _least(self.scale, scale)
            self.solo = chunk if self.chunks == 1 else None
        self._submit(chunk, self.previous, metrics, scorer)
        if any_serving(metrics, "keeps_previous"):
            self.previous = chunk  # kept only when asked for: a chunk per site is real memory
            if self.first is None:
                self.first = chunk

    def _submit(self, chunk: Chunk, previous: Chunk | None, metrics: list[Metric], scorer: ChunkScorer) -> None:
        jobs = []
        for m in metrics:
            if self._not_applicable(m):
                continue
            build = serving(m).chunk_input
            if build is not None and (sample := build(chunk, previous, self.tracks)) is not None:
                jobs.append((m, sample))
        if jobs:
            self.pending.append(Pending(scorer.submit(jobs), scorer, chunk, previous))

    def rescore(self, metrics: list[Metric], scorer: ChunkScorer) -> None:
        """Score again the chunks a stopped run left unscored (they come before any new chunk)."""
        again, self.unscored = self.unscored, []
        for chunk, previous in again:
            self._submit(chunk, previous, metrics, scorer)

    def collect(self) -> None:
        """Record the finished chunk scores in chunk order (the first error of a metric is kept).

        Once a stop is asked for, nothing is waited for: from the first chunk not done on, the chunks are
        kept unscored (a later chunk done early is scored again too, so the scores stay in chunk order).
        """
        for k, p in enumerate(self.pending):
            if not p.scorer.wait(p.future) or p.future.cancelled() or p.future.exception() is not None:
                self.unscored += [(q.chunk, q.previous) for q in self.pending[k:]]
                break
            for name, value, error in p.future.result():
                self._store(name, value, error)
        self.pending = []

    def _not_applicable(self, m: Metric) -> str | None:
        if m.equal_dims and self.dims and self.dims[0] != self.dims[1]:
            return f"needs equal feature dimensions (X: {self.dims[0]}, Y: {self.dims[1]})"
        if serving(m).end_input == "jvp" and self.jvp is None:
            return "Jacobian-vector products need float32/float64 tensors and the site's own nodes"
        return None

    def _store(self, name: str, value: float | None, error: str | None) -> None:
        if error is not None:
            self.errors.setdefault(name, error)
        else:
            self.values.setdefault(name, []).append(value)

    def finish(self, metrics: list[Metric], scorer: ChunkScorer) -> None:
        """Score the partial chunk if it is all there is (sets `partial`), collect the chunks, then the pooled.

        A stop asked for meanwhile (a plugin's KeyboardInterrupt) raises KeyboardInterrupt: no number is
        left out silently.
        """
        if self.finished:
            return
        self.rescore(metrics, scorer)
        rest = self.buffer.remainder()
        if not self.nonfinite_rows and self.chunks == 0 and rest is not None and rest[0].shape[0] >= 2:
            self.score(*rest, metrics, scorer)
            self.partial = True
        self.collect()
        self._half_samples(metrics, scorer)
        inputs = self._end_inputs()
        jobs = [(m, inputs[serving(m).end_input]) for m in metrics
                if inputs.get(serving(m).end_input) is not None and not self._not_applicable(m)]
        if jobs:
            future = scorer.submit(jobs)
            if scorer.wait(future) and not future.cancelled() and future.exception() is None:
                for name, value, error in future.result():
                    self._store(name, value, error)
        if self.unscored or scorer.stop_signal is not None:
            raise KeyboardInterrupt
        self.finished = True

    def _end_inputs(self) -> dict[str, Moments | JvpStats | None]:
        """What the run pooled for this site, read-only: the input of every metric scored at the end."""
        if self.nonfinite_rows:
            return {}
        moments = self.moments.total() if self.moments is not None and self.moments.n >= 2 else None
        traces = self.jvp.traces() if self.jvp is not None else None
        return {"moments": None if moments is None else readonly_moments(moments, self.chunk_rounding),
                "jvp": None if traces is None else JvpStats(self.jvp.form, *traces)}

    def _half_samples(self, metrics: list[Metric], scorer: ChunkScorer) -> None:
        """A run with one chunk: score HALVES random halves of it, for that chunk's ci95 (onnxaff.stats).

        Through the scorer like every metric call (read-only inputs, validated values, Ctrl-C never held)."""
        if self.chunks != 1 or self.solo is None or self.solo.n < 8:
            return
        rng = np.random.default_rng(0)
        picks = [np.sort(rng.choice(self.solo.n, self.solo.n // 2, replace=False)) for _ in range(HALVES)]
        halves = [Chunk(readonly(self.solo.x[i]), readonly(self.solo.y[i]), self.solo.rounding) for i in picks]
        jobs = [(m, h) for m in metrics if serving(m).half_samples and not self._not_applicable(m)
                and m.name in self.values for h in halves]
        if not jobs:
            self.solo = None
            return
        future = scorer.submit(jobs)
        if not scorer.wait(future) or future.cancelled() or future.exception() is not None:
            return  # stopped: the solo chunk stays, so a resumed run scores its halves
        for name, value, _ in future.result():
            if value is not None:
                self.halves.setdefault(name, []).append(value)
        self.solo = None

    def flags_and_ci(self, m: Metric, values: list[float], partial: bool) -> dict:
        """`flags` (onnxaff.stats.metric_flags) and `ci95` of an ok entry, the ci95 within the metric's range."""
        pooled = serving(m).pooled
        rows = self.rows if pooled else (self.chunk_rows or self.rows)
        d = max(self.dims) if self.dims else 0
        flags = metric_flags(m, rows, d, partial, self._seen_by(m, pooled), self.scale)
        ci = None if pooled else entry_ci(values, self.halves.get(m.name), m.range)
        return {"flags": flags, "ci95": ci}

    def _seen_by(self, m: Metric, pooled: bool) -> set[str]:
        """What the flags of `m` read: a pooled rank-sensitive metric's rank flags come from the pooled X (the
        spectrum it inverts), not from single chunks."""
        if not (pooled and getattr(m, "rank_sensitive", False) and self.moments is not None and self.moments.n >= 2
                and self.moments.dx <= RANK_TEST_MAX_D):  # past it the test is skipped: merge no moment tree for it
            return self.seen
        found = moments_rank(self.moments.total().cov_x(), self.chunk_rounding)
        return self.seen if found is None else (self.seen - set(RANK_FLAGS)) | found

    def entry(self, m: Metric, partial: bool) -> dict:
        values = self.values.get(m.name, [])
        out = {"mean": None, "std": None, "chunks": len(values), "status": "ok"}
        if self.nonfinite_rows:
            out["status"] = "nonfinite"
        elif (reason := self._not_applicable(m)) is not None:
            out.update(status="not_applicable", reason=reason)
        elif m.name in self.errors:
            out.update(status="error", error=self.errors[m.name])
        elif not values:
            out["status"] = "no_data"
            why = serving(m).no_data
            if why is not None and (reason := why(self)) is not None:
                out["reason"] = reason
        if values and out["status"] == "ok":
            out.update(mean=float(np.mean(values)), std=float(np.std(values)), values=values)
            if partial and serving(m).site_chunks:
                out["partial"] = True
            if serving(m).pooled:
                out.update(chunks=0, std=None, pooled_rows=self.rows)
            if self.dims and (note := self._caveat(m)):
                out["caveat"] = note
            out.update(self.flags_and_ci(m, values, partial))
        return out

    def _caveat(self, m: Metric) -> str | None:
        try:
            with plugin_output():
                note = m.caveat(self.chunk_rows or self.rows, *self.dims)
        except Exception as exc:
            return f"caveat() failed: {type(exc).__name__}: {exc}"
        return None if note is None else str(note)

    # --- checkpoints and shards ---

    def to_state(self) -> dict:
        """The collected state between batches (pending chunk scores are collected first; after a stop, the
        chunks not scored yet are saved as they are)."""
        self.collect()
        return {
            "index": None if self.site is None else self.site.index,
            "buffer": self.buffer.to_state(),
            "moments": None if self.moments is None else self.moments.to_state(),
            "values": {k: list(v) for k, v in self.values.items()}, "errors": dict(self.errors),  # copies: the
            "rows": self.rows, "nonfinite_rows": self.nonfinite_rows,  # state before a finish is kept (analysis)
            "chunks": self.chunks, "chunk_rows": self.chunk_rows,
            "dims": None if self.dims is None else list(self.dims),
            "first": _chunk_state(self.first), "previous": _chunk_state(self.previous),
            "jvp": None if self.jvp is None else self.jvp.to_state(), "tracks": self.tracks,
            "unscored": [{"chunk": _chunk_state(c), "previous": _chunk_state(p)} for c, p in self.unscored],
            "seen": sorted(self.seen), "scale": self.scale, "solo": _chunk_state(self.solo),
            "halves": {k: list(v) for k, v in self.halves.items()}, "rounding": self.rounding,
            "partial": self.partial, "finished": self.finished,
        }

    def restore(self, d: dict) -> None:
        """Continue from a saved state (this object comes from the same site of the same prepared run)."""
        self.buffer = ChunkBuffer.from_state(d["buffer"])
        self.moments = None if d["moments"] is None else BlockMoments.from_state(d["moments"])
        self.values = {k: list(v) for k, v in d["values"].items()}
        self.errors = dict(d["errors"])
        self.rows, self.nonfinite_rows = d["rows"], d["nonfinite_rows"]
        self.chunks, self.chunk_rows = d["chunks"], d["chunk_rows"]
        self.dims = None if d["dims"] is None else tuple(d["dims"])
        self.first, self.previous = _chunk_from(d["first"]), _chunk_from(d["previous"])
        self.jvp = None if d["jvp"] is None else JvpAccumulator.from_state(d["jvp"])
        self.tracks = d["tracks"]
        self.unscored = [(_chunk_from(u["chunk"]), _chunk_from(u["previous"])) for u in d.get("unscored") or []]
        self.seen = set(d.get("seen", []))
        self.scale = d.get("scale")
        self.solo = _chunk_from(d.get("solo"))
        self.halves = {k: list(v) for k, v in d.get("halves", {}).items()}
        self.note_rounding(d.get("rounding"))
        self.partial, self.finished = d.get("partial", False), d.get("finished", False)

    @classmethod
    def from_state(cls, d: dict) -> SiteState:
        st = cls(None, None, ChunkBuffer(d["buffer"]["size"]))
        st.restore(d)
        return st

    def merge(self, other: SiteState, metrics: list[Metric], scorer: ChunkScorer) -> None:
        """Append the state of the next slice of the data (self covers the examples just before it)."""
        if self.dims is not None and other.dims is not None and self.dims != other.dims:
            raise OnnxaffError(f"parts disagree on feature dimensions ({self.dims} vs {other.dims})")
        self.dims = self.dims or other.dims
        self.collect()  # chunks scored by an earlier merge come before this part's
        if self.unscored or other.unscored:  # a part is saved complete; never drop a chunk's scores silently
            raise OnnxaffError("a part holds chunks that were never scored (saved by a stopped run); run that "
                               "shard again")
        boundary = {}
        if self.previous is not None and other.first is not None and not (self.nonfinite_rows or other.nonfinite_rows):
            pair = ChunkPair(self.previous, other.first)
            jobs = [(m, pair) for m in metrics if serving(m).keeps_previous and not self._not_applicable(m)]
            if jobs:  # on a scoring thread, as every metric: Ctrl-C is not held up by a stuck one
                future = scorer.submit(jobs)
                if not scorer.wait(future) or future.cancelled() or future.exception() is not None:
                    raise KeyboardInterrupt
                boundary = {name: (value, error) for name, value, error in future.result()}
        for name in {*self.values, *other.values, *boundary}:
            merged = list(self.values.get(name, []))
            if name in boundary:
                value, error = boundary[name]
                if error is None:
                    merged.append(value)
                else:
                    self.errors.setdefault(name, error)
            self.values[name] = merged + other.values.get(name, [])
        for name, error in other.errors.items():
            self.errors.setdefault(name, error)
        self.rows += other.rows
        self.nonfinite_rows += other.nonfinite_rows
        self.seen |= other.seen
        self.scale = _least(self.scale, other.scale)
        self.note_rounding(other.rounding)
        self.halves = (self.halves or other.halves) if self.chunks + other.chunks == 1 else {}
        self.solo = (self.solo or other.solo) if self.chunks + other.chunks == 1 else None
        self.chunks += other.chunks
        self.chunk_rows = max(self.chunk_rows, other.chunk_rows)
        self.first = self.first or other.first
        self.previous = other.previous or self.previous
        if other.moments is not None:
            if self.moments is None:
                self.moments = other.moments
            else:
                self.moments.merge(other.moments)
        if other.jvp is not None:
            if self.jvp is None:
                self.jvp = other.jvp
            else:
                self.jvp.merge(other.jvp)
        rest = other.buffer.remainder()
        if rest is not None:  # only a slice that is not chunk-aligned leaves rows behind before the last part
            for cx, cy in self.buffer.add(*rest):
                self.score(cx, cy, metrics, scorer)
            self.collect()  # these chunks come after the part's own: record them now, in that order

"""A site's rows cut into chunks, each chunk's metric jobs submitted in order and their scores kept in that order.

Chunk rule: rows are cut into consecutive chunks of `chunk_size`; every full chunk is scored and a
site's score is the mean over its chunks (std with ddof=0, and the count). A trailing partial chunk
is dropped, so every score comes from equally sized samples, except when a site has no full chunk
at all: then the partial chunk (≥ 2 rows) is scored and the metric entry says `partial: true`.

A chunk's rows are let go as soon as its scores are in (`collect_done`, after every submit), not at the end of the
run; the first chunk alone may stay for its half-samples (onnxaff.collection.half_samples keeps it: docs/statistics.md).

Chunks whose scores were not done when a run stopped (Ctrl-C while a metric is slow or stuck) are kept as
`unscored` and scored again first when the run continues; a later chunk done early is scored again too, so the
scores stay in chunk order.
"""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from onnxaff.collection.collect import ChunkBuffer
from onnxaff.collection.scoring import MetricScorer
from onnxaff.foundations.statefields import saved, transient
from onnxaff.metrics import Chunk, ChunkPair
from onnxaff.metrics.rank import FLOAT32_EPS

ROWS_FLOOR = 64  # chunk_size="Kd": the fewest rows a chunk gets, whatever the site's width


def width_multiple(chunk_size) -> int | None:
    """K of chunk_size="Kd" (K·D rows per chunk for a site of D features), None for a fixed row count."""
    if isinstance(chunk_size, str) and chunk_size.endswith("d") and chunk_size[:-1].isdigit():
        return int(chunk_size[:-1])
    return None


def site_chunk_rows(chunk_size, dims) -> int | None:
    """Rows per chunk of a site of (dx, dy) features: the fixed chunk size, or under "Kd" max(ROWS_FLOOR, K·D)
    with D the larger side (the D a metric's rows_per_dim reads); None while D is unknown (a symbolic dim)."""
    k = width_multiple(chunk_size)
    if k is None:
        return chunk_size
    dims = [d for d in dims if d is not None] if None not in dims else []
    return max(ROWS_FLOOR, k * max(dims)) if dims else None


def readonly(a: np.ndarray) -> np.ndarray:
    """A float64 view that refuses writes: a metric writing into its input raises instead of corrupting it."""
    v = np.asarray(a, np.float64).view()
    v.flags.writeable = False
    return v


def chunk_state(c: Chunk) -> dict:
    return {"x": c.x, "y": c.y, "rounding": c.rounding}


def chunk_from(d: dict) -> Chunk:
    return Chunk(readonly(d["x"]), readonly(d["y"]), d.get("rounding", FLOAT32_EPS))


def _pairs_state(pairs: list) -> list:
    return [{"chunk": chunk_state(c), "previous": None if p is None else chunk_state(p)} for c, p in pairs]


def _pairs_from(items: list) -> list:
    return [(chunk_from(u["chunk"]), None if u["previous"] is None else chunk_from(u["previous"])) for u in items]


class Pending(NamedTuple):
    """A chunk whose scores are being computed, with what is needed to score it again."""

    future: Future
    scorer: MetricScorer
    chunk: Chunk
    previous: Chunk | None


CHUNK = {"encode": chunk_state, "decode": chunk_from}


@dataclass
class ChunkSchedule:
    """Rows -> chunks of `buffer.size`; `first`/`previous` for chunk-pair metrics (kept only when one is asked)."""

    buffer: ChunkBuffer = saved(factory=lambda: ChunkBuffer(2), encode=ChunkBuffer.to_state,
                                decode=ChunkBuffer.from_state)
    chunks: int = 0
    chunk_rows: int = 0
    first: Chunk | None = saved(None, **CHUNK)
    previous: Chunk | None = saved(None, **CHUNK)
    unscored: list[tuple[Chunk, Chunk | None]] = saved(factory=list, encode=_pairs_state, decode=_pairs_from)
    partial: bool = False  # the one partial chunk was scored (no full chunk)
    pending: list[Pending] = transient(factory=list)  # chunk scores still being computed, in chunk order

    @classmethod
    def sized(cls, rows: int) -> ChunkSchedule:
        """A schedule cutting chunks of `rows` rows (1 while a symbolic D waits for the first batch: size_chunks)."""
        return cls(buffer=ChunkBuffer(rows))

    def size_chunks(self, rows: int) -> None:
        """A schedule opened with 1-row chunks (a symbolic D) takes `rows`, the chunk size its first batch's
        features give; any other keeps its own. Such a buffer holds no row yet (a 1-row buffer cuts every row)."""
        if self.buffer.size == 1:
            self.buffer = ChunkBuffer(rows)

    def cut(self, x: np.ndarray, y: np.ndarray, rounding: float) -> list[Chunk]:
        """The full chunks these rows complete, read-only float64."""
        return [self.chunk(cx, cy, rounding) for cx, cy in self.buffer.add(x, y)]

    def chunk(self, x: np.ndarray, y: np.ndarray, rounding: float) -> Chunk:
        self.chunks += 1
        self.chunk_rows = x.shape[0]
        return Chunk(readonly(x), readonly(y), rounding)

    def remainder(self, rounding: float) -> Chunk | None:
        """The rows short of a chunk, as the partial chunk scored when a site has no full one (≥ 2 rows)."""
        rest = self.buffer.remainder()
        if self.chunks or rest is None or rest[0].shape[0] < 2:
            return None
        self.partial = True
        return self.chunk(*rest, rounding)

    def keep(self, chunk: Chunk) -> None:
        """The chunk a chunk-pair metric pairs with the next one (and the first, for a shard boundary)."""
        self.previous = chunk
        if self.first is None:
            self.first = chunk

    def submit(self, chunk: Chunk, previous: Chunk | None, jobs: list, scorer: MetricScorer) -> None:
        if jobs:
            self.pending.append(Pending(scorer.submit(jobs), scorer, chunk, previous))

    def collect_done(self, store) -> None:
        """Hand the scores of the leading chunks already scored to `store` without waiting, and let their rows go."""
        k = 0
        for p in self.pending:
            if not p.future.done() or p.future.cancelled() or p.future.exception() is not None:
                break
            store(p.future.result())
            k += 1
        del self.pending[:k]

    def boundary(self, other: ChunkSchedule) -> ChunkPair | None:
        """The chunk pair across the boundary with the next slice's schedule (this one's last chunk, that one's
        first), None when either is not kept."""
        if self.previous is None or other.first is None:
            return None
        return ChunkPair(self.previous, other.first)

    def take_unscored(self) -> list[tuple[Chunk, Chunk | None]]:
        again, self.unscored = self.unscored, []
        return again

    def collect(self, store) -> None:
        """Hand the finished chunk scores to `store` in chunk order. Once a stop is asked for nothing is waited
        for: from the first chunk not done on, the chunks are kept unscored."""
        for k, p in enumerate(self.pending):
            if (results := p.scorer.results(p.future)) is None:
                self.unscored += [(q.chunk, q.previous) for q in self.pending[k:]]
                break
            store(results)
        self.pending = []

    def append(self, other: ChunkSchedule) -> list[tuple[np.ndarray, np.ndarray]]:
        """Take the counters of the next slice's schedule; returns its leftover rows, which continue this buffer."""
        self.chunks += other.chunks
        self.chunk_rows = max(self.chunk_rows, other.chunk_rows)
        self.first = self.first or other.first
        self.previous = other.previous or self.previous
        rest = other.buffer.remainder()
        return [] if rest is None else [rest]

"""Chunk scoring off the batch loop: metric mathematics in a thread pool, results kept in chunk order.

The heavy parts (eigendecompositions, the assignment problem) run in LAPACK and scipy's C++ code, which
release the GIL, so threads overlap them with onnxruntime's own threads. At most `limit` chunks wait
at a time; past that the loop waits for the oldest, which bounds the memory held by queued chunks.
"""

from __future__ import annotations

import math
import os
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor

from onnxaff.metrics import Metric


def default_workers() -> int:
    """One thread per core beyond the first, at most 4: onnxruntime keeps the others busy."""
    return max(0, min(4, (os.cpu_count() or 1) - 1))


def evaluate(metric: Metric, sample) -> tuple[float | None, str | None]:
    """(value, None) or (None, error message): a raising or non-finite metric never stops a run."""
    try:
        value = float(metric.compute(sample))
        if not math.isfinite(value):
            raise ValueError(f"returned {value}")
    except Exception as exc:
        return None, f"{type(exc).__name__}: {exc}"
    return value, None


def _score(jobs: list[tuple[Metric, object]]) -> list[tuple[str, float | None, str | None]]:
    return [(m.name, *evaluate(m, sample)) for m, sample in jobs]


class ChunkScorer:
    """Runs a chunk's metric jobs now (workers=0) or in a pool; `submit` returns a Future either way."""

    def __init__(self, workers: int | None = None):
        self.workers = default_workers() if workers is None else max(0, workers)
        self.pool = ThreadPoolExecutor(self.workers, thread_name_prefix="onnxaff-chunk") if self.workers else None
        self.limit = 4 * self.workers
        self.inflight: deque[Future] = deque()

    def submit(self, jobs: list[tuple[Metric, object]]) -> Future:
        if self.pool is None:
            done: Future = Future()
            done.set_result(_score(jobs))
            return done
        while self.inflight and (self.inflight[0].done() or len(self.inflight) >= self.limit):
            self.inflight.popleft().result()
        future = self.pool.submit(_score, jobs)
        self.inflight.append(future)
        return future

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True)
            self.pool = None

    def __enter__(self) -> ChunkScorer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

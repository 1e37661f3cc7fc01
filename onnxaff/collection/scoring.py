"""Chunk scoring off the batch loop: metric mathematics in threads, results kept in chunk order.

The heavy parts (eigendecompositions, the assignment problem) run in LAPACK and scipy's C++ code, which
release the GIL, so threads overlap them with onnxruntime's own threads. At most `limit` chunks wait
at a time; past that the loop waits for the oldest, which bounds the memory held by queued chunks.

Metric code is never run on the main thread, not even inline (workers=0: one thread, and the loop waits
for each chunk): a Python thread cannot be killed, so the main thread must never be the one stuck in a
plugin. Every wait gives up as soon as the run's `stop` is set (Ctrl-C): chunks whose scores are not done
then are saved unscored and scored again on resume. The threads are daemons, so a stuck plugin does not
keep the process alive either.

BLAS: while scoring threads run, the process's BLAS pools (numpy's and scipy's OpenBLAS) compute each call on the
calling thread alone (threadpoolctl). The scoring threads already take the cores onnxruntime leaves, and a
multi-threaded BLAS call from a scoring thread spins against onnxruntime's threads: on 2 cores one affinity chunk
of d = 960 took 2.7 s with 2 BLAS threads against 0.36 s with one (benchmarks/RESULTS.md, issue 28).
"""

from __future__ import annotations

import os
import queue
import signal
import threading
from collections import deque
from concurrent.futures import CancelledError, Future
from concurrent.futures import TimeoutError as FutureTimeout

from onnxaff.errors import OnnxaffError, option
from onnxaff.foundations.stopping import StopFlag
from onnxaff.metrics import Metric, plugin_output
from onnxaff.metrics.guards import check_value, private

MAX_WORKERS = 256  # scoring threads; more only multiply the chunks held in memory
POLL_SECONDS = 0.05  # how often a wait for a metric looks at the stop flag
_busy_lock = threading.Lock()
_busy = 0  # scoring threads inside metric code right now (stuck ones stay counted)
_blas_lock = threading.Lock()
_blas_users = 0  # scorers whose threads are started: the BLAS pools stay at one thread while any is
_blas_limit = None  # threadpoolctl's limiter, restored when the last scorer closes


def _limit_blas() -> None:
    global _blas_users, _blas_limit
    with _blas_lock:
        _blas_users += 1
        if _blas_users == 1:
            try:
                from threadpoolctl import threadpool_limits
            except ImportError:  # pragma: no cover - in the cpu/gpu extras; without it the pools keep their size
                return
            _blas_limit = threadpool_limits(limits=1, user_api="blas")


def _release_blas() -> None:
    global _blas_users, _blas_limit
    with _blas_lock:
        _blas_users = max(0, _blas_users - 1)
        if _blas_users == 0 and _blas_limit is not None:
            _blas_limit.restore_original_limits()
            _blas_limit = None


def default_workers() -> int:
    """One thread per core beyond the first, at least 2 and at most 4 (none on one core: inline). Two on two
    cores: whenever the batch loop waits for scores, and after the last batch, onnxruntime's cores are idle, and a
    second thread takes one (MobileNetV2, 1024 images: 18.0 s → 15.7 s; PP-LCNet and ResNet-18 ±2 %)."""
    cores = os.cpu_count() or 1
    return 0 if cores == 1 else min(4, max(2, cores - 1))


def busy_threads() -> int:
    """How many scoring threads are inside metric code now: the CLI exits hard when one is stuck."""
    return _busy


# --- running a metric (its value checked and its input private: onnxaff.metrics.guards, check_metric's too) ---

def evaluate(metric: Metric, sample) -> tuple[float | None, str | None]:
    """(value, None) or (None, error message): a raising, exiting or misbehaving metric never stops a run.

    KeyboardInterrupt is passed on: whoever runs the metric treats it as Ctrl-C.
    """
    try:
        with plugin_output():
            value = metric.compute(sample)
        return check_value(metric, value), None
    except SystemExit as exc:
        return None, f"SystemExit: the metric called sys.exit({exc.code!r})"
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # Exception, or an odd BaseException subclass: that metric's error either way
        return None, f"{type(exc).__name__}: {exc}"


def _score(jobs: list[tuple[Metric, object]]) -> list[tuple[str, float | None, str | None]]:
    return [(m.spec, *evaluate(m, private(sample))) for m, sample in jobs]


class MetricScorer:
    """Runs metric jobs (a chunk's, a chunk pair's, the end-of-data pooled ones) on daemon threads; `submit`
    returns a Future, and futures complete in submission order.

    workers=0 is inline: one thread, and `submit` returns once the chunk is scored (or a stop is asked).
    Once `stop` is set (a signal, or a plugin's KeyboardInterrupt) nothing new runs: later submits return
    futures that stay pending.
    """

    def __init__(self, workers: int | None = None, stop: StopFlag | None = None):
        self.workers = default_workers() if workers is None else max(0, workers)
        self.limit = 4 * self.workers
        self.inflight: deque[Future] = deque()
        self.stop = StopFlag() if stop is None else stop  # the run's, shared with its signal handlers
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []

    def _start(self) -> None:
        if not self._threads:
            _limit_blas()
        while len(self._threads) < max(1, self.workers):
            t = threading.Thread(target=self._work, name=f"onnxaff-chunk-{len(self._threads)}", daemon=True)
            try:
                t.start()
            except RuntimeError as exc:  # "can't start new thread": the system's thread or memory limit
                raise OnnxaffError(f"cannot start scoring thread {len(self._threads) + 1} ({exc}); lower "
                                   f"{option('chunk_workers')}") from None
            self._threads.append(t)

    def _work(self) -> None:
        global _busy
        while (item := self._queue.get()) is not None:
            future, jobs = item
            if self.stop:
                future.cancel()
            if not future.set_running_or_notify_cancel():
                continue
            with _busy_lock:
                _busy += 1
            try:
                future.set_result(_score(jobs))
            except KeyboardInterrupt as exc:  # raised by a plugin: Ctrl-C, and this chunk stays unscored
                self.stop.set(signal.SIGINT)
                future.set_exception(exc)
            except BaseException as exc:  # pragma: no cover - evaluate() catches the rest
                future.set_exception(exc)
            finally:
                with _busy_lock:
                    _busy -= 1

    def submit(self, jobs: list[tuple[Metric, object]]) -> Future:
        future: Future = Future()
        if self.stop:
            return future  # never run: its chunk is saved unscored
        while self.inflight and (self.inflight[0].done() or len(self.inflight) >= self.limit):
            if not self.wait(self.inflight[0]):
                break
            self.inflight.popleft()
        self._start()
        self._queue.put((future, jobs))
        self.inflight.append(future)
        if self.workers == 0:
            self.wait(future)
        return future

    def wait(self, future: Future) -> bool:
        """Wait until `future` is done, unless a stop is asked for: True when it is done."""
        while not future.done() and not self.stop:
            try:
                future.exception(timeout=POLL_SECONDS)
            except (FutureTimeout, CancelledError):
                continue
        return future.done()

    def results(self, future: Future) -> list[tuple[str, float | None, str | None]] | None:
        """The scores of a submitted job list once done, None when a stop came first (or it was cancelled)."""
        if not self.wait(future) or future.cancelled() or future.exception() is not None:
            return None
        return future.result()

    def close(self) -> None:
        """Let the threads finish what is queued and end; waits for none of them (one may be stuck)."""
        for _ in self._threads:
            self._queue.put(None)
        if self._threads:
            _release_blas()
        self._threads = []
        self.inflight.clear()

    def __enter__(self) -> MetricScorer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

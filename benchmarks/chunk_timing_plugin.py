"""The default metrics timed chunk by chunk, for benchmarks/decoder_bench.py --per-chunk.

    ONNXAFF_CHUNK_TIMES=FILE onnxaff analyze MODEL --data DATA --plugin benchmarks/chunk_timing_plugin.py \
        --metrics timed_affinity,timed_affinity_lw

timed_affinity, timed_affinity_lw: affinity and affinity_lw, unchanged (the same numbers, the same shared work),
each chunk's CPU time on its scoring thread (time.thread_time: onnxruntime's threads are not counted) appended to
FILE as "metric rows D seconds". Apart from chunk_dump_plugin.py so that its noop_chunk imports no metric code.
"""

from __future__ import annotations

import os
import threading
import time

from onnxaff.metrics import Chunk, Metric
from onnxaff_plugins.affinity import Affinity, AffinityLedoitWolf

_times_lock = threading.Lock()


def _timed(metric: Metric, chunk: Chunk, compute) -> float:
    start = time.thread_time()
    value = compute(chunk)
    seconds = time.thread_time() - start
    with _times_lock, open(os.environ["ONNXAFF_CHUNK_TIMES"], "a") as f:
        f.write(f"{metric.name} {chunk.n} {chunk.x.shape[1]} {seconds:.6f}\n")
    return value


class TimedAffinity(Affinity):
    name = "timed_affinity"
    description = "affinity, each chunk's scoring-thread CPU time written to $ONNXAFF_CHUNK_TIMES"

    def compute(self, chunk: Chunk) -> float:
        return _timed(self, chunk, super().compute)


class TimedAffinityLedoitWolf(AffinityLedoitWolf):
    name = "timed_affinity_lw"
    description = "affinity_lw, each chunk's scoring-thread CPU time written to $ONNXAFF_CHUNK_TIMES"

    def compute(self, chunk: Chunk) -> float:
        return _timed(self, chunk, super().compute)

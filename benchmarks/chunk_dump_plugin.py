"""Metrics for benchmarks/chunk_phases.py: one that scores nothing, one that saves every chunk it is given.

    ONNXAFF_CHUNK_DUMP=FOLDER onnxaff analyze MODEL --data DATA --plugin benchmarks/chunk_dump_plugin.py \
        --metrics dump_chunk --intervals none

noop_chunk: what a run costs without any scoring (the augmented graph, the feeding and the chunk buffers only).
dump_chunk: each chunk goes to FOLDER/d<dx>_<sha256 prefix>.npz (X and Y as the metrics receive them, float64),
for chunk_phases.py to score again phase by phase. Both score the number of rows.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np

from onnxaff.metrics import Chunk, Metric, Needs


class NoOpChunk(Metric):
    name = "noop_chunk"
    description = "scores nothing (its score is n): the cost of a run's graph and collection alone"
    higher_is_more_linear = None
    range = (0.0, float("inf"))
    needs = Needs.CHUNK

    def compute(self, chunk: Chunk) -> float:
        return float(chunk.n)


class DumpChunk(NoOpChunk):
    name = "dump_chunk"
    description = "saves each chunk (X, Y) to $ONNXAFF_CHUNK_DUMP for the phase benchmark; its score is n"

    def compute(self, chunk: Chunk) -> float:
        x, y = np.asarray(chunk.x, np.float64), np.asarray(chunk.y, np.float64)
        digest = hashlib.sha256(x.tobytes() + y.tobytes()).hexdigest()[:16]
        np.savez(Path(os.environ["ONNXAFF_CHUNK_DUMP"]) / f"d{x.shape[1]}_{digest}.npz", x=x, y=y)
        return super().compute(chunk)


"""A metric that saves every chunk it is given, for benchmarks/chunk_phases.py to score again phase by phase.

    ONNXAFF_CHUNK_DUMP=FOLDER onnxaff analyze MODEL --data DATA --plugin benchmarks/chunk_dump_plugin.py \
        --metrics dump_chunk --intervals none

Each chunk goes to FOLDER/d<dx>_<sha256 prefix>.npz (X and Y as the metrics receive them, float64); the score
is the number of rows.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np

from onnxaff.metrics import Chunk, Metric, Needs


class DumpChunk(Metric):
    name = "dump_chunk"
    description = "saves each chunk (X, Y) to $ONNXAFF_CHUNK_DUMP for the phase benchmark; its score is n"
    higher_is_more_linear = None
    range = (0.0, float("inf"))
    needs = Needs.CHUNK

    def compute(self, chunk: Chunk) -> float:
        folder = Path(os.environ["ONNXAFF_CHUNK_DUMP"])
        x, y = np.asarray(chunk.x, np.float64), np.asarray(chunk.y, np.float64)
        digest = hashlib.sha256(x.tobytes() + y.tobytes()).hexdigest()[:16]
        np.savez(folder / f"d{x.shape[1]}_{digest}.npz", x=x, y=y)
        return float(chunk.n)


class NoOpChunk(Metric):
    """What a run costs without any scoring: the augmented graph, the feeding and the chunk buffers only."""

    name = "noop_chunk"
    description = "scores nothing (its score is n): the cost of a run's graph and collection alone"
    higher_is_more_linear = None
    range = (0.0, float("inf"))
    needs = Needs.CHUNK

    def compute(self, chunk: Chunk) -> float:
        return float(chunk.n)

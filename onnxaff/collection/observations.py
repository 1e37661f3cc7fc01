"""What a site's features showed, behind its flags: rows, non-finite and masked rows, dimensions, chunk diagnostics.

The flags themselves (few rows, ε-dominated, rank-deficient, dead outputs) are onnxaff.collection.stats'; this is the
part kept while the run goes and merged across shards.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from onnxaff.collection.stats import chunk_diagnostics, chunk_scale
from onnxaff.foundations.statefields import saved
from onnxaff.metrics import Chunk
from onnxaff.metrics.rank import FLOAT32_EPS


def _least(a: float | None, b: float | None) -> float | None:
    return a if b is None else b if a is None else min(a, b)


@dataclass
class Observations:
    """`seen`: chunk properties behind the flags; `scale`: the smallest chunk variance (what each metric's ε is
    judged by); `rounding`: the features' relative rounding (onnxaff.graph.rewrite.feature_rounding), which every
    Chunk and the Moments carry to the metrics, None until known (a symbolic P is read off the first batch)."""

    rows: int = 0
    nonfinite_rows: int = 0
    masked_rows: int = 0  # rows a mask left out (onnxaff.graph.masks): dropped before any count above
    dims: tuple[int, int] | None = saved(None, encode=list, decode=tuple)
    seen: set[str] = saved(factory=set, encode=sorted, decode=set)
    scale: float | None = None
    rounding: float | None = None
    dead: int = 0  # the most constant (dead) output features in one chunk

    @property
    def chunk_rounding(self) -> float:
        return FLOAT32_EPS if self.rounding is None else self.rounding

    def note_rounding(self, rounding: float | None) -> None:
        """The largest seen is kept, so a run whose batches differ in size cuts at the coarsest."""
        if rounding is not None:
            self.rounding = rounding if self.rounding is None else max(self.rounding, rounding)

    def note_masked(self, rows: int) -> None:
        """Rows a mask left out of a batch, dropped before any other count."""
        self.masked_rows += rows

    def note_rows(self, x: np.ndarray, y: np.ndarray) -> bool:
        """Count a batch's rows; False once any row of the site held NaN/Inf (a flagged site gets no number)."""
        if self.dims is None:
            self.dims = (x.shape[1], y.shape[1])
        self.rows += x.shape[0]
        bad = ~(np.isfinite(x).all(axis=1) & np.isfinite(y).all(axis=1))
        if bad.any():
            self.nonfinite_rows += int(bad.sum())
        return not self.nonfinite_rows

    def note_chunk(self, chunk: Chunk, rank: bool) -> None:
        """One chunk's diagnostics; the rank test costs about what r2 costs a chunk, so only when asked."""
        self.seen |= chunk_diagnostics(chunk.x, chunk.y, rank=rank, rounding=chunk.rounding)
        if "constant_output" in self.seen:
            self.dead = max(self.dead, int((np.ptp(chunk.y, axis=0) == 0).sum()))
        self.scale = _least(self.scale, chunk_scale(chunk.x, chunk.y))

    def merge(self, other: Observations) -> None:
        if self.dims is not None and other.dims is not None and self.dims != other.dims:
            raise ValueError(f"parts disagree on feature dimensions ({self.dims} vs {other.dims})")
        self.dims = self.dims or other.dims
        self.rows += other.rows
        self.nonfinite_rows += other.nonfinite_rows
        self.masked_rows += other.masked_rows
        self.seen |= other.seen
        self.scale = _least(self.scale, other.scale)
        self.dead = max(self.dead, other.dead)
        self.note_rounding(other.rounding)

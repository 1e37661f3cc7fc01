"""What a site pools over the whole run, in float64: moments (on a fixed block tree) and the NLC's JVP sums."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from onnxaff.collection.chunks import readonly
from onnxaff.collection.collect import BlockMoments, JvpAccumulator
from onnxaff.foundations.statefields import saved
from onnxaff.metrics import JvpStats, Moments


def readonly_moments(m: Moments, rounding: float | None = None) -> Moments:
    """A copy of the pooled moments whose arrays are read-only views (the live ones stay untouched), with the
    site's rounding when given."""
    return dataclasses.replace(m, mean_x=readonly(m.mean_x), mean_y=readonly(m.mean_y), m_xx=readonly(m.m_xx),
                               m_yy=readonly(m.m_yy), m_xy=readonly(m.m_xy),
                               rounding=m.rounding if rounding is None else rounding)


@dataclass
class Pooled:
    """Moments exist once a pooled-moment metric is asked for (d² float64 work per batch); `jvp` once the run
    feeds the site's Jacobian-vector statistics."""

    moments: BlockMoments | None = saved(None, encode=BlockMoments.to_state, decode=BlockMoments.from_state)
    jvp: JvpAccumulator | None = saved(None, encode=JvpAccumulator.to_state, decode=JvpAccumulator.from_state)

    def add(self, x: np.ndarray, y: np.ndarray, block: int) -> None:
        if self.moments is None:
            self.moments = BlockMoments(x.shape[1], y.shape[1])
        self.moments.update(x, y, block)

    def add_jvp(self, n: int, stats: dict[str, np.ndarray]) -> bool:
        """False when the statistics hold NaN/Inf: counted, nothing added, and the NLC gets no value (its own
        problem: the features and the other metrics' scores are as they were)."""
        if not all(np.isfinite(a).all() for a in stats.values()):
            self.jvp.nonfinite_batches += 1
            return False
        self.jvp.add(n, stats)
        return True

    def total(self) -> Moments | None:
        return self.moments.total() if self.moments is not None and self.moments.n >= 2 else None

    def inputs(self, rounding: float) -> dict[str, Moments | JvpStats | None]:
        """The input of every metric scored at the end, read-only."""
        moments = self.total()
        traces = self.jvp.traces() if self.jvp is not None and not self.jvp.nonfinite_batches else None
        return {"moments": None if moments is None else readonly_moments(moments, rounding),
                "jvp": None if traces is None else JvpStats(self.jvp.form, *traces)}

    def merge(self, other: Pooled) -> None:
        """Append the next slice's sums (bit for bit for the moments, to rounding for the JVP sums)."""
        for name in ("moments", "jvp"):
            mine, theirs = getattr(self, name), getattr(other, name)
            if theirs is None:
                continue
            if mine is None:
                setattr(self, name, theirs)
            else:
                mine.merge(theirs)

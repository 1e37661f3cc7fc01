"""Streaming collection per site: chunk buffers and exactly mergeable float64 moments."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from onnxaff.metrics.types import Moments


@dataclass
class BlockMoments:
    """Moments over numbered blocks of the data, combined along one fixed binary tree.

    Floating-point merging is not associative, so "exact" shard merging needs every grouping to do the
    same additions: blocks (lcm(chunk, batch) examples, the shard unit) are leaves, a node is always
    merge(left half, right half) of an aligned dyadic range of blocks, and the total folds the remaining
    nodes left to right. One run, a resumed run and any chunk-aligned split into shards then produce the
    same bits. Memory: O(log blocks) moments.
    """

    dx: int
    dy: int
    nodes: list = field(default_factory=list)  # [level, first block, Moments], a binary-counter stack
    block: int | None = None  # the block being filled
    current: Moments | None = None

    def update(self, x: np.ndarray, y: np.ndarray, block: int) -> None:
        if self.current is not None and block != self.block:
            self._close()
        if self.current is None:
            self.block, self.current = block, Moments(self.dx, self.dy)
        self.current.update(x, y)

    def _close(self) -> None:
        if self.current is not None and self.current.n:
            self._push(0, self.block, self.current)
        self.block, self.current = None, None

    def _push(self, level: int, first: int, m: Moments) -> None:
        self.nodes.append([level, first, m])
        while len(self.nodes) >= 2:
            (l1, s1, m1), (l2, s2, m2) = self.nodes[-2], self.nodes[-1]
            if l1 != l2 or s1 % (2 << l1) or s1 + (1 << l1) != s2:
                break
            self.nodes[-2:] = [[l1 + 1, s1, m1.merge(m2)]]

    def total(self) -> Moments:
        total = Moments(self.dx, self.dy)
        for _, _, m in self.nodes:
            total = total.merge(m)
        return total if self.current is None else total.merge(self.current)

    @property
    def n(self) -> int:
        return sum(m.n for _, _, m in self.nodes) + (self.current.n if self.current is not None else 0)

    def merge(self, other: BlockMoments) -> None:
        """Append the blocks of the next slice of the data (all after this one's)."""
        self._close()
        for level, first, m in other.nodes:
            self._push(level, first, m)
        self.block, self.current = other.block, other.current

    def to_state(self) -> dict:
        return {"dx": self.dx, "dy": self.dy, "block": self.block,
                "current": None if self.current is None else self.current.to_state(),
                "nodes": [[lv, first, m.to_state()] for lv, first, m in self.nodes]}

    @classmethod
    def from_state(cls, d: dict) -> BlockMoments:
        return cls(d["dx"], d["dy"], [[lv, first, Moments.from_state(m)] for lv, first, m in d["nodes"]],
                   d["block"], None if d["current"] is None else Moments.from_state(d["current"]))


@dataclass
class ChunkBuffer:
    """Collects rows and hands out consecutive chunks of exactly `size` rows."""

    size: int
    _x: list = field(default_factory=list)
    _y: list = field(default_factory=list)
    rows: int = 0

    def add(self, x: np.ndarray, y: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
        """The full chunks these rows complete, as row slices of one concatenation of the held rows.

        One concatenation per batch, however many chunks it completes: concatenating again for each chunk
        copied the rest of the batch each time (a softmax scored per position and head gives 64 chunks per
        batch of a 2-sequence decoder: 12 of a run's 50 s went to those copies).
        """
        self._x.append(x)
        self._y.append(y)
        self.rows += x.shape[0]
        if self.rows < self.size:
            return []
        bx, by = np.concatenate(self._x), np.concatenate(self._y)  # a copy even of one batch: the runtime's
        # output buffers may be reused for the next batch (IO binding), the chunks must not see that
        count = self.rows // self.size
        full = [(bx[i * self.size:(i + 1) * self.size], by[i * self.size:(i + 1) * self.size]) for i in range(count)]
        end = count * self.size
        # The rest is copied: a slice would keep the whole concatenation alive until the next chunk is cut.
        self._x, self._y = ([bx[end:].copy()], [by[end:].copy()]) if end < self.rows else ([], [])
        self.rows -= end
        return full

    def remainder(self) -> tuple[np.ndarray, np.ndarray] | None:
        if self.rows == 0:
            return None
        return np.concatenate(self._x), np.concatenate(self._y)

    def to_state(self) -> dict:
        rest = self.remainder()
        return {"size": self.size, "x": None if rest is None else rest[0], "y": None if rest is None else rest[1]}

    @classmethod
    def from_state(cls, d: dict) -> ChunkBuffer:
        buf = cls(d["size"])
        if d["x"] is not None:
            buf._x, buf._y, buf.rows = [d["x"]], [d["y"]], d["x"].shape[0]
        return buf


@dataclass
class ElementMoments:
    """Per-element count, mean and centred sum of squares of a tensor over examples (Chan merge)."""

    n: int = 0
    mean: np.ndarray | None = None
    m2: np.ndarray | None = None

    def merge_batch(self, n: int, mean: np.ndarray, m2: np.ndarray) -> None:
        mean, m2 = np.asarray(mean, np.float64), np.asarray(m2, np.float64)
        if self.n == 0:
            self.n, self.mean, self.m2 = n, mean.copy(), m2.copy()
            return
        total = self.n + n
        delta = mean - self.mean
        self.m2 = self.m2 + m2 + delta * delta * (self.n * n / total)
        self.mean = self.mean + delta * (n / total)
        self.n = total

    def merge(self, other: ElementMoments) -> None:
        if other.n:
            self.merge_batch(other.n, other.mean, other.m2)

    def add(self, values: np.ndarray) -> None:
        values = np.asarray(values, np.float64)
        mean = values.mean(axis=0)
        self.merge_batch(values.shape[0], mean, ((values - mean) ** 2).sum(axis=0))

    def variance(self) -> np.ndarray:
        return self.m2 / (self.n - 1)


@dataclass
class JvpAccumulator:
    """The NLC's two traces for one site, from the in-graph statistics of graph.jvp."""

    form: str
    x: ElementMoments = field(default_factory=ElementMoments)
    y: ElementMoments = field(default_factory=ElementMoments)
    d2sum: np.ndarray | None = None
    jv2_sum: float = 0.0  # Σ_b Σ_i ‖J(x_i) v_i‖²
    scatter_sum: float = 0.0  # Σ_b Σ_i ‖y_i − ȳ_b‖²
    dof: int = 0  # Σ_b (B_b − 1)
    short_batches: int = 0
    nonfinite_batches: int = 0  # batches whose in-graph sums held NaN/Inf (float32 overflow): the NLC gets no value

    def add(self, n: int, stats: dict[str, np.ndarray]) -> None:
        if self.form == "directional" and n < 2:
            self.short_batches += 1  # a direction needs another example of the batch
            return
        self.y.merge_batch(n, stats["ymean"], stats["ym2"])
        if self.form == "elementwise":
            self.x.merge_batch(n, stats["xmean"], stats["xm2"])
            d2 = np.asarray(stats["d2sum"], np.float64)
            self.d2sum = d2 if self.d2sum is None else self.d2sum + d2
        else:
            self.jv2_sum += float(np.sum(stats["jv2"], dtype=np.float64))
            self.scatter_sum += float(np.sum(stats["ym2"], dtype=np.float64))
            self.dof += n - 1

    def to_state(self) -> dict:
        return dataclasses.asdict(self)  # the ElementMoments become dicts of their fields

    @classmethod
    def from_state(cls, d: dict) -> JvpAccumulator:
        d = dict(d)
        d["x"], d["y"] = ElementMoments(**d["x"]), ElementMoments(**d["y"])
        return cls(**d)

    def merge(self, other: JvpAccumulator) -> None:
        """Another run's statistics over other examples (a shard): every field is a sum or a Chan merge."""
        self.x.merge(other.x)
        self.y.merge(other.y)
        if other.d2sum is not None:
            self.d2sum = other.d2sum.copy() if self.d2sum is None else self.d2sum + other.d2sum
        self.jv2_sum += other.jv2_sum
        self.scatter_sum += other.scatter_sum
        self.dof += other.dof
        self.short_batches += other.short_batches
        self.nonfinite_batches += other.nonfinite_batches

    def traces(self) -> tuple[float, float, int] | None:
        """(E Tr(J Σ_X Jᵀ), Tr Σ_Y, examples), or None before two examples were seen."""
        if self.y.n < 2:
            return None
        if self.form == "elementwise":
            num = float(np.sum(self.d2sum / self.y.n * self.x.variance()))
            return num, float(self.y.variance().sum()), self.y.n
        # within-batch estimates of both traces, so that an affine map gives exactly 1
        return self.jv2_sum / self.dof, self.scatter_sum / self.dof, self.y.n

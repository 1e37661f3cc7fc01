"""What a metric's compute() receives, and the Needs that say which of these it is.

Every input is float64 and read-only when the core hands it over: no metric can change what another sees.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import NamedTuple

import numpy as np

from onnxaff.metrics.rank import FLOAT32_EPS


class Needs(str, Enum):
    """Which input a metric's compute() takes; str-valued, so a signature's `needs` stays the plain word."""

    CHUNK = "chunk"  # a Chunk: n paired rows of the site's X and Y
    CHUNK_PAIR = "chunk_pair"  # a ChunkPair: two consecutive Chunks of the site (earlier, later)
    MOMENTS = "moments"  # the site's pooled Moments over every row of the run
    JVP = "jvp"  # the site's JvpStats (finite-difference Jacobian-vector products of its own subgraph)
    TRACKS = "tracks"  # the Tracks of a residual stage (the same rows through every block of the stage)

    def __str__(self) -> str:
        return self.value


NEEDS = tuple(n.value for n in Needs)


@dataclass(frozen=True)
class Chunk:
    """n paired rows of one site's features, float64: X [n, dx], Y [n, dy].

    `rounding`: the features' relative rounding, the larger of X's and Y's (eps32·sqrt(P) for means over P
    positions, onnxaff.graph.rewrite.feature_rounding): the level below which a direction of X is rounding
    noise (onnxaff.metrics.rank). A plugin that builds a Chunk of unreduced float32 values can leave it.
    """

    x: np.ndarray
    y: np.ndarray
    rounding: float = FLOAT32_EPS

    @property
    def n(self) -> int:
        return self.x.shape[0]


class ChunkPair(NamedTuple):
    """Two consecutive chunks of one site (a tuple, so `earlier, later = pair` works too)."""

    earlier: Chunk
    later: Chunk


@dataclass(frozen=True)
class Tracks:
    """One chunk of a residual stage: h⁰ … h^L, each [n, D] float64 (read-only), row i the same example."""

    arrays: tuple

    @property
    def n(self) -> int:
        return self.arrays[0].shape[0]


@dataclass(frozen=True)
class JvpStats:
    """What the non-linearity coefficient needs of one site (or of the network), accumulated in float64.

    numerator = E_x[Tr(J(x) Σ_X J(x)ᵀ)], denominator = Tr(Σ_Y). Elementwise sites use the exact
    per-element form Σ_i E[σ'(x_i)²]·Var(x_i), with σ' by central differences of the site's subgraph;
    other sites (and the network, input → output) use within-batch sums Σ‖J(x_i)(x_{i−1} − x̄_b)‖² and
    Σ‖y_i − ȳ_b‖² (exact when affine).
    """

    form: str  # "elementwise" or "directional"
    numerator: float
    denominator: float
    examples: int


@dataclass
class Moments:
    """Count, means and co-moment sums of paired rows; merges exactly (Chan, Golub & LeVeque 1979).

    `rounding` as on Chunk (the site's, set when the core hands the moments to a metric; a merge keeps the
    larger)."""

    dx: int
    dy: int
    n: int = 0
    mean_x: np.ndarray = None
    mean_y: np.ndarray = None
    m_xx: np.ndarray = None  # Σ (x − m_x)(x − m_x)ᵀ
    m_yy: np.ndarray = None
    m_xy: np.ndarray = None
    rounding: float = FLOAT32_EPS

    def __post_init__(self):
        if self.mean_x is None:
            self.mean_x, self.mean_y = np.zeros(self.dx), np.zeros(self.dy)
            self.m_xx, self.m_yy = np.zeros((self.dx, self.dx)), np.zeros((self.dy, self.dy))
            self.m_xy = np.zeros((self.dx, self.dy))

    @classmethod
    def of(cls, x: np.ndarray, y: np.ndarray) -> Moments:
        x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
        mx, my = x.mean(axis=0), y.mean(axis=0)
        xc, yc = x - mx, y - my
        return cls(x.shape[1], y.shape[1], x.shape[0], mx, my, xc.T @ xc, yc.T @ yc, xc.T @ yc)

    def merge(self, other: Moments) -> Moments:
        if other.n == 0:
            return self
        if self.n == 0:
            return other
        n = self.n + other.n
        dx, dy = other.mean_x - self.mean_x, other.mean_y - self.mean_y
        w = self.n * other.n / n
        return Moments(
            self.dx, self.dy, n,
            self.mean_x + dx * (other.n / n), self.mean_y + dy * (other.n / n),
            self.m_xx + other.m_xx + w * np.outer(dx, dx),
            self.m_yy + other.m_yy + w * np.outer(dy, dy),
            self.m_xy + other.m_xy + w * np.outer(dx, dy),
            max(self.rounding, other.rounding),
        )

    def update(self, x: np.ndarray, y: np.ndarray) -> None:
        merged = self.merge(Moments.of(x, y))
        self.n, self.mean_x, self.mean_y = merged.n, merged.mean_x, merged.mean_y
        self.m_xx, self.m_yy, self.m_xy = merged.m_xx, merged.m_yy, merged.m_xy
        self.rounding = merged.rounding

    def to_state(self) -> dict:
        return {"dx": self.dx, "dy": self.dy, "n": self.n, "mean_x": self.mean_x, "mean_y": self.mean_y,
                "m_xx": self.m_xx, "m_yy": self.m_yy, "m_xy": self.m_xy}

    @classmethod
    def from_state(cls, d: dict) -> Moments:
        return cls(**d)

    def cov_x(self) -> np.ndarray:
        return self.m_xx / (self.n - 1)

    def cov_y(self) -> np.ndarray:
        return self.m_yy / (self.n - 1)

    def cov_xy(self) -> np.ndarray:
        return self.m_xy / (self.n - 1)


"""Streaming collection per site: chunk buffers and exactly mergeable float64 moments."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class Moments:
    """Count, means and co-moment sums of paired rows; merges exactly (Chan, Golub & LeVeque 1979)."""

    dx: int
    dy: int
    n: int = 0
    mean_x: np.ndarray = None
    mean_y: np.ndarray = None
    m_xx: np.ndarray = None  # Σ (x − m_x)(x − m_x)ᵀ
    m_yy: np.ndarray = None
    m_xy: np.ndarray = None

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
        )

    def update(self, x: np.ndarray, y: np.ndarray) -> None:
        merged = self.merge(Moments.of(x, y))
        self.n, self.mean_x, self.mean_y = merged.n, merged.mean_x, merged.mean_y
        self.m_xx, self.m_yy, self.m_xy = merged.m_xx, merged.m_yy, merged.m_xy

    def cov_x(self) -> np.ndarray:
        return self.m_xx / (self.n - 1)

    def cov_y(self) -> np.ndarray:
        return self.m_yy / (self.n - 1)

    def cov_xy(self) -> np.ndarray:
        return self.m_xy / (self.n - 1)


@dataclass
class ChunkBuffer:
    """Collects rows and hands out consecutive chunks of exactly `size` rows."""

    size: int
    _x: list = field(default_factory=list)
    _y: list = field(default_factory=list)
    rows: int = 0

    def add(self, x: np.ndarray, y: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
        self._x.append(x)
        self._y.append(y)
        self.rows += x.shape[0]
        full = []
        while self.rows >= self.size:
            bx, by = np.concatenate(self._x), np.concatenate(self._y)
            full.append((bx[: self.size], by[: self.size]))
            self._x, self._y = [bx[self.size :]], [by[self.size :]]
            self.rows -= self.size
        return full

    def remainder(self) -> tuple[np.ndarray, np.ndarray] | None:
        if self.rows == 0:
            return None
        return np.concatenate(self._x), np.concatenate(self._y)

"""Generated inputs of each Needs kind, ordinary and degenerate, for check_metric.

Ordinary inputs are a smooth non-linear map of Gaussian rows, so a score lands inside its range rather than at
an end. Degenerate ones are what real sites produce and a metric must survive: constant (dead) features, a
constant output, two rows, tracks that do not move, Jacobian sums of a constant output.
"""

from __future__ import annotations

import numpy as np

from onnxaff import defaults
from onnxaff.metrics.types import Chunk, ChunkPair, JvpStats, Moments, Needs, Tracks

ROWS, DIM = 64, 4


def _pairs(rng, w: np.ndarray) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """{case: (X, Y)} of one map Y = tanh(XW + 0.3): the ordinary case first, then the degenerate ones."""
    dx, dy = w.shape

    def _rows(rng, n, dx, dy):
        x = rng.standard_normal((n, dx))
        return x, np.tanh(x @ w + 0.3)

    cases = {"ordinary": _rows(rng, ROWS, dx, dy)}
    x, y = _rows(rng, ROWS, dx, dy)
    x[:, 0] = 1.5
    cases["a constant column of X"] = (x, y)
    x, y = _rows(rng, ROWS, dx, dy)
    y[:, 0] = 0.25
    cases["a constant column of Y"] = (x, y)
    x, y = _rows(rng, ROWS, dx, dy)
    cases["a constant Y"] = (x, np.full_like(y, 0.25))
    x, y = _rows(rng, ROWS, dx, dy)
    cases["a constant X and Y"] = (np.full_like(x, 1.5), np.full_like(y, 0.25))
    cases["n == 2 rows"] = _rows(rng, 2, dx, dy)
    return cases


def _tracks(rng, n: int, depth: int = 3) -> list[np.ndarray]:
    h = [rng.standard_normal((n, DIM))]
    for _ in range(depth):
        h.append(h[-1] + 0.3 * np.tanh(h[-1] @ rng.standard_normal((DIM, DIM))))
    return h


def _stage_cases(rng) -> dict[str, Tracks]:
    cases = {"ordinary": _tracks(rng, ROWS)}
    h = _tracks(rng, ROWS)
    for a in h:
        a[:, 0] = 1.5
    cases["a constant column in every block"] = h
    cases["no example moves"] = [h[0]] * 4
    cases["one block"] = _tracks(rng, ROWS, depth=1)
    cases["n == 2 rows"] = _tracks(rng, 2)
    return {k: Tracks(tuple(v)) for k, v in cases.items()}


def _jvp_cases() -> dict[str, JvpStats]:
    return {
        "ordinary": JvpStats("directional", 1.3, 2.0, ROWS),
        "ordinary elementwise": JvpStats("elementwise", 0.7, 1.1, ROWS),
        "a constant output": JvpStats("directional", 0.0, 0.0, ROWS),
        "a zero Jacobian": JvpStats("directional", 0.0, 1.0, ROWS),
        "n == 2 examples": JvpStats("directional", 1.3, 2.0, 2),
    }


def samples(needs: Needs | str, equal_dims: bool, seed: int = defaults.SEED) -> dict[str, object]:
    """{case: the input compute() receives}; "ordinary" (and "ordinary …") cases first, then degenerate ones.

    X and Y differ in dimension unless the metric declares equal_dims."""
    rng = np.random.default_rng(seed)
    needs = Needs(needs)
    if needs is Needs.JVP:
        return _jvp_cases()
    if needs is Needs.TRACKS:
        return _stage_cases(rng)
    w = rng.standard_normal((DIM, DIM if equal_dims else DIM - 1))
    pairs = _pairs(rng, w)
    if needs is Needs.CHUNK:
        return {k: Chunk(x, y) for k, (x, y) in pairs.items()}
    if needs is Needs.CHUNK_PAIR:
        later = _pairs(rng, w)  # the same map: a fit on one chunk holds on the next
        return {k: ChunkPair(Chunk(x, y), Chunk(*later[k])) for k, (x, y) in pairs.items()}
    return {k: Moments.of(x, y) for k, (x, y) in pairs.items()}

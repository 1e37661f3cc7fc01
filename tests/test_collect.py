"""Streamed moments equal numpy's statistics of all rows, whatever the batching; chunks keep row order."""

import numpy as np
import pytest

from onnxaff.collect import ChunkBuffer, Moments


def stream(x, y, sizes):
    m, i = Moments(x.shape[1], y.shape[1]), 0
    for s in sizes:
        m.update(x[i:i + s], y[i:i + s])
        i += s
    assert i == len(x)
    return m


@pytest.mark.parametrize("sizes", [[1000], [1] * 10 + [990], [7] * 142 + [6], [512, 488], [3, 500, 497]])
def test_moments_equal_numpy(sizes, rng):
    x = rng.standard_normal((1000, 6)) * 5 + 100  # an offset mean stresses the update formula
    y = np.tanh(x[:, :4] - 100) + 3
    m = stream(x, y, sizes)
    full = np.cov(np.hstack([x, y]), rowvar=False)
    assert m.n == 1000
    np.testing.assert_allclose(m.mean_x, x.mean(0), rtol=1e-12)
    np.testing.assert_allclose(m.cov_x(), full[:6, :6], rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(m.cov_y(), full[6:, 6:], rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(m.cov_xy(), full[:6, 6:], rtol=1e-10, atol=1e-10)


def test_merging_halves_equals_one_pass(rng):
    x, y = rng.standard_normal((801, 5)), rng.standard_normal((801, 3))
    one = stream(x, y, [100] * 8 + [1])
    a, b = stream(x[:333], y[:333], [333]), stream(x[333:], y[333:], [68] * 6 + [60])
    merged = a.merge(b)
    assert merged.n == one.n
    for attr in ("mean_x", "mean_y", "m_xx", "m_yy", "m_xy"):
        np.testing.assert_allclose(getattr(merged, attr), getattr(one, attr), rtol=1e-10, atol=1e-9)
    assert Moments(5, 3).merge(a) is a and a.merge(Moments(5, 3)) is a


@pytest.mark.parametrize("batch", [1, 5, 64, 100, 1000])
def test_chunks_are_consecutive_rows(batch, rng):
    x = np.arange(1000, dtype=float)[:, None]
    buf, chunks = ChunkBuffer(128), []
    for i in range(0, 1000, batch):
        chunks += buf.add(x[i:i + batch], -x[i:i + batch])
    assert len(chunks) == 7
    for k, (cx, cy) in enumerate(chunks):
        np.testing.assert_array_equal(cx[:, 0], np.arange(128 * k, 128 * (k + 1)))
        np.testing.assert_array_equal(cy, -cx)
    rest = buf.remainder()
    np.testing.assert_array_equal(rest[0][:, 0], np.arange(896, 1000))

"""Streamed moments equal numpy's statistics of all rows, whatever the batching; chunks keep row order."""

import numpy as np
import pytest

from onnxaff.collection.collect import BlockMoments, ChunkBuffer, Moments


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


def test_a_batch_of_many_chunks_is_concatenated_once(monkeypatch):
    """Each chunk a batch completes is a slice of one concatenation: concatenating per chunk copied the rest of
    the batch for every chunk (quadratic in the chunks per batch: 12 s of a decoder run's 50)."""
    import onnxaff.collection.collect as collect

    calls = []
    real = np.concatenate
    monkeypatch.setattr(collect.np, "concatenate", lambda arrays, *a, **k: calls.append(len(arrays)) or
                        real(arrays, *a, **k))
    x = np.arange(64 * 100 + 37, dtype=float)[:, None]
    buf = ChunkBuffer(100)
    chunks = buf.add(x[:5], -x[:5]) + buf.add(x[5:], -x[5:])
    assert len(chunks) == 64
    assert calls == [2, 2]  # X and Y once, for the batch that completes chunks; none for the short first one
    for k, (cx, cy) in enumerate(chunks):
        np.testing.assert_array_equal(cx[:, 0], np.arange(100 * k, 100 * (k + 1)))
        np.testing.assert_array_equal(cy, -cx)


def test_chunks_and_the_rest_do_not_alias_the_batch():
    """The runtime may reuse an output buffer for the next batch: neither a chunk nor the held rest may see it."""
    x, y = np.arange(250, dtype=float)[:, None], np.zeros((250, 1))
    buf = ChunkBuffer(100)
    chunks = buf.add(x, y)
    x[:] = -1.0
    assert [c[0][0, 0] for c in chunks] == [0.0, 100.0]
    np.testing.assert_array_equal(buf.remainder()[0][:, 0], np.arange(200, 250))
    assert buf._x[0].base is None  # the rest owns its rows: it does not hold the whole concatenation alive


@pytest.mark.parametrize("cuts", [[3], [1, 2], [5, 6, 7], [2, 4, 9, 10]])
def test_block_moments_are_bitwise_independent_of_splits(cuts, rng):
    """Any split into consecutive parts, merged, performs the additions one pass does: equal bits."""
    blocks = [(rng.standard_normal((16, 4)) * 10 ** rng.uniform(-3, 3), rng.standard_normal((16, 3)))
              for _ in range(11)]
    one = BlockMoments(4, 3)
    for k, (x, y) in enumerate(blocks):
        one.update(x[:9], y[:9], k)  # two batches per block
        one.update(x[9:], y[9:], k)
    parts, bounds = [], [0, *cuts, len(blocks)]
    for a, b in zip(bounds, bounds[1:], strict=False):
        part = BlockMoments(4, 3)
        for k in range(a, b):
            part.update(blocks[k][0][:9], blocks[k][1][:9], k)
            part.update(blocks[k][0][9:], blocks[k][1][9:], k)
        parts.append(BlockMoments.from_state(part.to_state()))  # through the saved form too
    merged = parts[0]
    for p in parts[1:]:
        merged.merge(p)
    t1, t2 = one.total(), merged.total()
    assert t1.n == t2.n == 176
    for attr in ("mean_x", "mean_y", "m_xx", "m_yy", "m_xy"):
        assert np.array_equal(getattr(t1, attr), getattr(t2, attr)), attr
    x, y = np.concatenate([b[0] for b in blocks]), np.concatenate([b[1] for b in blocks])
    np.testing.assert_allclose(t1.cov_x(), np.cov(x, rowvar=False), rtol=1e-10, atol=1e-6)

"""Masked positions under the default protocol (reduce="sample:16", docs/statistics.md): a row is one position of
the site, so a masked position (a padded token, a padded query, a query row holding a masked key) is never
scored: it is drawn last, dropped and counted in `masked_rows`, as `reduce="positions"` drops it.

tests/test_masks.py checks the means over unmasked positions (reduce="mean"); here every score is checked against
the rows picked by hand from the raw tensors fetched from onnxruntime (the positions where fewer than 16 are
left: all of them; else the seeded draw, `sample_positions`, with the masked ones taken last), scored by the
independent affinity of tests/test_affinity.py.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest

import onnxaff
from onnxaff import defaults
from onnxaff.graph.reduction import sample_positions
from tests.conftest import FIXTURES
from tests.test_affinity import brute_force_affinity
from tests.test_masks import FMIN, H, N, T, analyse, causal_model, padded_model, padding, raw, site_of

K = 16  # the default's positions per example


def rows_of(a: np.ndarray, gone: np.ndarray) -> tuple[np.ndarray, int]:
    """The default's rows of a site whose features are a's last axis: each example's positions (every other axis
    after the batch, in order) drawn by the seeded keys, masked ones last and then dropped; and how many were."""
    per = a[0, ..., 0].size
    rows, gone = a.reshape(len(a), per, a.shape[-1]), gone.reshape(len(a), per)
    chosen = sample_positions(defaults.SEED, np.arange(len(a)), per, K, gone)
    kept = [rows[n, c[~gone[n, c]]] for n, c in enumerate(chosen)]
    return np.concatenate(kept), int(sum(gone[n, c].sum() for n, c in enumerate(chosen)))


def assert_rows_score(site: dict, x: np.ndarray, y: np.ndarray, masked: int) -> None:
    entry = site["metrics"]["affinity"]
    assert site["status"] == "ok" and entry["status"] == "ok", site
    assert entry.get("masked_rows", 0) == masked and site["rows"] == len(x) and entry["chunks"] == 1
    assert entry["mean"] == pytest.approx(brute_force_affinity(x, y), rel=1e-6)


@pytest.mark.parametrize("reduce_in", ["graph", "numpy"])
def test_a_causal_softmax_scores_only_its_query_rows_without_a_masked_key(reduce_in, rng, tmp_path):
    """H·T = 12 query rows an example, fewer than 16: all drawn. Every query but the last holds a masked key, so
    an example gives H rows (the last query of each head) and H·(T − 1) are left out, counted."""
    model = causal_model(rng)
    x = rng.standard_normal((N, H, T, 4)).astype(np.float32)
    z, p = raw(model, {"x": x}, "z", "p")
    gone = (z <= FMIN / 2).any(axis=-1)
    assert (gone.sum(axis=(1, 2)) == H * (T - 1)).all() and not gone[:, :, -1].any()
    fx, masked = rows_of(z, gone)
    fy, _ = rows_of(p, gone)
    assert masked == N * H * (T - 1) and len(fx) == N * H
    assert np.array_equal(fx, z[:, :, -1].reshape(N * H, T))
    sig = analyse(model, {"x": x}, tmp_path, reduce_in=reduce_in)
    assert sig.options["reduce"] == defaults.REDUCE
    assert_rows_score(site_of(sig, "softmax"), fx, fy, masked)


@pytest.mark.parametrize("reduce_in", ["graph", "numpy"])
def test_padded_tokens_and_queries_are_never_scored(reduce_in, rng, tmp_path):
    """The Tanh on [N, T, C]: T = 6 tokens, all drawn, the padded ones left out. The softmax [N, 1, T, T]: a
    padded example's every query row holds a padded key (and its padded queries are padding): all left out."""
    model = padded_model(rng)
    x = rng.standard_normal((N, T, 4)).astype(np.float32)
    mask = padding(rng)
    feeds = {"x": x, "attention_mask": mask}
    z, p, h, y = raw(model, feeds, "z", "p", "h", "y")
    pad = mask == 0
    sig = analyse(model, feeds, tmp_path, reduce_in=reduce_in)
    hx, masked = rows_of(h, pad)
    hy, _ = rows_of(y, pad)
    assert masked == pad.sum() > 0 and len(hx) == N * T - pad.sum()
    assert_rows_score(site_of(sig, "tanh"), hx, hy, masked)
    gone = (z <= FMIN / 2).any(axis=-1) | pad[:, None, :]
    padded = int(pad.any(axis=1).sum())
    fx, masked = rows_of(z, gone)
    fy, _ = rows_of(p, gone)
    assert masked == padded * T and len(fx) == (N - padded) * T
    assert_rows_score(site_of(sig, "softmax"), fx, fy, masked)


@pytest.mark.parametrize("name", ["bert_tiny", "gpt_tiny"])
def test_text_fixtures_sample_their_unmasked_query_rows(name, rng, tmp_path):
    """2 heads × 16 queries = 32 positions an example, more than 16: the seeded draw. BERT: an unpadded example
    gives 16 rows, a padded one (every query row holds a padded key) none, 16 counted. GPT: only the last query
    of each head sees no masked key; both are drawn before any masked row, so 2 rows an example, 14 counted."""
    path = FIXTURES / "text" / f"{name}.onnx"
    n = 12
    feeds = {"input_ids": rng.integers(0, 50, (n, 16)).astype(np.int64)}
    if name == "bert_tiny":
        mask = np.ones((n, 16), np.int64)
        mask[::4, 12:] = 0
        feeds.update(attention_mask=mask, token_type_ids=np.zeros((n, 16), np.int64))
    np.savez(tmp_path / "data.npz", **feeds)
    sig = onnxaff.analyze(str(path), str(tmp_path / "data.npz"), metrics=["affinity"], progress=False,
                          chunk_size=512)
    softmaxes = [s for s in sig.sites if s["kind"] == "softmax"]
    assert len(softmaxes) == 2
    model = onnx.load(path)
    tokens = feeds.get("attention_mask", np.ones((n, 16), np.int64)) != 0
    for site in softmaxes:
        z, p = raw(model, feeds, site["input"], site["output"])
        gone = (z <= FMIN / 2).any(axis=-1) | ~tokens[:, None, :]
        fx, masked = rows_of(z, gone)
        fy, _ = rows_of(p, gone)
        assert (len(fx), masked) == ((9 * K, 3 * K) if name == "bert_tiny" else (2 * n, (K - 2) * n))
        assert_rows_score(site, fx, fy, masked)

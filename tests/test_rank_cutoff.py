"""The rank cutoff follows the features' rounding: the same data reduced two correct ways gets one rank decision.

A mean over P float32 values rounds about sqrt(P)·eps32 (onnxaff.metrics.rank); r2 cuts X's directions at
CUTOFF times that and flags directions within NOISE times it of the cutoff (`rank_ambiguous`).
"""

from __future__ import annotations

import numpy as np
import pytest

from onnxaff.analysis import open_run
from onnxaff.collection.entries import metric_entry
from onnxaff.collection.scoring import MetricScorer
from onnxaff.collection.site_state import SiteState
from onnxaff.collection.stats import chunk_diagnostics, moments_rank
from onnxaff.graph import augment_model, discover_sites
from onnxaff.graph.reduction import feature_rounding, positions
from onnxaff.metrics import FLOAT32_EPS, Chunk, Moments, rank_cutoff, rank_verdict, resolve
from onnxaff.metrics.rank import CUTOFF, NOISE
from onnxaff_plugins.r2 import r2_held_out, r2_in_sample, r2_pooled
from tests.builders import chain

STEM = float(np.sqrt(784)) * FLOAT32_EPS  # a mean over a 28×28 map


def low_rank(rng, n=512, d=16, rank=4):
    """X of `rank` real directions in d features, the smallest at 1e-3 of the largest (far above any cutoff),
    and a Y that depends on them non-linearly."""
    base = rng.standard_normal((n, rank)) * np.logspace(0, -3, rank)
    x = 5.0 + base @ rng.standard_normal((rank, d))  # an offset: features are means of positive-ish maps
    y = np.maximum(base @ rng.standard_normal((rank, 6)), 0) + 0.1 * rng.standard_normal((n, 6))
    return x, y


def reduction_noise(rng, x, rounding, amplification=5.0):
    """X as another correct reduction would give it: every feature moved by `amplification`·rounding of its
    spread (the shipped stems measure up to 4.4 per feature from onnxruntime's mean against a host mean)."""
    return x + amplification * rounding * x.std(axis=0) * rng.standard_normal(x.shape)


def test_rank_four_x_gets_one_decision_with_and_without_reduction_noise(rng):
    x, y = low_rank(rng)
    noisy = reduction_noise(rng, x, STEM)
    for a in (x, noisy):
        assert chunk_diagnostics(a, y, rounding=STEM) == {"rank_deficient"}
    assert r2_in_sample(noisy, y, STEM) == pytest.approx(r2_in_sample(x, y, STEM), abs=1e-4)
    assert r2_pooled(_moments(noisy, y, STEM)) == pytest.approx(r2_pooled(_moments(x, y, STEM)), abs=1e-4)
    later = reduction_noise(rng, x, STEM)
    assert r2_held_out(Chunk(noisy, y, STEM), Chunk(later, y, STEM)) == pytest.approx(
        r2_held_out(Chunk(x, y, STEM), Chunk(x, y, STEM)), abs=1e-4)
    # The cutoff of unreduced features (eps32) sits under this noise: it fits the noise, and R² moves.
    assert abs(r2_in_sample(noisy, y) - r2_in_sample(x, y)) > 1e-3


def _moments(x, y, rounding):
    m = Moments.of(x, y)
    m.rounding = rounding
    return m


def two_features(n, ratio, rng):
    """Standardised X of two features whose smaller singular value is exactly `ratio` of the larger.

    a, e orthonormal and centred (×sqrt(n): unit spread); x2 = (a + δe)/sqrt(1 + δ²) has correlation
    r = 1/sqrt(1 + δ²) with a, and the two singular values are sqrt(n(1 ± r)): ratio² = (1 − r)/(1 + r)."""
    q, _ = np.linalg.qr(rng.standard_normal((n, 2)) - rng.standard_normal((n, 2)).mean(axis=0))
    q -= q.mean(axis=0)
    q, _ = np.linalg.qr(q)
    a, e = q.T * np.sqrt(n)
    r = (1 - ratio**2) / (1 + ratio**2)
    delta = np.sqrt(1 / r**2 - 1)
    return np.column_stack([a, (a + delta * e) / np.sqrt(1 + delta**2)])


@pytest.mark.parametrize(("ratio", "flags"), [
    (3 * CUTOFF, set()),  # above the band: kept by either path
    (CUTOFF + 1.1 * NOISE, set()),
    (CUTOFF + 0.9 * NOISE, {"rank_ambiguous"}),  # kept here, dropped by a path that moved it by NOISE
    (CUTOFF - 0.5 * NOISE, {"rank_deficient", "rank_ambiguous"}),
    (CUTOFF - 1.1 * NOISE, {"rank_deficient"}),
    (0.02 * CUTOFF, {"rank_deficient"}),  # the noise floor: dropped by either path
])
def test_a_direction_near_the_cutoff_is_flagged_ambiguous(ratio, flags, rng):
    x = two_features(512, ratio * STEM, rng)
    y = np.tanh(x @ rng.standard_normal((2, 3)))
    assert chunk_diagnostics(x, y, rounding=STEM) == flags
    z = x / x.std(axis=0)
    s = np.linalg.svd(z - z.mean(axis=0), compute_uv=False)
    assert s[1] / s[0] == pytest.approx(ratio * STEM, rel=1e-3)  # the closed form holds (to float64 rounding)
    assert rank_verdict(s / s[0], STEM) == flags
    assert moments_rank(np.cov(x.T), STEM) == flags


def test_cutoff_scales_with_rounding_and_keeps_above_a_float64_gram():
    assert rank_cutoff(STEM) == pytest.approx(CUTOFF * 28 * FLOAT32_EPS)
    assert rank_cutoff(FLOAT32_EPS) == pytest.approx(CUTOFF * FLOAT32_EPS)
    assert rank_cutoff(FLOAT32_EPS, gram_dim=512) == rank_cutoff(FLOAT32_EPS)  # the floor is far below at d ≤ 512
    assert rank_cutoff(FLOAT32_EPS, gram_dim=10**6) > rank_cutoff(FLOAT32_EPS)
    assert Chunk(np.zeros((2, 1)), np.zeros((2, 1))).rounding == FLOAT32_EPS  # a plugin's own Chunk: eps32


def test_positions_follow_each_reduction():
    model = chain("Relu", dims="N, 16, 28, 28")
    (site,) = discover_sites(model)
    assert [positions(site, m) for m in ("mean", "reference", "positions", "flatten")] == [784, 784, 1, 1]
    assert feature_rounding(site, "mean") == pytest.approx(STEM)
    assert feature_rounding(site, "flatten") == FLOAT32_EPS
    assert feature_rounding(site, "mean", doubles=(True, True)) == FLOAT32_EPS  # float64 means: eps32's floor
    (last,) = discover_sites(chain("Relu", dims="N, 28, 28, 16"), layout="channels_last")
    assert positions(last, "mean") == 784 and positions(last, "reference") == 28 * 16
    (tokens,) = discover_sites(chain("Relu", dims="N, 17, 64"))
    assert positions(tokens, "mean") == 17
    (flat,) = discover_sites(chain("Relu", width=64))
    assert positions(flat, "mean") == 1
    (dynamic,) = discover_sites(chain("Relu", dims="N, 16, H, W"))
    assert positions(dynamic, "mean") is None and positions(dynamic, "mean", (2, 16, 7, 9)) == 63
    _, outs = augment_model(chain("Relu", dims="N, 16, H, W"), [dynamic], "mean")
    assert outs[dynamic.index].rounding is None and outs[dynamic.index].shapes is not None
    # the default (sample:K reads the `positions` rows): one value a feature, eps32 whatever H and W
    _, outs = augment_model(chain("Relu", dims="N, 16, H, W"), [dynamic])
    assert outs[dynamic.index].rounding == FLOAT32_EPS


@pytest.mark.parametrize(("reduce", "rounding"), [("mean", 12 * FLOAT32_EPS), (None, FLOAT32_EPS)],
                         ids=["mean", "default"])
@pytest.mark.parametrize("dims", ["N, 4, 12, 12", "N, 4, H, W"])
def test_both_reductions_hand_the_metrics_one_rounding(dims, reduce, rounding, tmp_path, rng):
    """Static or symbolic P (read off Shape outputs, or off the raw arrays on the host): the same number. A mean
    over the 12×12 map rounds sqrt(144)·eps32; the default's sampled positions average nothing: eps32."""
    np.save(tmp_path / "x.npy", rng.standard_normal((96, 4, 12, 12)).astype(np.float32))
    options = {} if reduce is None else {"reduce": reduce}
    got = {}
    for where in ("graph", "numpy"):
        run = open_run(chain("Relu", dims=dims), str(tmp_path / "x.npy"), metrics=["r2", "r2_pooled"],
                       chunk_size=32, progress=False, reduce_in=where, **options)
        run.execute(finish=False)
        got[where] = run.state.sites[0].observed.rounding
    assert got["graph"] == got["numpy"] == pytest.approx(rounding)


def test_rounding_reaches_chunks_and_moments_and_survives_state_and_merge(rng):
    metrics = resolve(["r2", "r2_pooled", "r2_heldout"])
    seen = []

    class Spy:
        """Records what the scorer is given, then scores as usual."""

        def __init__(self, inner):
            self.inner = inner

        def submit(self, jobs):
            seen.extend(sample for _, sample in jobs)
            return self.inner.submit(jobs)

        def __getattr__(self, name):
            return getattr(self.inner, name)

    x, y = low_rank(rng, n=256)
    parts = []
    with MetricScorer(0) as scorer:
        for rows in (slice(0, 128), slice(128, 256)):
            st = SiteState.open(64, rounding=STEM)
            st.add(x[rows], y[rows], metrics, Spy(scorer))
            parts.append(SiteState.from_state(st.to_state()))
        assert parts[0].observed.rounding == STEM and parts[0].schedule.first.rounding == STEM
        parts[0].merge(parts[1], metrics, scorer)
        parts[0].finish(metrics, Spy(scorer))
    assert parts[0].observed.rounding == STEM
    inputs = [c for s in seen for c in (s if isinstance(s, tuple) else (s,))]  # a ChunkPair's two chunks
    assert inputs and all(s.rounding == STEM for s in inputs)  # every Chunk and the Moments
    assert any(isinstance(s, Moments) for s in inputs)
    entry = metric_entry(parts[0], metrics[1])
    assert entry["flags"] == ["rank_deficient"]  # r2_pooled's flags from the pooled X

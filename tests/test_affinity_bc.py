"""affinity_bc (issue 29): against a brute-force float64 implementation, its bias on closed-form sites, parameters."""

from __future__ import annotations

import functools
import itertools
import math

import numpy as np
import pytest
from scipy.linalg import sqrtm

from onnxaff.errors import OnnxaffError
from onnxaff.metrics import Chunk, check_metric, registry, resolve
from onnxaff_plugins.affinity import affinity_score
from onnxaff_plugins.affinity_bc import SEED, AffinityBC, affinity_bc_score


@functools.cache
def perms(n):
    return np.array(list(itertools.permutations(range(n))))  # every assignment of n rows (9! = 362,880 at most)


def brute_rho(x, y, eps=1e-6):
    """ρ_aff literally: unbiased covariances + εI, A = S(SΣ_XS)^{-1/2}S by scipy's sqrtm, OT over all permutations."""
    n, d = x.shape
    sx = np.cov(x, rowvar=False).reshape(d, d) + eps * np.eye(d)
    sy = np.cov(y, rowvar=False).reshape(d, d) + eps * np.eye(d)
    s = np.real(sqrtm(sy))
    a = s @ np.linalg.inv(np.real(sqrtm(s @ sx @ s))) @ s
    mapped = (x - x.mean(0)) @ a + y.mean(0)
    cost = ((mapped[:, None, :] - y[None, :, :]) ** 2).sum(-1)
    w2 = (cost[np.arange(n), perms(n)]).sum(1).min() / n
    return 1.0 - math.sqrt(w2 / (2.0 * np.trace(sy)))


def brute_bc(x, y, order):
    """Richardson in h = 1/m through the chunk and its halves (and quarters), the partition written out again."""
    n = len(x)
    h, dist = [1.0 / n], [(1.0 - brute_rho(x, y)) ** 2]
    for level in range(1, order):
        k = 2**level
        perm = np.random.default_rng(SEED + level).permutation(n)
        parts = [perm[i::k] for i in range(k)]
        h.append(np.mean([1.0 / len(p) for p in parts]))
        dist.append(np.mean([(1.0 - brute_rho(x[p], y[p])) ** 2 for p in parts]))
    if order == 2:  # the line through (h1, D1), (h2, D2) at h = 0
        a = dist[0] - h[0] * (dist[1] - dist[0]) / (h[1] - h[0])
    else:  # Lagrange's parabola at 0
        a = sum(dist[i] * np.prod([h[j] / (h[j] - h[i]) for j in range(3) if j != i]) for i in range(3))
    return 1.0 - math.sqrt(min(max(a, 0.0), 1.0))


@pytest.mark.parametrize("n, d, order", [(8, 2, 3), (8, 3, 2), (8, 3, 3), (8, 5, 3), (9, 3, 2)])
def test_equals_brute_force(n, d, order):
    rng = np.random.default_rng(n * 100 + d * 10 + order)
    x = rng.standard_normal((n, d)) @ rng.standard_normal((d, d))
    y = np.tanh(x) + 0.3 * np.maximum(x, 0) ** 2
    want = brute_bc(x, y, order)
    # 1e-7: where a quarter has fewer rows than d (d = 5), Σ_X is rank-deficient up to ε = 1e-6 and the literal
    # inverse of sqrtm keeps fewer digits than the eigendecompositions; elsewhere they agree to ~1e-12.
    assert affinity_bc_score(x, y, order=order) == pytest.approx(want, abs=1e-7 if 4 * d > n else 1e-10)
    assert AffinityBC(order=order).compute(Chunk(x, y)) == affinity_bc_score(x, y, order=order)


def test_span_and_direct_paths_agree():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((24, 64))
    y = np.maximum(x, 0)
    assert affinity_bc_score(x, y, method="span") == pytest.approx(affinity_bc_score(x, y, method="direct"), abs=1e-9)


def test_an_affine_image_scores_one_at_any_n():
    """Y = XM + b with M symmetric positive definite: population ρ = 1, and every (sub-)chunk's ρ is 1 to rounding."""
    rng = np.random.default_rng(2)
    d = 6
    m = rng.standard_normal((d, d))
    m = m @ m.T + np.eye(d)
    for n in (16, 32):  # n ≥ 2d: each quarter still has more rows than dimensions
        x = rng.standard_normal((n, d)) @ rng.standard_normal((d, d))
        assert affinity_bc_score(x, x @ m + 3.0) == pytest.approx(1.0, abs=1e-4)


def test_bias_on_a_closed_form_relu_site_is_under_half_the_affinitys():
    """Independent zero-mean ReLU coordinates: population ρ = 1 − sqrt(w2/(2v)) in closed form (as the study checks).

    At n = 2d the paper's estimator reads about +0.07 high; affinity_bc's mean over 40 chunks is within 0.03.
    """
    v = 0.5 - 1.0 / (2.0 * math.pi)
    rho = 1.0 - math.sqrt((2.0 * v - math.sqrt(v)) / (2.0 * v))
    rng = np.random.default_rng(3)
    d, n = 8, 16
    aff, bc = [], []
    for _ in range(40):
        x = rng.standard_normal((n, d))
        aff.append(affinity_score(x, np.maximum(x, 0)))
        bc.append(affinity_bc_score(x, np.maximum(x, 0)))
    bias_aff, bias_bc = np.mean(aff) - rho, np.mean(bc) - rho
    assert bias_aff > 0.04
    assert abs(bias_bc) < 0.03 and abs(bias_bc) < 0.5 * bias_aff


def test_parameters_are_validated():
    for bad in ({"order": 4}, {"order": 1}, {"eps": -1.0}, {"method": "fast"}):
        with pytest.raises(ValueError):
            AffinityBC(**bad)
    with pytest.raises(OnnxaffError, match="order must be 2 or 3"):
        resolve(["affinity_bc:order=5"])
    (m,) = resolve(["affinity_bc:order=2"])
    assert m.order == 2 and m.spec == "affinity_bc:order=2"
    x = np.random.default_rng(4).standard_normal((7, 2))
    with pytest.raises(ValueError, match="at least 8 rows"):
        affinity_bc_score(x, x)
    assert affinity_bc_score(x[:4], x[:4] ** 3, order=2) <= 1.0  # order 2: 4 rows are enough
    with pytest.raises(ValueError, match="equal feature dimensions"):
        affinity_bc_score(np.ones((8, 2)), np.ones((8, 3)))


def test_registered_beside_affinity_and_not_a_default():
    cls = registry()["affinity_bc"].cls
    assert cls is AffinityBC and cls.default is None
    check_metric(cls)
    check_metric(cls, order=2)


def test_a_chunk_size_it_cannot_score_is_refused_before_the_run(capfd, tmp_path):
    """Chunks of 6 rows ran the whole data pass and then failed at every site (a hostile review): affinity_bc
    declares min_rows, and the plan refuses a smaller chunk size in one line naming the option."""
    from tests.builders import chain, save
    from tests.conftest import one_line_error, run_cli

    model = save(chain("Relu"), tmp_path / "m.onnx")
    one_line_error(run_cli(capfd, "analyze", model, "--data", "synthetic:gaussian:n=60", "--metrics", "affinity_bc",
                           "--chunk-size", "6", "--out", tmp_path / "s.json"),
                   "--chunk-size 6: metric affinity_bc needs chunks of at least 8 rows")
    assert not (tmp_path / "s.json").exists()
    code, _, err = run_cli(capfd, "analyze", model, "--data", "synthetic:gaussian:n=60", "--metrics",
                           "affinity_bc:order=2", "--chunk-size", "6", "--out", tmp_path / "s.json", "--quiet")
    assert code == 0, err

"""The affinity score against closed forms, an LP solution and an independent implementation."""

import itertools

import numpy as np
import pytest
import scipy.linalg
from scipy.optimize import linprog

from onnxaff.linalg import covariance, ledoit_wolf
from onnxaff_plugins.affinity import affine_ot_map, affinity_score, exact_w2_squared


def spd(rng, d, lo=0.5, hi=2.0):
    q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    return q @ np.diag(rng.uniform(lo, hi, d)) @ q.T


def brute_force_affinity(x, y, eps=1e-6):
    """Written from the paper's formulas with other tools: scipy's general sqrtm, the Σ_X-side form of
    the Gaussian OT map, and W2² by enumerating permutations (tiny n) or by linprog."""
    n, d = x.shape
    sx = np.cov(x, rowvar=False).reshape(d, d) + eps * np.eye(d)
    sy = np.cov(y, rowvar=False).reshape(d, d) + eps * np.eye(d)
    rx = np.real(scipy.linalg.sqrtm(sx))
    rx_inv = np.linalg.inv(rx)
    a = rx_inv @ np.real(scipy.linalg.sqrtm(rx @ sy @ rx)) @ rx_inv
    t = (x - x.mean(0)) @ a.T + y.mean(0)
    cost = ((t[:, None, :] - y[None, :, :]) ** 2).sum(-1)
    if n <= 7:
        w2 = min(cost[np.arange(n), list(p)].mean() for p in itertools.permutations(range(n)))
    else:
        w2 = lp_w2(cost)
    return 1 - np.sqrt(w2 / (2 * np.trace(sy)))


def lp_w2(cost):
    """OT between uniform clouds as a linear program over doubly stochastic couplings."""
    n = cost.shape[0]
    a_eq = np.zeros((2 * n, n * n))
    for i in range(n):
        a_eq[i, i * n:(i + 1) * n] = 1
        a_eq[n + i, i::n] = 1
    res = linprog(cost.ravel() / n, A_eq=a_eq, b_eq=np.ones(2 * n), bounds=(0, None), method="highs")
    assert res.success
    return res.fun


@pytest.mark.parametrize("d", [1, 8, 64])
def test_affine_spd_map_scores_one(d, rng):
    x = rng.standard_normal((512, d))
    y = x @ spd(rng, d) + rng.standard_normal(d)
    # ε = 1e-6 regularises Σ_X and Σ_Y differently, which costs O(ε/λ_min) ≈ 1e-7 here.
    assert affinity_score(x, y) == pytest.approx(1.0, abs=1e-6)


def test_scaled_identity_and_translation_score_one(rng):
    x = rng.standard_normal((300, 5))
    assert affinity_score(x, 3.0 * x - 7.0) == pytest.approx(1.0, abs=1e-6)


def test_invariant_to_permuting_rows_of_y(rng):
    x = rng.standard_normal((200, 6))
    y = np.tanh(2 * x) + 0.1 * x**2
    perm = rng.permutation(200)
    assert affinity_score(x, y[perm]) == pytest.approx(affinity_score(x, y), abs=1e-12)


@pytest.mark.parametrize("seed", range(5))
def test_exact_ot_equals_linear_program(seed):
    rng = np.random.default_rng(seed)
    a, b = rng.standard_normal((9, 3)), rng.standard_normal((9, 3)) * 2 + 1
    cost = ((a[:, None] - b[None]) ** 2).sum(-1)
    assert exact_w2_squared(a, b) == pytest.approx(lp_w2(cost), rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("n,d,f", [(6, 2, np.tanh), (7, 3, lambda v: np.maximum(v, 0)), (40, 4, np.sin),
                                   (60, 1, lambda v: v**3)])
def test_matches_independent_brute_force(n, d, f, rng):
    x = rng.standard_normal((n, d))
    y = f(x @ spd(rng, d))
    assert affinity_score(x, y) == pytest.approx(brute_force_affinity(x, y), abs=1e-7)


def test_constant_output_uses_zero_map(rng):
    x = rng.standard_normal((100, 4))
    sy = covariance(np.zeros((100, 4))) + 1e-6 * np.eye(4)
    assert np.all(affine_ot_map(covariance(x), sy) == 0)
    assert affinity_score(x, np.zeros((100, 4))) == pytest.approx(1.0)


@pytest.mark.parametrize("f", [np.tanh, lambda v: np.maximum(v, 0), np.sin, np.abs, lambda v: np.sign(v)])
def test_range_zero_to_one(f, rng):
    x = rng.standard_normal((256, 8))
    assert -1e-9 <= affinity_score(x, f(x)) <= 1 + 1e-9


def test_less_linear_functions_score_lower(rng):
    x = rng.standard_normal((512, 1))
    scores = [affinity_score(x, g(x)) for g in (lambda v: v + 0.01 * v**2, np.tanh, np.abs)]
    assert scores[0] > scores[1] > scores[2]


def test_unequal_dims_and_tiny_chunks_refused(rng):
    with pytest.raises(ValueError, match="equal feature dimensions"):
        affinity_score(rng.standard_normal((10, 3)), rng.standard_normal((10, 4)))
    with pytest.raises(ValueError, match="at least 2 rows"):
        affinity_score(np.ones((1, 3)), np.ones((1, 3)))


def test_ledoit_wolf_matches_its_definition(rng):
    x = rng.standard_normal((30, 5)) @ spd(rng, 5)
    n, d = x.shape
    xc = x - x.mean(0)
    s = xc.T @ xc / n
    mu = np.trace(s) / d
    delta = np.linalg.norm(s - mu * np.eye(d), "fro") ** 2 / d
    beta = sum(np.linalg.norm(np.outer(r, r) - s, "fro") ** 2 for r in xc) / n**2 / d
    shrink = min(beta, delta) / delta
    cov, got = ledoit_wolf(x)
    assert got == pytest.approx(shrink, rel=1e-12)
    np.testing.assert_allclose(cov, (1 - shrink) * s + shrink * mu * np.eye(d), rtol=1e-12)


def test_ledoit_wolf_matches_scikit_learn_when_available(rng):
    sk = pytest.importorskip("sklearn.covariance")
    x = rng.standard_normal((50, 80))
    cov, shrink = ledoit_wolf(x)
    ref_cov, ref_shrink = sk.ledoit_wolf(x)
    assert shrink == pytest.approx(ref_shrink, rel=1e-10)
    np.testing.assert_allclose(cov, ref_cov, rtol=1e-10, atol=1e-14)


def test_ledoit_wolf_variant_defined_when_d_exceeds_n(rng):
    x = rng.standard_normal((64, 128))
    v = affinity_score(x, np.maximum(x, 0), shrinkage="ledoit_wolf")
    assert 0 <= v <= 1

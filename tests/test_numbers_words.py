"""Numbers held to their own words (issue 50, "Numbers against their own words"): each test measures a number the
docs state against an independent computation of it.
"""

import numpy as np
import pytest
from scipy.optimize import linear_sum_assignment

from onnxaff_plugins.affinity import affinity_score
from tests.test_affinity import spd

PATHS = ("direct", "map", "span")


def _sym_power(m, p):
    w, v = np.linalg.eigh(0.5 * (m + m.T))
    return (v * (np.maximum(w, 0.0) if p > 0 else w) ** p) @ v.T


def reference_affinity(x, y, eps=1e-6, shrinkage="none", relative_eps=False):
    """ρ_aff from its definition computed another way than the plugin: the Σ_X-side form of the same Gaussian OT map,
    A = Σ_X^{-1/2} (Σ_X^{1/2} Σ_Y Σ_X^{1/2})^{1/2} Σ_X^{-1/2}, with d×d covariances (scikit-learn's Ledoit–Wolf).

    It inverts only Σ_X ≥ ε·I (condition λ_max/ε, not the (λ_max/ε)² of S Σ_X S) and cuts no eigenvalue, so it
    shares neither the plugin's inverse root nor its cutoff. Against mpmath at 40 digits: 8e-13 at n = 32, d = 128
    (95 s; the fast case is `test_the_reference_agrees_with_mpmath`)."""
    n, d = x.shape
    xc, yc = x - x.mean(0), y - y.mean(0)
    if shrinkage == "ledoit_wolf":
        from sklearn.covariance import ledoit_wolf

        sx, sy = ledoit_wolf(x)[0], ledoit_wolf(y)[0]
    else:
        sx, sy = xc.T @ xc / (n - 1), yc.T @ yc / (n - 1)
    ex, ey = (eps * np.trace(sx) / d, eps * np.trace(sy) / d) if relative_eps else (eps, eps)
    sx, sy = sx + ex * np.eye(d), sy + ey * np.eye(d)
    root, inv_root = _sym_power(sx, 0.5), _sym_power(sx, -0.5)
    t = xc @ (inv_root @ _sym_power(root @ sy @ root, 0.5) @ inv_root)
    rows, cols = linear_sum_assignment(((t[:, None] - yc[None]) ** 2).sum(-1))
    diff = t[rows] - yc[cols]
    return 1 - np.sqrt((diff * diff).sum() / n / (2 * np.trace(sy)))


def test_the_reference_agrees_with_mpmath():
    """The reference itself, against the definition at 40 digits (mpmath: a test dependency through torch's sympy)."""
    mp = pytest.importorskip("mpmath")
    mp.mp.dps = 40
    rng = np.random.default_rng(3)
    n, d = 10, 24
    x = rng.standard_normal((n, d))
    y = np.maximum(x @ spd(rng, d), 0) + 0.1 * x
    xc, yc = (mp.matrix((a - a.mean(0)).tolist()) for a in (x, y))
    sx = xc.T * xc / (n - 1) + mp.mpf("1e-6") * mp.eye(d)
    sy = yc.T * yc / (n - 1) + mp.mpf("1e-6") * mp.eye(d)

    def power(m, p):
        w, v = mp.eighe(m)
        return v * mp.diag([wi ** p for wi in w]) * v.T

    s = power(sy, mp.mpf(1) / 2)
    t = xc * (s * power(s * sx * s, -mp.mpf(1) / 2) * s)
    tf, yf = np.array(t.tolist(), dtype=float), np.array(yc.tolist(), dtype=float)
    rows, cols = linear_sum_assignment(((tf[:, None] - yf[None]) ** 2).sum(-1))
    w2 = mp.fsum((t[i, j] - yc[k, j]) ** 2 for i, k in zip(rows, cols, strict=True) for j in range(d)) / n
    exact = float(1 - mp.sqrt(w2 / (2 * sum(sy[j, j] for j in range(d)))))
    assert abs(reference_affinity(x, y) - exact) <= 1e-11


@pytest.mark.parametrize("n,d", [(32, 128), (64, 256)])
@pytest.mark.parametrize("shrinkage,relative_eps", [("none", False), ("ledoit_wolf", False), ("none", True)])
def test_every_path_is_within_1e9_of_the_definition_at_n_below_d(n, d, shrinkage, relative_eps):
    """Issue 50: at n < d the pinv cutoff d·eps·λ_max of S Σ_X S zeroed genuine eigenvalues of order ε², and the
    score sat 1e-9–1.4e-8 from its definition on all three paths (n = 64, d = 256: −9.2e-9 … −1.4e-8 over 6 seeds);
    the old test's reference shared the cutoff. Now S Σ_X S ≥ α_X·α_Y is inverted whole: ≤ 8e-11 here."""
    for seed in range(2):
        rng = np.random.default_rng(seed)
        x = rng.standard_normal((n, d))
        y = np.maximum(x @ spd(rng, d), 0) + 0.1 * x
        ref = reference_affinity(x, y, shrinkage=shrinkage, relative_eps=relative_eps)
        for method in PATHS:
            got = affinity_score(x, y, shrinkage=shrinkage, relative_eps=relative_eps, method=method)
            assert abs(got - ref) <= 1e-9, (seed, method, got - ref)

"""Trajectory metrics against closed forms, a brute-force transport, and their invariances."""

import itertools

import numpy as np
import pytest

from onnxaff_plugins.trajectory import line_shape_per_sample, line_shape_score, ot_score, trajectory_scores


def steps(h0, *deltas):
    """Tracks h0, h0 + d1, h0 + d1 + d2, ... (each delta broadcast over samples or per sample)."""
    tracks = [h0]
    for d in deltas:
        tracks.append(tracks[-1] + d)
    return tracks


def test_constant_step_is_a_straight_optimal_line(rng):
    h0 = rng.standard_normal((40, 6))
    c = rng.standard_normal(6)
    tracks = steps(h0, c, c, c, c)
    assert line_shape_score(tracks) == pytest.approx(1.0, abs=1e-9)
    assert ot_score(tracks) == pytest.approx(1.0, abs=1e-9)
    np.testing.assert_allclose(line_shape_per_sample(tracks), 1.0, atol=1e-9)


def test_zigzag_matches_its_closed_form(rng):
    # +a, +b, +a, +b with b ⟂ a per sample: path 2(|a|+|b|), net 2|a+b| = 2 sqrt(|a|²+|b|²).
    n, d = 30, 5
    h0, a, b = rng.standard_normal((n, d)), rng.standard_normal((n, d)), rng.standard_normal((n, d))
    b -= (np.sum(a * b, axis=1) / np.sum(a * a, axis=1))[:, None] * a
    na, nb = np.linalg.norm(a, axis=1), np.linalg.norm(b, axis=1)
    expected = (na + nb) / np.sqrt(na**2 + nb**2)
    tracks = steps(h0, a, b, a, b)
    np.testing.assert_allclose(line_shape_per_sample(tracks), expected, rtol=1e-12)
    assert line_shape_score(tracks) == pytest.approx(expected.mean(), rel=1e-12)
    assert line_shape_score(tracks) > 1.05


def test_back_and_forth_counts_the_detour():
    # +3e1, -e1: path 4, net 2 -> LSS 2 for every sample.
    h0 = np.zeros((4, 3))
    e = np.array([1.0, 0.0, 0.0])
    assert line_shape_score(steps(h0, 3 * e, -e)) == pytest.approx(2.0, abs=1e-12)


def test_uniform_scaling_is_straight_and_optimal(rng):
    # h -> (1 + l s) h: each track is a ray, and a positive scaling is the gradient of a convex
    # function, so it is the optimal transport map between the clouds (OTS 1 without being a shift).
    h0 = rng.standard_normal((25, 4)) + 3.0
    tracks = [h0 * (1 + 0.3 * k) for k in range(4)]
    assert line_shape_score(tracks) == pytest.approx(1.0, abs=1e-9)
    assert ot_score(tracks) == pytest.approx(1.0, abs=1e-9)


def test_pure_permutation_scores_zero(rng):
    h0 = rng.standard_normal((12, 3))
    assert ot_score([h0, h0[rng.permutation(12)]]) == pytest.approx(0.0, abs=1e-12)


def test_quarter_turn_is_not_optimal(rng):
    # A rotation of a centred cloud moves samples much further than the clouds need.
    h0 = rng.standard_normal((60, 2))
    h0 -= h0.mean(axis=0)
    rot = np.array([[0.0, -1.0], [1.0, 0.0]])
    assert 0.0 <= ot_score([h0, h0 @ rot.T]) < 0.5


@pytest.mark.parametrize("n", [1, 2, 3, 5, 7])
def test_ots_matches_brute_force_transport(n):
    rng = np.random.default_rng(n)
    h0, h_l = rng.standard_normal((n, 3)), rng.standard_normal((n, 3)) + 0.5
    w2 = min(np.mean(np.sum((h0 - h_l[list(p)]) ** 2, axis=1)) for p in itertools.permutations(range(n)))
    moved = np.mean(np.sum((h_l - h0) ** 2, axis=1))
    mid = rng.standard_normal((n, 3))
    assert ot_score([h0, mid, h_l]) == pytest.approx(w2 / moved, rel=1e-12, abs=1e-15)


def test_invariances(rng):
    h = [rng.standard_normal((20, 5)) for _ in range(4)]
    lss, ots = line_shape_score(h), ot_score(h)
    rows, cols = rng.permutation(20), rng.permutation(5)
    q, _ = np.linalg.qr(rng.standard_normal((5, 5)))
    shift = rng.standard_normal(5)
    variants = {
        "same sample order change on every track": [a[rows] for a in h],
        "feature permutation": [a[:, cols] for a in h],
        "rotation": [a @ q for a in h],
        "common shift": [a + shift for a in h],
        "common scale": [2.5 * a for a in h],
    }
    for name, tracks in variants.items():
        assert line_shape_score(tracks) == pytest.approx(lss, rel=1e-10), name
        assert ot_score(tracks) == pytest.approx(ots, rel=1e-10), name
    # OTS reads only the ends; LSS reads the whole path.
    assert ot_score([h[0], rng.standard_normal((20, 5)), h[2], h[3]]) == pytest.approx(ots, rel=1e-12)
    assert lss >= 1.0 and 0.0 <= ots <= 1.0


def test_degenerate_samples_are_excluded_and_counted(rng):
    h0 = rng.standard_normal((6, 3))
    h1 = h0 + rng.standard_normal((6, 3))
    h2 = h1 + rng.standard_normal((6, 3))
    h1[0], h2[0] = h0[0], h0[0]  # sample 0 never moves
    h2[1] = h0[1]  # sample 1 comes back to its start
    per = line_shape_per_sample([h0, h1, h2])
    assert np.isnan(per[:2]).all() and not np.isnan(per[2:]).any()
    assert line_shape_score([h0, h1, h2]) == pytest.approx(per[2:].mean(), rel=1e-12)
    scores = trajectory_scores([h0, h1, h2])
    assert scores["lss_excluded"] == 2 and scores["n"] == 6 and scores["blocks"] == 2
    assert scores["lss"] == pytest.approx(per[2:].mean(), rel=1e-12)


def test_nothing_moves():
    h0 = np.ones((5, 2))
    assert np.isnan(line_shape_score([h0, h0]))
    assert np.isnan(ot_score([h0, h0]))


def test_trailing_axes_are_flattened_and_shapes_checked(rng):
    h0 = rng.standard_normal((8, 2, 3))
    c = rng.standard_normal((2, 3))
    assert line_shape_score(steps(h0, c, c)) == pytest.approx(1.0, abs=1e-9)
    with pytest.raises(ValueError, match="share one shape"):
        line_shape_score([h0, h0[:, :1]])
    with pytest.raises(ValueError, match="at least"):
        ot_score([h0])

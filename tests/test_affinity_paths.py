"""The affinity score's three ways to one number (direct, map, span: issue 40) held to each other and to the literal
d×d formulas on every shape class a chunk comes in, and on the shipped models' own chunks.

Tolerance 1e-9 on ρ (range [0, 1]): the issue's bound. The paths differ in the order of float64 products only;
largest difference from the direct path over 20 seeds of the classes below (both shrinkages, absolute and relative ε,
and ε = 0): 6e-15 (n ≈ d, n ≫ d), 2e-13 (rank-deficient), 2e-12 (constant columns; n < d on the map path), 5e-11
(n < d on the span path, whose QR coordinates round differently). The literal d×d formulas share the paths'
eigendecompositions; tests/test_numbers_words.py holds every path to the definition computed another way (the
Σ_X-side form of the map, checked against mpmath) at n < d (issue 50).
"""

import numpy as np
import pytest

import onnxaff
from onnxaff_plugins.affinity import METHODS, affinity_score
from tests.conftest import FIXTURES
from tests.test_affinity import literal_affinity, spd

PATHS = [m for m in METHODS if m != "auto"]
TOL = 1e-9


def _relu_like(x, rng):
    return np.maximum(x @ spd(rng, x.shape[1]), 0) + 0.1 * x


def chunk(kind, rng):
    """(x, y) of one shape class."""
    if kind == "n < d":
        x = rng.standard_normal((40, 60))
    elif kind == "n ≈ d":
        x = rng.standard_normal((64, 60))
    elif kind == "n ≫ d":
        x = rng.standard_normal((400, 12)) @ spd(rng, 12)
    elif kind == "rank-deficient":  # rank 5 in 30 dimensions, 80 rows
        x = rng.standard_normal((80, 5)) @ rng.standard_normal((5, 30))
    elif kind == "constant columns":  # dead features on both sides, as a ReLU network's chunks have them
        x = rng.standard_normal((80, 24))
        x[:, 3] = 1.5
        x[:, 10] = 0.0
    else:
        raise ValueError(kind)
    y = _relu_like(x, rng)
    if kind == "constant columns":
        y[:, [0, 5, 17]] = 0.0
    return x, y


KINDS = ["n < d", "n ≈ d", "n ≫ d", "rank-deficient", "constant columns"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("shrinkage", ["none", "ledoit_wolf"])
@pytest.mark.parametrize("relative_eps", [False, True])
def test_every_path_gives_the_same_score_on_every_shape_class(kind, shrinkage, relative_eps, rng):
    x, y = chunk(kind, rng)
    scores = {m: affinity_score(x, y, shrinkage=shrinkage, relative_eps=relative_eps, method=m)
              for m in METHODS}
    for m in METHODS:
        assert abs(scores[m] - scores["direct"]) <= TOL, (m, scores)
    if not relative_eps:
        assert abs(scores["map"] - literal_affinity(x, y, shrinkage=shrinkage)) <= 1e-8


@pytest.mark.parametrize("kind", ["n ≈ d", "n ≫ d", "constant columns"])
def test_paths_agree_without_a_regulariser(kind, rng):
    """ε = 0 with dead output features: Σ_Y is singular, Cholesky fails, and the symmetric root carries L."""
    x, y = chunk(kind, rng)
    ref = affinity_score(x, y, eps=0.0, method="direct")
    for m in PATHS:
        assert abs(affinity_score(x, y, eps=0.0, method=m) - ref) <= TOL


def test_auto_takes_span_below_2n_map_from_n_rows_on(rng, monkeypatch):
    import onnxaff_plugins.affinity as mod

    calls = []
    for fn in ("_direct_problem", "_map_problem", "_span_problem"):
        orig = getattr(mod, fn)
        monkeypatch.setattr(mod, fn, lambda *a, _o=orig, _n=fn: calls.append(_n) or _o(*a))
    for n, d in [(10, 21), (10, 20), (10, 11), (10, 10), (10, 5)]:
        x = rng.standard_normal((n, d))
        affinity_score(x, np.abs(x))
    assert calls == ["_span_problem", "_direct_problem", "_direct_problem", "_map_problem", "_map_problem"]


def test_variants_of_one_chunk_share_the_gram_matrices(rng, monkeypatch):
    """affinity and affinity_lw of one chunk compute XcᵀXc and YcᵀYc once (the map path and Ledoit–Wolf read them)."""
    import onnxaff_plugins.affinity as mod

    made = []
    for side in ("x", "y"):
        getter = getattr(mod._ChunkWork, f"gram_{side}").fget

        def counted(w, _g=getter, _s=side):
            if getattr(w, f"_gram_{_s}") is None:
                made.append(_s)
            return _g(w)
        monkeypatch.setattr(mod._ChunkWork, f"gram_{side}", property(counted))
    x = rng.standard_normal((90, 20))
    y = np.tanh(x)
    mod._recent.work = None
    for s in ("none", "ledoit_wolf"):
        affinity_score(x, y, shrinkage=s)
    assert sorted(made) == ["x", "y"]


def _count_span_r(monkeypatch, mod):
    made = []
    real = mod._span_r
    monkeypatch.setattr(mod, "_span_r", lambda xc, yc: made.append(xc.shape) or real(xc, yc))
    return made


def test_span_variants_share_r_when_the_settled_work_fits(rng, monkeypatch):
    """The budget is checked once a variant is done: the span path lets the centred rows go once R exists, so a
    chunk whose work passes the budget only while it is centred is still shared (d = 11008 at 512 rows: 188 MB
    while centring, 98 MB kept; the two metrics 3.3 → 1.9 CPU s)."""
    import onnxaff_plugins.affinity as mod

    x = rng.standard_normal((30, 200))
    y = np.maximum(x, 0.0)
    settled = 2 * x.nbytes + 60 * 60 * 8  # X, Y and R (min(d, 2n) × 2n)
    monkeypatch.setattr(mod, "SHARED_BYTES", settled + 1)  # under X, Y, Xc, Yc
    made = _count_span_r(monkeypatch, mod)
    mod._recent.work = None
    fresh = []
    for s in ("none", "ledoit_wolf"):
        fresh.append(affinity_score(x, y, shrinkage=s))
    assert len(made) == 1
    work = mod._recent.work
    assert work.nbytes() == settled and work._xc is None and work._yc is None
    monkeypatch.setattr(mod, "SHARED_BYTES", settled - 1)  # now over: computed again for each variant, not kept
    mod._recent.work = None
    again = [affinity_score(x, y, shrinkage=s) for s in ("none", "ledoit_wolf")]
    assert len(made) == 3 and mod._recent.work is None
    assert again == fresh  # the same bits, shared or not


def test_a_path_after_the_span_path_recentres_to_the_same_bits(rng):
    """A variant forced onto another path after a span variant let the centred rows go gets them again, equal."""
    import onnxaff_plugins.affinity as mod

    x = rng.standard_normal((20, 64))
    y = np.tanh(x)
    mod._recent.work = None
    direct_alone = affinity_score(x, y, method="direct")
    mod._recent.work = None
    affinity_score(x, y, method="span")
    assert affinity_score(x, y, method="direct") == direct_alone


def test_the_norm_of_xc_is_made_for_the_relative_eps_only(rng):
    """‖Xc‖² is read by the relative ε alone: the default metrics do not make it, affinity_rel makes it once."""
    import onnxaff_plugins.affinity as mod

    x = rng.standard_normal((40, 12))
    y = np.tanh(x)
    mod._recent.work = None
    for s in ("none", "ledoit_wolf"):
        affinity_score(x, y, shrinkage=s)
    assert mod._recent.work._xx is None
    affinity_score(x, y, relative_eps=True)
    assert mod._recent.work._xx == pytest.approx(float(((x - x.mean(axis=0)) ** 2).sum()), rel=1e-12)


def test_work_over_the_budget_is_let_go_even_when_the_metric_fails(rng, monkeypatch):
    import onnxaff_plugins.affinity as mod

    monkeypatch.setattr(mod, "SHARED_BYTES", 0)
    monkeypatch.setattr(mod, "exact_w2_squared", lambda a, b: 1 / 0)
    mod._recent.work = None
    with pytest.raises(ZeroDivisionError):
        affinity_score(rng.standard_normal((20, 8)), rng.standard_normal((20, 8)))
    assert mod._recent.work is None


FIXTURE_CASES = [("res_cnn_op17", 48), ("tiny_vit_op17", 48), ("tiny_vit_op17", 16), ("prenorm_vit_op17", 24),
                 ("act_zoo_op17", 32)]


@pytest.mark.parametrize("name,chunk_size", FIXTURE_CASES)
def test_paths_agree_on_the_shipped_models_chunks(name, chunk_size):
    specs = ["affinity"] + [f"affinity:method={m}" for m in PATHS] + ["affinity_lw"] + \
        [f"affinity_lw:method={m}" for m in PATHS]
    sig = onnxaff.analyze(FIXTURES / f"{name}.onnx", "synthetic:gaussian", limit=2 * chunk_size,
                          chunk_size=chunk_size, metrics=specs, intervals="none", progress=False)
    compared = 0
    for site in sig.sites:
        if site["status"] != "ok":
            continue
        for base in ("affinity", "affinity_lw"):
            ref = site["metrics"][f"{base}:method=direct"]
            if ref["status"] != "ok":
                continue
            for spec in [base] + [f"{base}:method={m}" for m in PATHS]:
                values = site["metrics"][spec]["values"]
                assert np.max(np.abs(np.subtract(values, ref["values"]))) <= TOL, (site["id"], spec)
                compared += len(values)
    assert compared > 0

"""The core reads what `Metric` declares as declared (issue 48): no `getattr` probe with a fallback of its own, no
built-in metric's constant (affinity's ε) repeated in the core; a metric's own declarations, on the class or set on
the instance, decide its flags, and the built-ins' flags are what they were."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from onnxaff.analysis.flagwarnings import flag_warnings
from onnxaff.collection.entries import metric_entry
from onnxaff.collection.scoring import MetricScorer
from onnxaff.collection.site_state import SiteState
from onnxaff.collection.stats import metric_flags
from onnxaff.format.siteentry import SiteEntry
from onnxaff.metrics import Metric, Needs, resolve
from onnxaff.metrics.loader import registry
from onnxaff_plugins.linalg import EPS

ROOT = Path(__file__).resolve().parents[1]
# `name` left out: a distribution, a node, a class checked for being a Metric all have one.
DECLARED = {n for n in Metric.__annotations__ if not n.startswith("_")} - {"name"}
# The registry checks a class before it is known to be a Metric (an entry point's object, check_metric's argument):
# there a probe is the check itself.
UNKNOWN_CLASS = {"onnxaff/metrics/loader.py", "onnxaff/metrics/check.py"}


def _core():
    for path in sorted((ROOT / "onnxaff").rglob("*.py")):
        yield path.relative_to(ROOT).as_posix(), ast.parse(path.read_text(encoding="utf-8"))


def test_the_core_probes_no_declared_metric_attribute():
    found = []
    for rel, tree in _core():
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
                    and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)
                    and node.args[1].value in DECLARED):
                continue
            if rel in UNKNOWN_CLASS and isinstance(node.args[0], ast.Name) and node.args[0].id == "cls":
                continue
            found.append(f"{rel}:{node.lineno}: {ast.unparse(node)}")
    assert "eps" in DECLARED and "rank_sensitive" in DECLARED
    assert not found, found


def test_no_built_in_metrics_eps_is_repeated_in_the_core():
    found = [f"{rel}:{n.lineno}" for rel, tree in _core() for n in ast.walk(tree)
             if isinstance(n, ast.Constant) and isinstance(n.value, float) and n.value == EPS]
    assert not found, found


class Declaring(Metric):
    """Every declaration the flags read, set on the instance as a parameter may set them."""

    name = "declaring"
    description = "a test metric"
    needs = Needs.CHUNK

    def __init__(self, rows_per_dim=None, regularised=False, eps=None, rank_sensitive=False, descriptive=False):
        self.rows_per_dim, self.regularised, self.eps = rows_per_dim, regularised, eps
        self.rank_sensitive = rank_sensitive
        if descriptive:
            self.higher_is_more_linear = None

    def compute(self, chunk) -> float:
        return 0.5


def test_each_declaration_is_honoured():
    seen = {"rank_deficient", "constant_output"}
    assert metric_flags(Declaring(), 20, 4, False, seen, 1e-4) == ["constant_output"]
    assert metric_flags(Declaring(rows_per_dim=6), 20, 4, False, seen, 1e-4) == ["few_rows", "constant_output"]
    assert metric_flags(Declaring(rows_per_dim=5), 20, 4, False, seen, 1e-4) == ["constant_output"]
    assert metric_flags(Declaring(rank_sensitive=True), 20, 4, False, seen, 1e-4) == [
        "rank_deficient", "constant_output"]
    # a regularised metric's own ε, judged against the site's smallest chunk variance (ε ≥ 1e-3 of it)
    assert metric_flags(Declaring(regularised=True, eps=2e-7), 20, 4, False, seen, 1e-4) == [
        "eps_dominated", "constant_output"]
    assert metric_flags(Declaring(regularised=True, eps=1e-8), 20, 4, False, seen, 1e-4) == ["constant_output"]
    # no absolute ε declared, or not regularised: nothing to weigh, whatever the scale
    assert metric_flags(Declaring(regularised=True), 20, 4, False, seen, 1e-12) == ["constant_output"]
    assert metric_flags(Declaring(eps=1.0), 20, 4, False, seen, 1e-12) == ["constant_output"]


def test_a_rank_sensitive_declaration_runs_the_rank_test():
    """The chunk's rank test runs only for a run with a rank-sensitive metric (SiteState.score), read off the
    instance."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 4))
    x[:, 3] = x[:, 0] + x[:, 1]  # rank 3
    for sensitive in (False, True):
        m = Declaring(rank_sensitive=sensitive)
        st = SiteState.open(32)
        with MetricScorer(0) as scorer:
            st.add(x, np.tanh(x), [m], scorer)
            st.finish([m], scorer)
        assert ("rank_deficient" in metric_entry(st, m)["flags"]) == sensitive


def _site(metrics: dict, dim: int | None = None) -> SiteEntry:
    """A site's typed entry holding these score dicts, as assembly hands it to flag_warnings."""
    return SiteEntry.of({"index": 0, "id": "s", "kind": "relu", "status": "ok", "dim": dim, "metrics": metrics})


def test_the_warnings_read_the_declarations():
    entry = {"status": "ok", "flags": ["few_rows", "eps_dominated", "constant_output"], "dead": [1, 4]}
    lines = flag_warnings([_site({"declaring": entry}, dim=4)],
                          [Declaring(rows_per_dim=100, regularised=True, eps=0.25, descriptive=True)])
    few, eps, dead = lines
    assert "up to 400 rows for d = 4" in few
    assert "absolute ε (0.25) moves" in eps
    assert "a descriptive metric" in dead and "affine map" not in dead
    (dead,) = flag_warnings([_site({"declaring": {"status": "ok", "flags": ["constant_output"]}})],
                            [Declaring()])
    assert "affine map" in dead and "descriptive" not in dead


def test_the_warning_says_when_the_eps_is_the_metrics_default():
    entry = {"status": "ok", "flags": ["eps_dominated"]}
    (line,) = flag_warnings([_site({"affinity": entry})], resolve(["affinity"]))
    assert f"absolute ε ({EPS:g}, its default) moves" in line, line
    (line,) = flag_warnings([_site({"affinity:eps=0.01": entry})], resolve(["affinity:eps=0.01"]))
    assert "absolute ε (0.01) moves" in line, line
    (line,) = flag_warnings([_site({"gone": entry})], [])  # the metric is not in this run: no ε to name
    assert "absolute ε moves" in line, line


# Each built-in's flags where every rule can fire (10 rows of d = 4, a partial chunk, a variance of 1e-4, rank and
# dead features seen), and at a variance of 1 on 1000 rows (ε = 1e-6 no longer bites): as before issue 48.
FEW_PARTIAL_SMALL = {
    "affinity": ["few_rows", "partial", "eps_dominated"], "affinity_bc": ["partial", "eps_dominated"],
    "affinity_lw": ["few_rows", "partial", "eps_dominated"], "affinity_rel": ["few_rows", "partial"],
    "cka": ["few_rows", "partial"], "cka_pooled": ["few_rows"], "entropy_change": ["partial"], "lss": [], "nlc": [],
    "ots": [], "r2": ["few_rows", "partial", "rank_deficient", "rank_ambiguous"],
    "r2_heldout": ["partial", "rank_deficient", "rank_ambiguous"],
    "r2_pooled": ["few_rows", "rank_deficient", "rank_ambiguous"], "sparsity_change": ["partial"],
    "affinity:eps=0.01": ["few_rows", "partial", "eps_dominated"], "affinity:eps=0.0": ["few_rows", "partial"],
}
LARGE = {"affinity:eps=0.01": ["eps_dominated"], "r2": ["rank_deficient", "rank_ambiguous"],
         "r2_heldout": ["rank_deficient", "rank_ambiguous"], "r2_pooled": ["rank_deficient", "rank_ambiguous"]}


@pytest.mark.parametrize("spec", sorted(FEW_PARTIAL_SMALL))
def test_the_built_ins_flags_are_unchanged(spec):
    assert set(FEW_PARTIAL_SMALL) >= set(registry())
    (m,) = resolve([spec])
    seen = {"rank_deficient", "rank_ambiguous", "constant_output"}
    assert metric_flags(m, 10, 4, True, seen, 1e-4) == [*FEW_PARTIAL_SMALL[spec], "constant_output"]
    assert metric_flags(m, 1000, 4, False, seen, 1.0) == [*LARGE.get(spec, []), "constant_output"]

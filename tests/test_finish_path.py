"""A finished site becomes its metric entries in one call (issue 48): assembly hands each SiteState to
onnxaff.collection.entries.site_metrics once, which reads the state's finished parts once (entries.Finished) and builds
every metric's entry from them; no entry reads the state again, and no metric asks it anything."""

from __future__ import annotations

import ast
import importlib
import inspect
import typing
from pathlib import Path

import numpy as np
import onnx
import pytest

import onnxaff
from onnxaff.collection import entries
from onnxaff.collection.scoring import MetricScorer
from onnxaff.collection.site_state import SiteState
from onnxaff.metrics import resolve
from onnxaff_plugins.r2 import R2Pooled
from tests.builders import mlp

ROOT = Path(__file__).resolve().parents[1]
ASSEMBLY = importlib.import_module("onnxaff.analysis.assemble")  # the package exports its function `assemble`
SPECS = ["affinity", "r2", "r2_heldout", "r2_pooled", "cka_pooled"]


@pytest.fixture(scope="module")
def metrics():
    return resolve(SPECS)


def _finished(metrics, rows: int = 96) -> SiteState:
    rng = np.random.default_rng(5)
    x = rng.standard_normal((rows, 4)).astype(np.float32)
    y = np.tanh(x @ rng.standard_normal((4, 4))).astype(np.float32)
    y[:, 3] = 0.5  # a dead output feature: the constant_output rule weighs the live chunk's score
    st = SiteState.open(32, index=0, label="s")
    with MetricScorer(0) as scorer:
        for a in range(0, rows, 16):
            st.add(x[a:a + 16], y[a:a + 16], metrics, scorer)
        st.finish(metrics, scorer)
    return st


def test_a_run_builds_each_sites_entries_in_one_call(tmp_path, metrics, monkeypatch):
    """One site_metrics call per site, and what it returns is the signature's entries as they are."""
    calls = []

    def recorded(st, ms):
        got = entries.site_metrics(st, ms)
        calls.append((st.index, got))
        return got

    monkeypatch.setattr(ASSEMBLY, "site_metrics", recorded)
    model = tmp_path / "mlp.onnx"
    onnx.save(mlp(np.random.default_rng(0)), model)
    sig = onnxaff.analyze(model, "synthetic:gaussian", metrics=SPECS, limit=256, chunk_size=64, progress=False)
    assert [i for i, _ in calls] == [s["index"] for s in sig.sites] and len(calls) == 2
    for (_, got), site in zip(calls, sig.sites, strict=True):
        assert site.to_json()["metrics"] == got


def test_the_entries_read_the_state_once(metrics, monkeypatch):
    """After Finished.of no entry reads the SiteState: the same entries come from the finished parts alone."""
    st = _finished(metrics)
    whole = entries.site_metrics(st, metrics)
    assert whole["affinity"]["dead"] == [1, 4] and whole["r2_pooled"]["status"] == "ok"
    assert entries.metric_entry(_finished(metrics), metrics[0]) == whole["affinity"]
    finished = entries.Finished.of(st, metrics)
    for name in ("not_applicable", "finish", "collect", "to_state"):
        monkeypatch.setattr(SiteState, name, lambda *a, **k: pytest.fail("the state was read again"))
    assert entries.from_finished(finished, metrics) == whole


def test_the_pooled_rank_test_runs_once_a_site(monkeypatch):
    """Two pooled rank-sensitive metrics read one rank test of the pooled X (it was run once a metric)."""

    class Twin(R2Pooled):
        name = "r2_pooled_twin"

    both = [*resolve(["r2_pooled"]), Twin()]
    st = _finished(both)
    ranks, real = [], entries.moments_rank
    monkeypatch.setattr(entries, "moments_rank", lambda *a: ranks.append(a) or real(*a))
    got = entries.site_metrics(st, both)
    assert len(ranks) == 1 and got["r2_pooled_twin"]["flags"] == got["r2_pooled"]["flags"]


def test_only_the_one_call_takes_a_site_state():
    """Every function of entries but the one call (and its one-metric form) reads the finished parts, not the state;
    assembly imports only that call from entries."""
    takes_state = {name for name, fn in inspect.getmembers(entries, inspect.isfunction)
                   if fn.__module__ == entries.__name__ and SiteState in typing.get_type_hints(fn).values()}
    assert takes_state == {"site_metrics", "metric_entry"}
    tree = ast.parse((ROOT / "onnxaff/analysis/assemble.py").read_text(encoding="utf-8"))
    imported = {a.name for n in ast.walk(tree)
                if isinstance(n, ast.ImportFrom) and n.module == "onnxaff.collection.entries" for a in n.names}
    assert imported == {"site_metrics"}

"""The interval method (AnalysisConfig.intervals): auto, chunks, half, none. Scores never move; only ci95 does.

Half-samples of a site's first chunk are scored as soon as it is cut when the run will give the site exactly one
chunk (or always, under "half"), beside inference; they must equal what the end-of-data path gives, bit for bit.
"""

from __future__ import annotations

import json

import pytest
from onnx.parser import parse_model as parse

from onnxaff.analysis import analyze
from onnxaff.collection.stats import HALVES
from onnxaff.errors import ConfigError
from tests.conftest import run_cli

TANH = parse('<ir_version: 8, opset_import: ["" : 17]> g (float[N, 3] x) => (float[N, 3] y) { y = Tanh(x) }')
OPTIONS = dict(metrics=["affinity", "cka"], chunk_size=64, batch_size=32, progress=False)


def _entries(sig):
    return [e for s in sig.sites for e in s["metrics"].values()]


@pytest.mark.parametrize("n", [64, 256])  # one chunk (half-samples under auto), four chunks
def test_scores_are_the_same_whatever_the_interval_method(n):
    data = f"synthetic:gaussian:n={n}"
    auto, chunks, none = (analyze(TANH, data, intervals=i, **OPTIONS) for i in ("auto", "chunks", "none"))
    assert [e["values"] for e in _entries(auto)] == [e["values"] for e in _entries(chunks)] \
        == [e["values"] for e in _entries(none)]
    assert all(e["ci95"] is None for e in _entries(none))
    assert none.options["intervals"] == "none" and "intervals" not in auto.options  # default runs unchanged
    if n == 64:  # one chunk: only auto has an interval (from its half-samples)
        assert all(e["ci95"] is not None for e in _entries(auto))
        assert all(e["ci95"] is None for e in _entries(chunks))
    else:  # several chunks: the chunk spread, the same under auto and chunks
        assert [e["ci95"] for e in _entries(auto)] == [e["ci95"] for e in _entries(chunks)]
        assert all(e["ci95"] is not None for e in _entries(chunks))


def test_no_half_samples_are_scored_unless_asked(monkeypatch):
    """intervals="none" or "chunks" spares a one-chunk run its HALVES rescorings of the chunk."""
    from onnxaff.collection.scoring import MetricScorer

    calls = []
    submit = MetricScorer.submit
    monkeypatch.setattr(MetricScorer, "submit", lambda self, jobs: calls.append(len(jobs)) or submit(self, jobs))
    analyze(TANH, "synthetic:gaussian:n=64", intervals="auto", **OPTIONS)
    auto = sum(calls)
    calls.clear()
    analyze(TANH, "synthetic:gaussian:n=64", intervals="none", **OPTIONS)
    assert sum(calls) == 2 and auto == 2 + 2 * HALVES  # two metrics once; under auto the halves each too


def test_a_bad_method_names_the_field():
    with pytest.raises(ConfigError) as info:
        analyze(TANH, "synthetic:gaussian:n=64", intervals="bootstrap", **OPTIONS)
    assert info.value.field == "intervals"


def test_the_cli_takes_intervals(capfd, tmp_path):
    import onnx

    onnx.save(TANH, tmp_path / "m.onnx")
    code, _, err = run_cli(capfd, "analyze", tmp_path / "m.onnx", "--data", "synthetic:gaussian:n=64", "--metrics",
                           "affinity", "--chunk-size", 64, "--intervals", "none", "--quiet",
                           "--out", tmp_path / "s.json")
    assert code == 0, err
    sig = json.loads((tmp_path / "s.json").read_text())
    assert sig["options"]["intervals"] == "none" and sig["sites"][0]["metrics"]["affinity"]["ci95"] is None


# --- early half-samples (beside inference) against the end-of-data path ---

MLP_OPTIONS = dict(metrics=["affinity", "affinity_lw"], chunk_size=64, batch_size=16, progress=False)


def _mlp():
    import numpy as np

    from tests.builders import mlp

    return mlp(np.random.default_rng(3), d_in=6, hidden=6, d_out=6)


def _watch(monkeypatch):
    """Every submitted job list as (after the end of the data?, is a half-sample of a 64-row chunk?)."""
    from onnxaff.analysis.runstate import RunState
    from onnxaff.collection.scoring import MetricScorer
    from onnxaff.metrics import Chunk

    seen, ended = [], []
    submit, finish = MetricScorer.submit, RunState.finish

    def watched_submit(self, jobs):
        seen.append((bool(ended), any(isinstance(s, Chunk) and s.n == 32 for _, s in jobs)))
        return submit(self, jobs)

    def watched_finish(self, *args, **kwargs):
        ended.append(True)
        return finish(self, *args, **kwargs)

    monkeypatch.setattr(MetricScorer, "submit", watched_submit)
    monkeypatch.setattr(RunState, "finish", watched_finish)
    return seen


def _end_path(monkeypatch):
    """Runs that do not know their row counts: every half-sample waits for the end of the data (the old path)."""
    monkeypatch.setattr("onnxaff.analysis.feeder.rows_per_example", lambda *a: None)


def _ci(sig):
    return [(s["id"], name, e.get("values"), e.get("ci95")) for s in sig.sites for name, e in s["metrics"].items()]


@pytest.mark.parametrize("workers", [0, 1, 3])
def test_early_half_samples_equal_the_end_of_data_path_exactly(monkeypatch, workers):
    """100 examples, chunks of 64: one chunk per site, known from the start. Its halves are scored beside the
    batches, none after the data end, and every value and bound equals the end-of-data path's (tolerance 0)."""
    seen = _watch(monkeypatch)
    early = analyze(_mlp(), "synthetic:gaussian:n=100", chunk_workers=workers, **MLP_OPTIONS)
    halves = [after for after, half in seen if half]
    assert len(halves) == 2 * HALVES and not any(halves)  # two sites, each half one job list, all before the end
    seen.clear()
    _end_path(monkeypatch)
    late = analyze(_mlp(), "synthetic:gaussian:n=100", chunk_workers=workers, **MLP_OPTIONS)
    assert all(after for after, half in seen if half) and sum(half for _, half in seen) == 2 * HALVES
    assert _ci(early) == _ci(late)
    assert all(ci is not None for *_, ci in _ci(early))


def test_a_prediction_that_was_wrong_falls_back_to_the_end_of_data_path(monkeypatch):
    """One chunk predicted, but the data give three (the halves are dropped: intervals over chunks), or only a
    partial chunk (skipped files: halves of the partial chunk at the end, as today): equal to the end path."""
    from onnxaff.collection.site_state import SiteState

    opened = SiteState.open
    for n, told in ((200, 100), (40, 100)):
        monkeypatch.setattr(SiteState, "open", classmethod(
            lambda cls, *a, told=told, **kw: opened(*a, **{**kw, "expected_rows": told})))
        wrong = analyze(_mlp(), f"synthetic:gaussian:n={n}", **MLP_OPTIONS)
        monkeypatch.setattr(SiteState, "open", opened)
        with monkeypatch.context() as m:
            _end_path(m)
            right = analyze(_mlp(), f"synthetic:gaussian:n={n}", **MLP_OPTIONS)
        assert _ci(wrong) == _ci(right)
        assert all(ci is not None for *_, ci in _ci(wrong))
        if n == 40:
            assert all(e.get("partial") for s in wrong.sites for e in s["metrics"].values())


def test_a_run_shorter_than_one_chunk_keeps_its_partial_chunk_interval(monkeypatch):
    """40 rows, chunks of 64: no full chunk, so nothing is scored before the end; the partial chunk and its
    halves are scored there, as before."""
    seen = _watch(monkeypatch)
    sig = analyze(_mlp(), "synthetic:gaussian:n=40", **MLP_OPTIONS)
    assert not any(not after for after, _ in seen)  # every job after the data end
    assert all(e["partial"] and e["ci95"] is not None for s in sig.sites for e in s["metrics"].values())


def test_half_uses_the_first_chunks_halves_for_every_site():
    """intervals="half": the same scores; with one chunk the same interval as auto; with k chunks
    mean ± t(HALVES − 1) · sd(halves of chunk 1)/sqrt(k)."""
    import math

    import numpy as np

    from onnxaff.analysis import AnalysisConfig, open_run
    from onnxaff.collection.stats import t975

    one = [analyze(_mlp(), "synthetic:gaussian:n=100", intervals=i, **MLP_OPTIONS) for i in ("auto", "half")]
    assert _ci(one[0]) == _ci(one[1])
    with open_run(_mlp(), "synthetic:gaussian:n=256", AnalysisConfig(intervals="half", **MLP_OPTIONS)) as run:
        run.execute()
        sig = run.signature()
        halves = {(k, m): h for k, st in enumerate(run.state.sites) for m, h in st.halved.halves.items()}
    auto = analyze(_mlp(), "synthetic:gaussian:n=256", **MLP_OPTIONS)
    for k, (s, a) in enumerate(zip(sig.sites, auto.sites, strict=True)):
        for name, e in s["metrics"].items():
            assert e["values"] == a["metrics"][name]["values"] and len(e["values"]) == 4
            assert e["ci95"] != a["metrics"][name]["ci95"]
            h = halves[(k, name)]
            assert len(h) == HALVES
            half = t975(HALVES - 1) * float(np.std(h, ddof=1)) / math.sqrt(4)
            mean = float(np.mean(e["values"]))
            assert e["ci95"] == pytest.approx([max(mean - half, 0.0), min(mean + half, 1.0)], abs=1e-15)
    assert sig.options["intervals"] == "half"


def test_auto_scores_no_half_sample_for_a_site_with_several_chunks(monkeypatch):
    seen = _watch(monkeypatch)
    analyze(_mlp(), "synthetic:gaussian:n=256", **MLP_OPTIONS)
    assert seen and not any(half for _, half in seen)


def test_scored_chunks_let_go_of_their_rows(monkeypatch):
    """A site holds the chunks still being scored, not every chunk of the run until the end."""
    from onnxaff.collection.site_state import SiteState

    most = []
    add = SiteState.add

    def watched(self, *a, **kw):
        add(self, *a, **kw)
        most.append(len(self.schedule.pending))

    monkeypatch.setattr(SiteState, "add", watched)
    analyze(_mlp(), "synthetic:gaussian:n=2048", chunk_workers=1, **MLP_OPTIONS)  # 32 chunks a site
    assert max(most) <= 5  # at most the scorer's queue (4 a worker) and the chunk just cut


def test_the_end_phase_counts_every_site(capsys):
    """The second progress line (onnxaff.foundations.progress) still reaches every site, after the data line."""
    analyze(_mlp(), "synthetic:gaussian:n=100", **{**MLP_OPTIONS, "progress": True})
    err = capsys.readouterr().err.splitlines()
    data = max(k for k, line in enumerate(err) if line.startswith("analyze ["))
    score = [k for k, line in enumerate(err) if line.startswith("score [") and "2/2 sites" in line]
    assert score and min(score) > data, err

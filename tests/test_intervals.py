"""The interval method (AnalysisConfig.intervals): auto, chunks, none. Scores never move; only ci95 does."""

from __future__ import annotations

import json

import pytest
from onnx.parser import parse_model as parse

from onnxaff.analysis import analyze
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
    """intervals="none" or "chunks" spares a one-chunk run its 8 rescorings of the chunk."""
    from onnxaff.scoring import MetricScorer

    calls = []
    submit = MetricScorer.submit
    monkeypatch.setattr(MetricScorer, "submit", lambda self, jobs: calls.append(len(jobs)) or submit(self, jobs))
    analyze(TANH, "synthetic:gaussian:n=64", intervals="auto", **OPTIONS)
    auto = sum(calls)
    calls.clear()
    analyze(TANH, "synthetic:gaussian:n=64", intervals="none", **OPTIONS)
    assert sum(calls) == 2 and auto == 2 + 2 * 8  # two metrics once; under auto 8 halves each too


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

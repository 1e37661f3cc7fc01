"""The cost preview (`--dry-run`, onnxaff.analysis.cost): it writes nothing, lists every site with the rows and
chunks the run will have, predicts the run's own few_rows flags, and says what it predicts in a fixed structure."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

import onnxaff
from onnxaff.analysis import Plan
from onnxaff.analysis.cost import Estimate, estimate
from tests.builders import mlp, save
from tests.conftest import FIXTURES, one_line_error, run_cli
from tests.test_study import write_models

FAST = ["--metrics", "affinity", "--chunk-size", "128", "--batch-size", "32", "--chunk-workers", "0"]
DATA = "synthetic:gaussian:n=300"


@pytest.fixture(scope="module")
def two_widths(tmp_path_factory) -> str:
    """A Relu of D = 40 and a Tanh of D = 6: at 128 rows a chunk, the first is short of rows, the second is not."""
    return save(mlp(np.random.default_rng(0), d_in=8, hidden=40, d_out=6),
                tmp_path_factory.mktemp("cost") / "mlp.onnx")


def test_a_dry_run_writes_nothing_and_prints_every_site(tmp_path, capfd, monkeypatch):
    model = FIXTURES / "res_cnn_op17.onnx"
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(capfd, "analyze", model, "--data", DATA, "--dry-run", *FAST)
    assert code == 0, err
    assert list(tmp_path.iterdir()) == []  # no signature, no checkpoint, no lock
    for site in Plan.build(str(model), DATA, onnxaff.analysis.AnalysisConfig()).sites:
        assert site.id in out
    assert "predicted: wall" in out and "peak memory" in out


@pytest.mark.parametrize("n", [300, 100])  # two full chunks; one partial chunk
def test_its_few_rows_flags_are_the_runs(two_widths, n):
    options = dict(metrics=["affinity", "r2"], chunk_size=128, batch_size=32, chunk_workers=0, progress=False)
    est = estimate(two_widths, f"synthetic:gaussian:n={n}", **options)
    sig = onnxaff.analyze(two_widths, f"synthetic:gaussian:n={n}", **options)
    for predicted, site in zip(est.sites, sig.sites, strict=True):
        assert predicted.id == site["id"]
        assert predicted.few_rows == [m for m, e in site["metrics"].items() if "few_rows" in (e.get("flags") or [])]
        assert predicted.chunks == site["metrics"]["affinity"]["chunks"]
        assert predicted.partial == bool(site["metrics"]["affinity"].get("partial"))
    assert [s.few_rows for s in est.sites] == [["affinity", "r2"], []]  # the rule bites where it should


def test_the_estimates_structure(two_widths):
    est = estimate(two_widths, DATA, metrics=["affinity", "r2"], chunk_size=128, batch_size=32, progress=False,
                   plain=True)
    assert isinstance(est, Estimate)
    d = json.loads(json.dumps(est.to_dict()))  # plain JSON types
    assert (d["examples"], d["batches"], d["chunk_size"], d["metrics"]) == (300, 10, 128, ["affinity", "r2"])
    for s in d["sites"]:
        assert (s["dim"], s["rows"], s["chunks"], s["rows_per_example"]) == (s["dim_y"], 128, 2, 1.0)
        assert set(s["seconds"]) == {"affinity", "r2"} and all(t > 0 for t in s["seconds"].values())
    secs = d["seconds"]
    assert set(secs) == {"startup", "setup", "inference", "plain_inference", "scoring", "wall"}
    assert secs["plain_inference"] > 0
    spread = min(max(1, d["workers"]), os.cpu_count() or 1)  # the scoring threads share the cores (docs/cost.md)
    assert secs["wall"] == pytest.approx(secs["startup"] + secs["setup"] + secs["inference"]
                                         + sum(secs["scoring"].values()) / spread)
    assert est.scoring_seconds == pytest.approx(sum(secs["scoring"].values()))
    assert d["peak_bytes"] > 0 and 0 < d["calibration_seconds"] < 60


def test_a_study_dry_run_lists_every_model(tmp_path, capfd):
    paths = write_models(tmp_path / "m")
    out = tmp_path / "study"
    code, stdout, err = run_cli(capfd, "study", *paths, "--data", "synthetic:gaussian:n=600", "--out", out, *FAST,
                                "--dry-run")
    assert code == 0, err
    assert not out.exists()
    for label in ("a", "b", "c"):
        assert f"== {label}" in stdout
    assert "predicted for the study: wall" in stdout


def test_a_study_dry_run_with_a_model_it_cannot_estimate_exits_as_the_study_would(tmp_path, capfd):
    """A model that fails gets its one line and the exit status of a study with failures (3), not 0 (review)."""
    paths = write_models(tmp_path / "m")
    (tmp_path / "m" / "broken.onnx").write_bytes(b"not a model")
    code, stdout, err = run_cli(capfd, "study", *paths, tmp_path / "m" / "broken.onnx", "--data",
                                "synthetic:gaussian:n=600", "--out", tmp_path / "study", *FAST, "--dry-run")
    assert code == 3 and "failed: broken" in err and "== a" in stdout, err
    assert not (tmp_path / "study").exists()


def test_bad_input_is_still_one_line(tmp_path, capfd):
    one_line_error(run_cli(capfd, "analyze", tmp_path / "missing.onnx", "--data", DATA, "--dry-run"), "missing.onnx")
    one_line_error(run_cli(capfd, "analyze", FIXTURES / "res_cnn_op17.onnx", "--data", DATA, "--dry-run",
                           "--chunk-size", "1"), "--chunk-size")


def test_a_dry_run_on_data_whose_features_are_nan(tmp_path, capfd, two_widths):
    """The real run flags such sites (no scores); the preview crashed concatenating no rows (a hostile review)."""
    np.save(tmp_path / "nan.npy", np.full((64, 8), np.nan, np.float32))
    code, out, err = run_cli(capfd, "analyze", two_widths, "--data", tmp_path / "nan.npy", "--dry-run", *FAST)
    assert code == 0, err
    assert "predicted: wall" in out

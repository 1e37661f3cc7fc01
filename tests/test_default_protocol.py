"""Issue 49: the default protocol ("width": affinity on chunks of 4·D rows, 16 sampled positions per example) gives
each site the rows its width needs, records itself, is one name away (`--protocol width`) as the paper's is, and
flags dead features only where they move the score beyond what the protocol resolves."""

from __future__ import annotations

import json

import numpy as np
import pytest

import onnxaff
from onnxaff import defaults
from onnxaff.analysis.config import AnalysisConfig
from onnxaff.collection.chunks import site_chunk_rows
from onnxaff.collection.entries import DEAD_RESOLUTION, dead_resolution, dead_within
from onnxaff.format.protocol import NAMED, protocol_of
from onnxaff.format.signature import read_signature
from onnxaff.metrics import default_metrics, registry
from tests.builders import mlp, save
from tests.conftest import run_cli
from tests.test_rows_protocol import CIN, SEED, N, S, conv_model, site


def test_the_defaults_are_the_width_protocol():
    config = AnalysisConfig()
    assert (config.chunk_size, config.reduce) == ("4d", "sample:16") == (defaults.CHUNK_SIZE, defaults.REDUCE)
    assert default_metrics(registry()) == ["affinity"]
    # every default metric needs no more rows than the protocol gives: its rows_per_dim ≤ the chunk's K
    assert all((registry()[m].cls().rows_per_dim or 1) <= 4 for m in default_metrics(registry()))
    assert NAMED["width"] == {"chunk_size": "4d", "reduce": "sample:16"}
    options = config.signature_options(32, default_metrics(registry()))
    assert protocol_of(options, {"affinity": {}})["name"] == "width"


def test_each_site_gets_4d_rows_a_chunk_from_16_positions_per_example(rng, tmp_path):
    """A conv net of 6 channels on 5×5 maps: 64 examples give 1,024 rows a site, 16 chunks of max(64, 4·6) rows;
    the same run with the options spelled out, and under `--protocol width`, gives the same numbers to the bit."""
    model = conv_model(rng)
    x = rng.standard_normal((N, CIN, S, S)).astype(np.float32)
    data = tmp_path / "data.npz"
    np.savez(data, x=x)
    path = save(model, tmp_path / "m.onnx")
    runs = [onnxaff.analyze(path, str(data), progress=False, seed=SEED, **options)
            for options in ({}, {"protocol": "width"},
                            {"metrics": ["affinity"], "chunk_size": "4d", "reduce": "sample:16"})]
    for kind in ("relu", "tanh"):
        s = site(runs[0], kind)
        assert s["rows"] == N * 16 and s["chunks"] == N * 16 // site_chunk_rows("4d", (6, 6)) == 16, s
        assert list(s["metrics"]) == ["affinity"] and "few_rows" not in s["metrics"]["affinity"]["flags"]
        assert site(runs[1], kind)["metrics"] == site(runs[2], kind)["metrics"] == s["metrics"]
    assert {r.protocol()["name"] for r in runs} == {"width"}
    assert runs[0].protocol()["text"].startswith("width: rows per chunk: 4d, 16 positions per example")


def test_a_dense_site_gives_one_row_per_example_and_keeps_its_flag_with_the_examples_it_needs(rng, tmp_path):
    """No positions to sample: a width-32 dense site needs 4·32 = 128 examples; 100 give a flagged partial chunk."""
    model = save(mlp(rng, 8, 32, 4), tmp_path / "mlp.onnx")
    short = onnxaff.analyze(model, "synthetic:gaussian:n=100", progress=False)
    enough = onnxaff.analyze(model, "synthetic:gaussian:n=128", progress=False)
    wide = next(s for s in short.sites if s["dim"] == 32)
    assert wide["rows"] == 100 and "few_rows" in wide["metrics"]["affinity"]["flags"]
    wide = next(s for s in enough.sites if s["dim"] == 32)
    assert wide["rows"] == 128 and wide["chunks"] == 1 and "few_rows" not in wide["metrics"]["affinity"]["flags"]


def test_the_cli_names_the_protocol_and_the_paper_is_one_option_away(rng, tmp_path, capfd):
    path = save(mlp(rng, 8, 16, 4), tmp_path / "mlp.onnx")
    for name, extra in (("width", []), ("paper", ["--protocol", "paper"])):
        out = tmp_path / f"{name}.json"
        code, _, err = run_cli(capfd, "analyze", str(path), "--data", "synthetic:gaussian:n=1024", "--out", str(out),
                               "--quiet", *extra)
        assert code == 0, err
        doc = json.loads(out.read_text())
        assert doc["protocol"]["name"] == name and list(doc["metrics"]) == ["affinity"]
    paper = read_signature(tmp_path / "paper.json")
    assert (paper.options["chunk_size"], paper.options["reduce"]) == (512, "mean")


@pytest.mark.parametrize("move, half, within", [
    (0.007, 0.003, True),  # the demo CNN's one dead channel of 16: finer than the protocol resolves
    (DEAD_RESOLUTION * 0.99, 0.0, True),
    (0.0316, 0.0033, False),  # a move the protocol resolves: flagged
    (0.03, 0.05, True),  # inside a wide interval
])
def test_dead_features_are_flagged_only_beyond_the_interval_and_the_resolution(move, half, within):
    values = [0.7, 0.71]
    assert dead_within([1, 0.71 + move], values, [0.705 - half, 0.705 + half]) is within


def test_the_demo_flags_no_site_few_rows(shipped_demo):
    """Issue 49's acceptance: `onnxaff demo` under the defaults, every site of every shipped model unflagged."""
    signatures = sorted((shipped_demo / "signatures").glob("*.json"))
    assert len(signatures) == 11
    for path in signatures:
        sig = read_signature(path)
        assert sig.protocol()["name"] == "width", path.name
        flagged = [s["id"] for s in sig.sites for e in s["metrics"].values() if "few_rows" in e.get("flags", [])]
        assert not flagged, (path.name, flagged)


def test_the_resolution_is_a_share_of_the_metrics_range():
    assert dead_resolution((0.0, 1.0)) == DEAD_RESOLUTION
    assert dead_resolution((-1.0, 1.0)) == pytest.approx(2 * DEAD_RESOLUTION)
    assert dead_resolution((1.0, float("inf"))) == 0.0  # unbounded (lss, nlc): the interval alone
    assert not dead_within([1, 0.72], [0.7, 0.71], [0.705, 0.705], resolution=0.0)


@pytest.mark.parametrize("flag, value", [("--chunk-size", "4d"), ("--reduce", "sample:16")])
def test_a_flag_given_against_the_protocol_is_refused_even_at_its_default(flag, value, rng, tmp_path, capfd):
    """AnalysisConfig takes a default as not given; the command line knows it was typed."""
    path = save(mlp(rng, 8, 16, 4), tmp_path / "mlp.onnx")
    code, _, err = run_cli(capfd, "analyze", str(path), "--data", "synthetic:gaussian:n=64", "--protocol", "paper",
                           flag, value, "--out", str(tmp_path / "x.json"))
    assert code == 2 and f"{flag} {value} contradicts --protocol paper" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "x.json").exists()


def test_sample_k_is_written_plainly():
    assert AnalysisConfig(reduce="sample:016").reduce == "sample:16"
    assert AnalysisConfig(protocol="width", reduce="sample:016").reduce == "sample:16"

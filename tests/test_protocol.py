"""Issue 49, slice protocol: every signature records how its rows were made and scored (its protocol), derived from
its options; `--protocol paper` sets the paper's options exactly; `compare` says when protocols differ (`--strict`
refuses) and the reports name them."""

from __future__ import annotations

import json

import numpy as np
import pytest

import onnxaff
from onnxaff.analysis.config import AnalysisConfig
from onnxaff.errors import ConfigError, OnnxaffError
from onnxaff.format.protocol import protocol_of, rows_per_example
from onnxaff.format.signature import read_signature
from onnxaff.reports.console import run_lines
from onnxaff.reports.html import comparison_page, single_page
from onnxaff.results.comparison import compare
from tests.conftest import run_cli
from tests.test_compare import mlp

PAPER_ROWS = "512 rows per chunk, one row per example (the mean over positions)"


def _run(tmp_path, name: str, **options):
    """A width-16 Tanh MLP on 1024 synthetic rows (two 512-row chunks), written and read back as the commands do."""
    sig = onnxaff.analyze(mlp(3, False, 0), "synthetic:gaussian", limit=1024, progress=False, chunk_workers=0,
                          **options)
    return read_signature(sig.write(tmp_path / f"{name}.json")), tmp_path / f"{name}.json"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The same model under the paper's protocol (named, and by its explicit options) and under 256-row chunks of the
    paper's reduction (a protocol that differs from the paper's in its chunk size alone)."""
    tmp = tmp_path_factory.mktemp("protocol")
    return {"named": _run(tmp, "named", protocol="paper"),
            "explicit": _run(tmp, "explicit", metrics=["affinity"], chunk_size=512, reduce="mean"),
            "small": _run(tmp, "small", metrics=["affinity", "affinity_bc"], chunk_size=256, reduce="mean")}


def test_the_signature_records_its_protocol(runs):
    sig, path = runs["small"]
    stored = json.loads(path.read_text())["protocol"]
    assert stored == sig.protocol() == protocol_of(sig.options, sig.metrics)
    assert (stored["name"], stored["chunk_size"], stored["reduce"], stored["intervals"]) == ("custom", 256, "mean",
                                                                                             "auto")
    assert stored["estimators"] == {"affinity": "plain covariances",
                                    "affinity_bc": "bias-corrected (Richardson extrapolation in 1/n, order 3)"}
    assert stored["text"].startswith("custom: 256 rows per chunk, one row per example (the mean over positions); ")
    named, _ = runs["named"]
    assert named.protocol()["name"] == "paper" and named.protocol()["text"] == (
        f"paper: {PAPER_ROWS}; affinity: plain covariances")


def test_the_protocol_is_derived_never_a_second_source(runs, tmp_path):
    """A file whose `protocol` was edited still reads the protocol of its options."""
    _, path = runs["named"]
    doc = json.loads(path.read_text())
    doc["protocol"] = {"name": "paper", "chunk_size": 99}
    doc["options"]["chunk_size"] = 128
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(doc))
    got = read_signature(edited).protocol()
    assert (got["name"], got["chunk_size"]) == ("custom", 128)


def test_a_signature_written_before_the_record_still_has_its_protocol(runs, tmp_path):
    """No `protocol` field, no metric `estimator`: the protocol comes from the recorded options; compared with a
    new file of the same options, no difference, even with --strict."""
    sig, path = runs["explicit"]
    doc = json.loads(path.read_text())
    del doc["protocol"]
    for info in doc["metrics"].values():
        info.pop("estimator", None)
    old = tmp_path / "old.json"
    old.write_text(json.dumps(doc))
    got = read_signature(old).protocol()
    assert got["name"] == "paper" and got["text"] == f"paper: {PAPER_ROWS}; affinity: as affinity defines it"
    assert compare([read_signature(old), sig], metric="affinity", strict=True).differences == []


def test_protocol_paper_is_the_explicit_options_to_the_bit(runs):
    named, _ = runs["named"]
    explicit, _ = runs["explicit"]
    assert AnalysisConfig(protocol="paper") == AnalysisConfig(metrics=["affinity"], chunk_size=512, reduce="mean",
                                                              protocol="paper")
    assert named.options == explicit.options and named.metrics == explicit.metrics
    values = [[s["metrics"]["affinity"].get("values") for s in sig.sites] for sig in (named, explicit)]
    assert values[0] == values[1] and any(v for v in values[0])  # the chunk scores, bit for bit
    assert all(len(v) == 2 for v in values[0] if v is not None)


@pytest.mark.parametrize("options, said", [
    ({"chunk_size": 256}, "chunk_size=256 contradicts protocol=paper, which sets chunk_size=512"),
    ({"reduce": "positions"}, "reduce=positions contradicts protocol=paper, which sets reduce=mean"),
    ({"metrics": ["affinity", "cka"]}, "metrics=affinity,cka contradicts protocol=paper, which sets metrics=affinity"),
    ({"protocol": "fast"}, "unknown protocol 'fast' for protocol; choose one of width, paper"),
])
def test_an_option_against_the_protocol_is_refused(options, said):
    with pytest.raises(ConfigError) as err:
        AnalysisConfig(**{"protocol": "paper", **options})
    assert str(err.value).startswith(said)


@pytest.mark.parametrize("call", ["analyze", "study"])
@pytest.mark.parametrize("named_by", ["keyword", "config"])
def test_the_python_api_refuses_a_default_value_said_against_the_protocol(call, named_by, tmp_path):
    """`analyze(protocol="paper", chunk_size="4d")`: 4d is the default, so the config alone would read it as left
    alone and run 512 rows; the keyword was said, so it is refused, as the command line refuses the typed flag."""
    model = tmp_path / "m.onnx"
    model.write_bytes(mlp(2, False, 0).SerializeToString())
    named = {"protocol": "paper"} if named_by == "keyword" else {"config": AnalysisConfig(protocol="paper")}
    with pytest.raises(ConfigError) as err:
        if call == "analyze":
            onnxaff.analyze(model, "synthetic:gaussian", limit=64, progress=False, chunk_size="4d", **named)
        else:
            onnxaff.study([model], "synthetic:gaussian", tmp_path / "study", limit=64, progress=False,
                          chunk_size="4d", **named)
    assert str(err.value).startswith("chunk_size=4d contradicts protocol=paper, which sets chunk_size=512")
    assert not (tmp_path / "study").exists()
    same = onnxaff.analyze(model, "synthetic:gaussian", limit=64, progress=False, chunk_size=512, **named)
    assert same.options["chunk_size"] == 512 and same.options["reduce"] == "mean"


def test_the_command_line_refuses_a_contradiction_in_one_line(capfd, tmp_path):
    model = tmp_path / "m.onnx"
    model.write_bytes(mlp(2, False, 0).SerializeToString())
    code, _, err = run_cli(capfd, "analyze", model, "--data", "synthetic:gaussian", "--protocol", "paper",
                           "--chunk-size", "256", "--out", tmp_path / "s.json")
    assert code == 2 and err.strip().splitlines() == [
        "onnxaff: error: --chunk-size 256 contradicts --protocol paper, which sets --chunk-size 512: give one or "
        "the other"], err
    assert not (tmp_path / "s.json").exists()


def test_compare_names_the_protocols_and_strict_refuses(runs, capfd, tmp_path):
    (paper, a), (small, b) = runs["named"], runs["small"]
    found = compare([paper, small], metric="affinity").differences
    assert found[0].field == "protocol" and found[0].values == ("paper (512 rows per chunk, reduce=mean)",
                                                                "custom (256 rows per chunk, reduce=mean)")
    code, _, err = run_cli(capfd, "compare", f"p={a}", f"s={b}", "--metric", "affinity", "--out", tmp_path / "c.html")
    assert code == 0 and err.startswith("warning: signatures made with different options: protocol differs: "
                                        "p=paper (512 rows per chunk, reduce=mean), s=custom (256 rows per chunk, "
                                        "reduce=mean); --chunk-size differs: p=512, s=256"), err
    code, _, err = run_cli(capfd, "compare", f"p={a}", f"s={b}", "--strict", "--out", tmp_path / "strict.html")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "protocol differs: p=paper" in err, err
    assert not (tmp_path / "strict.html").exists()
    with pytest.raises(OnnxaffError, match=r"refusing to compare .*: protocol differs: .*=paper \(512 rows"):
        compare([paper, small], metric="affinity", strict=True)


def test_the_reports_name_the_protocol(runs):
    (paper, _), (small, _), (explicit, _) = runs["named"], runs["small"], runs["explicit"]
    assert f"Protocol: paper: {PAPER_ROWS}; affinity: plain covariances." in single_page(paper)
    same = comparison_page([paper, explicit], [compare([paper, explicit], metric="affinity")])
    assert f"Protocol: paper: {PAPER_ROWS}; affinity: plain covariances." in same
    page = comparison_page([paper, small], [compare([paper, small], metric="affinity")])
    assert "<h3>Protocols</h3>" in page and "custom: 256 rows per chunk" in page and f"paper: {PAPER_ROWS}" in page
    assert any(line.startswith("protocol paper (512 rows per chunk, reduce=mean), ") for line in run_lines(paper))


def test_rows_per_example_in_words():
    """Every reduction, and the sampled positions of reduce=sample:K, said as rows per example."""
    assert rows_per_example("sample:16") == "16 positions per example (seeded samples of the activation's own rows)"
    assert rows_per_example("positions") == "one row per position of each example"
    record = protocol_of({"chunk_size": 512, "reduce": "positions", "intervals": "none"}, {"x": {}})
    assert record["name"] == "custom" and record["text"] == (
        "custom: 512 rows per chunk, one row per position of each example; x: as x defines it; no intervals")
    assert np.isscalar(record["chunk_size"])

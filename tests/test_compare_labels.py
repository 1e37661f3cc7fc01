"""Runs people can tell apart: LABEL=PATH, data-source names, one-line errors for absent metrics, and the
Markdown report's statistics."""

import csv
import json

import pytest

import onnxaff
from tests.conftest import run_cli
from tests.test_compare import mlp


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The same model on two data sets, and a third model; two metrics, for the lists and tables of each."""
    root = tmp_path_factory.mktemp("runs")
    paths = {}
    for key, model, data in (("g", mlp(3, False, 0), "synthetic:gaussian"), ("u", mlp(3, False, 0),
                                                                              "synthetic:uniform"),
                             ("r", mlp(5, True, 1), "synthetic:gaussian")):
        sig = onnxaff.analyze(model, data, limit=128, chunk_size=64, metrics=["affinity", "affinity_lw"],
                              progress=False, chunk_workers=0)
        paths[key] = sig.write(root / f"{key}.json")
    return paths


def test_same_model_on_two_data_sets_is_told_apart_by_its_data(runs, tmp_path, capfd):
    out = tmp_path / "c.json"
    code, stdout, err = run_cli(capfd, "compare", runs["g"], runs["u"], "--out", out)
    assert code == 0, err
    assert json.loads(out.read_text())["models"] == ["plain3 [synthetic:gaussian]", "plain3 [synthetic:uniform]"]
    assert "#2" not in stdout


@pytest.mark.parametrize("fmt", ["json", "csv", "md", "html"])
def test_labels_name_the_runs_everywhere(runs, tmp_path, capfd, fmt):
    out = tmp_path / f"c.{fmt}"
    code, stdout, err = run_cli(capfd, "compare", f"gauss={runs['g']}", f"unif={runs['u']}", runs["r"], "--out", out)
    assert code == 0, err
    text = out.read_text()
    if fmt == "json":
        assert json.loads(text)["models"] == ["gauss", "unif", "res5"]
    elif fmt == "csv":
        rows = list(csv.reader(text.splitlines()))
        assert rows[0][2:] == ["gauss", "unif", "res5"] and {r[1] for r in rows[1:]} == {"gauss", "unif", "res5"}
    else:
        assert "gauss" in text and "unif" in text and "plain3" not in text
    assert "gauss: nearest" in stdout


def test_correlate_takes_labels(runs, tmp_path, capfd):
    acc = tmp_path / "acc.csv"
    acc.write_text("a,0.9\nb,0.8\nc,0.7\n")
    out = tmp_path / "corr.json"
    code, _, err = run_cli(capfd, "correlate", f"a={runs['g']}", f"b={runs['u']}", f"c={runs['r']}",
                           "--accuracy", acc, "--out", out)
    assert code == 0, err
    assert [r["model"] for r in json.loads(out.read_text())["rows"]] == ["a", "b", "c"]
    code, _, err = run_cli(capfd, "compare", f"a={runs['g']}", f"a={runs['u']}", "--out", tmp_path / "x.json")
    assert code == 2 and "label 'a' is given twice" in err


def test_report_and_compare_name_the_metrics_a_signature_has(runs, tmp_path, capfd):
    out = tmp_path / "r.html"
    code, stdout, err = run_cli(capfd, "report", runs["g"], "--metric", "bogus", "--out", out)
    assert code == 2 and stdout == "" and not out.exists()
    assert err.strip() == ("onnxaff: error: --metric 'bogus': the signature has no bogus scores; "
                           "it has: affinity, affinity_lw")
    code, _, err = run_cli(capfd, "compare", runs["g"], runs["r"], "--metric", "bogus", "--out", tmp_path / "c.md")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "they share: affinity, affinity_lw" in err


def test_markdown_has_the_statistics_tables(runs, tmp_path, capfd):
    out = tmp_path / "c.md"
    code, _, err = run_cli(capfd, "compare", f"gauss={runs['g']}", runs["r"], "--out", out)
    assert code == 0, err
    text = out.read_text()
    assert text.count("signature statistics") == 2
    mean = json.loads(runs["g"].read_text())["summary"]["affinity"]["mean"]
    assert f"| gauss | 3 | {mean:.4f} |" in text


def test_demo_of_one_model_says_what_it_wrote(tmp_path, capfd):
    """It used to announce report.html and write none; the demo, now a study, writes the one model's page."""
    code, stdout, err = run_cli(capfd, "demo", "--models", "sk_mlp_relu", "--metrics", "affinity", "--quiet",
                                "--out", tmp_path / "d")
    assert code == 0, err
    assert (tmp_path / "d" / "report.html").exists() == ("report.html" in stdout)
    assert (tmp_path / "d" / "signatures" / "sk_mlp_relu.json").exists()


def test_a_label_that_is_not_utf8_is_shown_as_its_bytes(tmp_path, capfd):
    """A label given twice, or a study label that is not UTF-8, printed Python's 'm\\udcff'."""
    from tests.test_compare import fake_signature

    paths = [fake_signature(n, [0.5, 0.6, 0.7], 100).write(tmp_path / f"{n}.json") for n in "ab"]
    label = b"m\xff".decode("utf-8", "surrogateescape")  # what the command line gives Python
    code, _, err = run_cli(capfd, "compare", f"{label}={paths[0]}", f"{label}={paths[1]}", "--out", tmp_path / "c.md")
    assert code == 2 and err == "onnxaff: error: label 'm\\xff' is given twice\n", err
    model = tmp_path / "m.onnx"
    model.write_bytes(b"")
    code, _, err = run_cli(capfd, "study", f"{label}={model}", "--data", "synthetic:gaussian:n=8",
                           "--out", tmp_path / "study")
    assert code == 2 and "model label 'm\\xff'" in err and "udcff" not in err, err

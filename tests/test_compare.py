"""DTW, clustering, correlation and the reports."""

import json
import math
import re
import shutil
import subprocess

import numpy as np
import onnx
import pytest
from dtaidistance import dtw
from onnx import TensorProto, helper, numpy_helper

import onnxaff
from onnxaff.format.signature import Signature
from onnxaff.reports.html import comparison_page, correlation_page, single_page
from onnxaff.results.comparison import compare, correlate, dtw_distance
from tests.conftest import one_line_error, run_cli


def test_dtw_basics(rng):
    a, b = rng.uniform(size=7), rng.uniform(size=15)
    assert dtw_distance(a, a) == 0.0
    assert dtw_distance(a, b) == pytest.approx(dtw_distance(b, a), abs=1e-12)
    # by hand: [1,2,3] vs [1,3] warps 2 onto 1 or 3 (cost 1); [0,0,0] vs [1,1] pays 1 three times
    assert dtw_distance([1, 2, 3], [1, 3]) == pytest.approx(1.0)
    assert dtw_distance([0, 0, 0], [1, 1]) == pytest.approx(np.sqrt(3))
    assert dtw_distance([0, 0, 0], [1, 1], normalized=True) == pytest.approx(1.0)
    for x, y in [(a, b), (b, rng.uniform(size=49)), (a, rng.uniform(size=49))]:
        assert dtw_distance(x, y) == pytest.approx(dtw.distance(x, y, use_c=False), rel=1e-12)


def mlp(depth: int, residual: bool, seed: int) -> onnx.ModelProto:
    """Tanh MLPs of width 16: plain with large weights (strongly non-linear sites) or residual with a
    small branch (x + tanh(Wx)/10: near-linear blocks)."""
    rng = np.random.default_rng(seed)
    nodes, inits, h = [], [], "x"
    for k in range(depth):
        w = rng.standard_normal((16, 16)) * (0.4 if residual else 3.0 / 4)
        inits.append(numpy_helper.from_array(w.astype(np.float32), f"w{k}"))
        nodes.append(helper.make_node("MatMul", [h, f"w{k}"], [f"m{k}"]))
        nodes.append(helper.make_node("Tanh", [f"m{k}"], [f"t{k}"]))
        if residual:
            inits.append(numpy_helper.from_array(np.array(0.1, np.float32), f"s{k}"))
            nodes.append(helper.make_node("Mul", [f"t{k}", f"s{k}"], [f"b{k}"]))
            nodes.append(helper.make_node("Add", [h, f"b{k}"], [f"h{k}"]))
            h = f"h{k}"
        else:
            h = f"t{k}"
    nodes.append(helper.make_node("Identity", [h], ["y"]))
    graph = helper.make_graph(nodes, f"{'res' if residual else 'plain'}{depth}",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 16])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_clustering_groups_families():
    models = {"plain6": mlp(6, False, 0), "plain9": mlp(9, False, 1), "res7": mlp(7, True, 2),
              "res11": mlp(11, True, 3)}
    sigs = []
    for name, model in models.items():
        sig = onnxaff.analyze(model, "synthetic:gaussian:std=2", limit=512, chunk_size=256, metrics=["affinity"],
                              progress=False)
        sig.model["name"] = name
        sigs.append(sig)
    comp = compare(sigs)
    clusters = comp.clusters(2)
    assert clusters["plain6"] == clusters["plain9"] != clusters["res7"] == clusters["res11"]
    assert comp.neighbours(1)["res7"][0][0] == "res11" and comp.neighbours(1)["plain9"][0][0] == "plain6"
    page = comparison_page(sigs, [comp])
    assert page.count("<img src=\"data:image/png;base64,") == 3  # histograms, heatmap, dendrogram
    assert page.count("<svg class=\"sig\"") == 1  # signatures: inline SVG, a tooltip per point
    assert not re.search(r"(src|href)=[\"'](?!data:|#)", page) and "http" not in page


def fake_signature(name: str, scores: list[float], params: int) -> Signature:
    sites = [{"index": i, "id": f"s{i}", "kind": "relu", "status": "ok", "metrics": {"affinity": {"mean": v}}}
             for i, v in enumerate(scores)]
    return Signature(model={"name": name, "sha256": name * 8, "stats": {"parameters": params, "gflops": 1.0,
                                                                        "depth_sites": len(scores)}},
                     data={}, options={}, runtime={}, metrics={"affinity": {}}, sites=sites)


def test_correlate_exact_linear_statistic(tmp_path):
    accuracy = {"a": 0.70, "b": 0.74, "c": 0.79, "d": 0.81, "e": 0.76}
    sigs = []
    for k, (name, acc) in enumerate(accuracy.items()):
        base = 2 * acc - 1  # mean score = 2·accuracy − 1 exactly
        offsets = np.array([-0.05, 0.05, -0.02, 0.02])[: 2 + k % 3]
        offsets = offsets - offsets.mean()
        sigs.append(fake_signature(name, list(base + offsets), params=1000 * (k * 7 % 5 + 1)))
    result = correlate(sigs, {k: str(v) for k, v in accuracy.items()})
    assert result["table"]["all"]["affinity mean"]["r2"] == pytest.approx(1.0, abs=1e-12)
    assert result["table"]["all"]["affinity mean"]["slope"] == pytest.approx(0.5)
    assert result["table"]["all"]["parameters"]["r2"] < 0.9
    groups = {"a": "g1", "b": "g1", "c": "g1", "d": "g2", "e": "g2"}
    grouped = correlate(sigs, {k: str(v) for k, v in accuracy.items()}, groups=groups)
    assert set(grouped["table"]) == {"all", "g1"}  # g2 has fewer than three models
    assert result["left_out"] == []
    del sigs[0].model["stats"]["parameters"]
    assert correlate(sigs, {k: str(v) for k, v in accuracy.items()})["left_out"] == ["parameters"]
    page = correlation_page(result)
    assert "<svg class=\"scatter\"" in page and "http" not in page  # scatter plots: inline SVG


def test_single_model_report_and_cli_formats(tmp_path, capfd):
    two = ["affinity", "affinity_lw"]  # two metrics: a histogram and a section each
    sig = onnxaff.analyze(mlp(4, True, 0), "synthetic:gaussian", limit=128, chunk_size=64, metrics=two,
                          progress=False)
    page = single_page(sig)
    assert page.count("data:image/png;base64,") == 2 and "Sites" in page and "http" not in page
    paths = []
    for k, depth in enumerate((3, 5)):
        s = onnxaff.analyze(mlp(depth, k == 1, k), "synthetic:gaussian", limit=128, chunk_size=64, metrics=two,
                            progress=False)
        paths.append(s.write(tmp_path / f"m{k}.json"))
    for fmt in ("md", "csv", "json", "html"):
        out = tmp_path / f"cmp.{fmt}"
        code, _, err = run_cli(capfd, "compare", *paths, "--out", out)
        assert code == 0, err
        assert out.exists()
    report = json.loads((tmp_path / "cmp.json").read_text())
    assert set(report["metrics"]) == {"affinity", "affinity_lw"}  # every metric both signatures have
    assert report["metrics"]["affinity"]["dtw"][0][0] == 0
    assert (tmp_path / "cmp.md").read_text().count("### ") == 2


@pytest.mark.skipif(shutil.which("chromium") is None, reason="Chromium is not installed")
def test_html_renders_in_headless_chromium(tmp_path):
    sigs = [fake_signature(n, list(np.linspace(0.6, 0.9, k + 3)), 10) for k, n in enumerate("abcd")]
    page = tmp_path / "report.html"
    page.write_text(comparison_page(sigs, [compare(sigs)]))
    shot = tmp_path / "shot.png"
    subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                    "--disable-background-networking", "--disable-component-update", "--disable-sync",
                    f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1200,3000",
                    f"--screenshot={shot}", page.as_uri()], capture_output=True, timeout=120)
    assert shot.exists() and shot.stat().st_size > 50_000


def test_correlate_on_a_metric_the_signatures_lack_is_one_line():
    """It used to print the model baselines alone, as if the metric had nothing to say."""
    from onnxaff.errors import ConfigError

    sigs = [fake_signature(n, [0.5, 0.6, 0.7], params=1000) for n in "abc"]
    with pytest.raises(ConfigError, match=r"'cka': not every signature has cka scores \(they share: affinity; "
                                          r"a: no cka scores \(it has affinity\); b: no cka"):
        correlate(sigs, {"a": "0.7", "b": "0.8", "c": "0.9"}, metric="cka")


def test_comparing_signatures_with_no_shared_metric_names_what_each_has(capfd, tmp_path):
    """"share no metric" did not say which signature lacked what (issue 30)."""
    from tests.conftest import run_cli

    a, b = fake_signature("a", [0.5, 0.6], params=1), fake_signature("b", [0.5, 0.7], params=1)
    b.sites = [site.updated(metrics={"cka": site.metrics["affinity"]}) for site in b.sites]
    b.metrics = {"cka": {}}
    paths = []
    for sig in (a, b):
        sig.write(tmp_path / f"{sig.model['name']}.json")
        paths.append(tmp_path / f"{sig.model['name']}.json")
    code, out, err = run_cli(capfd, "compare", *paths)
    assert code != 0 and "share no metric" in err and "a has affinity; b has cka" in err, err
    code, out, err = run_cli(capfd, "compare", *paths, "--metric", "cka")
    assert code != 0 and "a: no cka scores (it has affinity)" in err, err


def test_correlate_shows_flagged_scores_and_can_leave_them_out(capfd, tmp_path):
    """Models whose statistics include flagged scores are counted in every table and drawn hollow in the scatters."""
    import csv
    import io

    from onnxaff.format.signature import read_signature
    from onnxaff.reports.csv import correlation_csv
    from onnxaff.reports.markdown import correlation_markdown

    accuracy = {"a": 0.70, "b": 0.74, "c": 0.79, "d": 0.81, "e": 0.76}
    paths = []
    for k, (name, acc) in enumerate(accuracy.items()):
        sig = fake_signature(name, [2 * acc - 1 + 0.01 * j for j in range(4)], params=1000 * (k + 1))
        sig.sites = [s.updated(metrics={"affinity": s.metrics["affinity"].updated(
            flags=["few_rows"] if name in "ab" and s.index < 1 + (name == "b") else [])}) for s in sig.sites]
        paths.append(sig.write(tmp_path / f"{name}.json"))
    (tmp_path / "acc.csv").write_text("".join(f"{k},{v}\n" for k, v in accuracy.items()))
    result = correlate([read_signature(p) for p in paths], {k: str(v) for k, v in accuracy.items()})
    assert {r["model"]: r["flagged"] for r in result["rows"]} == {"a": 1, "b": 2, "c": 0, "d": 0, "e": 0}
    assert result["table"]["all"]["affinity mean"]["flagged_models"] == 2
    assert result["table"]["all"]["parameters"]["flagged_models"] == 0  # a baseline has no site scores
    rows = list(csv.DictReader(io.StringIO(correlation_csv(result))))
    assert {r["statistic"]: r["flagged_models"] for r in rows}["affinity mean"] == "2"
    md = correlation_markdown(result)
    assert "flagged sites" in md and "| a | 0.7 | all | 1 of 4 |" in md
    page = correlation_page(result)
    assert "flagged sites" in page and "1 of 4" in page and "2 of 4" in page
    code, out, err = run_cli(capfd, "correlate", *paths, "--accuracy", tmp_path / "acc.csv", "--exclude-flagged",
                             "--out", tmp_path / "corr.json")
    assert code == 0, err
    assert "left out 3 flagged of 20 site scores" in err
    left = json.loads((tmp_path / "corr.json").read_text())
    assert {r["model"]: r["flagged"] for r in left["rows"]} == dict.fromkeys("abcde", 0)
    assert {r["model"]: r["scored"] for r in left["rows"]} == {"a": 3, "b": 2, "c": 4, "d": 4, "e": 4}


def _correlate_cli(capfd, tmp_path, accuracy_text: str, encoding: str = "utf-8"):
    accuracy = {"a": 0.70, "b": 0.74, "c": 0.79, "d": 0.81, "e": 0.76}
    paths = [fake_signature(n, [2 * acc - 1, 2 * acc - 0.9], params=1000 * (k + 1)).write(tmp_path / f"{n}.json")
             for k, (n, acc) in enumerate(accuracy.items())]
    (tmp_path / "acc.csv").write_text(accuracy_text, encoding=encoding)
    return run_cli(capfd, "correlate", *paths, "--accuracy", tmp_path / "acc.csv", "--out", tmp_path / "corr.json")


ROWS = "a,0.70\nb,0.74\nc,0.79\nd,0.81\ne,0.76\n"


@pytest.mark.parametrize("bad", ["nan", "inf", "-inf"])
def test_correlate_refuses_a_non_finite_accuracy(capfd, tmp_path, bad):
    """nan/inf made every statistic nan, and nothing said why."""
    one_line_error(_correlate_cli(capfd, tmp_path, ROWS.replace("0.79", bad)),
                   f"accuracy of c is not a finite number: {bad!r}")


def test_correlate_refuses_a_model_listed_twice(capfd, tmp_path):
    """The last of two rows for a model silently won."""
    one_line_error(_correlate_cli(capfd, tmp_path, ROWS + "b,0.99\n"), "accuracy file lists 'b' twice (rows 2 and 6)")


def test_correlate_reads_an_accuracy_file_with_a_byte_order_mark(capfd, tmp_path):
    """A UTF-8 BOM (Excel's CSV) was part of the first name: "no accuracy for model a"."""
    code, _, err = _correlate_cli(capfd, tmp_path, ROWS, encoding="utf-8-sig")
    assert code == 0, err


def test_correlate_of_huge_accuracies_does_not_overflow(capfd, tmp_path):
    """Accuracies near 1e308 overflowed the fit: R² printed as 0.0000 for an exactly linear statistic."""
    rows = "".join(f"{k},{v * 1e307:.17g}\n" for k, v in zip("abcde", (0.70, 0.74, 0.79, 0.81, 0.76), strict=True))
    code, out, err = _correlate_cli(capfd, tmp_path, rows)
    assert code == 0, err
    fit = json.loads((tmp_path / "corr.json").read_text())["table"]["all"]["affinity mean"]
    assert fit["r2"] == pytest.approx(1.0, abs=1e-9) and math.isfinite(fit["slope"])


def test_the_dendrogram_of_identical_signatures_draws_without_a_warning():
    """Every DTW distance 0 (one model studied twice): scipy warned of a flat y range on the user's terminal."""
    import warnings

    from scipy.cluster import hierarchy

    from onnxaff.reports import plots

    linkage = hierarchy.linkage(np.zeros(3), method="average")  # three signatures, all at distance 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        uri = plots.dendrogram(["a", "b", "c"], linkage, {"a": 0, "b": 0, "c": 0})
    assert uri.startswith("data:image/png;base64,")

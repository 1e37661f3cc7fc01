"""Hostile names in every output: CSV, Markdown, HTML, plots, JSON and the terminal treat names as text.

A model name can hold anything a file name can (`,`, `"`, `|`, `$`, `\\`, `<`, control characters, bytes that are
not UTF-8): it must neither shift a table's columns, run as a spreadsheet formula, become markup (HTML, Markdown,
matplotlib's mathtext), drive a terminal, nor crash an encoder.
"""

from __future__ import annotations

import csv
import html
import io
import json
import warnings

import numpy as np
import pytest

from onnxaff.foundations.text import csv_cell, csv_text, json_safe, md_cell, printable
from tests.builders import chain
from tests.conftest import run_cli
from tests.test_compare import fake_signature

HOSTILE = 'a,b"c|d`e$x\\y$<b>&amp;'
FORMULA = "=HYPERLINK(\"http://x\")"
NOT_UTF8 = "m\udcff\udcfe"  # what os.fsdecode makes of the file name b"m\xff\xfe"


@pytest.fixture(autouse=True)
def _no_debug(monkeypatch):
    monkeypatch.delenv("ONNXAFF_DEBUG", raising=False)


def write_signatures(folder, names: list[str]) -> list:
    paths = []
    for k, name in enumerate(names):
        sig = fake_signature(name, list(np.linspace(0.5, 0.9, 3 + k) ** (k + 1)), 10 * (k + 1))
        path = folder / f"s{k}.json"  # as an older onnxaff wrote it: a surrogate stays a \udcff escape in the file
        path.write_text(json.dumps(sig.to_dict()))
        paths.append(path)
    return paths


def ok(result) -> str:
    code, out, err = result
    assert code == 0 and err == "", err
    return out


def quiet(capfd, *args) -> str:
    """ok(run_cli(...)), and no Python warning either (in-process, pytest would catch them before stderr)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = ok(run_cli(capfd, *args))
    assert [str(w.message) for w in caught] == []
    return out


def test_csv_cells():
    """Text that a spreadsheet would run is prefixed with `'`; numbers, negative ones and numbers written as
    text ("-0.25", "+1": a spreadsheet reads them as numbers, not formulas) never are."""
    assert [csv_cell(v) for v in ("=1+1", "+1", "-cmd", "@SUM(A1)", "plain", -0.25, "-0.25", "+3e-5", 7)] == \
        ["'=1+1", "+1", "'-cmd", "'@SUM(A1)", "plain", "-0.25", "-0.25", "+3e-5", 7]
    assert csv_cell("\tx") == "\\x09x" and csv_cell("\rx") == "\\x0dx"  # control characters never reach a cell
    rows = list(csv.reader(io.StringIO(csv_text([[HOSTILE, "two\nlines", -1.5]]), newline="")))
    assert rows == [[HOSTILE, "two\\x0alines", "-1.5"]]


def test_md_cells():
    assert md_cell("a|b`c<d>&e[f](g)*h*") == "a\\|b\\`c&lt;d&gt;&amp;e\\[f\\](g)\\*h\\*"
    assert md_cell("x\\|y") == "x\\\\\\|y"  # a backslash cannot un-escape the pipe after it
    assert md_cell("one\ntwo") == "one\\\\x0atwo"  # the escape's own backslash is escaped: shown as typed
    assert md_cell("torch_cnn_relu") == "torch_cnn_relu" and md_cell("_x_ a__b") == "\\_x\\_ a\\_\\_b"


def test_printable():
    assert printable(NOT_UTF8) == "m\\xff\\xfe"
    assert printable("\x1b[2Jred\u202egreen") == "\\x1b[2Jred\\u202egreen"
    assert printable("Ünïcode ≥ fine") == "Ünïcode ≥ fine"
    printable(NOT_UTF8).encode("utf-8")


def test_compare_csv_and_md_keep_their_columns(capfd, tmp_path):
    """Names with `,` `"` `|` shifted the columns of compare's CSV and Markdown; a formula name ran in a sheet."""
    paths = write_signatures(tmp_path, [HOSTILE, FORMULA, "plain"])
    ok(run_cli(capfd, "compare", *paths, "--out", tmp_path / "c.csv", "--metric", "affinity"))
    rows = list(csv.reader(open(tmp_path / "c.csv", newline="")))
    assert rows[0] == ["metric", "model", HOSTILE, "'" + FORMULA, "plain"]
    assert [r[:2] for r in rows[1:]] == [["affinity", HOSTILE], ["affinity", "'" + FORMULA], ["affinity", "plain"]]
    assert all(len(r) == 5 for r in rows) and rows[1][2] == "0"
    ok(run_cli(capfd, "compare", *paths, "--out", tmp_path / "c.md", "--metric", "affinity"))
    text = (tmp_path / "c.md").read_text()
    tables = [[line for line in block.splitlines() if line.startswith("|")] for block in text.split("\n\n")]
    table, stats = [t for t in tables if t]  # the DTW matrix, then the metric's signature statistics
    unescaped = [line.replace("\\|", "") for line in table]
    assert [line.count("|") for line in unescaped] == [5] * 5  # 4 columns: 5 pipes on every line
    assert "| a,b\"c\\|d\\`e$x\\\\y$&lt;b&gt;&amp;amp; | 0 |" in table[2]
    unescaped = [line.replace("\\|", "") for line in stats]
    assert len(stats) == 5 and len({line.count("|") for line in unescaped}) == 1  # the names keep their row
    assert stats[2].startswith("| a,b\"c\\|d\\`e$x\\\\y$&lt;b&gt;&amp;amp; | 3 |")
    assert "<b>" not in (tmp_path / "c.md").read_text()


def test_correlate_csv_and_md(capfd, tmp_path):
    """correlate wrote HTML whatever the --out suffix; now .csv and .md are tables, negative r left as numbers."""
    accuracy = tmp_path / "acc.csv"
    paths = write_signatures(tmp_path, [HOSTILE, FORMULA, "plain", "fourth"])
    accuracy.write_text("".join(f'"{n.replace(chr(34), 2 * chr(34))}",{a}\n'
                                for n, a in zip([HOSTILE, FORMULA, "plain", "fourth"], [0.6, 0.7, 0.8, 0.9],
                                                strict=True)))
    def few(result):  # four models: one warning line, nothing else on stderr
        code, out, err = result
        assert code == 0 and err.strip().splitlines() == [
            "warning: only 4 models: a correlation over fewer than 10 is weak evidence; read its p-value and "
            "interval, not R² alone"], err
        return out

    few(run_cli(capfd, "correlate", *paths, "--accuracy", accuracy, "--out", tmp_path / "r.csv"))
    rows = list(csv.reader(open(tmp_path / "r.csv", newline="")))
    assert rows[0] == ["group", "statistic", "r2", "pearson_r", "r_ci95_low", "r_ci95_high", "p_value", "p_method",
                       "slope", "intercept", "models", "flagged_models"]
    assert all(len(r) == 12 for r in rows)
    mean = next(r for r in rows if r[1] == "affinity mean")
    assert float(mean[3]) < 0 and mean[3].startswith("-")  # plain negative number, no `'`
    assert mean[7] == "exact" and 0 < float(mean[6]) <= 1 and float(mean[4]) <= float(mean[5])
    few(run_cli(capfd, "correlate", *paths, "--accuracy", accuracy, "--out", tmp_path / "r.md"))
    assert "| affinity mean |" in (tmp_path / "r.md").read_text()
    few(run_cli(capfd, "correlate", *paths, "--accuracy", accuracy, "--out", tmp_path / "r.html"))  # scatter labels
    assert (tmp_path / "r.html").read_text().startswith("<!DOCTYPE html>")


@pytest.mark.parametrize("name", [HOSTILE, "$\\alpha$", "$x", NOT_UTF8, "new\nline\x1b[31m", "日本語モデル"],
                         ids=["markup", "mathtext", "dollar", "not-utf8", "control", "no-glyphs"])
def test_report_and_compare_with_hostile_names(capfd, tmp_path, name):
    """`$x\\y$` made matplotlib's mathtext raise, a non-UTF-8 name made the UTF-8 encoder raise, in report and
    compare: both internal errors; letters the plot font lacks printed a wall of matplotlib warnings. Now every
    format is written, shows the name as text, and stderr stays empty."""
    paths = write_signatures(tmp_path, [name, "plain", "third"])
    shown = printable(name)
    quiet(capfd, "report", paths[0], "--out", tmp_path / "r.html")
    page = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert f"<title>onnxaff: {html.escape(shown)}</title>" in page
    assert "<b>" not in page and "\x1b" not in page
    for fmt in ("html", "csv", "md", "json"):
        out = quiet(capfd, "compare", *paths, "--out", tmp_path / f"c.{fmt}")
        assert out.count("\n") == 4 and shown in out and "\x1b" not in out  # three names, one line each
        (tmp_path / f"c.{fmt}").read_text(encoding="utf-8")
    assert json.loads((tmp_path / "c.json").read_text())["models"][0] == json_safe(name)  # JSON escapes the rest


def test_labels_svg_titles_and_statistics_are_text(capfd, tmp_path):
    """The inputs branch's additions carry names too: LABEL=PATH labels, SVG legends and hover titles (site id,
    kind, op types), and compare's Markdown statistics tables; each goes through the same escaping."""
    import re

    paths = write_signatures(tmp_path, ["plain", "second", "third"])
    d = json.loads(paths[0].read_text())
    d["sites"][0].update(id="evil\n\x1b[2J<b>site", kind="k<i>nd", op_types=["Op|\x07", "<script>"])
    paths[0].write_text(json.dumps(d))
    quiet(capfd, "report", paths[0], "--out", tmp_path / "r.html")
    page = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert "\x1b" not in page and "\x07" not in page and "<b>" not in page and "<script>" not in page
    titles = re.findall(r"<title>(.*?)</title>", page, flags=re.S)[1:]  # the page's own title first
    assert titles and all(t.count("\n") == 3 for t in titles)  # model, site, D, score: a name adds no line
    assert "evil\\x0a\\x1b[2J&lt;b&gt;site (k&lt;i&gt;nd; Op|\\x07+&lt;script&gt;)" in titles[0]
    labels = [f"{HOSTILE}={paths[0]}", f"@SUM(A1)={paths[1]}", f"new\nline\x1b[31m={paths[2]}"]  # no `=` in a label
    quiet(capfd, "compare", *labels, "--out", tmp_path / "c.html")
    page = (tmp_path / "c.html").read_text(encoding="utf-8")
    assert "\x1b" not in page and "<b>" not in page and html.escape(HOSTILE) in page
    assert f">{html.escape(printable(chr(10).join(['new', 'line' + chr(27) + '[31m'])))}</text>" in page  # legend
    quiet(capfd, "compare", *labels, "--out", tmp_path / "c.csv")
    rows = list(csv.reader(open(tmp_path / "c.csv", newline="")))
    assert rows[0][2:] == [HOSTILE, "'@SUM(A1)", "new\\x0aline\\x1b[31m"]
    out = quiet(capfd, "compare", *labels, "--out", tmp_path / "c.md")
    assert "\x1b" not in out and len(out.splitlines()) == 4
    text = (tmp_path / "c.md").read_text()
    assert "<b>" not in text and "\x1b" not in text
    stats = [line for line in text.split("signature statistics")[1].splitlines() if line.startswith("|")]
    assert len(stats) == 5 and len({line.replace("\\|", "").count("|") for line in stats}) == 1
    assert stats[2].startswith("| a,b\"c\\|d\\`e$x\\\\y$&lt;b&gt;&amp;amp; | 3 |")


def test_summary_table_is_printable(capfd, tmp_path):
    """analyze's 120-column summary prints site names through printable too."""
    import onnx


    model = chain("Relu")
    model.graph.node[0].name = "evil\n\x1b[2Jname"
    onnx.save(model, tmp_path / "m.onnx")
    code, out, err = run_cli(capfd, "analyze", tmp_path / "m.onnx", "--data", "synthetic:gaussian:n=64", "--out",
                             tmp_path / "s.json", "--chunk-size", "32", "--metrics", "affinity")
    assert code == 0, err
    assert "\x1b" not in out and "evil\\x0a\\x1b[2Jname" in out
    assert max(len(line) for line in out.splitlines()) <= 120


def test_terminal_tables_are_printable(capfd, tmp_path):
    """A node named with a newline and an escape sequence broke `sites`' table and coloured the terminal."""
    import onnx


    model = chain("Relu")
    model.graph.node[0].name = "evil\n\x1b[2Jname"
    onnx.save(model, tmp_path / "m.onnx")
    out = ok(run_cli(capfd, "sites", tmp_path / "m.onnx"))
    assert "\x1b" not in out and "evil\\x0a\\x1b[2Jname" in out and len(out.splitlines()) == 5


def test_error_lines_stay_one_line(capfd, tmp_path):
    """A file name with a newline split the `onnxaff: error:` line in two."""
    code, out, err = run_cli(capfd, "sites", tmp_path / "two\nlines.onnx")
    assert code == 2 and out == "" and err == f"onnxaff: error: model file not found: {tmp_path}/two\\x0alines.onnx\n"


def test_non_utf8_model_file_name(capfd, tmp_path):
    """onnx's checker takes UTF-8 paths only; its type error used to be reported as an invalid model."""
    import onnx


    model = chain("Relu")
    path = tmp_path / "m\udcff.onnx"
    onnx.save(model, path)
    for args in (["sites", path], ["analyze", path, "--data", "synthetic:gaussian:n=64", "--out", tmp_path / "s.json"]):
        code, out, err = run_cli(capfd, *args)
        assert code == 2 and out == ""
        assert err == f"onnxaff: error: the model's path is not UTF-8 ({tmp_path}/m\\xff.onnx): onnx and " \
                      "onnxruntime open UTF-8 paths only; rename it\n"


def test_non_utf8_data_file_name_in_the_signature(capfd, tmp_path):
    """A data file whose name is not UTF-8 is analysed; the signature, its report and the terminal show the
    name with the byte escaped."""
    import onnx


    model = chain("Relu")
    onnx.save(model, tmp_path / "m.onnx")
    data = tmp_path / "d\udcff.npy"
    np.save(data, np.random.default_rng(0).standard_normal((64, 4)).astype(np.float32))
    code, out, err = run_cli(capfd, "analyze", tmp_path / "m.onnx", "--data", data, "--out", tmp_path / "s.json",
                             "--chunk-size", "32", "--metrics", "affinity")
    assert code == 0 and "error" not in err, err
    assert f"64 samples from {tmp_path}/d\\xff.npy" in out
    text = (tmp_path / "s.json").read_text(encoding="utf-8")
    assert json.loads(text)["data"]["source"] == f"{tmp_path}/d\\xff.npy"
    ok(run_cli(capfd, "report", tmp_path / "s.json"))


def test_long_site_ids_stay_distinct_in_the_summary(capfd, tmp_path):
    """Ids cut to their first 32 characters read the same (`/features/features.10/conv/conv.`): the table keeps
    each id's end, and where ends coincide, the text from where the ids differ."""
    import onnx

    from onnxaff.foundations.text import short_names

    model = chain("Relu", "Tanh", "Sigmoid")
    for node, k in zip(model.graph.node, ("10", "11", "12"), strict=True):
        node.name = f"/features/features.{k}/conv/conv.0/conv.0.2/Clip"
    onnx.save(model, tmp_path / "m.onnx")
    code, out, err = run_cli(capfd, "analyze", tmp_path / "m.onnx", "--data", "synthetic:gaussian:n=64", "--out",
                             tmp_path / "s.json", "--chunk-size", "32", "--metrics", "affinity")
    assert code == 0, err
    shown = [line.split()[1] for line in out.splitlines() if line.split()[2:3] in (["relu"], ["tanh"], ["sigmoid"])]
    assert len(shown) == 3 and len(set(shown)) == 3 and all(len(s) <= 32 for s in shown), out
    names = ["a" * 40 + "/x", "a" * 40 + "/y", "b" * 30 + "Q" + "c" * 30, "b" * 30 + "R" + "c" * 30, "short"]
    short = short_names(names, 32)
    assert len(set(short)) == 5 and all(len(s) <= 32 for s in short) and short[4] == "short"
    a = "p" * 10 + "a" + "q" * 39 + "x" + "Z" * 40  # b differs from a early, c late: one window cannot show both
    b, c = a[:10] + "b" + a[11:], a[:50] + "y" + a[51:]
    short = short_names([a, b, c], 32)
    assert len(set(short)) == 3 and all(len(s) <= 32 for s in short), short

"""Hand-edited, truncated or hostile signature files: report, compare, correlate and merge name the file and the
field in one line (`sig.json: sites[3].metrics.affinity.mean: expected a finite number ... or null`), never an
internal error.
"""

from __future__ import annotations

import copy
import json
import os

import pytest

from tests.conftest import cli_process, run_cli
from tests.test_compare import fake_signature


def base() -> dict:
    d = fake_signature("m", [0.5, 0.6, 0.7, 0.8, 0.9], 10).to_dict()
    d["stages"] = [{"index": 0, "id": "stage", "length": 2, "status": "ok", "metrics": {"lss": {"mean": 1.1}}}]
    d["metrics"]["affinity"]["range"] = [0, 1]
    return d


def edited(change) -> str:
    d = base()
    change(d)
    return json.dumps(d)


def _set(path: str, value):
    """A change that sets (or with value DELETE, deletes) the field at a dotted path with [k] indices."""
    def change(d):
        keys = path.replace("[", ".").replace("]", "").split(".")
        for k in keys[:-1]:
            d = d[int(k)] if isinstance(d, list) else d[k]
        last = int(keys[-1]) if isinstance(d, list) else keys[-1]
        if value is DELETE:
            del d[last]
        else:
            d[last] = value
    return change


DELETE = object()
CASES = {
    "ci95-null-end": (edited(_set("sites[1].metrics.affinity.ci95", [None, 0.5])),
                      "sites[1].metrics.affinity.ci95[0]: expected a finite number"),
    "ci95-reversed": (edited(_set("sites[1].metrics.affinity.ci95", [0.9, 0.1])),
                      "sites[1].metrics.affinity.ci95: expected [low, high] with low ≤ high, or null"),
    "flags-not-text": (edited(_set("sites[1].metrics.affinity.flags", [3])),
                       "sites[1].metrics.affinity.flags[0]: expected text"),
    "score-text": (edited(_set("sites[3].metrics.affinity.mean", "high")),
                   "sites[3].metrics.affinity.mean: expected a finite number (at most 1e+100 in size) or null"),
    "status-missing": (edited(_set("sites[1].status", DELETE)), "sites[1].status: missing"),
    "metrics-list": (edited(_set("sites[0].metrics", [])), "sites[0].metrics: expected an object"),
    "score-infinite": (edited(_set("sites[3].metrics.affinity.mean", float("inf"))),
                       "sites[3].metrics.affinity.mean: expected a finite number (at most 1e+100 in size) or null"),
    "score-nan": (edited(_set("sites[0].metrics.affinity.values", [float("nan")])),
                  "sites[0].metrics.affinity.values[0]: expected a finite number (at most 1e+100 in size) or null"),
    "score-huge": (edited(_set("sites[2].metrics.affinity.mean", -1e300)),
                   "sites[2].metrics.affinity.mean: expected a finite number (at most 1e+100 in size) or null"),
    "index-float": (edited(_set("sites[2].index", 2.5)), "sites[2].index: expected a whole number"),
    "values-text": (edited(_set("sites[4].metrics.affinity.values", [0.1, "x"])),
                    "sites[4].metrics.affinity.values[1]: expected a finite number (at most 1e+100 in size) or null"),
    "name-number": (edited(_set("model.name", 3)), "model.name: expected text"),
    "stats-text": (edited(_set("model.stats.parameters", "many")),
                   "model.stats.parameters: expected a finite number (at most 1e+100 in size) or null"),
    "metric-info": (edited(_set("metrics.affinity", 1)), "metrics.affinity: expected an object"),
    "warning-number": (edited(_set("warnings", [1])), "warnings[0]: expected text"),
    "stage-length": (edited(_set("stages[0].length", "two")), "stages[0].length: expected a whole number"),
    "sites-missing": (edited(_set("sites", DELETE)), "sites: missing"),
    "version": (edited(_set("schema_version", 2)), "schema_version: version 2 is not 1"),
    # impossible values that used to pass: a mean outside the metric's declared range, negative counts and spreads,
    # a site numbered out of its place
    "mean-outside-range": (edited(_set("sites[1].metrics.affinity.mean", 7.5)),
                           "sites[1].metrics.affinity.mean: 7.5 is outside the metric's range [0, 1]"),
    "value-outside-range": (edited(_set("sites[1].metrics.affinity.values", [0.5, -0.25])),
                            "sites[1].metrics.affinity.values[1]: -0.25 is outside the metric's range [0, 1]"),
    "chunks-negative": (edited(_set("sites[1].metrics.affinity.chunks", -3)),
                        "sites[1].metrics.affinity.chunks: expected a whole number ≥ 0 or null"),
    "std-negative": (edited(_set("sites[1].metrics.affinity.std", -1)),
                     "sites[1].metrics.affinity.std: expected a finite number ≥ 0 or null"),
    "index-out-of-place": (edited(_set("sites[0].index", 5)),
                           "sites[0].index: expected 0 (sites are numbered in their order)"),
    "not-object": ("[1, 2]", "schema: not an onnxaff signature (missing schema field)"),
    "fields-missing": ('{"schema": "onnxaff.signature", "schema_version": 1}', "model: missing"),
    "site-not-object": (edited(_set("sites", [3])), "sites[0]: expected an object"),
    "truncated": (json.dumps(base())[:300], "is not valid JSON: "),
    "deep": ("[" * 100_000 + "]" * 100_000, "is not valid JSON: nested too deeply"),
    "huge-integer": (json.dumps(base()).replace('"index": 0', '"index": ' + "9" * 5000, 1),
                     "is not valid JSON: Exceeds the limit (4300 digits)"),
    "not-utf8": (b'{"schema": "\xff"}', "is not valid JSON: not UTF-8 text (invalid start byte at byte 12)"),
}


@pytest.fixture(autouse=True)
def _no_debug(monkeypatch):
    monkeypatch.delenv("ONNXAFF_DEBUG", raising=False)


def write(path, content) -> str:
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return str(path)


def command(name: str, bad: str, folder) -> list:
    good = [fake_signature(n, [0.5, 0.6, 0.55 + k / 10], 10).write(folder / f"{n}.json") for k, n in
            enumerate("abc")]
    out = ["--out", folder / "out.html"]
    if name == "report":
        return ["report", bad, *out]
    if name == "compare":
        return ["compare", good[0], bad, *out]
    if name == "correlate":
        write(folder / "acc.csv", "a,0.7\nb,0.8\nc,0.9\nm,0.75\n")
        return ["correlate", *good, bad, "--accuracy", folder / "acc.csv", *out]
    return ["merge", bad, "--out", folder / "merged.json"]


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("name", ["report", "compare", "correlate", "merge"])
def test_damaged_signature(capfd, tmp_path, name, case):
    content, fragment = CASES[case]
    bad = write(tmp_path / "sig.json", content)
    code, out, err = run_cli(capfd, *command(name, bad, tmp_path))
    assert code == 2 and out == "", err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"onnxaff: error: {bad}"), err
    assert fragment in lines[0], lines[0]
    assert not (tmp_path / "out.html").exists() and not (tmp_path / "merged.json").exists()


def test_the_base_signature_is_read(capfd, tmp_path):
    """The cases above differ from a signature every command accepts only by their damage."""
    good = write(tmp_path / "sig.json", json.dumps(base()))
    for name in ("report", "compare", "correlate"):
        code, _, err = run_cli(capfd, *command(name, good, tmp_path))
        assert code == 0, err
    code, _, err = run_cli(capfd, *command("merge", good, tmp_path))
    assert code == 2 and "is not a shard part" in err


def test_fifo_instead_of_a_signature(tmp_path):
    """report waited forever on a FIFO given as the signature; now refused before it is opened."""
    os.mkfifo(tmp_path / "sig.json")
    r = cli_process("report", tmp_path / "sig.json", timeout=60)  # its own process: a hang cannot stop pytest
    assert r.returncode == 2 and r.stderr == f"onnxaff: error: signature path is not a regular file: " \
                                             f"{tmp_path / 'sig.json'}\n"


def test_part_pointing_its_state_elsewhere(capfd, tmp_path):
    """A part's JSON names its state file; a path there (not a file name beside the part) is refused."""
    d = base()
    d["data"]["shard"] = {"index": 0, "count": 2, "state": "../../etc/passwd", "state_sha256": "0" * 64}
    part = write(tmp_path / "p.json", json.dumps(d))
    code, out, err = run_cli(capfd, "merge", part, "--out", tmp_path / "m.json")
    assert code == 2 and err == f"onnxaff: error: {part}: data.shard.state: expected the name of a file beside " \
                                "the part\n"
    d2 = copy.deepcopy(d)
    d2["data"]["shard"] = ["state"]
    write(tmp_path / "p.json", json.dumps(d2))
    code, out, err = run_cli(capfd, "merge", part, "--out", tmp_path / "m.json")
    assert code == 2 and err == f"onnxaff: error: {part}: data.shard: expected an object\n"


@pytest.mark.parametrize("content,fragment", [
    (b"a,0.7\n\xff\xfe,0.8\n", "accuracy file is not UTF-8 text: "),
    (b"a,0.7\nb,\"0.8\n", "accuracy file is not a readable CSV: "),
])
def test_damaged_accuracy_table(capfd, tmp_path, content, fragment):
    """A byte that is not UTF-8 raised UnicodeDecodeError (an internal error); an unclosed quote ran to the end."""
    args = command("correlate", fake_signature("m", [0.5, 0.7, 0.6], 10).write(tmp_path / "m.json"), tmp_path)
    write(tmp_path / "acc.csv", content)
    code, out, err = run_cli(capfd, *args)
    assert code == 2 and out == "" and err.startswith(f"onnxaff: error: {tmp_path / 'acc.csv'}: {fragment}"), err
    assert len(err.splitlines()) == 1


def test_fifo_instead_of_an_accuracy_table(tmp_path):
    args = command("correlate", fake_signature("m", [0.5, 0.7, 0.6], 10).write(tmp_path / "m.json"), tmp_path)
    os.remove(tmp_path / "acc.csv")
    os.mkfifo(tmp_path / "acc.csv")
    r = cli_process(*args, timeout=60)
    assert r.returncode == 2 and r.stderr == f"onnxaff: error: accuracy path is not a regular file: " \
                                             f"{tmp_path / 'acc.csv'}\n"

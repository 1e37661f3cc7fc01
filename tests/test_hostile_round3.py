"""Every input of the third hostile tester's report, in one place: none may print `internal error` or a traceback.

Each has its own test where it was fixed (named in docs/reliability.md); this module runs a compact reproduction
of the whole list, in-process where it can (subprocesses: the model too wide for memory, under an address-space
cap, and a FIFO given to `study`, under a timeout).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from tests.builders import HEADER, chain_text, save
from tests.conftest import cli_process, parse, run_cli
from tests.test_compare import ROWS, _correlate_cli
from tests.test_mutation import checkpoint_base, resume
from tests.test_resources import capped_cli
from tests.test_signature_files import _set, edited
from tests.test_study import DATA, FAST, write_models

SYNTH = "synthetic:gaussian:n=64"


@pytest.fixture(autouse=True)
def _no_debug(monkeypatch):
    monkeypatch.delenv("ONNXAFF_DEBUG", raising=False)


def clean(result, codes=(0, 2)) -> tuple[int, str, str]:
    """The run ended with one of `codes`, and no traceback or internal error anywhere in its output."""
    code, out, err = result
    assert "internal error" not in out + err and "Traceback" not in out + err, err
    assert code in codes, err
    if code == 2:
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("onnxaff: error: "), err
    return code, out, err


@pytest.fixture
def relu(tmp_path):
    return save(parse(chain_text("Relu")), tmp_path / "relu.onnx")


def analyze(capfd, model, data, tmp_path, *extra):
    return run_cli(capfd, "analyze", model, "--data", data, "--out", tmp_path / "s.json", "--quiet", *extra)


def test_nlc_on_data_with_nan_and_on_synthetic_std_1e38(capfd, tmp_path, relu):
    x = np.random.default_rng(0).standard_normal((64, 4)).astype(np.float32)
    x[3, 1] = np.nan
    np.save(tmp_path / "nan.npy", x)
    for data in (tmp_path / "nan.npy", f"{SYNTH},std=1e38"):
        assert clean(analyze(capfd, relu, data, tmp_path, "--metrics", "nlc"), (0,))[0] == 0


def test_models_without_inputs_or_with_a_scalar_input(capfd, tmp_path):
    none = save(parse(HEADER + ' g () => (float[2] y) { c = Constant<value = float[2] {1.0, -1.0}>() y = Relu(c) }'),
                tmp_path / "noin.onnx")
    assert clean(analyze(capfd, none, SYNTH, tmp_path))[0] == 2
    scalar = save(parse(HEADER + " g (float x) => (float y) { y = Relu(x) }"), tmp_path / "scalar.onnx")
    assert clean(run_cli(capfd, "sites", scalar), (0,))[0] == 0


def test_resource_options_and_declared_sizes(capfd, tmp_path, relu):
    assert clean(analyze(capfd, relu, "synthetic:gaussian:n=8", tmp_path, "--chunk-workers", "100000"))[0] == 2
    dynamic = save(parse(chain_text("Relu", dims="N, C, H, W")), tmp_path / "dyn.onnx")
    assert clean(analyze(capfd, dynamic, "synthetic:gaussian:n=8", tmp_path, "--input-shape",
                         "x=1000000x1000000x1000000"))[0] == 2
    wide = save(parse(chain_text("Relu", dims="N, 100000000")), tmp_path / "wide.onnx")  # refused before allocating
    assert clean(capped_cli("analyze", wide, "--data", SYNTH, "--out", tmp_path / "w.json", "--quiet"))[0] == 2


def test_a_tampered_checkpoint_cursor(capfd, tmp_path):
    state, model, data = checkpoint_base(tmp_path)
    state["cursor"] = 10**12
    assert clean(resume(capfd, tmp_path, state, model, data))[0] == 2


@pytest.mark.parametrize("rows", [ROWS.replace("0.79", "nan"), ROWS.replace("0.79", "inf"), ROWS + "b,0.99\n",
                                  "\ufeff" + ROWS])
def test_correlate_accuracy_tables(capfd, tmp_path, rows):
    clean(_correlate_cli(capfd, tmp_path, rows))


@pytest.mark.parametrize("path, value", [("sites[1].metrics.affinity.mean", 7.5),
                                         ("sites[1].metrics.affinity.chunks", -3),
                                         ("sites[1].metrics.affinity.std", -1), ("sites[0].index", 5)])
def test_report_of_a_hand_edited_signature(capfd, tmp_path, path, value):
    (tmp_path / "sig.json").write_text(edited(_set(path, value)))
    assert clean(run_cli(capfd, "report", tmp_path / "sig.json", "--out", tmp_path / "r.html"))[0] == 2


def test_study_with_a_fifo_as_model(tmp_path):
    (good,) = write_models(tmp_path / "m", names=("a",))
    os.mkfifo(tmp_path / "pipe.onnx")
    r = cli_process("study", good, f"z={tmp_path / 'pipe.onnx'}", "--data", DATA, "--out", tmp_path / "s", *FAST,
                    "--quiet", timeout=120)
    clean((r.returncode, r.stdout, r.stderr), (3,))


@pytest.mark.parametrize("scale", [1, 100])
def test_float_tiffs(capfd, tmp_path, scale):
    root = tmp_path / "imgs"
    root.mkdir()
    a = np.random.default_rng(2).random((24, 40)).astype(np.float32) * scale
    Image.fromarray(a, "F").save(root / "a.tif")
    for name in ("b.png", "c.png"):  # two readable images, whatever happens to the TIFF
        Image.fromarray(np.full((20, 20), 99, np.uint8)).save(root / name)
    model = save(parse(chain_text("Relu", dims="N, 1, 16, 16")), tmp_path / "img.onnx")
    clean(analyze(capfd, model, root, tmp_path, "--preprocess", "raw", "--metrics", "affinity", "--chunk-size", "2"),
          (0,))
    skipped = json.loads((tmp_path / "s.json").read_text())["data"]["skipped"]
    assert [Path(s["file"]).name for s in skipped] == ([] if scale == 1 else ["a.tif"])

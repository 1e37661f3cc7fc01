"""`study` reuses a signature only when everything that made it is unchanged, and never writes over its inputs."""

from __future__ import annotations

import json
import os
import textwrap

import onnx
import pytest
from onnx import numpy_helper

from onnxaff.data.images import list_images
from onnxaff.studies import data_identity
from onnxaff.studies import run as study_run
from tests.conftest import cli_process, one_line_error, parse, refuse_calls, run_cli
from tests.test_study import DATA, FAST, WEIGHTS, write_models


def external_model(folder):
    folder.mkdir(parents=True, exist_ok=True)
    model = parse(f"""<ir_version: 8, opset_import: ["" : 17]>
        g (float[N, 6] x) => (float[N, 6] y) <float[6, 6] w = {{{WEIGHTS}}}> {{ h = MatMul(x, w)  y = Tanh(h) }}""")
    weights = model.graph.initializer[0]
    weights.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(weights), "w"))  # raw bytes: saved outside
    onnx.save_model(model, str(folder / "m.onnx"), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="w.bin", size_threshold=0)
    return folder / "m.onnx"


def test_rewritten_external_weights_make_the_signature_stale(tmp_path, capfd):
    path = external_model(tmp_path / "m")
    out = tmp_path / "s"
    assert run_cli(capfd, "study", path, "--data", DATA, "--out", out, *FAST)[0] == 0
    weights = tmp_path / "m" / "w.bin"
    weights.write_bytes(bytes(reversed(weights.read_bytes())))  # same size, other numbers, .onnx untouched
    code, _, err = run_cli(capfd, "study", path, "--data", DATA, "--out", out, *FAST)
    assert code == 0, err
    assert "analysing (the model or its weights changed)" in err and "skipped" not in err


def test_a_file_added_in_a_symlinked_class_folder_changes_the_data_identity(tmp_path):
    from PIL import Image

    elsewhere, root = tmp_path / "elsewhere", tmp_path / "data"
    (root / "cat").mkdir(parents=True)
    elsewhere.mkdir()
    Image.new("RGB", (8, 8)).save(root / "cat" / "1.png")
    Image.new("RGB", (8, 8)).save(elsewhere / "1.png")
    (root / "dog").symlink_to(elsewhere, target_is_directory=True)
    before = data_identity(str(root))
    assert len(list_images(root)) == 2  # the loader enters the linked class folder
    Image.new("RGB", (8, 8), "white").save(elsewhere / "2.png")
    assert len(list_images(root)) == 3
    assert data_identity(str(root)) != before


PLUGIN = textwrap.dedent('''
    from onnxaff.metrics import Chunk, Metric
    from helper_for_study import scale

    class Scaled(Metric):
        name = "scaled_mean"
        description = "mean of Y, scaled by a helper"
        higher_is_more_linear = True
        range = (float("-inf"), float("inf"))
        needs = "chunk"

        def compute(self, chunk: Chunk) -> float:
            return float(chunk.y.mean()) * scale()
''')


def test_a_changed_plugin_helper_metric_code_or_version_makes_the_signature_stale(tmp_path, capfd, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "helper_for_study.py").write_text("def scale():\n    return 1.0\n")
    plugin = tmp_path / "plug.py"
    plugin.write_text(PLUGIN)
    (path,) = write_models(tmp_path / "m", names=("a",))
    out = tmp_path / "s"
    args = ["study", path, "--data", DATA, "--out", out, "--plugin", plugin, "--metrics", "scaled_mean,affinity",
            "--chunk-size", "128", "--chunk-workers", "0"]
    assert run_cli(capfd, *args)[0] == 0
    assert "up to date" in run_cli(capfd, *args)[2]
    (tmp_path / "helper_for_study.py").write_text("def scale():\n    return 2.0\n")
    monkeypatch.delitem(__import__("sys").modules, "helper_for_study")
    assert "analysing (the metric code or the onnxaff version changed)" in run_cli(capfd, *args)[2]
    assert "up to date" in run_cli(capfd, *args)[2]
    monkeypatch.setattr("onnxaff.metrics.loader.Registered.fingerprint", property(lambda self: "edited code"))
    assert "analysing (the metric code or the onnxaff version changed)" in run_cli(capfd, *args)[2]
    monkeypatch.undo()
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr("onnxaff.__version__", "99.0")
    assert "analysing (the metric code or the onnxaff version changed)" in run_cli(capfd, *args)[2]


@pytest.mark.parametrize("where", ["data", "model"])
def test_study_refuses_to_write_over_its_own_inputs(tmp_path, capfd, where, monkeypatch):
    (path,) = write_models(tmp_path / "m", names=("a",))
    out = tmp_path / "s"
    (out / "signatures").mkdir(parents=True)
    if where == "data":
        victim = out / "compare.json"
        victim.write_text("precious")
        args = [path, "--data", victim]
    else:
        victim = out / "signatures" / "a.json"
        victim.write_bytes(path.read_bytes())
        args = [f"a={victim}", "--data", DATA]
    refuse_calls(monkeypatch, "analysed a model before refusing", (study_run, "_analyse"))
    one_line_error(run_cli(capfd, "study", *args, "--out", out, *FAST), "never replaces an input")
    assert victim.read_bytes() in (b"precious", path.read_bytes())


@pytest.mark.parametrize("special", ["fifo", pytest.param("/dev/zero", marks=pytest.mark.slow)])
def test_a_fifo_or_device_as_a_model_fails_that_model_without_hanging(tmp_path, special):
    (good,) = write_models(tmp_path / "m", names=("a",))
    if special == "fifo":
        model = tmp_path / "pipe.onnx"
        os.mkfifo(model)
    else:
        model = special
    result = cli_process("study", good, f"z={model}", "--data", DATA, "--out", tmp_path / "s", *FAST, "--quiet",
                         timeout=120)
    assert result.returncode == 3, result.stderr
    assert f"failed: z: cannot read {model} (not a regular file)" in result.stderr
    assert json.loads((tmp_path / "s" / "compare.json").read_text())["models"] == ["a"]


def test_an_unwritable_study_output_is_refused_before_any_model(tmp_path, capfd, monkeypatch):
    paths = write_models(tmp_path / "m")
    out = tmp_path / "s"
    (out / "report.html").mkdir(parents=True)  # the report can never be written there
    refuse_calls(monkeypatch, "analysed a model before refusing", (study_run, "_analyse"))
    one_line_error(run_cli(capfd, "study", *paths, "--data", DATA, "--out", out, *FAST), "is a folder")


def test_a_foreign_file_at_a_models_checkpoint_gets_study_advice(tmp_path, capfd):
    (path,) = write_models(tmp_path / "m", names=("a",))
    out = tmp_path / "s"
    (out / "signatures").mkdir(parents=True)
    foreign = out / "signatures" / "a.ckpt.npz"
    foreign.write_text("mine")
    code, _, err = run_cli(capfd, "study", path, "--data", DATA, "--out", out, *FAST)
    assert code == 3, err
    assert "choose another" not in err and "--checkpoint" not in err
    assert "move it away or label the model otherwise (LABEL=MODEL)" in err
    assert foreign.read_text() == "mine"

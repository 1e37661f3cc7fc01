"""Study manifests (onnxaff/studies/manifest.py, onnxaff/studies/settings.py): each model with its own preprocessing,
data, options, accuracy and group; its own options in its up-to-date key; every bad key one line.

The studies here run a one-Relu image model on eight 20×24 PNGs at 16×16, so each analysis takes about a second.
"""

from __future__ import annotations

import json
import textwrap

import numpy as np
import onnx
import pytest
from PIL import Image

from onnxaff.errors import ConfigError, OnnxaffError
from onnxaff.format.signature import read_signature
from onnxaff.studies import StudyModel, resolve_models
from onnxaff.studies.manifest import read_manifest
from onnxaff.studies.models import Manifest
from onnxaff.studies.run import _accuracies
from onnxaff.studies.settings import groups_of, model_options, study_options
from tests.builders import chain
from tests.conftest import one_line_error, run_cli

OPTIONS = """\
[options]
metrics = "affinity"
chunk_size = 4
batch_size = 4
chunk_workers = 0
workers = 0
"""
# The same Relu under two preprocessings: raw leaves every input in [0, 1], where Relu is the identity (affinity
# 1); centred by mean 0.5 and std 0.25 the inputs span [-2, 2] and Relu bends them.
TWO = OPTIONS + """
[[model]]
label = "positive"
path = "relu.onnx"
accuracy = 0.5
group = "g"
preprocess = "raw"

[[model]]
label = "centred"
path = "relu.onnx"
preprocess = { preset = "raw", mean = [0.5, 0.5, 0.5], std = [0.25, 0.25, 0.25] }
"""


@pytest.fixture
def folder(tmp_path):
    """A manifest's folder: relu.onnx and photos/ (eight random PNGs)."""
    root = tmp_path / "project"
    (root / "photos").mkdir(parents=True)
    rng = np.random.default_rng(0)
    for k in range(8):
        Image.fromarray(rng.integers(0, 256, (20, 24, 3), dtype=np.uint8)).save(root / "photos" / f"{k}.png")
    onnx.save(chain("Relu", dims="N, 3, 16, 16"), root / "relu.onnx")
    return root


def manifest(folder, body: str, data: str = 'data = "photos"\n'):
    path = folder / "study.toml"
    path.write_text(data + textwrap.dedent(body))
    return path


def study(capfd, path, out, *flags):
    code, stdout, err = run_cli(capfd, "study", path, "--out", out, *flags)
    assert code == 0, err
    return stdout, err


def test_two_models_get_their_own_preprocessing_and_their_signatures_record_it(folder, tmp_path, capfd,
                                                                                monkeypatch):
    monkeypatch.chdir(tmp_path)  # not the manifest's folder: its paths are read from there
    out = tmp_path / "out"
    stdout, _ = study(capfd, manifest(folder, TWO).relative_to(tmp_path), out)
    sigs = {label: read_signature(out / "signatures" / f"{label}.json") for label in ("positive", "centred")}
    pos, centred = (sigs[k].data["preprocessing"] for k in ("positive", "centred"))
    assert (pos["preset"], pos["mean"], pos["std"], pos["scale"]) == ("raw", None, None, 1 / 255)
    assert (centred["preset"], centred["mean"], centred["std"]) == ("raw+custom", [0.5] * 3, [0.25] * 3)
    assert all(s.data["samples"] == 8 and s.data["kind"] == "image_folder" for s in sigs.values())
    assert all(s.options["chunk_size"] == 4 for s in sigs.values())  # the manifest's [options]
    # What each model was fed shows in its numbers: Relu on inputs >= 0 is linear.
    assert sigs["positive"].scores("affinity")[0] == pytest.approx(1.0, abs=1e-9)
    assert sigs["centred"].scores("affinity")[0] < 0.99
    # The table says where the preprocessing differs, with the manifest's accuracy.
    lines = {line.split()[0]: line for line in stdout.splitlines() if line.split()[:1] in (["positive"], ["centred"])}
    assert "raw; mean none; std none" in lines["positive"] and "0.5000" in lines["positive"]
    assert "raw+custom; mean 0.5,0.5,0.5; std 0.25,0.25,0.25" in lines["centred"]
    assert "preprocessing" in (out / "report.html").read_text()


def test_changing_one_models_preprocessing_redoes_only_that_model_and_a_flag_overrides_options(folder, tmp_path,
                                                                                               capfd):
    out = tmp_path / "out"
    path = manifest(folder, TWO)
    study(capfd, path, out)
    _, err = study(capfd, path, out)
    assert err.count("up to date (same model, data and options), skipped") == 2
    path.write_text(path.read_text().replace("std = [0.25, 0.25, 0.25]", "std = [0.5, 0.5, 0.5]"))
    _, err = study(capfd, path, out)
    assert "[1/2] positive: up to date" in err
    assert "[2/2] centred: analysing (the options changed: --std [0.25, 0.25, 0.25] → [0.5, 0.5, 0.5])" in err
    assert read_signature(out / "signatures" / "centred.json").data["preprocessing"]["std"] == [0.5] * 3
    # A flag given on the command line overrides [options]; a flag left at its default does not.
    _, err = study(capfd, path, out, "--chunk-size", "8", "--batch-size", "4")
    assert err.count("analysing (the options changed: --chunk-size 4 → 8)") == 2
    assert {read_signature(out / "signatures" / f"{m}.json").options["chunk_size"] for m in ("positive",
                                                                                           "centred")} == {8}


def test_a_dry_run_estimates_each_model_with_its_own_options_and_writes_nothing(folder, tmp_path, capfd):
    code, stdout, err = run_cli(capfd, "study", manifest(folder, TWO), "--out", tmp_path / "out", "--dry-run")
    assert code == 0, err
    assert "positive" in stdout and "centred" in stdout
    assert not (tmp_path / "out").exists()


def test_paths_are_read_from_the_manifests_folder(folder, tmp_path):
    (folder / "plugin.py").write_text("")
    (folder / "clips").mkdir()
    models, settings = read_manifest(manifest(folder, """\
        [options]
        plugins = "plugin.py"
        [[model]]
        label = "a"
        path = "relu.onnx"
        [[model]]
        label = "b"
        path = "relu.onnx"
        data = "audio:clips"
        [[model]]
        label = "c"
        path = "relu.onnx"
        data = "synthetic:gaussian:n=8"
        input_shapes = { x = "3x16x16" }
        options = { limit = 4 }
        """))
    assert settings == Manifest(folder / "study.toml", str(folder / "photos"), {"plugins": [str(folder / "plugin.py")]})
    assert [m.path for m in models] == [folder / "relu.onnx"] * 3
    assert [m.data for m in models] == [None, f"audio:{folder / 'clips'}", "synthetic:gaussian:n=8"]
    assert [m.data_for("cli/") for m in models] == ["cli/", f"audio:{folder / 'clips'}", "synthetic:gaussian:n=8"]
    assert models[0].data_for(None) == str(folder / "photos")  # the manifest's data where the study gives none
    assert models[2].options == {"limit": 4, "input_shapes": {"x": (3, 16, 16)}}
    assert all(m.manifest is settings for m in models)


def test_options_are_layered_own_then_given_then_the_manifests_then_the_defaults(tmp_path):
    settings = Manifest(tmp_path / "m.toml", None, {"chunk_size": 64, "limit": 10, "metrics": ["cka"],
                                                    "images": {"preprocess": "caffe", "workers": 0}})
    own = {"limit": 5, "images": {"preprocess": "raw", "mean": (0.5,)}}
    model = StudyModel("a", tmp_path / "a.onnx", options=own, manifest=settings)
    plain = StudyModel("b", tmp_path / "b.onnx", manifest=settings)
    cli = {"metrics": None, "chunk_size": 512, "limit": None, "seed": 3,
           "images": {"preprocess": "torchvision", "std": (2.0,), "workers": 4}}
    given = {"seed", "images.std"}
    base = study_options([model, plain], cli, given)
    assert base["metrics"] == ["cka"]  # the manifest's, the command line naming none
    got = model_options(plain, base, given)
    assert (got["chunk_size"], got["limit"], got["seed"]) == (64, 10, 3)
    assert got["images"] == {"preprocess": "caffe", "std": (2.0,), "workers": 0}
    got = model_options(model, base, given)
    assert got["limit"] == 5  # its own, over everything
    assert got["images"] == {"preprocess": "raw", "mean": (0.5,), "workers": 0}  # its whole preprocessing
    assert model_options(plain, cli, None) == cli  # every key given (a Python caller): the manifest fills none
    other = StudyModel("c", tmp_path / "c.onnx", manifest=Manifest(tmp_path / "n.toml", None, {"metrics": ["x"]}))
    with pytest.raises(ConfigError, match="the manifests .*m.toml and .*n.toml give different metrics") as err:
        study_options([model, other], cli, given)
    assert err.value.field == "metrics"
    assert study_options([model, other], {**cli, "metrics": ["affinity"]}, {"metrics"})["metrics"] == ["affinity"]


def test_accuracy_and_group_files_override_the_manifests(tmp_path):
    models = [StudyModel("a", tmp_path / "a.onnx", accuracy=0.7), StudyModel("b", tmp_path / "b.onnx", accuracy=0.6)]
    assert _accuracies(models, {"a": None, "b": None}, {"b": "0.9"}) == {"a": 0.7, "b": 0.9}
    with pytest.raises(OnnxaffError, match="no row for c"):
        _accuracies([*models, StudyModel("c", tmp_path / "c.onnx")], {}, {"b": "0.9"})
    models = [StudyModel(k, tmp_path / f"{k}.onnx", group="own") for k in "abc"]
    assert groups_of(models, {"a": "sha-a", "b": "sha-b", "c": None}, {"sha-a": "file", "b": "file"}) == {
        "c": "own", "sha-a": "file", "b": "file"}  # a row by sha256 counts too: correlate would read a's label first
    assert groups_of(models[:1], {}, None) == {"a": "own"} and groups_of([], {}, None) is None


def test_a_manifest_beside_other_specs_and_a_label_twice(folder):
    path = manifest(folder, TWO)
    models = resolve_models([str(path), f"other={folder / 'relu.onnx'}"])
    assert [m.label for m in models] == ["positive", "centred", "other"]
    assert [m.group for m in models] == ["g", None, None] and models[0].accuracy == 0.5
    with pytest.raises(OnnxaffError, match="two models are labelled 'positive'"):
        resolve_models([str(path), f"positive={folder / 'relu.onnx'}"])


MODEL = '[[model]]\nlabel = "a"\npath = "relu.onnx"\n'
BAD = [  # (manifest text after the data line, what its one line says)
    (MODEL + 'labl = "x"\n', "model 'a', key 'labl': unknown key; did you mean 'label'?"),
    ('[options]\nchunksize = 8\n' + MODEL, "[options], key 'chunksize': unknown key; did you mean 'chunk_size'?"),
    ('[options]\nbogus = 8\n' + MODEL, "[options], key 'bogus': unknown key; not an analysis option"),
    ('outdir = "x"\n' + MODEL, "key 'outdir': unknown key; the keys here are data, options, model"),
    (MODEL + 'options = { metrics = "cka" }\n', "model 'a', key 'options.metrics': unknown key"),
    (MODEL + 'options = { mean = 0.5 }\n', "model 'a', key 'options.mean': unknown key"),
    (MODEL + 'preprocess = "imagenet"\n', "model 'a', key 'preprocess': unknown preset 'imagenet'; choose one of "
                                          "torchvision, inception, caffe, raw"),
    (MODEL + 'preprocess = { sdt = [1.0] }\n', "model 'a', key 'preprocess.sdt': unknown key; did you mean 'std'?"),
    (MODEL + 'preprocess = { mean = "half" }\n', "key 'preprocess.mean': must be a number or a list of numbers"),
    (MODEL + 'preprocess = { crop = [0, 4] }\n', "key 'preprocess.crop': must be N, [H, W] or \"HxW\""),
    (MODEL + 'accuracy = "high"\n', "model 'a', key 'accuracy': must be a finite number, got 'high'"),
    (MODEL + 'input_shapes = { x = [3, 0] }\n', "model 'a', key 'input_shapes.x': must be the positive dims"),
    (MODEL + 'options = { chunk_size = 1 }\n', "model 'a', key 'options.chunk_size': options.chunk_size must be a "
                                               "whole number of at least 2, got 1"),
    ('[options]\nmetrics = "nosuchmetric"\n' + MODEL, "[options], key 'metrics': unknown metric 'nosuchmetric'"),
    (MODEL + MODEL, "model 'a', key 'label': another model has this label"),
    ('[[model]]\npath = "relu.onnx"\n', "model 1, key 'label': missing; every model needs a label and a path"),
    ('[[model]]\nlabel = "a b"\npath = "relu.onnx"\n', "model 'a b', key 'label': must be letters, digits"),
    ('[[model]]\nlabel = "a"\npath = "gone.onnx"\n', "model 'a', key 'path': file not found: "),
    ('[[model]]\nlabel = "a"\npath = "relu.onnx"\ndata = "nophotos"\n', "model 'a', key 'data': file not found"),
    ('[model]\nlabel = "a"\npath = "relu.onnx"\n', "key 'model': must be [[model]] tables, one a model"),
    ('[options]\nchunk_size = 8\n', "key 'model': give each model as a [[model]] table"),
    (MODEL + 'group = 3\n', "model 'a', key 'group': must be a name, got 3"),
]


@pytest.mark.parametrize("body,says", BAD, ids=[b[1].split(":")[0] + f" {k}" for k, b in enumerate(BAD)])
def test_every_bad_manifest_is_one_line_naming_the_manifest_the_model_and_the_key(folder, tmp_path, capfd, body,
                                                                                  says):
    path = manifest(folder, body)
    line = one_line_error(run_cli(capfd, "study", path, "--out", tmp_path / "out"), says)
    assert line.startswith(f"onnxaff: error: manifest {path}: ")
    assert not (tmp_path / "out").exists()


def test_a_manifest_that_is_not_toml_or_not_there(folder, tmp_path, capfd):
    path = folder / "study.toml"
    path.write_text('data = "photos\n')
    one_line_error(run_cli(capfd, "study", path, "--out", tmp_path / "o"), f"the manifest {path} is not TOML: ")
    one_line_error(run_cli(capfd, "study", folder / "gone.toml", "--out", tmp_path / "o"),
                   f"cannot read the manifest {folder / 'gone.toml'}: No such file or directory")


def test_without_data_in_the_manifest_or_on_the_command_line(folder, tmp_path, capfd):
    path = manifest(folder, OPTIONS + MODEL, data="")
    one_line_error(run_cli(capfd, "study", path, "--out", tmp_path / "o"),
                   "the study needs data: give --data (or data in a manifest)")


def test_a_manifest_value_the_model_cannot_take_fails_that_model_alone(folder, tmp_path, capfd):
    path = manifest(folder, TWO.replace('preprocess = "raw"', 'preprocess = { crop = 32 }'))
    code, _, err = run_cli(capfd, "study", path, "--out", tmp_path / "out")
    assert code == 3, err
    assert "failed: positive: preprocess.crop 32 but model input x: float32[N, 3, 16, 16] takes 16x16 images" in err
    assert json.loads((tmp_path / "out" / "compare.json").read_text())["models"] == ["centred"]


def test_the_documented_manifest_reads_as_documented(tmp_path):
    from pathlib import Path

    page = (Path(__file__).resolve().parents[1] / "docs" / "usage.md").read_text()
    text = page.split("```toml\n", 1)[1].split("```", 1)[0]
    for name in ("photos", "other_photos"):
        (tmp_path / name).mkdir()
    for name in ("mobilenet_v2.onnx", "efficientnet_lite0.onnx"):
        (tmp_path / name).write_bytes(b"")
    (tmp_path / "study.toml").write_text(text)
    (mnv2, lite), settings = read_manifest(tmp_path / "study.toml")
    assert settings.data == str(tmp_path / "photos")
    assert settings.options == {"metrics": ["affinity", "cka"], "chunk_size": 512, "limit": 2048,
                                "images": {"workers": 2}}
    assert (mnv2.label, mnv2.accuracy, mnv2.group, mnv2.options) == ("mobilenet_v2", 0.7188, "cnn",
                                                                     {"images": {"preprocess": "torchvision"}})
    assert lite.options == {"limit": 1024, "input_shapes": {"images": (3, 224, 224)},
                            "images": {"preprocess": "torchvision", "mean": (0.498,) * 3, "std": (0.502,) * 3}}
    assert lite.data == str(tmp_path / "other_photos")
    assert 127 / 255 == pytest.approx(0.498, abs=5e-4) and 128 / 255 == pytest.approx(0.502, abs=5e-4)


def test_the_python_study_takes_a_manifest_alone(folder, tmp_path):
    """onnxaff.study("study.toml", out=...): the manifest gives the data; a keyword overrides its [options]."""
    import onnxaff

    result = onnxaff.study([str(manifest(folder, TWO))], out=tmp_path / "out", chunk_size=8, progress=False)
    assert sorted(result.signatures) == ["centred", "positive"]
    assert all(s.options["chunk_size"] == 8 and s.data["samples"] == 8 for s in result.signatures.values())
    with pytest.raises(OnnxaffError, match="needs out"):
        onnxaff.study([str(manifest(folder, TWO))])


def test_a_models_own_preprocessing_is_all_of_it_scale_offset_and_channel_order_included(folder, tmp_path):
    """Every ImagePreprocess field but decoding is a model's own preprocessing: the manifest takes scale, offset and
    channel_order, and the caller's never leak into a model that gives its own (review)."""
    path = manifest(folder, """
        [[model]]
        label = "own"
        path = "relu.onnx"
        preprocess = { preset = "raw", scale = 0.5, offset = -1.0, channel_order = "BGR" }
        """)
    models, _ = read_manifest(path)
    assert models[0].options["images"] == {"preprocess": "raw", "scale": 0.5, "offset": -1.0,
                                           "channel_order": "BGR"}
    caller = {"images": {"preprocess": "torchvision", "scale": 2.0, "offset": 3.0, "channel_order": "BGR",
                         "workers": 0}}
    got = model_options(models[0], caller, {"images.scale", "images.offset", "images.channel_order"})
    assert got["images"] == {"preprocess": "raw", "scale": 0.5, "offset": -1.0, "channel_order": "BGR", "workers": 0}
    for bad in ('channel_order = "GBR"', "scale = 0", 'offset = "x"'):
        with pytest.raises(OnnxaffError, match=r"study.toml.*own.*preprocess\."):
            read_manifest(manifest(folder, f"""
                [[model]]
                label = "own"
                path = "relu.onnx"
                preprocess = {{ preset = "raw", {bad} }}
                """))

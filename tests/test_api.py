"""The Python API a notebook user finds: `onnxaff.analyze`, `sites`, `study`, `compare`, `correlate`, `report` with
real signatures and runnable examples, `ImagePreprocess`, data from memory and torch modules (issue 30)."""

from __future__ import annotations

import doctest
import importlib
import inspect
import json
import pydoc
import subprocess
import sys
import warnings

import numpy as np
import pytest

import onnxaff
from onnxaff.analysis.config import AnalysisConfig, default
from onnxaff.errors import ConfigError, OnnxaffError
from tests.builders import save
from tests.conftest import FIXTURES, need, run_cli
from tests.test_compare import fake_signature
from tests.test_images import image_model, sample_photos

API = ("analyze", "sites", "study", "compare", "correlate", "report")
QUICK = dict(metrics=["affinity", "cka"], chunk_size=16, progress=False)


def test_the_api_is_listed_and_importing_it_stays_cheap():
    code = ("import sys, onnxaff; print(onnxaff.__all__); "
            "print([m for m in ('numpy', 'onnx', 'onnxruntime', 'torch') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    names, heavy = out.splitlines()
    assert set(eval(names)) >= {*API, "AnalysisConfig", "ImagePreprocess", "Signature", "Comparison", "Study",
                                "read_signature"}
    assert heavy == "[]"
    assert all(getattr(onnxaff, name) is not None for name in onnxaff.__all__)
    assert onnxaff.Study.__name__ == "Study" and callable(onnxaff.Study.to_pandas)


def test_the_functions_keep_their_names_when_every_module_is_imported():
    """No module shares a function's name: importing them all leaves onnxaff.compare, .report and .study the
    API's functions (a submodule onnxaff/compare.py would have replaced the function on import)."""
    import onnxaff.reports.html
    import onnxaff.results.comparison
    import onnxaff.studies.run  # noqa: F401

    assert inspect.signature(onnxaff.compare).parameters["metric"].kind.name == "KEYWORD_ONLY"
    assert [inspect.isfunction(getattr(onnxaff, n)) for n in ("compare", "report", "study")] == [True] * 3
    assert inspect.ismodule(onnxaff.results.comparison) and inspect.ismodule(onnxaff.studies.run)


@pytest.mark.parametrize("name", API)
def test_help_shows_the_parameters_and_numpydoc_sections(name):
    function = getattr(onnxaff, name)
    text = pydoc.render_doc(function, renderer=pydoc.plaintext)
    assert "*args" not in str(inspect.signature(function))
    for section in ("Parameters\n", "Returns\n"):
        assert section in function.__doc__, (name, section)
    documented = function.__doc__.split("Parameters\n", 1)[1].split("Returns\n", 1)[0]
    for parameter in inspect.signature(function).parameters:
        assert parameter.lstrip("*") in documented, (name, parameter)
    assert name + "(" in text


def test_analyze_shows_analysis_config_defaults_and_keeps_a_given_config(tiny):
    parameters = inspect.signature(onnxaff.analyze).parameters
    for field in ("metrics", "chunk_size", "batch_size", "limit", "reduce", "device", "input_shapes", "seed",
                  "progress", "intervals"):
        assert repr(parameters[field].default) == repr(default(field)), field
    shown = str(inspect.signature(onnxaff.analyze))
    assert "chunk_size='4d'" in shown and "reduce='sample:16'" in shown  # the width protocol (onnxaff.defaults)
    path, data, _ = tiny
    sig = onnxaff.analyze(path, data, config=AnalysisConfig(chunk_size=32, metrics=("cka",), progress=False),
                          limit=48)
    assert sig.options["chunk_size"] == 32 and sig.options["limit"] == 48 and sig.options["metrics"] == ["cka"]


def test_docstring_examples_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the examples write their reports and study here
    attempted = 0
    for module in ("onnxaff.api.run", "onnxaff.api.results", "onnxaff.api.studies", "onnxaff.data.image_preprocess"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # correlate's "few models", compare's option differences
            result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
        assert result.failed == 0, module
        attempted += result.attempted
    assert attempted >= 30


# --- data given in Python ------------------------------------------------------------------------------


def _scores(sig):
    return {m: [s["metrics"][m].get("mean") for s in sig.sites] for m in sig.metrics}


def test_arrays_and_iterables_give_the_numbers_of_the_same_arrays_from_npy(tiny):
    path, npy, x = tiny
    want = _scores(onnxaff.analyze(path, npy, **QUICK))
    labels = np.arange(len(x))
    given = {
        "array": x, "dict": {"x": x}, "path object": npy,
        "(x, y) batches": ((x[i:i + 7], labels[i:i + 7]) for i in range(0, len(x), 7)),
        "single examples": list(x.astype(np.float64)),  # cast to the input's float32, as from a file
    }
    digests = set()
    for what, data in given.items():
        sig = onnxaff.analyze(path, data, **QUICK)
        assert _scores(sig) == want, what
        if what != "path object":
            assert sig.data["kind"] == "python" and sig.data["samples"] == len(x), what
            digests.add(sig.data["sha256"])
    assert len(digests) == 1  # the same examples, whatever held them


def test_an_iterable_is_read_once_and_only_as_far_as_the_limit(tiny):
    path, _, x = tiny
    read = []

    def batches():
        for i in range(0, len(x), 10):
            read.append(i)
            yield x[i:i + 10]

    stream = batches()
    sig = onnxaff.analyze(path, stream, limit=32, **QUICK)
    assert read == [0, 10, 20, 30] and sig.data["samples"] == 32 and sig.data["available"] is None
    assert next(stream).shape == (10, 8)  # the rest is the caller's


@pytest.mark.parametrize(("data", "message"), [
    ([np.zeros((4, 3), np.float32)], r"item 0 of the list given for input x gives examples of shape \[3\] but model"),
    ([np.zeros((2, 2, 8), np.float32)], "takes batches of rank 2"),
    (iter([]), "the list_iterator given holds no examples"),
    ([{"y": np.zeros((2, 8), np.float32)}], "a dict without any model input"),
    ([np.zeros((2, 8), np.complex64)], "dtype complex64"),
    (42, "data must be a path"),
])
def test_data_given_in_python_that_does_not_fit_is_one_line(tiny, data, message):
    with pytest.raises(OnnxaffError, match=message) as info:
        onnxaff.analyze(tiny[0], data, **QUICK)
    assert "\n" not in str(info.value)


# --- images ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    import shutil

    root = tmp_path_factory.mktemp("photos")
    for src in sample_photos():
        shutil.copy(src, root / src.name)
    return root


def test_image_preprocess_is_recorded_and_equals_the_dict_it_stands_for(tmp_path, photos):
    model = save(image_model(["N", 3, 32, 32]), tmp_path / "img.onnx")
    pre = onnxaff.ImagePreprocess.inception(interpolation="bicubic", channel_order="BGR", scale=1 / 255, offset=0.5)
    sig = onnxaff.analyze(model, photos, preprocess=pre, metrics=["cka"], chunk_size=2, progress=False)
    recorded = sig.data["preprocessing"]
    assert recorded["preset"] == "inception+custom" and recorded["center_crop"] == [32, 32]
    assert (recorded["interpolation"], recorded["channel_order"], recorded["offset"]) == ("bicubic", "BGR", 0.5)
    as_dict = onnxaff.analyze(model, photos, images=pre.options(), metrics=["cka"], chunk_size=2, progress=False)
    assert as_dict.data["preprocessing"] == recorded and _scores(as_dict) == _scores(sig)
    by_name = onnxaff.analyze(model, photos, preprocess="raw", metrics=["cka"], chunk_size=2, progress=False)
    assert by_name.data["preprocessing"]["preset"] == "raw" and AnalysisConfig(images=pre).images == pre.options()


def test_image_preprocess_refuses_wrong_values_naming_the_field():
    for kwargs, field in [({"preset": "keras"}, "images.preprocess"), ({"crop": "0x5"}, "images.crop"),
                          ({"fit": "letterbox", "resize": 256}, "images.fit"), ({"std": (0.5, 0)}, "images.std"),
                          ({"pad_value": 300}, "images.pad_value"), ({"channel_order": "GRB"}, "images.channel_order"),
                          ({"workers": -1}, "images.workers")]:
        with pytest.raises(ConfigError) as info:
            onnxaff.ImagePreprocess(**kwargs)
        assert info.value.field == field
    with pytest.raises(ConfigError, match="images has no option 'resample'"):
        AnalysisConfig(images={"resample": "bicubic"})
    with pytest.raises(ConfigError, match="give one of them"):
        onnxaff.analyze("m.onnx", "x.npy", preprocess="raw", images={"preprocess": "raw"})


# --- torch modules ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def torch_net():
    torch = need("torch")
    torch.manual_seed(0)
    return torch, torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4),
                                      torch.nn.Tanh())


def test_a_torch_module_and_a_dataloader_give_the_numbers_of_its_export_and_the_arrays(tmp_path, torch_net, tiny):
    torch, net = torch_net
    x = tiny[2]
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.from_numpy(x), torch.zeros(len(x))),
                                         batch_size=10)
    sig = onnxaff.analyze(net, loader, example_input=torch.zeros(1, 8), **QUICK)
    assert sig.model["name"] == "Sequential" and sig.model["path"] is None
    assert sig.model["export"]["module"] == "torch.nn.modules.container.Sequential"
    assert sig.data["type"] == "torch.utils.data.dataloader.DataLoader"
    kept = onnxaff.analyze(net, x, example_input=torch.zeros(1, 8), onnx_path=tmp_path / "net.onnx", name="net",
                           **QUICK)
    assert (tmp_path / "net.onnx").is_file() and kept.model["path"] == str((tmp_path / "net.onnx").resolve())
    np.save(tmp_path / "x.npy", x)
    want = _scores(onnxaff.analyze(tmp_path / "net.onnx", tmp_path / "x.npy", **QUICK))
    assert _scores(sig) == _scores(kept) == want and kept.model["name"] == "net"
    assert [s.kind for s in onnxaff.sites(net, example_input=torch.zeros(1, 8))] == ["gelu", "tanh"]


def test_a_torch_module_without_an_example_input_is_one_line(torch_net, tiny):
    with pytest.raises(ConfigError, match="give example_input, one batch of input") as info:
        onnxaff.analyze(torch_net[1], tiny[2], **QUICK)
    assert info.value.field == "example_input"
    with pytest.raises(ConfigError, match="are for a torch.nn.Module"):
        onnxaff.analyze(tiny[0], tiny[2], example_input=np.zeros((1, 8)), **QUICK)
    with pytest.raises(OnnxaffError, match="must be an ONNX file, an onnx.ModelProto or a torch.nn.Module, not a"):
        onnxaff.analyze(object(), tiny[2], **QUICK)


# --- sites ----------------------------------------------------------------------------------------


def test_sites_are_what_the_sites_command_lists(capfd):
    path = FIXTURES / "res_cnn_op17.onnx"
    for options, flags in [({}, []), ({"blocks": ["residual", "attention", "mlp"]}, ["--blocks", "all"])]:
        code, out, err = run_cli(capfd, "sites", path, "--format", "json", *flags)
        assert code == 0, err
        found = onnxaff.sites(path, **options)
        assert found.records() == json.loads(out)
    assert "<table>" in found._repr_html_() and len(found.to_pandas()) == len(found)
    with pytest.warns(DeprecationWarning, match="use onnxaff.sites"):
        assert onnxaff.discover_sites(path).records() == onnxaff.sites(path).records()


# --- compare, correlate, report, study -------------------------------------------------------------------


def test_compare_correlate_and_report_from_python_write_what_the_commands_write(tmp_path, capfd):
    pd = pytest.importorskip("pandas")
    accuracy = {"a": 0.70, "b": 0.74, "c": 0.79, "d": 0.81}
    sigs = {k: fake_signature(k, [2 * acc - 1 + d for d in (-0.05, 0.05, 0.02 * i)], params=1000 * (i + 1))
            for i, (k, acc) in enumerate(accuracy.items())}
    paths = []
    for label, sig in sigs.items():
        paths.append(sig.write(tmp_path / f"{label}.json"))
    comparison = onnxaff.compare(paths)
    frame = comparison.to_pandas()
    assert list(frame.index) == list("abcd") and np.allclose(frame.to_numpy(), frame.to_numpy().T)
    assert "DTW distances of affinity" in comparison._repr_html_()
    written = onnxaff.report(paths, tmp_path / "api.md")
    assert run_cli(capfd, "compare", *paths, "--out", tmp_path / "cli.md")[0] == 0
    assert written.read_text() == (tmp_path / "cli.md").read_text()
    onnxaff.report(comparison, tmp_path / "api.json")
    assert run_cli(capfd, "compare", *paths, "--out", tmp_path / "cli.json")[0] == 0
    assert json.loads((tmp_path / "api.json").read_text()) == json.loads((tmp_path / "cli.json").read_text())
    with pytest.warns(UserWarning, match="only 4 models"):
        correlation = onnxaff.correlate(paths, accuracy)
    assert correlation["table"]["all"]["affinity mean"]["r2"] > 0.9
    assert isinstance(correlation.to_pandas(), pd.DataFrame) and "affinity mean" in correlation._repr_html_()
    (tmp_path / "acc.csv").write_text("".join(f"{k},{v}\n" for k, v in accuracy.items()))
    assert run_cli(capfd, "correlate", *paths, "--accuracy", tmp_path / "acc.csv", "--out", tmp_path / "cli.md")[0] == 0
    assert onnxaff.report(correlation, tmp_path / "api.md").read_text() == (tmp_path / "cli.md").read_text()
    with pytest.raises(OnnxaffError, match="is the signature"):
        onnxaff.report(paths, paths[0])
    assert sigs["a"].model.get("label") is None  # a Signature given is never changed


def test_a_signature_report_is_the_report_commands_page(tmp_path, capfd, tiny):
    sig = onnxaff.analyze(tiny[0], tiny[1], **QUICK)
    sig.write(tmp_path / "s.json")
    assert run_cli(capfd, "report", tmp_path / "s.json", "--out", tmp_path / "cli.html")[0] == 0
    page = onnxaff.report(onnxaff.read_signature(tmp_path / "s.json"), tmp_path / "api.html").read_text()
    assert page == (tmp_path / "cli.html").read_text() == onnxaff.report(tmp_path / "s.json", tmp_path / "p.html"
                                                                         ).read_text()
    with pytest.raises(OnnxaffError, match="is the signature"):
        onnxaff.report(tmp_path / "s.json", tmp_path / "s.json")
    with pytest.raises(ConfigError, match="no nlc scores; it has: affinity, cka"):
        onnxaff.report(sig, tmp_path / "x.html", metric="nlc")


def test_a_study_from_python_with_labels_and_torch_modules(tmp_path, torch_net, tiny):
    pytest.importorskip("pandas")
    torch, net = torch_net
    models = {"mlp": tiny[0], "net": net}
    result = onnxaff.study(models, tiny[1], tmp_path / "study", example_input=torch.zeros(1, 8), **QUICK)
    assert isinstance(result, onnxaff.Study) and sorted(result.signatures) == ["mlp", "net"] and not result.failed
    assert (tmp_path / "study" / "models" / "net.onnx").is_file()
    assert list(result.to_pandas().index) == ["mlp", "net"] and "report.html" in result._repr_html_()
    again = onnxaff.study(models, tiny[1], tmp_path / "study", example_input=torch.zeros(1, 8), **QUICK)
    assert again.skipped == ["mlp", "net"]  # the module's second export is the same file: up to date
    copy = onnxaff.report(again, tmp_path / "copy.html")
    assert copy.read_text() == (tmp_path / "study" / "report.html").read_text()
    assert set(onnxaff.compare(again, metric="cka").names) == {"mlp", "net"}
    with pytest.raises(ConfigError, match="give data as a path or spec"):
        onnxaff.study(models, tiny[2], tmp_path / "other", **QUICK)

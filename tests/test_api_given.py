"""The Python API given what a notebook holds: a config with a manifest, numpy and pandas accuracies, a torch
module in training mode or a wrong example input, tensors and tuples as data, image options with arrays, and
signatures scored only with metrics that are not the defaults. Each test reproduced a review finding first."""

from __future__ import annotations

import numpy as np
import pytest

import onnxaff
from onnxaff.analysis.config import AnalysisConfig
from onnxaff.errors import ConfigError, OnnxaffError
from onnxaff.format.signature import Signature
from tests.builders import HEADER, save
from tests.conftest import need, parse, run_cli
from tests.test_compare import fake_signature

QUICK = dict(metrics=["cka"], chunk_size=16, progress=False)


def _scores(sig):
    return {m: [s["metrics"][m].get("mean") for s in sig.sites] for m in sig.metrics}


def _one_line(info) -> str:
    text = str(info.value)
    assert "\n" not in text
    return text


# --- a study given a config keeps its manifest's [options] ---------------------------------------------


def test_a_study_given_a_config_keeps_the_manifests_options_the_config_does_not_set(tmp_path, tiny):
    path, npy, _ = tiny
    (tmp_path / "s.toml").write_text(f'data = "{npy}"\n[options]\nmetrics = ["cka"]\nlimit = 32\nchunk_size = 16\n'
                                     f'[[model]]\nlabel = "m"\npath = "{path}"\n')

    def run(out, **kwargs):
        sig = onnxaff.study([tmp_path / "s.toml"], out=tmp_path / out, **kwargs).signatures["m"]
        return list(sig.metrics), sig.data["samples"], sig.options["seed"]

    assert run("plain", progress=False) == (["cka"], 32, 0)
    assert run("config", config=AnalysisConfig(seed=3, progress=False)) == (["cka"], 32, 3)  # was the defaults
    assert run("set", config=AnalysisConfig(limit=16, progress=False), metrics=["affinity"]) == (["affinity"], 16, 0)


# --- accuracy as numpy or pandas values ------------------------------------------------------------


def test_accuracy_as_numpy_numbers_a_pandas_series_or_a_dict_gives_the_same_correlation():
    pd = need("pandas")
    accuracy = {"a": 0.70, "b": 0.74, "c": 0.79, "d": 0.81}
    sigs = {k: fake_signature(k, [2 * acc - 1 + d for d in (-0.05, 0.05, 0.02 * i)], params=1000 * (i + 1))
            for i, (k, acc) in enumerate(accuracy.items())}

    def r2(table):
        with pytest.warns(UserWarning, match="only 4 models"):
            return onnxaff.correlate(sigs, table)["table"]["all"]["affinity mean"]["r2"]

    want = r2(accuracy)
    assert r2({k: np.float64(v) for k, v in accuracy.items()}) == want  # was "accuracy of a is not a number"
    assert r2(pd.Series(accuracy)) == want  # was a TypeError traceback
    assert r2({k: np.float32(v) for k, v in accuracy.items()}) == pytest.approx(want, abs=1e-6)
    with pytest.raises(OnnxaffError, match="accuracy must be a dict of model -> accuracy, a pandas Series or a "
                                           "two-column CSV file's path, not a list") as info:
        onnxaff.correlate(sigs, [0.7, 0.74, 0.79, 0.81])
    _one_line(info)


# --- torch modules: the training mode kept, a wrong example input in one line --------------------------


def _torch_net():
    torch = need("torch")
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.BatchNorm1d(16), torch.nn.ReLU(),
                              torch.nn.Dropout(0.5), torch.nn.Linear(16, 4))
    net.train()
    net[1].eval()  # a frozen batch norm, as in fine-tuning: it stays frozen
    return torch, net


def test_a_torch_module_comes_back_in_the_training_mode_it_was_given_in(tmp_path, tiny):
    torch, net = _torch_net()
    modes = [m.training for m in net.modules()]
    onnxaff.analyze(net, tiny[2], example_input=torch.zeros(2, 8), **QUICK)
    assert [m.training for m in net.modules()] == modes  # was every module in eval mode
    from onnxaff.graph.export import from_torch

    with pytest.raises(ConfigError):
        from_torch(net, torch.zeros(2, 3), tmp_path / "bad.onnx")
    assert [m.training for m in net.modules()] == modes  # also when the export fails
    net.eval()
    assert from_torch(net, torch.zeros(2, 8), tmp_path / "e.onnx").ok and not net.training


def test_a_wrong_example_input_is_one_line_naming_it_and_a_numpy_array_is_its_tensor(tmp_path, tiny):
    torch, net = _torch_net()
    for wrong, fragment in [(torch.zeros(1, 3), r"Tensor of shape \[1, 3\], float32\): RuntimeError: mat1 and mat2"),
                            (np.zeros((1, 8)), r"float64\): RuntimeError: mat1 and mat2 must have the same dtype"),
                            ([[0.0] * 8], r"\(a list\): TypeError")]:
        with pytest.raises(ConfigError, match=f"the module does not run on example_input .*{fragment}") as info:
            onnxaff.analyze(net, tiny[2], example_input=wrong, **QUICK)
        assert info.value.field == "example_input"
        _one_line(info)
    from_numpy = onnxaff.analyze(net, tiny[2], example_input=np.zeros((2, 8), np.float32), **QUICK)
    assert _scores(from_numpy) == _scores(onnxaff.analyze(net, tiny[2], example_input=torch.zeros(2, 8), **QUICK))


# --- data given in Python ----------------------------------------------------------------------------


def test_a_bfloat16_tensor_is_read_as_float32(tiny):
    torch = need("torch")
    path, _, x = tiny
    tensor = torch.from_numpy(x).bfloat16()
    sig = onnxaff.analyze(path, tensor, **QUICK)  # was TypeError: Got unsupported ScalarType BFloat16
    assert sig.data["arrays"]["x"]["dtype"] == "float32"
    assert _scores(sig) == _scores(onnxaff.analyze(path, tensor.float().numpy(), **QUICK))
    batches = [tensor[i:i + 16] for i in range(0, 64, 16)]
    assert _scores(onnxaff.analyze(path, batches, **QUICK)) == _scores(sig)


TWO_INPUTS = HEADER + " g (float[N, 8] a, float[N, 8] b) => (float[N, 8] y) { s = Add(a, b)  y = Relu(s) }"


@pytest.mark.parametrize(("items", "message"), [
    ([{"a": 1, "b": 1}, {"a": 1}], "item 1 of the list given has no input b (item 0 gives a, b): every item must "
                                   "give the same inputs"),
    ([{"a": 1}, {"a": 1}, {"a": 1, "b": 1}], "item 2 of the list given gives input b (item 0 gives a)"),
])
def test_dict_items_must_name_the_inputs_the_first_item_names(tmp_path, items, message):
    path = save(parse(TWO_INPUTS), tmp_path / "two.onnx")
    x = np.ones((4, 8), np.float32)
    with pytest.raises(OnnxaffError) as info:  # were examples silently paired with another item's
        onnxaff.analyze(path, [{k: x for k in item} for item in items], **QUICK)
    assert message in _one_line(info)


def test_a_tuple_of_inputs_and_labels_is_the_inputs(tiny):
    path, npy, x = tiny
    sig = onnxaff.analyze(path, (x, np.arange(len(x))), **QUICK)  # was two items, a misleading shape error
    assert sig.data["samples"] == 64 and sig.data["type"] == "tuple (x, y)"
    assert _scores(sig) == _scores(onnxaff.analyze(path, npy, **QUICK))
    batches = onnxaff.analyze(path, (x[:32], x[32:]), **QUICK)  # two batches of as many examples: x[:32]
    assert batches.data["samples"] == 32


def test_an_empty_list_is_no_examples(tiny):
    for empty in ([], ()):
        with pytest.raises(OnnxaffError, match="no examples in the data given") as info:  # was "need a tokenizer"
            onnxaff.analyze(tiny[0], empty, **QUICK)
        _one_line(info)


# --- image options are for image folders ---------------------------------------------------------------


@pytest.mark.parametrize(("data", "kwargs", "field", "what"), [
    ("array", dict(preprocess="inception"), "images.preprocess", "data given in Python"),
    ("array", dict(preprocess=onnxaff.ImagePreprocess()), "images.preprocess", "data given in Python"),
    ("batches", dict(images={"crop": 3}), "images.crop", "data given in Python"),
    ("npy", dict(images={"mean": 0.5}), "images.mean", "a .npy/.npz file's arrays"),
    ("npy", dict(config=AnalysisConfig(images={"preprocess": "raw"})), "images.preprocess", "a .npy/.npz file's"),
    ("synthetic:gaussian", dict(images={"std": 2.0}), "images.std", "synthetic data"),
])
def test_image_options_with_data_that_are_no_image_folder_are_refused(tiny, data, kwargs, field, what):
    path, npy, x = tiny
    given = {"array": x, "batches": [x[:32], x[32:]], "npy": npy}.get(data, data)
    with pytest.raises(ConfigError, match=f"{field} is how an image folder is read; {what}") as info:
        onnxaff.analyze(path, given, **kwargs, **QUICK)  # were ignored: "preprocessing: none (arrays ...)"
    assert info.value.field == field
    _one_line(info)
    onnxaff.analyze(path, npy, config=AnalysisConfig(images={"workers": 2}), **QUICK)  # speed only: no refusal


def test_the_command_line_refuses_image_flags_with_array_data(tmp_path, capfd, tiny):
    code, _, err = run_cli(capfd, "analyze", tiny[0], "--data", tiny[1], "--preprocess", "inception", "--out",
                           tmp_path / "s.json", "--quiet")
    assert code == 2 and err.strip().splitlines() == [
        "onnxaff: error: --preprocess is how an image folder is read; a .npy/.npz file's arrays are fed as they "
        "are: leave the image options out"]
    code, _, err = run_cli(capfd, "analyze", tiny[0], "--data", tiny[1], "--metrics", "cka", "--chunk-size", "16",
                           "--out", tmp_path / "s.json", "--quiet")
    assert code == 0, err  # the flags' defaults are no image options given


# --- signatures of other metrics than the defaults ---------------------------------------------------------


def _renamed(sig: Signature, metric: str) -> Signature:
    sites = [{**s, "metrics": {metric: s["metrics"]["affinity"]}} for s in sig.sites]
    return Signature(model=sig.model, data={}, options={}, runtime={}, metrics={metric: {}}, sites=sites)


def test_compare_correlate_and_report_default_to_a_metric_the_signatures_have(tmp_path, capfd, tiny):
    sig = onnxaff.analyze(tiny[0], tiny[1], **QUICK)  # cka only
    page = onnxaff.report(sig, tmp_path / "a.html").read_text()  # was "the signature has no affinity scores"
    assert page == onnxaff.report(sig, tmp_path / "b.html", metric="cka").read_text()
    sig.write(tmp_path / "s.json")
    assert run_cli(capfd, "report", tmp_path / "s.json", "--out", tmp_path / "cli.html")[0] == 0
    assert (tmp_path / "cli.html").read_text() == page
    other = onnxaff.analyze(tiny[0], tiny[2][:48], **QUICK)
    assert onnxaff.compare([sig, other]).metric == "cka"
    both = onnxaff.analyze(tiny[0], tiny[1], metrics=["cka", "affinity"], chunk_size=16, progress=False)
    assert onnxaff.compare([both, both]).metric == "affinity"  # a declared default first, where all have it
    accuracy = {"a": 0.70, "b": 0.74, "c": 0.79, "d": 0.81}
    sigs = {k: _renamed(fake_signature(k, [2 * v - 1 + d for d in (-0.05, 0.05, 0.02 * i)], 1000 * (i + 1)), "cka")
            for i, (k, v) in enumerate(accuracy.items())}
    with pytest.warns(UserWarning, match="only 4 models"):
        assert onnxaff.correlate(sigs, accuracy)["metric"] == "cka"
    with pytest.raises(ConfigError, match="'affinity' is not scored in every signature; they share: none"):
        onnxaff.compare([sig, fake_signature("f", [0.1, 0.2], 10)])  # nothing shared: what each has

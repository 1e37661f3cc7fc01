"""Per-input feeding (issue 27): batch axes other than 0, rank-0 and constant inputs, per-input synthetic ranges,
token ids drawn below their embedding table's size, masks, zeros for inputs an array file lacks, and the one-line
errors of every bad value (onnxaff.data.feeding, onnxaff.graph.inputs)."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnx.parser
import pytest
from onnx import numpy_helper

import onnxaff
from onnxaff.analysis import AnalysisConfig
from onnxaff.analysis.checkpoint import run_key
from onnxaff.analysis.plan import Plan
from onnxaff.data import examples_in, model_inputs, open_source
from onnxaff.errors import ConfigError, OnnxaffError
from onnxaff.graph import load_model
from onnxaff.graph.inputs import input_hints
from tests.builders import HEADER, save, with_weights
from tests.conftest import FIXTURES, one_line_error, run_cli

FAST = ("--metrics", "affinity", "--chunk-size", "16", "--quiet")
FEED = ("--constant", "sr=16000", "--batch-axis", "state=1")


def stateful(rng) -> object:
    """silero-vad's shape: x [B, 64], a [2, B, 8] recurrent state (batch on axis 1) and a rank-0 sample rate."""
    text = HEADER + """ g (float[N, 64] x, float[2, N, 8] state, int64[] sr)
                                       => (float[N, 8] y, float[2, N, 8] state_out) {
        f = Cast<to = 1>(sr)
        scale = Div(f, k)
        xs = Mul(x, scale)
        h = MatMul(xs, w)
        s0 = Gather<axis = 0>(state, zero)
        a = Add(h, s0)
        y = Tanh(a)
        r = Relu(a)
        u = Unsqueeze(r, axes)
        state_out = Concat<axis = 0>(u, u)
    }"""
    model = onnx.parser.parse_model(text)
    model.graph.input[2].type.tensor_type.shape.SetInParent()  # rank 0 (the text format leaves the rank unknown)
    weights = {"w": rng.standard_normal((64, 8)).astype(np.float32), "k": np.array(16000.0, np.float32),
               "zero": np.array(0, np.int64), "axes": np.array([0], np.int64)}
    model.graph.initializer.extend(numpy_helper.from_array(v, k) for k, v in weights.items())
    onnx.checker.check_model(model)
    return model


def embedding(rng, mask: bool = False) -> object:
    """input_ids on a [50, 8] word table, token_type_ids on a [2, 8] one (through a Cast), optionally a mask."""
    extra = ", int64[N, 6] attention_mask" if mask else ""
    body = "m = Cast<to = 1>(attention_mask)\n mu = Unsqueeze(m, two)\n t = Mul(s, mu)" if mask else "t = Identity(s)"
    return with_weights(HEADER + f""" g (int64[N, 6] input_ids, int64[N, 6] token_type_ids{extra})
                                       => (float[N, 6, 8] y) {{
        a = Gather(words, input_ids)
        c = Cast<to = 6>(token_type_ids)
        b = Gather(types, c)
        s = Add(a, b)
        {body}
        y = Tanh(t)
    }}""", words=rng.standard_normal((50, 8)).astype(np.float32), types=rng.standard_normal((2, 8)).astype(np.float32),
        two=np.array([2], np.int64))


@pytest.fixture
def vad(tmp_path, rng) -> str:
    return save(stateful(rng), tmp_path / "vad.onnx")


def analyze(capfd, model, out, *extra, data="synthetic:gaussian:n=32"):
    return run_cli(capfd, "analyze", model, "--data", data, "--out", out, *FAST, *extra)


def source_of(model, data="synthetic:gaussian:n=8", batch_axes=None, **feed):
    loaded = load_model(model)
    inputs = model_inputs(loaded.model, batch_axes)
    return inputs, open_source(data, inputs, hints=input_hints(loaded.view), **feed)


def test_a_stateful_model_with_a_constant_and_a_batch_axis(capfd, tmp_path, vad):
    code, _, err = analyze(capfd, vad, tmp_path / "s.json", *FEED)
    assert code == 0, err
    sig = json.loads((tmp_path / "s.json").read_text())
    assert sig["data"]["constants"] == {"sr": 16000} and sig["options"]["batch_axes"] == {"state": 1}
    assert [s["status"] for s in sig["sites"]] == ["ok", "ok"]
    inputs, source = source_of(vad, batch_axes={"state": 1}, constants={"sr": 16000})
    batch = next(source.batches(5))
    assert batch["x"].shape == (5, 64) and batch["state"].shape == (2, 5, 8) and batch["sr"].shape == ()
    assert batch["sr"].dtype == np.int64 and int(batch["sr"]) == 16000 and examples_in(batch, inputs) == 5
    assert [s.name for s in source.varying] == ["x", "state"]


def test_the_python_api_takes_the_same_options(vad):
    sig = onnxaff.analyze(vad, "synthetic:gaussian:n=32", metrics=["affinity"], chunk_size=16, progress=False,
                          constants={"sr": np.int64(16000)}, batch_axes={"state": 1})
    assert sig.data["constants"] == {"sr": 16000} and all(s["status"] == "ok" for s in sig.sites)
    with pytest.raises(OnnxaffError, match=r"give its value with constants=sr=VALUE"):
        onnxaff.analyze(vad, "synthetic:gaussian:n=32", batch_axes={"state": 1}, progress=False)


def test_the_batch_symbol_on_another_axis_is_named(capfd, tmp_path, vad):
    one_line_error(analyze(capfd, vad, tmp_path / "s.json", "--constant", "sr=16000"),
                   "has the batch dim 'N' of the other inputs on axis 1, not on axis 0; give it with "
                   "--batch-axis state=1")


def test_the_run_key_changes_with_a_constant(vad):
    def key(**options):
        plan = Plan.build(vad, "synthetic:gaussian:n=16", AnalysisConfig(batch_axes={"state": 1}, **options))
        return run_key(plan.data, plan.source.describe(), len(plan.source), plan.options, plan.model_info,
                       plan.unit, plan.fingerprints)

    assert key(constants={"sr": 16000}) == key(constants={"sr": 16000})
    assert key(constants={"sr": 16000})["data_sha256"] != key(constants={"sr": 8000})["data_sha256"]


def test_a_constant_example_from_a_npy_file(tmp_path, vad):
    state = np.arange(16, dtype=np.float64).reshape(2, 8)
    np.save(tmp_path / "state.npy", state)
    _, source = source_of(vad, batch_axes={"state": 1}, constants={"sr": 16000, "state": str(tmp_path / "state.npy")})
    batch = next(source.batches(3))
    assert batch["state"].dtype == np.float32 and batch["state"].shape == (2, 3, 8)
    assert all(np.array_equal(batch["state"][:, k], state) for k in range(3))
    held = source.describe()["constants"]["state"]
    assert held["file"] == str((tmp_path / "state.npy").resolve()) and held["shape"] == [2, 8]
    assert [s.name for s in source.varying] == ["x"]
    _, zero = source_of(vad, batch_axes={"state": 1}, constants={"sr": 16000, "state": 0})  # a number fills one
    assert not next(zero.batches(2))["state"].any()


def test_inputs_an_array_file_lacks_are_zeros_with_a_warning(capfd, tmp_path, vad, rng):
    np.savez(tmp_path / "x.npz", x=rng.standard_normal((32, 64)).astype(np.float32))
    code, _, err = analyze(capfd, vad, tmp_path / "s.json", *FEED, data=tmp_path / "x.npz")
    assert code == 0, err
    sig = json.loads((tmp_path / "s.json").read_text())
    assert sig["data"]["zeros"] == ["state"]
    assert any("model inputs state are not in the data" in w and "constants=NAME=VALUE" in w
               for w in sig["warnings"])


def test_token_ids_are_drawn_below_their_tables_size(capfd, tmp_path, rng):
    """Plain synthetic data, no option: token_type_ids from [0, 2) (was [0, 10): a Gather out of bounds)."""
    model = save(embedding(rng), tmp_path / "emb.onnx")
    assert input_hints(load_model(model).view) == {"input_ids": {"range": [0, 50]},
                                                   "token_type_ids": {"range": [0, 2]}}
    code, _, err = analyze(capfd, model, tmp_path / "s.json")
    assert code == 0, err
    sig = json.loads((tmp_path / "s.json").read_text())
    assert sig["data"]["inputs"] == {"input_ids": {"range": [0, 50]}, "token_type_ids": {"range": [0, 2]}}
    batch = next(source_of(model, "synthetic:gaussian:n=64")[1].batches(64))
    assert batch["token_type_ids"].max() == 1 and batch["input_ids"].max() > 10


def test_an_input_range_overrides(capfd, tmp_path, rng):
    model = save(embedding(rng), tmp_path / "emb.onnx")
    code, _, err = analyze(capfd, model, tmp_path / "s.json", "--input-range", "input_ids=3:5")
    assert code == 0, err
    sig = json.loads((tmp_path / "s.json").read_text())
    assert sig["options"]["input_ranges"] == {"input_ids": [3, 5]}
    assert sig["data"]["inputs"]["input_ids"] == {"range": [3, 5]}
    batch = next(source_of(model, "synthetic:gaussian:n=64", input_ranges={"input_ids": (3, 5)})[1].batches(64))
    assert set(np.unique(batch["input_ids"])) == {3, 4}


def test_a_float_input_range_is_drawn_uniformly(vad):
    _, source = source_of(vad, batch_axes={"state": 1}, constants={"sr": 1}, input_ranges={"x": (2.0, 3.0)})
    x = next(source.batches(8))["x"]
    assert 2.0 <= x.min() and x.max() < 3.0


def test_a_mask_is_ones_or_padded_at_its_tail(rng, tmp_path):
    model = save(embedding(rng, mask=True), tmp_path / "mask.onnx")
    assert input_hints(load_model(model).view)["attention_mask"] == {"mask": True}
    ones = next(source_of(model, "synthetic:gaussian:n=32")[1].batches(32))["attention_mask"]
    assert ones.dtype == np.int64 and (ones == 1).all()
    padded = next(source_of(model, "synthetic:gaussian:n=32", pad=0.5)[1].batches(32))["attention_mask"]
    kept = padded.sum(axis=1)
    assert kept.min() >= 3 and kept.min() < 6 and (padded[:, 0] == 1).all()
    assert all((row[:k] == 1).all() and (row[k:] == 0).all() for row, k in zip(padded, kept, strict=True))
    again = next(source_of(model, "synthetic:gaussian:n=32", pad=0.5)[1].batches(32))["attention_mask"]
    assert np.array_equal(padded, again)  # seeded


def test_inputs_fixing_different_batch_sizes_are_named(capfd, tmp_path):
    from tests.conftest import parse

    model = parse(HEADER + " g (float[2, 4] a, float[3, 4] b) => (float[2, 4] y) { y = Relu(a) }")
    one_line_error(analyze(capfd, save(model, tmp_path / "m.onnx"), tmp_path / "s.json"),
                   "model inputs a: float32[2, 4] and b: float32[3, 4] fix different batch sizes (2 and 3); give "
                   "each one's batch axis with --batch-axis NAME=AXIS")


@pytest.mark.parametrize("args,fragment", [
    (("--constant", "sr=16000", "--batch-axis", "state=3"),
     "--batch-axis state=3 is out of range: model input 'state' has rank 3 (axes 0 to 2)"),
    (("--constant", "sr=16000", "--batch-axis", "sr=0"), "--batch-axis sr=0 is out of range"),
    (FEED + ("--batch-axis", "nope=1"), "--batch-axis names 'nope', which is not a model input"),
    (FEED + ("--constant", "nope=1"), "--constant names 'nope', which is not a model input"),
    (FEED + ("--input-range", "nope=0:1"), "--input-range names 'nope', which is not a model input"),
    (("--batch-axis", "state"), "--batch-axis 'state' is not NAME=AXIS"),
    (("--batch-axis", "state=one"), "--batch-axis state='one': the axis is not a whole number"),
    (("--constant", "sr"), "--constant 'sr' is not NAME=VALUE or NAME=FILE.npy"),
    (("--constant", "sr=abc"), "--constant sr=abc: give a number or a .npy file"),
    (("--constant", "state=missing.npy"), "--constant state=missing.npy: file not found"),
    (("--input-range", "x=1"), "--input-range x='1' is not NAME=LOW:HIGH"),
    (("--input-range", "x=3:1"), "--input-range x=(3, 1): expected LOW:HIGH, finite, LOW < HIGH"),
    (("--pad", "2"), "--pad must be a fraction in [0, 1], got 2.0"),
    (("--batch-axis", "state=1"), "model input sr: int64[] is a scalar (rank 0: no batch axis to draw examples "
                                  "along); give its value with --constant sr=VALUE"),
    (("--constant", "sr=0.5", "--batch-axis", "state=1"), "has dtype float64 but model input sr: int64[] needs int64"),
])
def test_bad_feeding_options_are_one_line(capfd, tmp_path, vad, args, fragment):
    one_line_error(analyze(capfd, vad, tmp_path / "s.json", *args), fragment)
    assert not (tmp_path / "s.json").exists()


def test_bad_constant_files_are_one_line(capfd, tmp_path, vad):
    np.save(tmp_path / "wrong.npy", np.zeros((3, 8), np.float32))
    (tmp_path / "fake.npy").write_text("not numpy")
    (tmp_path / "state.txt").write_text("0")
    for value, fragment in (("wrong.npy", "state has shape [3, 8], but model input state: float32[2, N, 8] takes "
                                          "one example of shape [2, 8]"),
                            ("fake.npy", "fake.npy: not a .npy file (no NumPy header)"),
                            ("state.txt", "state.txt: give a number or a .npy file")):
        one_line_error(analyze(capfd, vad, tmp_path / "s.json", *FEED, "--constant", f"state={tmp_path / value}"),
                       fragment)
    with pytest.raises(ConfigError, match="constants state has shape"):
        source_of(vad, batch_axes={"state": 1}, constants={"sr": 1, "state": np.zeros((2, 9))})


def test_sites_takes_the_feeding_options(capfd, vad):
    code, _, err = run_cli(capfd, "sites", vad, *FEED, "--format", "json")
    assert code == 0, err
    one_line_error(run_cli(capfd, "sites", vad, "--batch-axis", "state=x"), "--batch-axis state='x'")


BERT, VAD = FIXTURES / "text" / "bert_tiny.onnx", FIXTURES / "audio" / "vad_tiny.onnx"


def test_synthetic_only_options_are_refused_for_other_data(capfd, tmp_path, vad):
    """--pad and --input-range shape synthetic data; given with a data file they were recorded in the options
    as if applied (a hostile review). --pad on a model without a mask input pads nothing: refused too."""
    np.save(tmp_path / "x.npy", np.zeros((8, 64), np.float32))
    for extra, flag in ((("--pad", "0.5"), "--pad"), (("--input-range", "x=0:5"), "--input-range")):
        one_line_error(analyze(capfd, vad, tmp_path / "s.json", *FEED, *extra, data=str(tmp_path / "x.npy")),
                       f"{flag} shapes synthetic data")
    one_line_error(analyze(capfd, vad, tmp_path / "s.json", *FEED, "--pad", "0.5"), "--pad pads mask inputs")
    assert not (tmp_path / "s.json").exists()


@pytest.mark.skipif(not BERT.exists(), reason="fixture not built")
def test_bert_tiny_runs_on_plain_synthetic_data(capfd, tmp_path):
    code, _, err = analyze(capfd, BERT, tmp_path / "s.json")
    assert code == 0, err
    data = json.loads((tmp_path / "s.json").read_text())["data"]
    assert data["inputs"] == {"input_ids": {"range": [0, 96]}, "token_type_ids": {"range": [0, 2]},
                              "attention_mask": {"mask": "ones"}}


@pytest.mark.skipif(not VAD.exists(), reason="fixture not built")
def test_vad_tiny_runs_with_its_sample_rate_and_state_axis(capfd, tmp_path):
    code, _, err = analyze(capfd, VAD, tmp_path / "s.json", *FEED)
    assert code == 0, err
    sig = json.loads((tmp_path / "s.json").read_text())
    assert sig["data"]["constants"] == {"sr": 16000} and all(s["status"] == "ok" for s in sig["sites"])


def test_a_study_sees_a_constant_files_content(tmp_path):
    from onnxaff.studies import options_identity

    path = tmp_path / "state.npy"
    np.save(path, np.zeros((2, 8), np.float32))
    before = options_identity({"constants": {"state": str(path), "sr": 16000}})
    np.save(path, np.ones((2, 8), np.float32))
    assert options_identity({"constants": {"state": str(path), "sr": 16000}}) != before

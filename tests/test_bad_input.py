"""Bad input never hurts: every broken model, data set or option ends in one clear line and a non-zero exit
(`onnxaff: error: ...`, never `internal error`), or, for bad values in the data, in a flagged site.

The CLI runs in-process (`onnxaff.cli.main`); `capfd` captures file descriptors, so anything onnxruntime
prints from C++ would show up on stderr too.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import onnxaff
from onnxaff.errors import OnnxaffError
from tests.builders import HEADER, chain, chain_text, mlp, save, with_weights
from tests.conftest import one_line_error, parse, refuse_calls, run_cli

RELU = chain_text("Relu")
SYNTH = "synthetic:gaussian:n=64"


@pytest.fixture(autouse=True)
def _no_debug(monkeypatch):
    monkeypatch.delenv("ONNXAFF_DEBUG", raising=False)  # with it onnxruntime's own error lines come back


@pytest.fixture
def relu_model(tmp_path):
    return save(parse(RELU), tmp_path / "relu.onnx")


def analyze(capfd, model, data, out, *extra):
    return run_cli(capfd, "analyze", model, "--data", data, "--out", out, "--metrics", "affinity",
                   "--chunk-size", "32", "--quiet", *extra)


# 1. A missing model file.
@pytest.mark.parametrize("command", ["sites", "analyze"])
def test_missing_model_file(capfd, tmp_path, command):
    args = [command, tmp_path / "nope.onnx"] + (["--data", SYNTH] if command == "analyze" else [])
    one_line_error(run_cli(capfd, *args), f"model file not found: {tmp_path / 'nope.onnx'}")


def test_missing_data_file(capfd, tmp_path, relu_model):
    one_line_error(analyze(capfd, relu_model, tmp_path / "nothing.npy", tmp_path / "s.json"),
                   f"data file not found: {tmp_path / 'nothing.npy'}")


# 2. A truncated model and random bytes.
@pytest.mark.parametrize("command", ["sites", "analyze"])
@pytest.mark.parametrize("damage", ["truncated", "random", "text"])
def test_unreadable_model_file(capfd, tmp_path, relu_model, command, damage):
    good = open(relu_model, "rb").read()
    blob = {"truncated": good[: len(good) // 2], "random": np.random.default_rng(1).bytes(4096),
            "text": b"this is not a model\n" * 10}[damage]
    path = tmp_path / f"{damage}.onnx"
    path.write_bytes(blob)
    args = [command, path] + (["--data", SYNTH] if command == "analyze" else [])
    one_line_error(run_cli(capfd, *args), f"not a readable ONNX model: {path}")


def test_model_that_fails_the_checker(capfd, tmp_path):
    model = onnx.parser.parse_model(HEADER + " g (float[N, 3] x) => (float[N, 3] y) { y = Relu(undefined) }")
    one_line_error(run_cli(capfd, "sites", save(model, tmp_path / "invalid.onnx")), "invalid ONNX model")


# 3. A valid model with no non-linearity.
def test_model_without_nonlinearity(capfd, tmp_path):
    model = with_weights(HEADER + " g (float[N, 4] x) => (float[N, 4] y) { h = MatMul(x, w) \n y = Add(h, x) }",
                         w=np.eye(4, dtype=np.float32))
    path = save(model, tmp_path / "linear.onnx")
    one_line_error(analyze(capfd, path, SYNTH, tmp_path / "s.json"), "the model has no non-linearity to analyse")
    assert not (tmp_path / "s.json").exists()
    code, out, err = run_cli(capfd, "sites", path)
    assert code == 0 and "0 sites in linear.onnx (0 ok, 0 skipped)" in out, err
    with pytest.raises(OnnxaffError, match="no non-linearity"):
        onnxaff.analyze(model, SYNTH, progress=False)


# 4. Data that does not fit the model's input shape or dtype.
@pytest.mark.parametrize("array,fragment", [
    (np.zeros((64, 5), np.float32), "gives examples of shape [5] but model input x: float32[N, 4] expects [4]"),
    (np.zeros((64, 4, 2), np.float32), "expects rank 2 (batch first)"),
    (np.zeros(64, np.float32), "expects rank 2 (batch first)"),
    (np.ones((64, 4), np.complex64), "has dtype complex64 but model input x: float32[N, 4] needs float32"),
    (np.ones((64, 4), bool), "has dtype bool but model input x: float32[N, 4] needs float32"),
], ids=["trailing-dims", "rank-3", "rank-1", "complex", "bool"])
def test_data_that_does_not_fit_a_float_input(capfd, tmp_path, relu_model, array, fragment):
    np.save(tmp_path / "data.npy", array)
    one_line_error(analyze(capfd, relu_model, tmp_path / "data.npy", tmp_path / "s.json"), fragment)


def test_int_data_is_cast_for_a_float_input(capfd, tmp_path, relu_model):
    """docs/usage.md: values are cast to the input's dtype when nothing essential is lost (int → float)."""
    ints = np.random.default_rng(0).integers(-5, 5, (64, 4))
    np.save(tmp_path / "ints.npy", ints)
    np.save(tmp_path / "floats.npy", ints.astype(np.float32))
    assert analyze(capfd, relu_model, tmp_path / "ints.npy", tmp_path / "i.json")[0] == 0
    assert analyze(capfd, relu_model, tmp_path / "floats.npy", tmp_path / "f.json")[0] == 0
    scores = [json.loads((tmp_path / f"{k}.json").read_text())["sites"][0]["metrics"]["affinity"]["values"]
              for k in "if"]
    assert scores[0] == scores[1]


@pytest.mark.parametrize("array,fragment", [
    (np.full((64, 4), 1.5, np.float32), "has dtype float32 but model input x: int8[N, 4] needs int8"),
    (np.full((64, 4), 300, np.int64), "holds values in [300, 300] that model input x: int8[N, 4] cannot hold"),
], ids=["float-to-int", "int-out-of-range"])
def test_data_that_does_not_fit_an_int_input(capfd, tmp_path, array, fragment):
    model = parse(HEADER + " g (int8[N, 4] x) => (float[N, 4] y) { f = Cast<to=1>(x) \n y = Relu(f) }")
    np.save(tmp_path / "data.npy", array)
    one_line_error(analyze(capfd, save(model, tmp_path / "int.onnx"), tmp_path / "data.npy", tmp_path / "s.json"),
                   fragment)


@pytest.mark.parametrize("content,fragment", [
    (b"garbage, not numpy", "not a .npy file (no NumPy header)"),
    (None, "cannot read array file"),  # a real .npy cut short
], ids=["no-header", "truncated"])
def test_unreadable_array_file(capfd, tmp_path, relu_model, content, fragment):
    path = tmp_path / "data.npy"
    if content is None:
        np.save(path, np.zeros((1000, 4), np.float32))
        content = path.read_bytes()[:3000]
    path.write_bytes(content)
    one_line_error(analyze(capfd, relu_model, path, tmp_path / "s.json"), fragment)


@pytest.mark.parametrize("spec,fragment", [
    ("synthetic:gaussian:n=0", "n=0 must be an integer ≥ 1"),
    ("synthetic:gaussian:n=-5", "n=-5 must be an integer ≥ 1"),
    ("synthetic:gaussian:n=1.5", "n=1.5 must be an integer ≥ 1"),
    ("synthetic:gaussian:seed=-1", "seed=-1 must be an integer ≥ 0"),
    ("synthetic:gaussian:n=inf", "n=inf is not a finite number"),
    ("synthetic:gaussian:std=nan", "std=nan is not a finite number"),
    ("synthetic:gaussian:std=-1", "std=-1 must not be negative"),
    ("synthetic:uniform:low=1,high=0", "needs low < high (low=1, high=0)"),
])
def test_bad_synthetic_options(capfd, tmp_path, relu_model, spec, fragment):
    """numpy refused these mid-run (internal errors) or silently rounded n."""
    one_line_error(analyze(capfd, relu_model, spec, tmp_path / "s.json"), fragment)


def test_negative_seed_for_synthetic_data(capfd, tmp_path, relu_model):
    one_line_error(analyze(capfd, relu_model, SYNTH, tmp_path / "s.json", "--seed", "-1"),
                   "--seed -1: synthetic data need a seed ≥ 0")


# 5. An image folder without images.
@pytest.fixture
def image_case(tmp_path):
    """An image model and an empty folder for its data."""
    (tmp_path / "images").mkdir()
    return save(chain("Relu", dims="N, 3, 8, 8"), tmp_path / "cnn.onnx"), tmp_path / "images"


@pytest.mark.parametrize("content", [[], ["notes.txt", "sub/labels.csv"]], ids=["empty", "no-image-files"])
def test_image_folder_without_images(capfd, tmp_path, image_case, content):
    model, folder = image_case
    for name in content:
        (folder / name).parent.mkdir(exist_ok=True)
        (folder / name).write_text("not an image")
    one_line_error(analyze(capfd, model, folder, tmp_path / "s.json"),
                   f"no images (.bmp, .jpeg, .jpg, .png, .tif, .tiff, .webp) found under {folder}")


def test_image_folder_of_only_corrupt_images(capfd, tmp_path, image_case):
    """Every file skipped: the error counts them and gives the first one's reason."""
    model, folder = image_case
    for name in ("a.jpg", "b.png", "c.jpg"):
        (folder / name).write_bytes(b"\xff\xd8 truncated")
    message = one_line_error(analyze(capfd, model, folder, tmp_path / "s.json", "--workers", "0"),
                             f"no usable example in {folder}: 3 skipped, the first (a.jpg) because ")
    assert "UnidentifiedImageError" in message
    assert not (tmp_path / "s.json").exists()


# 6. A .npz without the model's inputs (one missing: fed zeros with a warning, tests/test_feeding.py).
def test_npz_missing_an_input(capfd, tmp_path):
    model = parse(HEADER + " g (float[N, 4] a, float[N, 4] b) => (float[N, 4] y) { s = Add(a, b) \n y = Relu(s) }")
    np.savez(tmp_path / "data.npz", c=np.zeros((64, 4), np.float32))
    one_line_error(analyze(capfd, save(model, tmp_path / "two.onnx"), tmp_path / "data.npz", tmp_path / "s.json"),
                   "data.npz has no array for model input 'a' (has: c)")


# 7. NaN/Inf in the data and NaN/Inf made by the model: the site is flagged, the others keep their numbers.
TWO_BRANCHES = HEADER + """ g (float[N, 4] a, float[N, 4] b) => (float[N, 4] r, float[N, 4] t) {
    r = Relu(a)
    t = Tanh(b)
}"""


def test_nonfinite_data_flags_the_sites_it_reaches(capfd, tmp_path):
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((2, 64, 4)).astype(np.float32)
    bad_b = b.copy()
    bad_b[3, 1], bad_b[40, 2] = np.nan, np.inf
    model = save(parse(TWO_BRANCHES), tmp_path / "two.onnx")
    np.savez(tmp_path / "clean.npz", a=a, b=b)
    np.savez(tmp_path / "bad.npz", a=a, b=bad_b)
    assert analyze(capfd, model, tmp_path / "clean.npz", tmp_path / "clean.json")[0] == 0
    code, _, err = analyze(capfd, model, tmp_path / "bad.npz", tmp_path / "bad.json")
    assert code == 0, err
    clean, bad = (json.loads((tmp_path / f"{k}.json").read_text()) for k in ("clean", "bad"))
    relu, tanh = bad["sites"]
    assert relu["status"] == "ok" and relu["metrics"] == clean["sites"][0]["metrics"]
    assert tanh["status"] == "flagged" and tanh["reason"] == "NaN/Inf in the features of 2 of 64 rows"
    assert tanh["metrics"]["affinity"] == {"mean": None, "std": None, "chunks": 0, "status": "nonfinite"}
    assert bad["warnings"] == ["site 1 (Tanh:t): NaN/Inf in the features of 2 of 64 rows"]


def test_values_beyond_float32_become_inf_and_flag_the_site(capfd, tmp_path, relu_model):
    """float64 data past float32's range: cast to ±inf without a numpy warning (a stray stderr line), then flagged."""
    x = np.random.default_rng(0).standard_normal((64, 4))
    x[7, 0] = 1e39
    np.save(tmp_path / "big.npy", x)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a warning becomes an exception, hence an internal error
        code, _, err = analyze(capfd, relu_model, tmp_path / "big.npy", tmp_path / "s.json")
    assert code == 0 and err == ""
    (site,) = json.loads((tmp_path / "s.json").read_text())["sites"]
    assert site["status"] == "flagged" and "1 of 64 rows" in site["reason"]


def test_nonfinite_activations_flag_only_their_sites(capfd, tmp_path):
    """Log of negative inputs (NaN, -inf at 0) before a ReLU, and x / 0 (±inf) before a Sigmoid."""
    text = HEADER + """ g (float[N, 4] x) => (float[N, 4] r, float[N, 4] t, float[N, 4] s) {
        r = Relu(x)
        l = Log(x)
        t = Relu(l)
        zero = Constant<value = float {0.0}>()
        d = Div(x, zero)
        s = Sigmoid(d)
    }"""
    model = save(parse(text), tmp_path / "inf.onnx")
    clean = save(parse(RELU.replace("y", "r")), tmp_path / "clean.onnx")
    code, _, err = analyze(capfd, model, SYNTH, tmp_path / "s.json")
    assert code == 0, err
    assert analyze(capfd, clean, SYNTH, tmp_path / "clean.json")[0] == 0
    sig = json.loads((tmp_path / "s.json").read_text())
    relu, log_relu, div_sigmoid = sig["sites"]
    assert relu["metrics"] == json.loads((tmp_path / "clean.json").read_text())["sites"][0]["metrics"]
    for site in (log_relu, div_sigmoid):
        assert site["status"] == "flagged" and site["reason"].startswith("NaN/Inf in the features of")
        assert site["metrics"]["affinity"]["status"] == "nonfinite" and site["metrics"]["affinity"]["mean"] is None
    assert sig["summary"]["affinity"]["sites"] == 1
    assert len([w for w in sig["warnings"] if "NaN/Inf" in w]) == 2
    assert log_relu["metrics"]["affinity"] == {"mean": None, "std": None, "chunks": 0, "status": "nonfinite"}
    json.loads((tmp_path / "s.json").read_text(), parse_constant=pytest.fail)  # no NaN/Infinity literal in it


# 8. Dead units and constant outputs: defined numbers or a stated error, never a silent NaN.
DEAD = HEADER + """ g (float[N, 4] x) => (float[N, 4] y, float[N, 4] z) {
    a = Abs(x)
    n = Neg(a)
    b = Sub(n, one)
    y = Relu(b)
    c = Mul(x, mask)
    s = Sub(c, shift)
    z = Relu(s)
}"""
CONSTANT_Y = "undefined for a constant"


def test_dead_units(capfd, tmp_path):
    """y = Relu(−|x| − 1) is 0 everywhere: the constant-output map A = 0 gives an affinity of exactly 1 (a
    constant is affine).
    z's last channel is Relu(−1) = 0 for every example: a dead channel among live ones, still a finite score.
    Metrics that divide by the output's variance say so in their status instead of returning NaN."""
    model = with_weights(DEAD, one=np.array(1, np.float32), mask=np.array([1, 1, 1, 0], np.float32),
                         shift=np.array([0, 0, 0, 1], np.float32))
    path = save(model, tmp_path / "dead.onnx")
    metrics = "affinity,affinity_lw,cka,r2,r2_pooled,nlc"
    code, _, err = analyze(capfd, path, SYNTH, tmp_path / "s.json", "--metrics", metrics)
    assert code == 0, err
    sig = json.loads((tmp_path / "s.json").read_text())
    dead, one_dead_channel = sig["sites"]
    for name in ("affinity", "affinity_lw"):
        assert dead["metrics"][name]["status"] == "ok" and dead["metrics"][name]["values"] == [1.0, 1.0]
        assert 0 < one_dead_channel["metrics"][name]["mean"] < 1
    for name in ("cka", "r2", "r2_pooled", "nlc"):
        entry = dead["metrics"][name]
        assert entry["status"] == "error" and entry["mean"] is None and CONSTANT_Y in entry["error"], entry
        assert math.isfinite(one_dead_channel["metrics"][name]["mean"])
        assert any(f"metric {name} failed" in w and CONSTANT_Y in w for w in sig["warnings"])


# 9. A model whose batch axis is fixed at 1, asked for batches of 64.
def test_fixed_batch_of_one(capfd, tmp_path):
    path = save(chain("Tanh", dims="1, 4"), tmp_path / "fixed.onnx")
    code, out, err = run_cli(capfd, "analyze", path, "--data", SYNTH, "--batch-size", "64", "--chunk-size", "32",
                             "--metrics", "affinity", "--out", tmp_path / "s.json")
    assert code == 0, err
    assert "warning: the model's batch size is fixed at 1: batches of 1" in err.splitlines()
    sig = json.loads((tmp_path / "s.json").read_text())
    assert sig["options"]["batch_size"] == 1 and sig["data"]["samples"] == 64
    assert sig["sites"][0]["rows"] == 64 and sig["sites"][0]["metrics"]["affinity"]["chunks"] == 2
    assert "the model's batch size is fixed at 1: batches of 1" in sig["warnings"]


# 10. External data whose file is gone.
def _external_model(folder, rng) -> str:
    model = mlp(rng, d_in=8, hidden=8, d_out=8)
    folder.mkdir()
    path = folder / "ext.onnx"
    onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="ext.weights", size_threshold=0)
    return str(path)


@pytest.mark.parametrize("command", ["sites", "analyze"])
def test_external_data_file_missing(capfd, tmp_path, rng, command):
    path = _external_model(tmp_path / "model", rng)
    os.remove(tmp_path / "model" / "ext.weights")
    args = [command, path] + (["--data", SYNTH] if command == "analyze" else [])
    one_line_error(run_cli(capfd, *args),
                   f"external data file missing for ext.onnx: {tmp_path / 'model' / 'ext.weights'}")


# 11. Unknown metric and reduction names.
@pytest.mark.parametrize("metrics,fragment", [
    ("affinity,affinityy", "unknown metric 'affinityy'; available: affinity, affinity_bc, affinity_lw,"),
    (" , ", "--metrics ' , ' names no metric"),
])
def test_unknown_metric(capfd, tmp_path, relu_model, metrics, fragment):
    one_line_error(analyze(capfd, relu_model, SYNTH, tmp_path / "s.json", "--metrics", metrics), fragment)
    assert not (tmp_path / "s.json").exists()


def test_unknown_reduction(capfd, tmp_path, relu_model):
    """One line, exit 2, the value and the choices named (sample:K among them: not a fixed click Choice)."""
    code, out, err = analyze(capfd, relu_model, SYNTH, tmp_path / "s.json", "--reduce", "median")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert "unknown reduction 'median' for --reduce; choose one of mean, reference, positions, flatten or sample:K" \
        in err


# 12. An output path that cannot be written: refused before the analysis, nothing left behind.
@pytest.fixture
def no_analysis(monkeypatch):
    """The output check must come before the work: the analysis itself is not reachable."""
    refuse_calls(monkeypatch, "the analysis ran before the output path was checked", "onnxaff.analysis.analyze",
                 "onnxaff.analysis.open_run")


def test_output_folder_missing(capfd, tmp_path, relu_model, no_analysis):
    out = tmp_path / "missing" / "s.json"
    one_line_error(analyze(capfd, relu_model, SYNTH, out), f"output folder does not exist: {out.parent}")
    assert not out.parent.exists()


def test_output_path_is_a_folder(capfd, tmp_path, relu_model, no_analysis):
    (tmp_path / "out").mkdir()
    one_line_error(analyze(capfd, relu_model, SYNTH, tmp_path / "out"), "output path is a folder, not a file")
    assert os.listdir(tmp_path / "out") == []


def test_output_folder_read_only(capfd, tmp_path, relu_model, no_analysis):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        try:
            (folder / "probe").write_text("")
        except PermissionError:
            pass
        else:
            pytest.skip("this process writes to read-only folders (root)")
        one_line_error(analyze(capfd, relu_model, SYNTH, folder / "s.json"), f"cannot write to {folder}")
        assert os.listdir(folder) == []
    finally:
        folder.chmod(0o755)


def test_output_folder_refusing_files(capfd, tmp_path, relu_model, no_analysis, monkeypatch):
    """The same refusal where root writes anyway: the folder refuses every new file (as a read-only mount does)."""

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr("onnxaff.foundations.files.tempfile.mkstemp", refuse)
    one_line_error(analyze(capfd, relu_model, SYNTH, tmp_path / "s.json"),
                   f"cannot write to {tmp_path}: Permission denied")
    assert sorted(os.listdir(tmp_path)) == ["relu.onnx"]


def test_disk_full_keeps_the_previous_file(capfd, tmp_path, relu_model):
    """A write that fails half-way (ENOSPC at fsync) is one line; the earlier signature stays as it was."""
    out = tmp_path / "s.json"
    code, _, err = analyze(capfd, relu_model, SYNTH, out)
    assert code == 0, err
    before = out.read_bytes()

    def full(fd):
        raise OSError(28, "No space left on device")

    with pytest.MonkeyPatch.context() as m:
        m.setattr("onnxaff.foundations.files.os.fsync", full)
        one_line_error(analyze(capfd, relu_model, SYNTH, out, "--seed", "1"),
                       f"cannot write {out}: No space left on device")
    assert out.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["relu.onnx", "s.json"]


# 13. A small model with external data, end to end.
def test_external_data_model_end_to_end(capfd, tmp_path, rng, monkeypatch):
    """Weights in one file next to the model, the model opened from another working directory; the scores
    equal those of the same model with its weights inline."""
    path = _external_model(tmp_path / "model", rng)
    inline = save(onnx.load(path), tmp_path / "inline.onnx")  # onnx.load reads the external data back in
    assert onnx.load(inline, load_external_data=False).graph.initializer[0].raw_data
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    code, out, err = run_cli(capfd, "sites", os.path.relpath(path))
    assert code == 0 and "2 sites in ext.onnx (2 ok, 0 skipped)" in out, err
    for model, name in ((os.path.relpath(path), "ext.json"), (inline, "inline.json")):
        code, _, err = analyze(capfd, model, SYNTH, name)
        assert code == 0, err
    ext, ref = (json.loads((elsewhere / n).read_text()) for n in ("ext.json", "inline.json"))
    assert [s["status"] for s in ext["sites"]] == ["ok", "ok"]
    assert [s["metrics"] for s in ext["sites"]] == [s["metrics"] for s in ref["sites"]]
    assert ext["model"]["path"] == str((tmp_path / "model" / "ext.onnx").resolve())
    weights = tmp_path / "model" / "ext.weights"
    assert ext["model"]["external_data"] == [{"location": "ext.weights", "bytes": weights.stat().st_size,
                                              "sha256": hashlib.sha256(weights.read_bytes()).hexdigest()}]
    assert "external_data" not in ref["model"]


def test_checkpoint_refuses_swapped_external_weights(tmp_path, rng):
    """The .onnx of an external-data model is unchanged when its weights are replaced: the run key must see it."""
    from onnxaff.analysis import open_run

    path = _external_model(tmp_path / "model", rng)
    options = dict(metrics=("affinity",), chunk_size=32, progress=False)
    with open_run(path, SYNTH, **options) as run:
        ckpt = run.save(tmp_path / "run.ckpt.npz")
    open_run(path, SYNTH, checkpoint=ckpt, resume="always", **options).close()  # same weights: accepted
    weights = tmp_path / "model" / "ext.weights"
    raw = bytearray(weights.read_bytes())
    raw[:4] = np.float32(123.0).tobytes()  # same size, one weight changed
    weights.write_bytes(bytes(raw))
    with pytest.raises(OnnxaffError, match="is from another model"):
        open_run(path, SYNTH, checkpoint=ckpt, resume="always", **options)


# 14. Weights over 2 GB in an external file.
BIG_N, BIG_K = 1 << 17, 4097  # 2^17 × 4097 float32 = 2 148 007 936 bytes > 2^31


def _big_model(folder) -> str:
    """input [N, 2^17] → MatMul with W [2^17, 4097] → Relu. W is zero except an identity block in its last
    4097 rows, whose bytes straddle the 2^31 offset: h = x[:, -4097:] exactly. The weight file is written
    sparse (seek and write the ones), so it costs little disk and never exists in this process's memory."""
    nbytes = BIG_N * BIG_K * 4
    one = np.float32(1).tobytes()
    with open(folder / "big.weights", "wb") as f:
        f.truncate(nbytes)
        for j in range(BIG_K):
            f.seek(((BIG_N - BIG_K + j) * BIG_K + j) * 4)
            f.write(one)
    w = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[BIG_N, BIG_K], data_location=TensorProto.EXTERNAL)
    for key, value in (("location", "big.weights"), ("offset", "0"), ("length", str(nbytes))):
        w.external_data.add(key=key, value=value)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])], "big",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", BIG_N])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", BIG_K])], initializer=[w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return save(model, folder / "big.onnx")


@pytest.mark.slow  # about 5 GB of memory
def test_external_weights_over_2gb(capfd, tmp_path):
    """Loading, shape inference, hashing and the runtime session never put the weights into one protobuf
    (it cannot exceed 2 GB); onnxruntime reads them where they lie. The identity block makes the site's
    features exactly the last 4097 input columns: the same scores as a bare Relu fed those columns."""
    if shutil.disk_usage(tmp_path).free < 4 << 30:
        pytest.skip("needs 4 GB free for the sparse weight file")
    path = _big_model(tmp_path)
    assert os.path.getsize(tmp_path / "big.weights") > 2**31
    code, out, err = run_cli(capfd, "sites", path)
    assert code == 0 and "1 sites in big.onnx (1 ok, 0 skipped)" in out, err
    code, _, err = analyze(capfd, path, SYNTH, tmp_path / "big.json")
    assert code == 0, err

    from onnxaff.data import model_inputs
    from onnxaff.data.synthetic import SyntheticSource

    source = SyntheticSource(SYNTH, model_inputs(onnx.load(path, load_external_data=False)))
    x = np.concatenate([b["x"] for b in source.batches(64)])
    np.save(tmp_path / "tail.npy", x[:, -BIG_K:])
    small = chain("Relu", width=BIG_K)
    code, _, err = analyze(capfd, save(small, tmp_path / "small.onnx"), tmp_path / "tail.npy", tmp_path / "ref.json")
    assert code == 0, err
    big, ref = (json.loads((tmp_path / n).read_text()) for n in ("big.json", "ref.json"))
    (site,) = big["sites"]
    assert site["status"] == "ok" and site["rows"] == 64 and site["dim"] == BIG_K
    assert [(e["location"], e["bytes"]) for e in big["model"]["external_data"]] == [("big.weights", BIG_N * BIG_K * 4)]
    assert site["metrics"]["affinity"]["values"] == pytest.approx(ref["sites"][0]["metrics"]["affinity"]["values"],
                                                                  abs=1e-12)


@pytest.mark.parametrize("data", ["nan", "std=1e38"])
def test_network_nlc_on_nonfinite_data_has_no_value_and_says_why(capfd, tmp_path, relu_model, data):
    """`--metrics nlc` on NaN data, or on synthetic data past float32's range, was `LinAlgError: Eigenvalues did
    not converge` (an internal error), with a numpy overflow warning for the synthetic data."""
    if data == "nan":
        x = np.random.default_rng(0).standard_normal((64, 4)).astype(np.float32)
        x[3, 1] = np.nan
        np.save(tmp_path / "nan.npy", x)
        source = tmp_path / "nan.npy"
    else:
        source = f"{SYNTH},{data}"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        code, _, err = run_cli(capfd, "analyze", relu_model, "--data", source, "--out", tmp_path / "s.json",
                               "--metrics", "nlc", "--quiet")
    assert code == 0, err
    assert "internal error" not in err and "RuntimeWarning" not in err
    sig = json.loads((tmp_path / "s.json").read_text())
    assert sig["sites"][0]["status"] == "flagged"
    nlc = sig["network"]["nlc"]
    assert nlc["values"]["y"] is None and "NaN/Inf" in nlc["reason"]


def test_model_without_graph_inputs(capfd, tmp_path):
    """A graph computing from constants only: `analyze` was `internal error: StopIteration`."""
    text = HEADER + ' g () => (float[2] y) { c = Constant<value = float[2] {1.0, -1.0}>() y = Relu(c) }'
    model = save(parse(text), tmp_path / "noin.onnx")
    one_line_error(analyze(capfd, model, SYNTH, tmp_path / "s.json"), "the model has no inputs")


def test_sites_of_a_scalar_input_model(capfd, tmp_path):
    """`sites` on a model whose input is a scalar was `internal error: TypeError` in feature_dim."""
    model = save(parse(HEADER + " g (float x) => (float y) { y = Relu(x) }"), tmp_path / "scalar.onnx")
    code, out, err = run_cli(capfd, "sites", model)
    assert "internal error" not in err and "Traceback" not in err, err
    assert code == 0 and "scalar tensor: no batch axis" in out, (out, err)


@pytest.mark.parametrize("dim", [0, -3])
def test_zero_or_negative_declared_dims_are_not_called_symbolic(capfd, tmp_path, dim):
    """A declared dim of 0 or −3 was reported as "symbolic dims"."""
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", dim])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", dim])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    line = one_line_error(analyze(capfd, save(model, tmp_path / "m.onnx"), SYNTH, tmp_path / "s.json"),
                          f"declares a dim of {dim} after the batch axis (a size must be positive)")
    assert "symbolic" not in line and "--input-shape x=D" in line

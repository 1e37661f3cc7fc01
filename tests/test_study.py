"""`onnxaff study`: many models on one data set, resumable per model, one failure never sinks the others."""

from __future__ import annotations

import json
import signal
import subprocess

import onnx
import pytest

from onnxaff.errors import OnnxaffError
from onnxaff.format.signature import read_signature
from onnxaff.studies import StudyModel, resolve_models, run_study
from tests.builders import chain
from tests.conftest import parse, run_cli, start_cli, stderr_once_ended, wait_for_file
from tests.test_scale import assert_same

BODIES = {  # three small networks with different non-linearities (a linear map between them)
    "a": "h = MatMul(x, w)  r = Relu(h)  y = Tanh(r)",
    "b": "h = MatMul(x, w)  r = Sigmoid(h)  y = Relu(r)",
    "c": "h = MatMul(x, w)  r = Tanh(h)  y = Sigmoid(r)",
}
WEIGHTS = ", ".join(f"{((i * 7 + j * 3) % 11 - 5) / 5:.1f}" for i in range(6) for j in range(6))
DATA = "synthetic:gaussian:n=600"
FAST = ["--metrics", "affinity", "--chunk-size", "128", "--batch-size", "32", "--chunk-workers", "0"]


def write_models(folder, names=("a", "b", "c")) -> list:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for name in names:
        model = parse(f"""<ir_version: 8, opset_import: ["" : 17]>
            g (float[N, 6] x) => (float[N, 6] y) <float[6, 6] w = {{{WEIGHTS}}}> {{ {BODIES[name]} }}""")
        onnx.save(model, folder / f"{name}.onnx")
        paths.append(folder / f"{name}.onnx")
    return paths


def signatures(out):
    return {p.stem: read_signature(p) for p in sorted((out / "signatures").glob("*.json"))}


def test_three_models_then_a_rerun_skips_all_and_rewrites_only_the_report(tmp_path, capfd):
    paths = write_models(tmp_path / "m")
    out = tmp_path / "study"
    code, stdout, err = run_cli(capfd, "study", *paths, "--data", DATA, "--out", out, *FAST)
    assert code == 0, err
    sigs = signatures(out)
    assert list(sigs) == ["a", "b", "c"]
    assert [s.model["name"] for s in sigs.values()] == ["a", "b", "c"]
    assert all(len(s.scores("affinity")) == 2 and s.data["samples"] == 600 for s in sigs.values())
    assert [f"[{k}/3] {n}: done in" in err for k, n in enumerate("abc", 1)] == [True] * 3
    assert "study ETA" in err
    compared = json.loads((out / "compare.json").read_text())
    assert compared["models"] == ["a", "b", "c"] and compared["failed"] == {}
    assert set(compared["metrics"]) == {"affinity"}
    dtw = compared["metrics"]["affinity"]["dtw"]
    assert dtw[0][0] == 0 and dtw[0][1] == dtw[1][0] > 0
    page = (out / "report.html").read_text()
    plots = page.count("data:image/png;base64,") + page.count("<svg")  # signatures are inline SVG, the rest PNG
    assert "DTW" in page and plots >= 4 and "src=\"http" not in page

    before = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in (out / "signatures").iterdir()}
    (out / "report.html").unlink()
    code, stdout, err = run_cli(capfd, "study", *paths, "--data", DATA, "--out", out, *FAST)
    assert code == 0, err
    assert err.count("up to date (same model, data and options), skipped") == 3 and "analysing" not in err
    assert {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in (out / "signatures").iterdir()} == before
    assert (out / "report.html").read_text() == page


@pytest.mark.slow  # 3 s
def test_changed_options_data_or_model_redo_what_they_touch_and_force_redoes_all(tmp_path, capfd):
    paths = write_models(tmp_path / "m")
    out = tmp_path / "study"
    assert run_cli(capfd, "study", *paths, "--data", DATA, "--out", out, *FAST)[0] == 0
    _, _, err = run_cli(capfd, "study", *paths, "--data", DATA, "--out", out, *FAST, "--chunk-size", "100")
    assert err.count("analysing (the options changed: --chunk-size 128 → 100)") == 3
    # Speed-only options (device, threads) do not make a signature stale.
    _, _, err = run_cli(capfd, "study", *paths, "--data", DATA, "--out", out, *FAST, "--chunk-size", "100",
                        "--chunk-workers", "1", "--device", "cpu")
    assert err.count("skipped") == 3
    _, _, err = run_cli(capfd, "study", *paths, "--data", "synthetic:gaussian:n=500", "--out", out, *FAST,
                        "--chunk-size", "100")
    assert err.count("analysing (the data changed)") == 3
    model = onnx.load(paths[1])
    model.producer_name = "edited"
    onnx.save(model, paths[1])
    _, _, err = run_cli(capfd, "study", *paths, "--data", "synthetic:gaussian:n=500", "--out", out, *FAST,
                        "--chunk-size", "100")
    assert err.count("skipped") == 2 and "[2/3] b: analysing (the model or its weights changed)" in err
    _, _, err = run_cli(capfd, "study", *paths, "--data", "synthetic:gaussian:n=500", "--out", out, *FAST,
                        "--chunk-size", "100", "--force")
    assert err.count("analysing (--force)") == 3


@pytest.mark.parametrize("bad", [b"not a model", b""])
def test_a_corrupt_model_is_named_and_the_others_complete(tmp_path, capfd, bad):
    paths = write_models(tmp_path / "m")
    (tmp_path / "m" / "broken.onnx").write_bytes(bad)
    missing = tmp_path / "m" / "gone.onnx"
    out = tmp_path / "study"
    code, stdout, err = run_cli(capfd, "study", paths[0], tmp_path / "m" / "broken.onnx", paths[1], missing,
                                paths[2], "--data", DATA, "--out", out, *FAST)
    assert code == 3  # finished, but not every model could be analysed
    assert list(signatures(out)) == ["a", "b", "c"]
    assert "[2/5] broken: FAILED: not a" in err and "ONNX model" in err
    assert "[4/5] gone: FAILED: cannot read" in err and "(no such file)" in err
    assert "failed: broken: " in err and "2 failed" in stdout
    compared = json.loads((out / "compare.json").read_text())
    assert compared["models"] == ["a", "b", "c"] and set(compared["failed"]) == {"broken", "gone"}
    page = (out / "report.html").read_text()
    assert "<h2>Failed</h2>" in page and "broken" in page and "gone.onnx" in page


def test_a_model_whose_data_does_not_fit_fails_alone(tmp_path):
    paths = write_models(tmp_path / "m")
    wide = chain("Relu", width=9)
    onnx.save(wide, tmp_path / "m" / "wide.onnx")
    npz = tmp_path / "x.npz"
    import numpy as np

    np.savez(npz, x=np.random.default_rng(0).standard_normal((300, 6)).astype(np.float32))
    models = resolve_models([str(p) for p in paths] + [str(tmp_path / "m" / "wide.onnx")])
    result = run_study(models, str(npz), tmp_path / "s", options=dict(metrics=["affinity"], chunk_size=100,
                                                                      progress=False))
    assert sorted(result.signatures) == ["a", "b", "c"] and list(result.failed) == ["wide"]
    assert "6" in result.failed["wide"] and "9" in result.failed["wide"]  # the shape mismatch, in one line
    assert "\n" not in result.failed["wide"]


def test_models_from_a_folder_a_list_file_and_labels(tmp_path):
    paths = write_models(tmp_path / "zoo")
    (tmp_path / "zoo" / "deeper").mkdir()
    onnx.save(onnx.load(paths[0]), tmp_path / "zoo" / "deeper" / "d.onnx")
    assert [(m.label, m.path.name) for m in resolve_models([str(tmp_path / "zoo")])] == [
        ("a", "a.onnx"), ("b", "b.onnx"), ("c", "c.onnx"), ("d", "d.onnx")]
    listing = tmp_path / "models.txt"
    listing.write_text("# the study\nzoo/a.onnx\nsecond=zoo/b.onnx  # a label\n\n")
    assert [(m.label, m.path) for m in resolve_models([str(listing), f"third={paths[2]}"])] == [
        ("a", tmp_path / "zoo" / "a.onnx"), ("second", tmp_path / "zoo" / "b.onnx"), ("third", paths[2])]
    with pytest.raises(OnnxaffError, match="two models are labelled 'a'"):
        resolve_models([str(paths[0]), str(tmp_path / "zoo" / "a.onnx")])
    with pytest.raises(OnnxaffError, match="model label '../x'"):
        resolve_models([f"../x={paths[0]}"])


def test_empty_folder_and_empty_list_are_one_line_errors(tmp_path, capfd):
    (tmp_path / "empty").mkdir()
    code, _, err = run_cli(capfd, "study", tmp_path / "empty", "--data", DATA, "--out", tmp_path / "s")
    assert code == 2 and err.strip() == f"onnxaff: error: no .onnx file in the folder {tmp_path / 'empty'}"
    (tmp_path / "list.txt").write_text("# nothing\n")
    code, _, err = run_cli(capfd, "study", tmp_path / "list.txt", "--data", DATA, "--out", tmp_path / "s")
    assert code == 2 and "names no model" in err and err.count("\n") == 1


def test_missing_data_or_unusable_out_fail_before_any_model(tmp_path, capfd):
    paths = write_models(tmp_path / "m", names=("a", "b"))
    code, _, err = run_cli(capfd, "study", *paths, "--data", tmp_path / "nothere.npz", "--out", tmp_path / "s")
    assert code == 2 and err.strip() == f"onnxaff: error: data file not found: {tmp_path / 'nothere.npz'}"
    assert not (tmp_path / "s").exists()
    (tmp_path / "afile").write_text("")
    code, _, err = run_cli(capfd, "study", *paths, "--data", DATA, "--out", tmp_path / "afile")
    assert code == 2 and err.strip() == f"onnxaff: error: cannot create the study folder {tmp_path / 'afile'}: " \
        "Not a directory"


def test_ray_with_mid_model_checkpoints_is_refused_before_anything_runs(tmp_path, capfd):
    paths = write_models(tmp_path / "m", names=("a",))
    code, _, err = run_cli(capfd, "study", *paths, "--data", DATA, "--out", tmp_path / "s", "--executor", "ray",
                           "--checkpoint-every", "5")
    assert code == 2 and err.startswith("onnxaff: error: the ray executor keeps no mid-model checkpoint")
    assert err.count("\n") == 1


def test_accuracy_and_groups_give_the_correlation_and_a_missing_row_fails_before_any_analysis(tmp_path, capfd):
    paths = write_models(tmp_path / "m")
    acc = tmp_path / "acc.csv"
    acc.write_text("model,top1\na,0.7\nb,0.8\n")
    out = tmp_path / "s"
    code, _, err = run_cli(capfd, "study", *paths, "--data", DATA, "--out", out, *FAST, "--accuracy", acc)
    assert code == 2 and err.strip() == "onnxaff: error: the accuracy file has no row for c (by label or sha256)"
    assert not list((out / "signatures").glob("*.json"))  # nothing analysed for nothing
    import hashlib

    acc.write_text(f"a,0.7\nb,0.8\n{hashlib.sha256(paths[2].read_bytes()).hexdigest()},0.75\n")
    groups = tmp_path / "groups.csv"
    groups.write_text("a,x\nb,x\nc,x\n")
    code, stdout, err = run_cli(capfd, "study", *paths, "--data", DATA, "--out", out, *FAST, "--accuracy", acc,
                                "--group", groups)
    assert code == 0, err
    assert "0.7500" in stdout  # the table's accuracy column
    compared = json.loads((out / "compare.json").read_text())
    table = compared["correlation"]["table"]
    assert set(table) == {"all", "x"} and table["all"]["affinity mean"]["models"] == 3
    assert "Correlation with accuracy" in (out / "report.html").read_text()


def test_one_model_writes_its_signature_and_a_page_without_comparison(tmp_path):
    paths = write_models(tmp_path / "m", names=("a",))
    result = run_study([StudyModel("only", paths[0])], DATA, tmp_path / "s",
                       options=dict(metrics=["affinity"], chunk_size=128, progress=False))
    assert list(result.signatures) == ["only"] and result.ok
    assert "nothing to compare" in (tmp_path / "s" / "report.html").read_text()
    assert json.loads((tmp_path / "s" / "compare.json").read_text())["metrics"] == {}


@pytest.mark.parametrize("signum", [pytest.param(signal.SIGKILL, marks=pytest.mark.slow), signal.SIGINT])
def test_killed_during_the_second_model_a_rerun_finishes_with_the_same_numbers(tmp_path, capfd, signum):
    """Model a done, b stopped mid-run (its checkpoint kept), c not started: the rerun skips a, continues b."""
    paths = write_models(tmp_path / "m")
    args = [*map(str, paths), "--data", "synthetic:gaussian:n=2048", "--metrics", "affinity,cka_pooled",
            "--chunk-size", "256", "--batch-size", "4", "--chunk-workers", "0"]
    reference = tmp_path / "reference"  # uninterrupted, in this process (saves a start-up)
    assert run_cli(capfd, "study", *args, "--out", reference, "--quiet")[0] == 0
    out = tmp_path / "study"
    ckpt = out / "signatures" / "b.ckpt.npz"
    proc = start_cli("study", *args, "--out", out, "--checkpoint-every", "20", stdout=subprocess.DEVNULL)
    wait_for_file(proc, ckpt)
    proc.send_signal(signum)
    err = stderr_once_ended(proc, f"signal {signum}", timeout=60)
    assert proc.returncode == (-9 if signum == signal.SIGKILL else 130), err
    if signum == signal.SIGINT:
        last = err.strip().splitlines()[-1]
        assert last.startswith("onnxaff: interrupted: b: SIGINT after") and "rerun the same command" in last
    assert ckpt.exists() and (out / "signatures" / "a.json").exists()
    assert not (out / "signatures" / "b.json").exists() and not (out / "report.html").exists()
    code, _, err = run_cli(capfd, "study", *args, "--out", out)
    assert code == 0, err
    assert "[1/3] a: up to date" in err and "continuing from b.ckpt.npz" in err
    assert not ckpt.exists()
    want, got = signatures(reference), signatures(out)
    assert list(got) == list(want) == ["a", "b", "c"]
    for name in want:
        assert_same(want[name], got[name], tol=0)
    assert json.loads((out / "compare.json").read_text())["metrics"] == \
        json.loads((reference / "compare.json").read_text())["metrics"]


@pytest.mark.slow  # 7 s: starts a local Ray cluster
def test_ray_executor_runs_models_side_by_side_and_equals_the_local_study(tmp_path):
    pytest.importorskip("ray")
    paths = write_models(tmp_path / "m", names=("a", "b"))
    (tmp_path / "m" / "wide.onnx").write_bytes(b"not a model")  # fails inside its Ray tasks
    options = dict(metrics=["affinity", "cka"], chunk_size=64, batch_size=32, progress=False)
    lines = []
    sigterm = signal.getsignal(signal.SIGTERM)
    try:
        ray = run_study(resolve_models([str(p) for p in paths] + [str(tmp_path / "m" / "wide.onnx")]),
                        "synthetic:gaussian:n=512", tmp_path / "ray", options=options, executor="ray", shards=2,
                        echo=lines.append)
    finally:
        signal.signal(signal.SIGTERM, sigterm)  # ray.init gives the driver a SIGTERM handler of its own
    # Ray's tasks run onnxruntime on their share of the cores: the local study to equal exactly uses as many
    threads = ray.signatures["a"].runtime["executor"]["cpus_per_task"]
    local = run_study(resolve_models([str(p) for p in paths]), "synthetic:gaussian:n=512", tmp_path / "local",
                      options={**options, "threads": threads})
    assert list(ray.failed) == ["wide"] and "a Ray shard failed" in ray.failed["wide"]
    assert any(line.startswith("[3/3] wide: FAILED: a Ray shard failed") for line in lines)
    for name in ("a", "b"):
        assert ray.signatures[name].runtime["executor"]["shards"] == 2
        assert_same(local.signatures[name], ray.signatures[name], tol=1e-12)


def test_the_demo_is_a_study_of_the_shipped_models_with_its_numbers_frozen(tmp_path, capfd):
    """`onnxaff demo` runs through the study: every number equals the frozen demo run (within its measured
    tolerance); a rerun skips them all."""
    from tests.golden.compare import differences, load, tolerances
    from tests.golden.freeze import numbers

    names = ["sk_mlp_relu", "torch_vit"]
    code, stdout, err = run_cli(capfd, "demo", "--out", tmp_path, "--models", ",".join(names))
    assert code == 0, err
    assert "torch_vit: done in" in err and "sk_mlp_relu" in stdout
    got, want = {}, {}
    for name in names:
        sig = read_signature(tmp_path / "signatures" / f"{name}.json")
        got[name], want[name] = json.loads(json.dumps(numbers(sig))), load("numbers.json")["runs"][f"{name}/demo"]
        assert sig.model["name"] == name and sig.model["reference"]["architecture"]
    found = differences(got, want, tolerances())
    assert not found, [str(d) for d in found[:5]]
    assert (tmp_path / "compare.json").exists() and (tmp_path / "report.html").exists()
    code, _, err = run_cli(capfd, "demo", "--out", tmp_path, "--models", ",".join(names))
    assert code == 0 and err.count(": up to date (same model, data and options), skipped") == 2


def test_default_metrics_head_the_table_and_bad_options_stop_before_any_model(tmp_path, capfd):
    """No --metrics: the declared defaults run and the first heads the table (this used to end in an internal
    error after every model was done). A bad option is one line naming its flag before any model is read."""
    paths = write_models(tmp_path / "m", names=("a", "b"))
    code, stdout, err = run_cli(capfd, "study", *paths, "--data", DATA, "--out", tmp_path / "s", "--chunk-size",
                                "128", "--batch-size", "32", "--chunk-workers", "0")
    assert code == 0, err
    assert stdout.splitlines()[0].split()[:2] == ["model", "sites"] and "affinity mean" in stdout
    assert set(read_signature(tmp_path / "s" / "signatures" / "a.json").metrics) == {"affinity"}  # the default
    for args, message in ((["--chunk-size", "1"], "--chunk-size must be a whole number of at least 2, got 1"),
                          (["--metrics", "affinity:bogus=1"], "--metrics: metric 'affinity' has no parameter 'bogus'"),
                          (["--checkpoint-every", "-2"], "--checkpoint-every must be 0 or positive, got -2")):
        code, _, err = run_cli(capfd, "study", *paths, "--data", DATA, "--out", tmp_path / "bad", *args)
        assert code == 2 and err.startswith(f"onnxaff: error: {message}") and err.count("\n") == 1, err
        assert not (tmp_path / "bad").exists()

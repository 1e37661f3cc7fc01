"""Checkpoints, resume, shards and their merge, the Ray executor: all equal one uninterrupted run."""

import json
import os
import shutil
import signal
from pathlib import Path

import numpy as np
import onnx
import pytest

from onnxaff.analysis import Run, analyze, open_run, shard_window
from onnxaff.analysis.checkpoint import load_state, save_state
from onnxaff.errors import Interrupted, OnnxaffError
from onnxaff.format.signature import read_signature
from onnxaff.results.executors import shard_state
from onnxaff.results.shards import merge_parts, merge_states
from onnxaff_models import shipped_models
from tests.builders import chain, save
from tests.conftest import cli_process, one_line_error, run_cli, start_cli, stderr_once_ended, wait_for_file

# Every kind of collector state: chunk scores, a chunk_pair metric, pooled moments and NLC statistics.
METRICS = ["affinity", "cka", "r2_heldout", "cka_pooled", "r2_pooled", "nlc"]
OPTIONS = dict(metrics=METRICS, chunk_size=128, batch_size=32, progress=False)
TOL = 1e-12


@pytest.fixture(scope="module")
def rescnn():
    """The shipped residual CNN and its 1024 digits: 10 sites of several widths; under the default reduction
    (sample:16) each digit gives every site 16 rows, 128 chunks of 128."""
    m = next(x for x in shipped_models() if x.name == "torch_rescnn_relu")
    return str(m.path), str(m.data)


@pytest.fixture(scope="module")
def reference(rescnn):
    return analyze(*rescnn, **OPTIONS)


def assert_same(a, b, tol=TOL):
    """Every site, metric, status, chunk score and mean of two signatures, to tol."""
    assert [s["id"] for s in a.sites] == [s["id"] for s in b.sites]
    checked = 0
    for sa, sb in zip(a.sites, b.sites, strict=True):
        assert (sa["status"], sa.get("rows"), sa.get("chunks")) == (sb["status"], sb.get("rows"), sb.get("chunks"))
        assert sa["metrics"].keys() == sb["metrics"].keys()
        for name, ea in sa["metrics"].items():
            eb = sb["metrics"][name]
            assert ea["status"] == eb["status"], (sa["id"], name)
            assert ea["chunks"] == eb["chunks"], (sa["id"], name)
            if ea["mean"] is not None:
                np.testing.assert_allclose(ea["values"], eb["values"], rtol=0, atol=tol)
                assert abs(ea["mean"] - eb["mean"]) <= tol
                checked += 1
    assert checked > 0
    assert a.network == b.network or _close_nlc(a.network, b.network, tol)
    assert a.data["samples"] == b.data["samples"]


def _close_nlc(x, y, tol):
    vx, vy = x["nlc"]["values"], y["nlc"]["values"]
    return vx.keys() == vy.keys() and all(abs(vx[k] - vy[k]) <= tol for k in vx)


def test_reference_exercises_every_kind_of_state(reference):
    site = next(s for s in reference.sites if s["status"] == "ok")
    rows = 16 * 1024  # sample:16, the default: 16 of each digit's 28×28 positions
    assert reference.options["reduce"] == "sample:16" and site["rows"] == rows and site["chunks"] == rows // 128
    m = site["metrics"]
    assert m["affinity"]["chunks"] == rows // 128 and m["r2_heldout"]["chunks"] == rows // 128 - 1  # pairs
    assert m["cka_pooled"]["pooled_rows"] == rows and m["nlc"]["status"] == "ok"
    assert reference.network["nlc"]["status"] == "ok"


# --- state files ---

def test_state_file_round_trips_bit_for_bit(tmp_path, rng):
    state = {"a": rng.standard_normal((5, 3)), "b": [rng.standard_normal(4).astype(np.float32), None, 1.5],
             "c": {"x": 0.1 + 0.2, "n": 7, "s": "text", "empty": np.zeros((0, 2), np.float32)}}
    back = load_state(save_state(tmp_path / "s.npz", state))
    assert back["a"].dtype == np.float64 and np.array_equal(back["a"], state["a"])
    assert back["b"][0].dtype == np.float32 and np.array_equal(back["b"][0], state["b"][0])
    assert back["b"][1:] == [None, 1.5] and back["c"]["x"] == 0.1 + 0.2 and back["c"]["s"] == "text"
    assert back["c"]["empty"].shape == (0, 2)


@pytest.mark.parametrize("content", [b"", b"not a zip at all", b"PK\x03\x04broken"])
def test_unreadable_state_is_a_clear_error(tmp_path, content):
    path = tmp_path / "bad.npz"
    path.write_bytes(content)
    with pytest.raises(OnnxaffError, match="not a readable onnxaff state file"):
        load_state(path)


# --- checkpoints and resume ---

def in_batch(run: Run, batches: int, act) -> None:
    """Call `act()` when batch `batches` enters the runtime (a signal delivered, a crash raised)."""
    original, count = run.runner.run, [0]

    def runner(names, feed):
        count[0] += 1
        if count[0] == batches:
            act()
        return original(names, feed)

    run.runner.run = runner


def interrupt_after(run: Run, batches: int, signum: int = signal.SIGINT) -> None:
    """Deliver a real signal to this process while batch `batches` is in the runtime."""
    in_batch(run, batches, lambda: signal.raise_signal(signum))


def crash_in(run: Run, batches: int, message: str = "simulated crash") -> None:
    """The runtime raises RuntimeError on batch `batches`."""

    def crash():
        raise RuntimeError(message)

    in_batch(run, batches, crash)


def checkpoint_after(rescnn, path, batches: int = 2):
    """A checkpoint of the reference run, left by a SIGINT during batch `batches`."""
    with open_run(*rescnn, checkpoint=path, **OPTIONS) as run:
        interrupt_after(run, batches)
        with pytest.raises(Interrupted):
            run.execute()
    return path


@pytest.mark.parametrize("batches, every", [(1, 0), pytest.param(7, 3, marks=pytest.mark.slow),
                                            pytest.param(31, 1, marks=pytest.mark.slow)])
def test_interrupt_then_resume_equals_one_run(rescnn, reference, tmp_path, batches, every):
    ckpt = tmp_path / "run.ckpt.npz"
    run = open_run(*rescnn, checkpoint=ckpt, **OPTIONS)
    interrupt_after(run, batches)
    found = signal.getsignal(signal.SIGINT)  # SIG_IGN where pytest runs as a background job of a script
    with pytest.raises(Interrupted, match=f"SIGINT after {32 * batches} of 1024 examples"):
        run.execute(every)
    run.close()
    assert signal.getsignal(signal.SIGINT) is found  # handlers put back
    assert ckpt.exists() and not list(tmp_path.glob(".*.tmp"))
    resumed = analyze(*rescnn, checkpoint=ckpt, resume=True, **OPTIONS)
    assert_same(reference, resumed, tol=0)  # the same batches in the same order: bit for bit
    assert resumed.data["samples"] == 1024


def test_sigterm_also_saves_and_resumes(rescnn, reference, tmp_path):
    ckpt = tmp_path / "run.ckpt.npz"
    run = open_run(*rescnn, checkpoint=ckpt, **OPTIONS)
    interrupt_after(run, 9, signal.SIGTERM)
    found = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Interrupted, match="SIGTERM after 288 of 1024"):
        run.execute()
    run.close()
    assert signal.getsignal(signal.SIGTERM) is found
    assert_same(reference, analyze(*rescnn, checkpoint=ckpt, resume=True, **OPTIONS), tol=0)


@pytest.mark.slow  # 4 s
def test_periodic_checkpoints_alone_allow_a_resume(rescnn, reference, tmp_path):
    """A kill -9 leaves only the last periodic checkpoint: resuming from it redoes the batches after it."""
    ckpt = tmp_path / "run.ckpt.npz"
    run = open_run(*rescnn, checkpoint=ckpt, **OPTIONS)
    crash_in(run, 12)
    with pytest.raises(RuntimeError):
        run.execute(5)
    run.close()
    assert load_state(ckpt)["cursor"] == 10 * 32
    assert_same(reference, analyze(*rescnn, checkpoint=ckpt, resume=True, **OPTIONS), tol=0)


def test_checkpoint_of_another_run_is_refused(rescnn, tmp_path):
    ckpt = checkpoint_after(rescnn, tmp_path / "run.ckpt.npz")
    other_model = next(x for x in shipped_models() if x.name == "torch_cnn_relu")
    with pytest.raises(OnnxaffError, match="from another model"):
        analyze(str(other_model.path), rescnn[1], checkpoint=ckpt, resume=True, **OPTIONS)
    with pytest.raises(OnnxaffError, match=r"from other options \(chunk_size\)"):
        analyze(*rescnn, checkpoint=ckpt, resume=True, **{**OPTIONS, "chunk_size": 256})
    data = np.load(rescnn[1])
    fewer = tmp_path / "fewer.npz"
    np.savez(fewer, **{k: v[:512] for k, v in data.items()})
    with pytest.raises(OnnxaffError, match="from another data set"):
        analyze(rescnn[0], str(fewer), checkpoint=ckpt, resume=True, **OPTIONS)
    with pytest.raises(OnnxaffError, match=r"\(another shard\)"):
        analyze(*rescnn, checkpoint=ckpt, resume=True, shard=(0, 2), **OPTIONS)
    with pytest.raises(OnnxaffError, match="no checkpoint to resume"):
        analyze(*rescnn, checkpoint=tmp_path / "none.npz", resume=True, **OPTIONS)


@pytest.mark.slow  # 3 s: two interpreters
def test_sigint_from_another_process_then_resume_via_cli(tmp_path, capfd):
    """The CLI as a user runs it: SIGINT arrives from outside, exit 130 with one line, --resume finishes.
    4096 batches, each followed by a checkpoint: the signal comes long before the end."""
    model = save(chain("Relu", "Tanh", width=8), tmp_path / "m.onnx")
    args = [model, "--data", "synthetic:gaussian:n=16384", "--metrics", "affinity,cka", "--chunk-size", 256,
            "--batch-size", 4, "--quiet"]
    ref = tmp_path / "ref.json"
    assert run_cli(capfd, "analyze", *args, "--out", ref)[0] == 0
    out = tmp_path / "sig.json"
    ckpt = tmp_path / "sig.json.ckpt.npz"
    proc = start_cli("analyze", *args, "--out", out, "--checkpoint-every", "1")
    wait_for_file(proc, ckpt)
    proc.send_signal(signal.SIGINT)
    err = stderr_once_ended(proc, "SIGINT", timeout=60)
    assert proc.returncode == 130, err
    assert err.strip().count("\n") == 0 and err.startswith("onnxaff: interrupted: SIGINT after"), err
    assert not out.exists() and ckpt.exists()
    kept = tmp_path / "kept.ckpt.npz"
    shutil.copy(ckpt, kept)
    code, _, err = run_cli(capfd, "analyze", *args, "--out", out, "--resume")
    assert code == 0, err
    assert not ckpt.exists()  # removed once the signature is written
    assert_same(read_signature(ref), read_signature(out), tol=0)
    # Forgetting --resume starts over, and says what it replaces.
    code, _, err = run_cli(capfd, "analyze", *args, "--out", tmp_path / "again.json", "--checkpoint", kept)
    assert code == 0 and not kept.exists()
    assert err.splitlines() == [f"warning: {kept} holds an interrupted run; starting over replaces it "
                                f"(--resume continues it)"]


def photo_folder(root, copies: int, name: str = "{k}_{name}"):
    """`copies` copies of the sample photos in one folder (sorted by copy number)."""
    from tests.test_images import sample_photos

    root.mkdir()
    for k in range(copies):
        for src in sample_photos():
            shutil.copy(src, root / name.format(k=k, name=src.name))
    return root


def test_resume_keeps_unreadable_files_counted(tmp_path):
    from tests.test_images import image_model

    root = photo_folder(tmp_path / "photos", 3)
    (root / "1_broken.jpg").write_bytes(b"not an image")
    (root / "2_empty.jpg").write_bytes(b"")
    model = image_model(["N", 3, 16, 16])
    opts = dict(metrics=["affinity"], chunk_size=2, batch_size=2, images={"preprocess": "raw", "workers": 0},
                progress=False)
    ref = analyze(model, str(root), **opts)
    with open_run(model, str(root), checkpoint=tmp_path / "c.npz", **opts) as run:
        interrupt_after(run, 4)  # after the first unreadable file (sorted order: 0_*, 1_broken, ...)
        with pytest.raises(Interrupted):
            run.execute()
    resumed = analyze(model, str(root), checkpoint=tmp_path / "c.npz", resume=True, **opts)
    assert sorted(s["file"] for s in resumed.data["skipped"]) == ["1_broken.jpg", "2_empty.jpg"]
    assert_same(ref, resumed, tol=0)


def decoding_run(tmp_path, capfd) -> tuple[list, Path]:
    """CLI arguments of a 10-batch image-folder run with 2 decoder processes, and the signature of the same
    run decoded inline (the reference a stopped and resumed run must equal)."""
    from tests.test_images import image_model

    root = photo_folder(tmp_path / "photos", 20, "{k:02d}_{name}")
    model = tmp_path / "m.onnx"
    onnx.save(image_model(["N", 3, 16, 16]), model)
    args = [model, "--data", root, "--preprocess", "raw", "--workers", 2, "--metrics", "affinity",
            "--chunk-size", 2, "--batch-size", 2, "--quiet"]
    ref = tmp_path / "ref.json"
    assert run_cli(capfd, "analyze", *args, "--workers", 0, "--out", ref)[0] == 0
    return args, ref


@pytest.mark.slow  # 2 s: decoding processes
def test_sigterm_to_the_whole_group_with_decoding_workers(tmp_path, capfd):
    """`timeout`, Slurm and systemd signal every process of the group: the decoders must not die with their
    tasks pending (the main process would wait for them forever); the run saves and exits 130."""
    args, ref = decoding_run(tmp_path, capfd)
    out, ckpt = tmp_path / "sig.json", tmp_path / "sig.json.ckpt.npz"
    proc = start_cli("analyze", *args, "--out", out, "--checkpoint-every", "1", start_new_session=True)
    wait_for_file(proc, ckpt)
    os.killpg(proc.pid, signal.SIGTERM)
    err = stderr_once_ended(proc, "SIGTERM to its process group", timeout=60)
    assert proc.returncode == 130, err
    assert err.startswith("onnxaff: interrupted: SIGTERM after"), err
    code, _, err = run_cli(capfd, "analyze", *args, "--out", out, "--resume")
    assert code == 0, err
    assert_same(read_signature(ref), read_signature(out), tol=0)


def test_damaged_checkpoint_and_unwritable_checkpoint_path(rescnn, tmp_path, capfd):
    ckpt = checkpoint_after(rescnn, tmp_path / "run.ckpt.npz")
    state = load_state(ckpt)
    del state["sites"][0]["buffer"]
    save_state(ckpt, state)
    with pytest.raises(OnnxaffError, match=r"checkpoint .* is damaged: sites\[0\]\.buffer: missing"):
        analyze(*rescnn, checkpoint=ckpt, resume=True, **OPTIONS)
    # The checkpoint's folder is checked before the run, not at the first Ctrl-C.
    missing = tmp_path / "gone" / "c.npz"
    one_line_error(run_cli(capfd, "analyze", rescnn[0], "--data", rescnn[1], "--metrics", "affinity", "--out",
                           tmp_path / "s.json", "--checkpoint", missing),
                   f"output folder does not exist: {missing.parent}")
    one_line_error(run_cli(capfd, "analyze", rescnn[0], "--data", rescnn[1], "--out", tmp_path / "s.json",
                           "--shard", "0/2", "--checkpoint-every", -1),
                   "--checkpoint-every must be 0 or positive, got -1")


# --- shards ---

@pytest.mark.parametrize("total, n, unit", [(1024, 3, 128), (1000, 3, 128), (100, 4, 64), (5, 3, 2), (0, 2, 8)])
def test_shard_windows_tile_the_data_on_unit_boundaries(total, n, unit):
    windows = [shard_window(total, (i, n), unit) for i in range(n)]
    assert windows[0][0] == 0 and windows[-1][1] == total
    for (a, b), (c, _) in zip(windows, windows[1:], strict=False):
        assert b == c and a <= b and a % unit == 0
    assert shard_window(total, None, unit) == (0, total)


@pytest.fixture(scope="module")
def parts(rescnn):
    return [shard_state(*rescnn, (i, 3), {k: v for k, v in OPTIONS.items() if k != "progress"}) for i in range(3)]


def test_three_shards_merged_equal_one_run(reference, parts):
    assert [(p["start"], p["stop"]) for p in parts] == [(0, 256), (256, 640), (640, 1024)]
    merged = merge_states(parts[::-1])  # any order given
    assert_same(reference, merged)
    assert merged.data["merged_from"]["shards"] == 3 and "shard" not in merged.data


def test_network_nlc_of_shards_past_its_example_limit(tmp_path):
    """The network NLC uses one run's first 1024 examples; shards that start later contribute none, and a shard
    straddling the limit only its share (before: every shard took its own first 1024, and the merge 1536)."""
    model = tmp_path / "m.onnx"
    onnx.save(chain("Relu", "Tanh", width=8), model)
    options = {"metrics": ["affinity", "nlc"], "chunk_size": 256, "batch_size": 64}
    data = "synthetic:gaussian:n=3072"
    one = analyze(str(model), data, progress=False, **options)
    parts = [shard_state(str(model), data, (i, 4), options) for i in range(4)]
    assert [p["start"] for p in parts] == [0, 768, 1536, 2304]
    assert [p["network"]["examples"] for p in parts] == [768, 256, 0, 0]
    merged = merge_states(parts)
    assert one.network["nlc"]["examples"] == merged.network["nlc"]["examples"] == 1024
    assert_same(one, merged)


def test_merge_says_when_a_shard_ends_between_chunks(tmp_path):
    """An unreadable file leaves its shard a row short of a chunk boundary: the merge cannot be one run's
    chunking there, and says so; the chunk scores stay in data order. One row per example (reduce mean): under the
    default's 16 rows a photo, 2-row chunks always end on a boundary."""
    from tests.test_images import image_model

    root = photo_folder(tmp_path / "photos", 4)
    (root / "0_zbroken.jpg").write_bytes(b"not an image")
    model = tmp_path / "m.onnx"
    onnx.save(image_model(["N", 3, 16, 16]), model)
    options = {"metrics": ["affinity"], "chunk_size": 2, "reduce": "mean", "batch_size": 2,
               "images": {"preprocess": "raw", "workers": 0}}
    parts = [shard_state(str(model), str(root), (i, 2), options) for i in range(2)]
    merged = merge_states(parts)
    assert merged.warnings[-1].startswith("shard(s) 0/2 ended between chunk boundaries")
    one = analyze(str(model), str(root), progress=False, **options)
    assert not any("chunk boundaries" in w for w in one.warnings)
    assert merged.sites[0]["rows"] == one.sites[0]["rows"]
    assert merged.sites[0]["metrics"]["affinity"]["chunks"] == one.sites[0]["metrics"]["affinity"]["chunks"]


def test_merge_refuses_incomplete_or_mixed_parts(parts, rescnn):
    with pytest.raises(OnnxaffError, match="missing 1/3"):
        merge_states([parts[0], parts[2]])
    with pytest.raises(OnnxaffError, match="given twice: 0/3"):
        merge_states([parts[0], parts[0], parts[2]])
    other = dict(parts[1], key=dict(parts[1]["key"], model_sha256="0" * 64))
    with pytest.raises(OnnxaffError, match="one is from another model"):
        merge_states([parts[0], other, parts[2]])
    with pytest.raises(OnnxaffError, match="different shard counts"):
        merge_states([parts[0], dict(parts[1], shard=[1, 4])])
    # A part whose site records are gone (a state file of version 3 saved them as sites_base) merged into no site.
    with pytest.raises(OnnxaffError, match="site_records: no record of site"):
        merge_states([dict(parts[0], site_records=[]), parts[1], parts[2]])


@pytest.mark.slow  # 3 s: four interpreters
def test_shards_and_merge_through_the_cli(rescnn, reference, tmp_path, capfd):
    common = ["--metrics", ",".join(METRICS), "--chunk-size", 128, "--batch-size", 32, "--quiet"]
    outs = []
    for i in range(3):
        out = tmp_path / f"part{i}.json"
        code, _, err = run_cli(capfd, "analyze", rescnn[0], "--data", rescnn[1], *common, "--shard", f"{i}/3",
                               "--out", out)
        assert code == 0, err
        part = json.loads(out.read_text())
        assert part["data"]["shard"]["index"] == i and (tmp_path / f"part{i}.state.npz").exists()
        outs.append(out)
    merged = tmp_path / "merged.json"
    code, _, err = run_cli(capfd, "merge", *outs, "--out", merged, "--quiet")
    assert code == 0, err
    assert_same(reference, read_signature(merged))
    # a part whose state file changed afterwards is refused
    (tmp_path / "part1.state.npz").write_bytes((tmp_path / "part1.state.npz").read_bytes() + b"\0")
    one_line_error(run_cli(capfd, "merge", *outs, "--out", tmp_path / "again.json"),
                   "has changed since the part was written")
    code, _, err = run_cli(capfd, "analyze", rescnn[0], "--data", rescnn[1], "--shard", "3/3")
    assert code == 2 and "0 <= i < n" in err


def test_shard_with_no_full_chunk_merges_to_the_partial_rule(tmp_path):
    """Fewer rows than a chunk: all shards but the last are empty, the merge scores the lone partial chunk."""
    model = chain("Relu", width=2)
    opts = dict(metrics=["affinity"], chunk_size=512, batch_size=16)
    ref = analyze(model, "synthetic:gaussian:n=100", progress=False, **opts)
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    merged = merge_states([shard_state(str(path), "synthetic:gaussian:n=100", (i, 3), opts) for i in range(3)])
    assert merged.sites[0]["metrics"]["affinity"]["partial"] is True
    assert_same(ref, merged)


@pytest.mark.slow  # 9 s: starts a local Ray cluster
def test_ray_executor_equals_one_run(rescnn, reference, tmp_path):
    pytest.importorskip("ray")
    out = tmp_path / "ray.json"
    env = dict(os.environ, RAY_DISABLE_USAGE_STATS="1")
    r = cli_process("analyze", rescnn[0], "--data", rescnn[1], "--metrics", ",".join(METRICS), "--chunk-size", 128,
                    "--batch-size", 32, "--executor", "ray", "--shards", 3, "--quiet", "--out", out, env=env,
                    timeout=300)
    assert r.returncode == 0, r.stderr
    sig = read_signature(out)
    assert sig.runtime["executor"]["engine"] == "ray" and sig.runtime["executor"]["shards"] == 3
    # 3 shards on this 2-core box: one core each, and as many onnxruntime threads (not one per core per task)
    cpus = sig.runtime["executor"]["cpus_per_task"]
    assert cpus == max(1, min(os.cpu_count() or 1, (os.cpu_count() or 1) // 3))
    # Ray's tasks run onnxruntime on that many threads: the one run to equal exactly uses as many
    assert_same(analyze(*rescnn, **OPTIONS, threads=cpus), sig)
    assert merge_parts  # the CLI path and merge_states share one implementation


def test_threads_reach_every_session(rescnn):
    run = open_run(*rescnn, **{**OPTIONS, "metrics": ["affinity", "nlc"]}, threads=1)
    assert run.runner.session.get_session_options().intra_op_num_threads == 1
    assert run.feeder.network.runner.session.get_session_options().intra_op_num_threads == 1
    assert "threads" not in run.state.key["options"]  # a result does not depend on it


def _interrupted_then_resumed(tmp_path, model, data, batches: int, **options) -> None:
    """A run stopped by SIGINT during batch `batches`, resumed from its checkpoint, equals one run exactly."""
    ckpt = tmp_path / "c.ckpt.npz"
    with open_run(model, data, checkpoint=ckpt, **options) as run:
        interrupt_after(run, batches)
        with pytest.raises(Interrupted):
            run.execute()
    assert_same(analyze(model, data, **options), analyze(model, data, checkpoint=ckpt, resume=True, **options),
                tol=0)


def test_resume_past_the_network_nlc_window_with_a_batch_that_does_not_divide_it(tmp_path):
    """The network NLC adds whole batches until 1024 examples: at batch 100 it holds 1100, which the checkpoint
    check once called damaged."""
    model = save(chain("Tanh", width=8), tmp_path / "m.onnx")
    opts = dict(metrics=["nlc", "affinity"], chunk_size=256, batch_size=100, limit=1500, progress=False)
    _interrupted_then_resumed(tmp_path, model, "synthetic:gaussian:n=1500", 13, **opts)


def test_resume_of_a_sequence_first_site(tmp_path):
    """A site on [S, N, E] (PyTorch's default for attention and LSTMs) adds S rows a batch whatever its size: its
    rows are no multiple of the examples, which the checkpoint check once called damaged."""
    from tests.conftest import parse

    model = save(parse('<ir_version: 8, opset_import: ["" : 17]> g (float[N, 10, 4] x) => (float[10, N, 4] y) '
                       '{ h = Transpose<perm = [1, 0, 2]>(x)  y = Relu(h) }'), tmp_path / "m.onnx")
    opts = dict(metrics=["affinity"], chunk_size=16, batch_size=64, limit=192, progress=False)
    _interrupted_then_resumed(tmp_path, model, "synthetic:gaussian:n=192", 3, **opts)

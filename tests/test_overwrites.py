"""No data loss: an output never replaces an input or another output, a checkpoint path never deletes a file that
is not a checkpoint, a failed final write keeps the run's results, and killed saves leave no temporaries behind.

Every refusal is one line (`onnxaff: error: ...`), comes before the analysis, and leaves every file byte for byte.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from onnxaff.analysis.checkpoint import save_state, state_kind
from onnxaff.errors import OnnxaffError
from onnxaff.format.signature import read_signature
from onnxaff.foundations.files import _temporary_beside, refuse_overwrite, same_file
from tests.builders import HEADER, chain
from tests.conftest import one_line_error, refuse_calls, run_cli

OPTS = ["--metrics", "affinity,cka", "--chunk-size", "16", "--batch-size", "8", "--quiet"]


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    monkeypatch.delenv("ONNXAFF_DEBUG", raising=False)
    monkeypatch.chdir(tmp_path)  # relative names as a user types them


@pytest.fixture
def files(tmp_path, rng):
    """A model, its data, a text file and a plugin in the working directory."""
    onnx.save(chain("Relu", "Tanh"), tmp_path / "m.onnx")
    np.save(tmp_path / "x.npy", rng.standard_normal((64, 4)).astype(np.float32))
    (tmp_path / "notes.txt").write_text("a week of lab notes\n")
    (tmp_path / "plug.py").write_text("# no metric here\n")
    return tmp_path


def snapshot(folder) -> dict:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def refused(capfd, fragment: str, *args) -> str:
    return one_line_error(run_cli(capfd, *args), fragment)


@pytest.fixture
def no_run(monkeypatch):
    """A refusal must come before the data pass."""
    refuse_calls(monkeypatch, "the data pass started before the paths were checked",
                 "onnxaff.analysis.lifecycle.Run.execute", "onnxaff.results.executors.run_ray")


# --- one file under several names ---

def test_same_file_sees_through_names_links_and_missing_files(tmp_path):
    (tmp_path / "a.json").write_text("{}")
    os.symlink(tmp_path / "a.json", tmp_path / "link.json")
    os.link(tmp_path / "a.json", tmp_path / "hard.json")
    (tmp_path / "sub").mkdir()
    os.symlink(tmp_path / "sub", tmp_path / "alias")
    assert same_file("a.json", "./a.json") and same_file("a.json", tmp_path / "a.json")
    assert same_file("link.json", "a.json") and same_file("hard.json", "a.json")
    assert same_file("sub/../a.json", "a.json")
    assert same_file("alias/new.json", "sub/new.json")  # neither exists yet: where they would be written
    assert not same_file("a.json", "b.json") and not same_file("sub/new.json", "new.json")
    with pytest.raises(OnnxaffError, match=r"^--out ./a.json is the model link.json: an output never replaces"):
        refuse_overwrite([("--out", "./a.json")], [("the model", "link.json")])
    with pytest.raises(OnnxaffError, match=r"^--checkpoint hard.json and --out a.json are one file"):
        refuse_overwrite([("--out", "a.json"), ("--checkpoint", "hard.json")], [("the model", None)])
    refuse_overwrite([("--out", "b.json"), ("--checkpoint", None)], [("the model", "a.json")])


# --- analyze: outputs against inputs ---

@pytest.mark.parametrize("extra, fragment", [
    (["--out", "m.onnx"], "--out m.onnx is the model m.onnx"),
    (["--out", "./x.npy"], "--out ./x.npy is the data file x.npy"),
    (["--out", "xlink.npy"], "--out xlink.npy is the data file x.npy"),
    (["--out", "plug.py", "--plugin", "plug.py"], "--out plug.py is the plugin plug.py"),
    (["--out", "s.json", "--checkpoint", "./s.json"], "--checkpoint ./s.json and --out s.json are one file"),
    (["--out", "s.json", "--checkpoint", "x.npy"], "--checkpoint x.npy is the data file x.npy"),
    (["--out", "s.json", "--checkpoint", "m.onnx"], "--checkpoint m.onnx is the model m.onnx"),
    (["--out", "s.json", "--checkpoint", "s.state.npz", "--shard", "0/2"],
     "the shard's state file s.state.npz and --checkpoint s.state.npz are one file"),
], ids=["out=model", "out=data", "out=symlink-to-data", "out=plugin", "checkpoint=out", "checkpoint=data",
        "checkpoint=model", "checkpoint=part-state"])
def test_analyze_never_writes_over_its_inputs(capfd, files, no_run, extra, fragment):
    os.symlink("x.npy", files / "xlink.npy")
    before = snapshot(files)
    refused(capfd, fragment, "analyze", "m.onnx", "--data", "x.npy", *OPTS, *extra)
    assert snapshot(files) == before


def test_shard_state_file_never_replaces_the_data(capfd, files, no_run):
    """`--shard` also writes PART.state.npz: data named like it is an input too."""
    np.savez(files / "p.state.npz", x=np.load(files / "x.npy"))
    before = snapshot(files)
    refused(capfd, "the shard's state file p.state.npz is the data file p.state.npz",
            "analyze", "m.onnx", "--data", "p.state.npz", "--shard", "1/2", "--out", "p.json", *OPTS)
    assert snapshot(files) == before


def test_out_never_replaces_an_external_weight_file(capfd, tmp_path, rng, no_run):
    model = onnx.parser.parse_model(HEADER + " g (float[N, 4] x) => (float[N, 4] y) { h = MatMul(x, w)  y = Relu(h) }")
    model.graph.initializer.append(numpy_helper.from_array(rng.standard_normal((4, 4)).astype(np.float32), "w"))
    onnx.save_model(model, "ext.onnx", save_as_external_data=True, location="ext.weights", size_threshold=0)
    before = snapshot(tmp_path)
    refused(capfd, "--out ext.weights is an external weight file of the model", "analyze", "ext.onnx",
            "--data", "synthetic:gaussian:n=64", "--out", "ext.weights", *OPTS)
    refused(capfd, "--checkpoint ext.weights holds a file that is not an onnxaff checkpoint", "analyze", "ext.onnx",
            "--data", "synthetic:gaussian:n=64", "--out", "s.json", "--checkpoint", "./ext.weights", *OPTS)
    refused(capfd, "--out ./ext.weights is an external weight file of the model", "analyze", "ext.onnx",
            "--data", "synthetic:gaussian:n=64", "--out", "./ext.weights", "--executor", "ray", *OPTS)
    assert snapshot(tmp_path) == before


def test_out_never_replaces_an_image_of_the_data_folder(capfd, tmp_path, no_run):
    from tests.test_images import image_model, sample_photos

    (tmp_path / "photos").mkdir()
    photo = shutil.copy(sample_photos()[0], tmp_path / "photos" / "a.jpg")
    onnx.save(image_model(["N", 3, 16, 16]), "img.onnx")
    before = photo.read_bytes()
    refused(capfd, "--out photos/a.jpg is a file of the data folder", "analyze", "img.onnx", "--data", "photos",
            "--out", "photos/a.jpg", *OPTS)
    assert photo.read_bytes() == before


def test_out_never_replaces_a_sound_of_an_audio_folder_or_a_constant(capfd, tmp_path, no_run):
    """`--data audio:DIR` was not seen as a folder, and --constant files were not inputs (a hostile review)."""
    from tests.conftest import FIXTURES
    from tests.test_audio import pcm, write_wav

    (tmp_path / "wavs").mkdir()
    write_wav(tmp_path / "wavs" / "a.wav", pcm(0.5, 16000, 2), 16000, 2)
    np.save(tmp_path / "state.npy", np.zeros((32,), np.float32))
    before = {p: p.read_bytes() for p in (tmp_path / "wavs" / "a.wav", tmp_path / "state.npy")}
    vad = str(FIXTURES / "audio" / "vad_tiny.onnx")
    feed = ("--constant", "sr=16000", "--batch-axis", "state=1")
    refused(capfd, "--out wavs/a.wav is a file of the data folder", "analyze", vad, "--data", "audio:wavs", *feed,
            "--out", "wavs/a.wav", *OPTS)
    refused(capfd, "--out state.npy is the constant of state", "analyze", vad, "--data", "synthetic:gaussian:n=8",
            *feed, "--constant", "state=state.npy", "--out", "state.npy", *OPTS)
    assert {p: p.read_bytes() for p in before} == before


def test_out_that_is_a_fifo_or_device_is_refused(capfd, files):
    """Outputs are replaced by a rename: `--out /dev/null` run as root would put a file in place of the device.
    (Tested on a FIFO: a wrong result here must not damage the machine.)"""
    code, _, err = run_cli(capfd, "analyze", "m.onnx", "--data", "x.npy", "--out", "s.json", *OPTS)
    assert code == 0, err
    os.mkfifo(files / "pipe")
    refused(capfd, "output path is a device, FIFO or socket, not a file: pipe", "analyze", "m.onnx", "--data",
            "x.npy", "--out", "pipe", *OPTS)
    refused(capfd, "output path is a device, FIFO or socket, not a file: pipe", "report", "s.json", "--out", "pipe")
    assert stat.S_ISFIFO(os.lstat(files / "pipe").st_mode)


# --- the checkpoint path ---

@pytest.mark.parametrize("content, what", [
    (b"a week of lab notes\n", "a file that is not an onnxaff checkpoint"),
    (b"", "a file that is not an onnxaff checkpoint"),
    ("npz", "a file that is not an onnxaff checkpoint"),
    ("part", "a shard part's state"),
], ids=["text", "empty", "foreign-npz", "shard-part"])
def test_checkpoint_path_holding_another_file_is_refused_and_kept(capfd, files, no_run, content, what):
    """It used to be deleted after a successful run (or replaced at the first save)."""
    target = files / "keep.npz"
    if content == "npz":
        np.savez(target, weights=np.arange(5.0))
    elif content == "part":
        save_state(target, {"kind": "part", "cursor": 0})
    else:
        target.write_bytes(content)
    before = snapshot(files)
    refused(capfd, f"--checkpoint keep.npz holds {what}; it is left as it is: choose another --checkpoint",
            "analyze", "m.onnx", "--data", "x.npy", "--out", "s.json", "--checkpoint", "keep.npz", *OPTS)
    assert snapshot(files) == before
    refused(capfd, "holds", "analyze", "m.onnx", "--data", "x.npy", "--out", "s.json", "--checkpoint", "keep.npz",
            "--resume", *OPTS)
    assert snapshot(files) == before


def test_api_run_refuses_a_checkpoint_path_holding_another_file(files):
    from onnxaff.analysis import open_run

    with pytest.raises(OnnxaffError, match="holds a file that is not an onnxaff checkpoint"):
        open_run("m.onnx", "x.npy", metrics=["affinity"], chunk_size=16, progress=False, checkpoint="notes.txt")
    assert (files / "notes.txt").read_text() == "a week of lab notes\n"


def test_a_real_checkpoint_is_removed_after_the_run(capfd, files):
    """The one file the run may remove: a checkpoint (of this or an abandoned run) once the signature is written."""
    code, _, err = run_cli(capfd, "analyze", "m.onnx", "--data", "x.npy", "--out", "s.json", "--checkpoint-every", 1,
                           "--checkpoint", "c.npz", *OPTS)
    assert code == 0 and not (files / "c.npz").exists(), err
    save_state(files / "c.npz", {"kind": "checkpoint"})
    assert state_kind(files / "c.npz") == "checkpoint"
    code, _, err = run_cli(capfd, "analyze", "m.onnx", "--data", "x.npy", "--out", "s.json", "--checkpoint", "c.npz",
                           *OPTS)
    assert code == 0 and "starting over replaces it" in err and not (files / "c.npz").exists()


def test_temporaries_of_killed_checkpoint_saves_are_removed(capfd, files):
    """A kill -9 during a save leaves `.NAME.XXXXXXXX.tmp` beside the checkpoint: the next run on it removes those
    and only those."""
    killed = [_temporary_beside(files / "c.npz") for _ in range(2)]  # the names a killed save leaves
    for fd, _ in killed:
        os.write(fd, b"half a checkpoint")
        os.close(fd)
    others = [".c.npz.notes.tmp", ".c.npz.abcd1234.tmp.bak", "c.npz.abcd1234.tmp", ".d.npz.abcd1234.tmp",
              ".c.npz.ABCD1234.tmp", ".s.json.abcd1234.tmp"]
    for name in others:
        (files / name).write_text("not onnxaff's")
    (files / ".c.npz.dir12345.tmp").mkdir()
    code, _, err = run_cli(capfd, "analyze", "m.onnx", "--data", "x.npy", "--out", "s.json", "--checkpoint", "c.npz",
                           *OPTS)
    assert code == 0, err
    assert not any(os.path.exists(tmp) for _, tmp in killed)
    assert all((files / name).read_text() == "not onnxaff's" for name in others)
    assert (files / ".c.npz.dir12345.tmp").is_dir()


# --- a final write that fails keeps the results ---

def fail_writing(monkeypatch, suffix: str) -> list:
    """ENOSPC for every atomic write whose target ends with `suffix` (the others go through)."""
    import onnxaff.foundations.files as files_module

    real, failed = files_module.os.replace, []

    def replace(src, dst):
        if str(dst).endswith(suffix):
            failed.append(str(dst))
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(src, dst)

    monkeypatch.setattr(files_module.os, "replace", replace)
    return failed


@pytest.mark.parametrize("shard, metrics", [(None, "affinity,cka"), ("1/2", "affinity,cka"),
                                            (None, "affinity,cka,cka_pooled,nlc")])
def test_failed_signature_write_keeps_the_results_for_resume(capfd, files, monkeypatch, shard, metrics):
    """The finished pass is saved; resuming from it must not finish it again (pooled values were stored twice)."""
    sharding = ["--shard", shard] if shard else []
    opts = ["--metrics", metrics, *OPTS[2:]]
    code, _, err = run_cli(capfd, "analyze", "m.onnx", "--data", "x.npy", "--out", "ref.json", *sharding, *opts)
    assert code == 0, err
    with monkeypatch.context() as m:
        failed = fail_writing(m, ".json")
        line = refused(capfd, "cannot write s.json: No space left on device; the results are kept in s.json.ckpt.npz: "
                              "rerun the same command with --resume --checkpoint s.json.ckpt.npz and an output that "
                              "can be written", "analyze", "m.onnx", "--data", "x.npy", "--out", "s.json", *sharding,
                       *opts)
    assert failed == ["s.json"] and "\n" not in line
    assert state_kind(files / "s.json.ckpt.npz") == "checkpoint" and not (files / "s.json").exists()
    calls = []
    monkeypatch.setattr("onnxaff.analysis.feeder.Feeder.feed", lambda *a: calls.append(a))
    code, _, err = run_cli(capfd, "analyze", "m.onnx", "--data", "x.npy", "--out", "s2.json", "--resume",
                           "--checkpoint", "s.json.ckpt.npz", *sharding, *opts)
    assert code == 0, err
    assert calls == []  # written from the checkpoint: no batch ran again
    assert not (files / "s.json.ckpt.npz").exists()
    ref, again = read_signature(files / "ref.json"), read_signature(files / "s2.json")
    assert [s["metrics"] for s in again.sites] == [s["metrics"] for s in ref.sites]
    assert again.data["samples"] == ref.data["samples"] > 0
    if shard:
        assert (files / "s2.state.npz").exists() and state_kind(files / "s2.state.npz") == "part"


def test_failed_final_save_and_write_say_both(capfd, files, monkeypatch):
    with monkeypatch.context() as m:
        fail_writing(m, "")
        refused(capfd, "cannot write s.json: No space left on device; the final state could not be saved either "
                       "(cannot write s.json.ckpt.npz: No space left on device)",
                "analyze", "m.onnx", "--data", "x.npy", "--out", "s.json", *OPTS)
    assert sorted(p.name for p in files.iterdir()) == ["m.onnx", "notes.txt", "plug.py", "x.npy"]


# --- report, compare, correlate, merge ---

@pytest.fixture
def sigs(capfd, files):
    for seed in (0, 1, 2):
        code, _, err = run_cli(capfd, "analyze", "m.onnx", "--data", f"synthetic:gaussian:n=64,seed={seed}",
                               "--out", f"s{seed}.json", *OPTS)
        assert code == 0, err
    (files / "acc.csv").write_text("s0,0.9\ns1,0.8\ns2,0.7\n")
    (files / "groups.csv").write_text("s0,a\ns1,a\ns2,a\n")
    return files


@pytest.mark.parametrize("args, fragment", [
    (["report", "s0.json", "--out", "./s0.json"], "--out ./s0.json is the signature s0.json"),
    (["report", "s0.json", "--out", "s0link.json"], "--out s0link.json is the signature s0.json"),
    (["compare", "s0.json", "s1.json", "--out", "s1.json", "--format", "json"], "--out s1.json is the signature s1"),
    (["correlate", "s0.json", "s1.json", "s2.json", "--accuracy", "acc.csv", "--out", "acc.csv"],
     "--out acc.csv is --accuracy acc.csv"),
    (["correlate", "s0.json", "s1.json", "s2.json", "--accuracy", "acc.csv", "--group", "groups.csv",
      "--out", "groups.csv"], "--out groups.csv is --group groups.csv"),
    (["correlate", "s0.json", "s1.json", "s2.json", "--accuracy", "acc.csv", "--out", "s2.json"],
     "--out s2.json is the signature s2.json"),
    # LABEL=PATH: the path after the label is the input
    (["compare", "a=s0.json", "b=./s1.json", "--out", "s1.json", "--format", "md"], "--out s1.json is the signature"),
    (["compare", "a=s0.json", "b=s1.json", "--out", "s0link.json", "--format", "csv"],
     "--out s0link.json is the signature s0.json"),
    (["correlate", "s0=s0.json", "s1=s1.json", "s2=s2.json", "--accuracy", "acc.csv", "--out", "./s2.json"],
     "--out ./s2.json is the signature s2.json"),
], ids=["report", "report-symlink", "compare", "correlate-accuracy", "correlate-group", "correlate-signature",
        "compare-label", "compare-label-symlink", "correlate-label"])
def test_reports_never_write_over_their_inputs(capfd, sigs, args, fragment):
    os.symlink("s0.json", sigs / "s0link.json")
    before = snapshot(sigs)
    refused(capfd, fragment, *args)
    assert snapshot(sigs) == before


@pytest.mark.parametrize("out", ["p0.json", "./p0.state.npz", "p1.state.npz"])
def test_merge_never_writes_over_a_part(capfd, files, out):
    for i in (0, 1):
        code, _, err = run_cli(capfd, "analyze", "m.onnx", "--data", "x.npy", "--shard", f"{i}/2", "--out",
                               f"p{i}.json", *OPTS)
        assert code == 0, err
    before = snapshot(files)
    refused(capfd, f"--out {out} is a part", "merge", "p0.json", "p1.state.npz", "--out", out, "--quiet")
    assert snapshot(files) == before
    code, _, err = run_cli(capfd, "merge", "p0.json", "p1.state.npz", "--out", "merged.json", "--quiet")
    assert code == 0, err


@pytest.mark.parametrize("extra", [["--checkpoint-every", "5"], ["--checkpoint", "c.npz"]])
def test_ray_refuses_checkpoint_options_it_would_ignore(capfd, files, extra):
    """Ray runs keep no checkpoint: these options were accepted and silently ignored."""
    refused(capfd, "--executor ray runs every shard itself and keeps no checkpoint", "analyze", "m.onnx",
            "--data", "x.npy", "--out", "s.json", "--executor", "ray", *extra, *OPTS)

"""What makes a study's signature or a checkpoint stale: the data's content, not its size and modification time
(a file rewritten with the same size and its mtime put back, as `cp -p`, `rsync -t` and `tar` leave it); the
options a run takes, not how they were spelt (the CLI sends every default, the Python API only what is given);
and the progress line of a resumed run (issue 50).

Every comparison with a fresh run is at tolerance 0: the same code on one machine, twice."""

from __future__ import annotations

import io
import json
import os
import re
import time

import numpy as np
import pytest
from PIL import Image

import onnxaff
from onnxaff.analysis import open_run
from onnxaff.errors import OnnxaffError
from onnxaff.foundations.progress import Progress
from tests.builders import chain, save
from tests.conftest import run_cli
from tests.test_scale import interrupt_after

FAST = ["--metrics", "affinity", "--chunk-size", "32", "--batch-size", "16", "--chunk-workers", "0"]


def rewrite_keeping_size_and_mtime(path, write) -> None:
    """`write(path)` puts other content there; the file keeps its size, and its times are put back."""
    st = os.stat(path)
    write(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    again = os.stat(path)
    assert (again.st_size, again.st_mtime_ns) == (st.st_size, st.st_mtime_ns)  # only the bytes differ


def npz(path, seed: int) -> str:
    np.savez(path, x=np.random.default_rng(seed).normal(size=(128, 4)).astype(np.float32))
    return str(path)


def score(folder, label: str) -> float:
    sig = json.loads((folder / "signatures" / f"{label}.json").read_text())
    return sig["sites"][0]["metrics"]["affinity"]["mean"]


def test_an_npz_rewritten_with_the_same_size_and_mtime_is_analysed_again(tmp_path, capfd):
    model = save(chain("Tanh"), tmp_path / "tanh.onnx")
    data = npz(tmp_path / "x.npz", seed=1)
    args = ("study", model, "--data", data, *FAST)
    assert run_cli(capfd, *args, "--out", tmp_path / "s")[0] == 0
    before = score(tmp_path / "s", "tanh")
    rewrite_keeping_size_and_mtime(data, lambda p: npz(p, seed=2))
    code, _, err = run_cli(capfd, *args, "--out", tmp_path / "s")
    assert code == 0 and ": up to date" not in err and "analysing (the data changed)" in err, err
    assert run_cli(capfd, *args, "--out", tmp_path / "fresh")[0] == 0
    assert score(tmp_path / "s", "tanh") == score(tmp_path / "fresh", "tanh") != before


def bmp_folder(root, seed: int, count: int = 24):
    root.mkdir(exist_ok=True)
    rng = np.random.default_rng(seed)
    for k in range(count):
        Image.fromarray(rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)).save(root / f"{k:03d}.bmp")
    return root


def test_a_folder_of_bmps_rewritten_with_the_same_sizes_and_mtimes_is_analysed_again(tmp_path, capfd):
    model = save(chain("Tanh", dims="N, 3, 8, 8"), tmp_path / "tanh.onnx")
    data = bmp_folder(tmp_path / "images", seed=1)
    args = ("study", model, "--data", data, "--preprocess", "raw", "--resize", "8", "--crop", "8", "--workers", "0",
            *FAST)
    assert run_cli(capfd, *args, "--out", tmp_path / "s")[0] == 0
    before = score(tmp_path / "s", "tanh")

    def other_pixels(path):  # a BMP of the same dimensions: the same size, byte for byte
        Image.fromarray(np.random.default_rng(9).integers(0, 256, (8, 8, 3), dtype=np.uint8)).save(path)

    for name in ("000.bmp", "005.bmp", "017.bmp"):
        rewrite_keeping_size_and_mtime(data / name, other_pixels)
    code, _, err = run_cli(capfd, *args, "--out", tmp_path / "s")
    assert code == 0 and ": up to date" not in err and "analysing (the data changed)" in err, err
    assert run_cli(capfd, *args, "--out", tmp_path / "fresh")[0] == 0
    assert score(tmp_path / "s", "tanh") == score(tmp_path / "fresh", "tanh") != before
    # The same study through the Python API, its image options as one value and no decode workers: up to date.
    again = onnxaff.study([model], str(data), tmp_path / "s", metrics=["affinity"], chunk_size=32, batch_size=16,
                          progress=False, preprocess=onnxaff.ImagePreprocess(preset="raw", resize=8, crop=8))
    assert again.skipped == ["tanh"]


OPTIONS = dict(metrics=["affinity"], chunk_size=32, batch_size=16, progress=False, chunk_workers=0)


def interrupted(model, data, ckpt):
    with open_run(model, data, checkpoint=ckpt, **OPTIONS) as run:
        interrupt_after(run, 3)
        with pytest.raises(onnxaff.errors.Interrupted):
            run.execute()
    return ckpt


def test_a_checkpoint_of_data_rewritten_with_the_same_size_and_mtime_is_never_continued(tmp_path, capfd):
    model = chain("Tanh")
    saved = save(model, tmp_path / "tanh.onnx")
    data = npz(tmp_path / "x.npz", seed=1)
    ckpt = interrupted(model, data, tmp_path / "c.npz")
    rewrite_keeping_size_and_mtime(data, lambda p: npz(p, seed=2))
    with pytest.raises(OnnxaffError, match="another data set"):
        open_run(model, data, checkpoint=ckpt, resume="always", **OPTIONS)
    code, _, err = run_cli(capfd, "analyze", saved, "--data", data, "--out", tmp_path / "o.json", "--checkpoint",
                           ckpt, "--resume", *FAST)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "another data set" in err, err
    # A study's model (resume auto, on mismatch restart) starts over: the rows of the old data are not mixed in.
    lines = []
    with open_run(model, data, checkpoint=ckpt, resume="auto", on_mismatch="restart", echo=lines.append,
                  **OPTIONS) as run:
        assert run.state.cursor == 0
        run.execute(finish=True)
        resumed = run.signature()
    assert "starting over" in lines[0]
    fresh = onnxaff.analyze(model, data, **OPTIONS)
    assert resumed.sites[0]["metrics"]["affinity"]["mean"] == fresh.sites[0]["metrics"]["affinity"]["mean"]


def test_a_study_made_by_the_cli_is_up_to_date_for_the_python_api_with_the_same_options(tmp_path, capfd):
    model = save(chain("Tanh"), tmp_path / "tanh.onnx")
    data = npz(tmp_path / "x.npz", seed=1)
    out = tmp_path / "s"
    assert run_cli(capfd, "study", model, "--data", data, "--out", out, *FAST, "--workers", "3")[0] == 0
    again = onnxaff.study([model], data, out, metrics=["affinity"], chunk_size=32, batch_size=16, progress=False)
    assert again.skipped == ["tanh"]
    # Options that change only the speed (decode workers, scoring threads, onnxruntime's threads) keep it current.
    again = onnxaff.study([model], data, out, metrics=["affinity"], chunk_size=32, batch_size=16, progress=False,
                          chunk_workers=1, threads=1, preprocess=onnxaff.ImagePreprocess(workers=1))
    assert again.skipped == ["tanh"]
    code, _, err = run_cli(capfd, "study", model, "--data", data, "--out", out, *FAST)
    assert code == 0 and "up to date" in err, err


def test_a_study_redoing_a_model_for_its_options_names_each_option_and_both_values(tmp_path, capfd):
    model = save(chain("Tanh"), tmp_path / "tanh.onnx")
    data = npz(tmp_path / "x.npz", seed=1)
    out = tmp_path / "s"
    assert run_cli(capfd, "study", model, "--data", data, "--out", out, *FAST)[0] == 0
    code, _, err = run_cli(capfd, "study", model, "--data", data, "--out", out, *FAST, "--chunk-size", "64",
                           "--seed", "3")
    assert code == 0, err
    assert "analysing (the options changed: --chunk-size 32 → 64, --seed 0 → 3)" in err, err
    lines = []
    onnxaff.studies.run_study([onnxaff.studies.StudyModel("tanh", tmp_path / "tanh.onnx")], data, out,
                              options=dict(metrics=["affinity"], chunk_size=64, batch_size=16, progress=False),
                              echo=lines.append)
    assert any("analysing (the options changed: seed 3 → 0)" in line for line in lines), lines


# --- progress after a resume ---

def test_a_resumed_runs_rate_counts_only_this_processes_examples_and_its_eta_what_remains(monkeypatch):
    clock = [100.0]
    monkeypatch.setattr("onnxaff.foundations.progress.time.perf_counter", lambda: clock[0])
    stream = io.StringIO()
    bar = Progress(1000, stream=stream, resumed=900)
    assert bar.done == 900 and "ETA --:--" in bar.line()  # nothing fed here yet: no rate, no estimate
    clock[0] += 10.0
    bar.update(50)  # 50 examples in 10 s here: 5 a second, 50 left
    line = bar.line()
    assert "950/1000" in line and re.search(r"\b5\.0 samples/s", line) and "ETA 00:10" in line, line


def test_a_resumed_run_prints_the_rate_of_its_own_examples(tmp_path, monkeypatch):
    model = chain("Tanh")
    data = npz(tmp_path / "x.npz", seed=1)
    ckpt = interrupted(model, data, tmp_path / "c.npz")
    bars = []
    real = Progress.__init__

    def spy(self, *args, **kw):
        real(self, *args, **kw)
        bars.append(self)

    monkeypatch.setattr(Progress, "__init__", spy)
    with open_run(model, data, checkpoint=ckpt, resume="always", **{**OPTIONS, "progress": True}) as run:
        run.execute(finish=True)
    bar = bars[0]
    assert (bar.total, bar.done, bar.resumed) == (128, 128, 48)  # 3 batches of 16 came from the checkpoint
    t0 = time.perf_counter()
    line = bar.line()
    t1 = time.perf_counter()
    rate = float(re.search(r"([\d.]+) samples/s", line).group(1))
    assert 80 / (t1 - bar.start) - 0.05 <= rate <= 80 / (t0 - bar.start) + 0.05, line  # 80 fed here, not 128


def test_the_data_is_hashed_only_for_a_state_that_is_saved(tmp_path, capfd, monkeypatch):
    """Every file's sha256 keys a checkpoint or a shard's part; a run that can save neither (the Python API without
    a checkpoint) and a dry run read no file for it (a limit of 64 over a large folder read the whole folder to key
    a state nothing compares). The command line always has a checkpoint (saved on Ctrl-C): keyed."""
    import onnxaff.analysis.checkpoint as checkpoint

    calls = []
    real = checkpoint.data_content
    monkeypatch.setattr(checkpoint, "data_content", lambda spec: calls.append(spec) or real(spec))
    model, data = save(chain("Relu", width=4), tmp_path / "m.onnx"), npz(tmp_path / "d.npz", 0)
    common = ("--data", data, "--metrics", "cka", "--chunk-size", 32, "--quiet")
    onnxaff.analyze(model, data, metrics=["cka"], chunk_size=32, progress=False)
    assert run_cli(capfd, "analyze", model, *common, "--dry-run")[0] == 0
    assert calls == []
    assert run_cli(capfd, "analyze", model, *common, "--checkpoint", tmp_path / "c.npz", "--out",
                   tmp_path / "b.json")[0] == 0
    assert calls == [data]
    assert run_cli(capfd, "analyze", model, *common, "--shard", "0/2", "--out", tmp_path / "part.npz")[0] == 0
    assert calls == [data, data]

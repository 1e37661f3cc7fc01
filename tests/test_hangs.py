"""Hangs and silently wrong numbers on the data side: dead decoders, image bombs, 16-bit images, linked
folders, too little data, lazy .npz members, Ray workers and addresses, NumPy warnings on Inf."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import onnx
import pytest

from onnxaff.signature import read_signature
from tests.test_scale import assert_same, cli, photo_folder


def _decoder_pids(parent: int) -> list[int]:
    """The spawned decoder processes of `parent` (not its resource tracker)."""
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            cmdline = (stat.parent / "cmdline").read_bytes()
        except OSError:
            continue
        if int(fields[1]) == parent and b"spawn_main" in cmdline:
            pids.append(int(stat.parent.name))
    return pids


def test_killed_decoder_stops_the_run_saves_and_resumes(tmp_path):
    """The out-of-memory killer's SIGKILL on a decoder: one line naming the batch within seconds, the state up
    to the last complete batch saved, and --resume equals an uninterrupted run bit for bit."""
    from tests.test_images import image_model

    root = photo_folder(tmp_path / "photos", 20, "{k:02d}_{name}")
    model = tmp_path / "m.onnx"
    onnx.save(image_model(["N", 3, 16, 16]), model)
    args = [model, "--data", root, "--preprocess", "raw", "--workers", 2, "--metrics", "affinity",
            "--chunk-size", 2, "--batch-size", 2, "--quiet"]
    ref = tmp_path / "ref.json"
    assert cli("analyze", *args, "--workers", 0, "--out", ref).returncode == 0
    out, ckpt = tmp_path / "sig.json", tmp_path / "sig.json.ckpt.npz"
    proc = subprocess.Popen([sys.executable, "-m", "onnxaff.cli", "analyze", *map(str, args), "--out", str(out),
                             "--checkpoint-every", "1"], stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 60
    while not ckpt.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    victims = _decoder_pids(proc.pid)
    assert victims and proc.poll() is None
    os.kill(victims[0], signal.SIGKILL)
    killed = time.monotonic()
    try:
        _, err = proc.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail("the run hung after a decoder was killed")
    assert time.monotonic() - killed < 10
    assert proc.returncode == 2, err
    assert err.count("\n") == 1 and err.startswith("onnxaff: error: an image decoder process died"), err
    assert "batch" in err and "saved to" in err and "--resume" in err, err
    assert not out.exists() and ckpt.exists()
    done = cli("analyze", *args, "--out", out, "--resume")
    assert done.returncode == 0, done.stderr
    assert_same(read_signature(ref), read_signature(out), tol=0)

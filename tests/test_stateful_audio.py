"""The silero-vad-style fixture (tests/fixtures/audio/vad_tiny.onnx: waveform `input` [B, 512], a `[2, B, 32]`
recurrent `state`, a rank-0 int64 `sr`) analysed as its users run it: `--constant sr=16000 --batch-axis state=1`,
on synthetic data and on a folder of WAV files (issue 27's acceptance)."""

from __future__ import annotations

import numpy as np
import pytest

from onnxaff.format.signature import read_signature
from tests.conftest import FIXTURES, run_cli
from tests.test_audio import pcm, write_wav

VAD = FIXTURES / "audio" / "vad_tiny.onnx"
FEED = ("--constant", "sr=16000", "--batch-axis", "state=1")


def _all_ok(sig) -> None:
    assert len(sig.sites) == 9
    for s in sig.sites:
        entry = s["metrics"]["affinity"]
        assert s["status"] == "ok" and entry["status"] == "ok" and np.isfinite(entry["mean"]), s


@pytest.mark.parametrize("data", ["synthetic", "audio"])
def test_vad_with_a_constant_sample_rate_and_its_state_on_axis_1(data, capfd, tmp_path):
    if data == "audio":
        root = tmp_path / "wav"
        root.mkdir()
        for k, (rate, seconds) in enumerate(((16000, 2.0), (8000, 1.5), (44100, 1.0))):
            write_wav(root / f"clip{k}.wav", pcm(seconds, rate, 2, seed=k), rate, 2)
        spec = f"audio:{root}"
    else:
        spec = "synthetic:gaussian:n=96"
    out = tmp_path / "vad.json"
    code, _, err = run_cli(capfd, "analyze", VAD, "--data", spec, *FEED, "--metrics", "affinity", "--chunk-size", 32,
                           "--out", out, "--quiet")
    assert code == 0, err
    sig = read_signature(out)
    _all_ok(sig)
    assert sig.data["constants"] == {"sr": 16000}
    if data == "audio":  # 2 s + 1.5 s + 1 s at 16 kHz in windows of 512 samples; the state starts at zeros
        assert sig.data["samples"] == 32000 // 512 + 24000 // 512 + 16000 // 512 == 139
        assert sig.data["zeros"] == ["state"]


def test_vad_without_its_options_says_what_to_give(capfd, tmp_path):
    """Each missing option is one line naming the flag to give: the state's batch axis, then the sample rate."""
    out = tmp_path / "v.json"
    code, _, err = run_cli(capfd, "analyze", VAD, "--data", "synthetic:gaussian:n=32", "--out", out)
    assert code != 0 and len(err.strip().splitlines()) == 1 and "--batch-axis state=1" in err, err
    code, _, err = run_cli(capfd, "analyze", VAD, "--data", "synthetic:gaussian:n=32", "--batch-axis", "state=1",
                           "--out", out)
    assert code != 0 and len(err.strip().splitlines()) == 1 and "--constant sr=VALUE" in err, err
    assert not out.exists()

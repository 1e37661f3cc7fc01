"""Audio folders (onnxaff/data/audio.py): WAV and FLAC files mixed to mono, resampled, cut into windows of the
waveform input's length; unreadable files skipped and counted; a Conv1d model analysed end to end."""

import json
import math
import wave

import numpy as np
import pytest
from scipy.signal import resample_poly

from onnxaff.data import InputSpec, open_source
from onnxaff.errors import OnnxaffError
from tests.builders import save, with_weights
from tests.conftest import run_cli

T = 1024
WAVEFORM = [InputSpec("x", np.dtype(np.float32), ("N", 1, T))]
SCALE = {1: 127, 2: 32767, 3: 8388607, 4: 2147483647}


def pcm(seconds: float, rate: int, width: int, channels: int = 1, seed: int = 0) -> np.ndarray:
    """A 440 Hz sine plus noise as the integers a `width`-byte PCM file holds: int64 [frames, channels]."""
    rng = np.random.default_rng(seed)
    t = np.arange(round(seconds * rate)) / rate
    wave_ = [0.6 * np.sin(2 * np.pi * (440 + 110 * c) * t) + 0.05 * rng.standard_normal(t.size)
             for c in range(channels)]
    return np.round(np.clip(np.stack(wave_, axis=1), -1, 1) * SCALE[width]).astype(np.int64)


def write_wav(path, values: np.ndarray, rate: int, width: int) -> None:
    """Integer samples [frames, channels] as a PCM WAV (8-bit unsigned, the others signed little-endian)."""
    flat = values.reshape(-1)
    if width == 1:
        raw = (flat + 128).astype(np.uint8).tobytes()
    elif width == 3:
        raw = (flat.astype("<i4").view(np.uint8).reshape(-1, 4)[:, :3]).tobytes()
    else:
        raw = flat.astype(f"<i{width}").tobytes()
    with wave.open(str(path), "wb") as w:
        w.setnchannels(values.shape[1])
        w.setsampwidth(width)
        w.setframerate(rate)
        w.writeframes(raw)


def as_float(values: np.ndarray, width: int) -> np.ndarray:
    """What a reader should make of them: full scale 2^(8·width − 1), channels averaged."""
    return (values / float(2 ** (8 * width - 1))).mean(axis=1)


def windows(n: int, rate: int, to: int = 16000) -> int:
    g = math.gcd(rate, to)
    return math.ceil(n * (to // g) / (rate // g)) // T


@pytest.fixture
def audio_dir(tmp_path):
    """Four files: 8 kHz 16-bit mono, 44.1 kHz 8-bit stereo, 22.05 kHz 24-bit mono, 16 kHz 32-bit mono."""
    root = tmp_path / "audio"
    (root / "sub").mkdir(parents=True)
    files = {"a.wav": (8000, 2, 1, 0.9), "sub/b.wav": (44100, 1, 2, 0.5), "c.wav": (22050, 3, 1, 0.3),
             "d.WAV": (16000, 4, 1, 0.2)}
    made = {}
    for k, (name, (rate, width, channels, seconds)) in enumerate(files.items()):
        values = pcm(seconds, rate, width, channels, seed=k)
        write_wav(root / name, values, rate, width)
        made[name] = (values, rate, width)
    return root, made


def rows(source, batch_size=5, start=0, stop=None) -> np.ndarray:
    return np.concatenate([b["x"] for b in source.batches(batch_size, start, stop)])


def test_windows_are_counted_from_the_headers(audio_dir):
    root, made = audio_dir
    source = open_source(f"audio:{root}", WAVEFORM)
    want = sum(windows(len(v), rate) for v, rate, _ in made.values())
    assert want > 10 and len(source) == want == source.describe()["windows"]
    x = rows(source)
    assert x.shape == (want, 1, T) and x.dtype == np.float32
    d = source.describe()
    assert [f["file"] for f in d["files"]] == ["a.wav", "c.wav", "d.WAV", "sub/b.wav"]
    assert (d["sample_rate"], d["window"], d["skipped"], d["unreadable"]) == (16000, T, [], 0)
    assert "dropped" in d["partial_window"]


def test_decoding_and_resampling_match_scipy(audio_dir):
    """Each file's windows are resample_poly of its samples (reduced fraction), channels averaged, cut in order."""
    root, made = audio_dir
    x = rows(open_source(f"audio:{root}", WAVEFORM), batch_size=4)[:, 0, :]
    at = 0
    for name in ("a.wav", "c.wav", "d.WAV", "sub/b.wav"):
        values, rate, width = made[name]
        g = math.gcd(rate, 16000)
        want = as_float(values, width)
        want = want if rate == 16000 else resample_poly(want, 16000 // g, rate // g)
        k = windows(len(values), rate)
        np.testing.assert_allclose(x[at:at + k].reshape(-1), want[:k * T].astype(np.float32), atol=1e-6)
        at += k
    assert at == len(x)


def test_resampling_a_known_sine_keeps_it():
    """A 500 Hz tone at 8 kHz resampled to 16 kHz is the 500 Hz tone at 16 kHz (away from the ends)."""
    from onnxaff.data.audio import resample

    t8, t16 = np.arange(8000) / 8000, np.arange(16000) / 16000
    up = resample(np.sin(2 * np.pi * 500 * t8), 8000, 16000)
    assert up.shape == (16000,)
    np.testing.assert_allclose(up[500:-500], np.sin(2 * np.pi * 500 * t16)[500:-500], atol=2e-3)


def test_batches_are_numbered_the_same_every_time(audio_dir):
    root, _ = audio_dir
    source = open_source(f"audio:{root}", WAVEFORM)
    whole = rows(source)
    np.testing.assert_array_equal(rows(source, 3, 2, 9), whole[2:9])
    np.testing.assert_array_equal(rows(source, 3, 2, 9), rows(open_source(f"audio:{root}", WAVEFORM), 7, 2, 9))
    assert len(open_source(f"audio:{root}", WAVEFORM, limit=4)) == 4


def test_unreadable_files_are_skipped_and_counted(audio_dir):
    root, made = audio_dir
    (root / "bad.wav").write_bytes(b"not a wav file at all" * 10)
    values = pcm(0.5, 16000, 2)
    write_wav(root / "cut.wav", values, 16000, 2)
    data = (root / "cut.wav").read_bytes()
    (root / "cut.wav").write_bytes(data[:len(data) // 2])  # its header still says 0.5 s
    good = sum(windows(len(v), rate) for v, rate, _ in made.values())
    source = open_source(f"audio:{root}", WAVEFORM)
    assert len(source) == good + 1 + windows(len(values), 16000)  # bad.wav holds one (skipped) example
    x = rows(source)
    assert len(x) == good
    skipped = source.describe()["skipped"]
    assert [s["file"] for s in skipped] == ["bad.wav"] + ["cut.wav"] * windows(len(values), 16000)
    assert "truncated" in skipped[-1]["reason"] and skipped[0]["reason"]
    assert source.describe()["unreadable"] == 1


def test_waveform_input_of_rank_1(audio_dir):
    root, _ = audio_dir
    source = open_source(f"audio:{root}", [InputSpec("wav", np.dtype(np.float32), ("B", 512))])
    assert next(source.batches(3))["wav"].shape == (3, 512)


def test_waveform_input_errors(audio_dir, tmp_path):
    root, _ = audio_dir
    with pytest.raises(OnnxaffError, match="float input of shape"):
        open_source(f"audio:{root}", [InputSpec("img", np.dtype(np.float32), ("N", 3, 8, 8))])
    with pytest.raises(OnnxaffError, match="input_shapes"):
        open_source(f"audio:{root}", [InputSpec("x", np.dtype(np.float32), ("N", "T"))])
    fixed = open_source(f"audio:{root}", [InputSpec("x", np.dtype(np.float32), ("N", "T"))], shapes={"x": (256,)})
    assert next(fixed.batches(2))["x"].shape == (2, 256)
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("no audio here")
    with pytest.raises(OnnxaffError, match="no audio files"):
        open_source(f"audio:{tmp_path / 'empty'}", WAVEFORM)
    with pytest.raises(OnnxaffError, match="not found"):
        open_source(f"audio:{tmp_path / 'nowhere'}", WAVEFORM)


def test_flac_through_soundfile(tmp_path):
    sf = pytest.importorskip("soundfile")
    values = pcm(0.4, 22050, 2, channels=2)
    (tmp_path / "f").mkdir()
    sf.write(tmp_path / "f" / "a.flac", values.astype(np.int16), 22050, subtype="PCM_16")
    x = rows(open_source(f"audio:{tmp_path / 'f'}", WAVEFORM))[:, 0, :]
    want = resample_poly(as_float(values, 2), 320, 441)
    assert len(x) == windows(len(values), 22050) > 0
    np.testing.assert_allclose(x.reshape(-1), want[:x.size], atol=1e-6)


def conv1d_audio_model(rank: int = 3):
    """Waveform [N, 1, T] (or [N, T]) → Conv1d 1→8 (kernel 16, stride 8) → Relu → Conv1d 8→8 → Relu."""
    rng = np.random.default_rng(0)
    dims, lead = ("N, 1, 1024", "") if rank == 3 else ("N, 1024", "u = Unsqueeze(x, one)\n")
    src = "x" if rank == 3 else "u"
    return with_weights(f"""<ir_version: 8, opset_import: ["" : 17]>
    g (float[{dims}] x) => (float[N, 8, 125] y) {{
        {lead}h = Conv<kernel_shape = [16], strides = [8]>({src}, w1, b1)
        r = Relu(h)
        c = Conv<kernel_shape = [3]>(r, w2, b2)
        y = Relu(c)
    }}""", w1=(rng.standard_normal((8, 1, 16)) * 2).astype(np.float32), b1=np.zeros(8, np.float32),
        w2=(rng.standard_normal((8, 8, 3)) * 0.3).astype(np.float32), b2=np.zeros(8, np.float32),
        **({} if rank == 3 else {"one": np.array([1], np.int64)}))


@pytest.mark.parametrize("rank", [3, 2])
def test_analyze_a_conv1d_model_on_an_audio_folder(capfd, tmp_path, audio_dir, rank):
    root, made = audio_dir
    model = save(conv1d_audio_model(rank), tmp_path / "conv1d.onnx")
    out = tmp_path / "sig.json"
    code, _, err = run_cli(capfd, "analyze", model, "--data", f"audio:{root}", "--out", out, "--metrics", "affinity",
                           "--chunk-size", "8", "--quiet")
    assert code == 0, err
    sig = json.loads(out.read_text())
    want = sum(windows(len(v), rate) for v, rate, _ in made.values())
    assert (sig["data"]["kind"], sig["data"]["samples"], sig["data"]["windows"]) == ("audio_folder", want, want)
    assert sig["options"]["sample_rate"] == 16000
    sites = [s for s in sig["sites"] if s["status"] == "ok"]
    assert len(sites) == 2 and all((s["layout"], s["feature_axis"]) == ("channels_first", 1) for s in sites)
    assert all(s["metrics"]["affinity"]["status"] == "ok" for s in sites)


def test_sample_rate_changes_the_windows_and_is_recorded(capfd, tmp_path, audio_dir):
    root, made = audio_dir
    model = save(conv1d_audio_model(), tmp_path / "conv1d.onnx")
    out = tmp_path / "sig.json"
    code, _, err = run_cli(capfd, "analyze", model, "--data", f"audio:{root}", "--out", out, "--metrics", "affinity",
                           "--chunk-size", "4", "--sample-rate", "8000", "--quiet")
    assert code == 0, err
    sig = json.loads(out.read_text())
    assert sig["data"]["samples"] == sum(windows(len(v), rate, 8000) for v, rate, _ in made.values())
    assert sig["options"]["sample_rate"] == sig["data"]["sample_rate"] == 8000
    code, _, err = run_cli(capfd, "analyze", model, "--data", f"audio:{root}", "--out", out, "--sample-rate", "0")
    assert code != 0 and "--sample-rate" in err and len(err.strip().splitlines()) == 1


def test_a_folder_without_audio_is_a_one_line_error(capfd, tmp_path):
    model = save(conv1d_audio_model(), tmp_path / "conv1d.onnx")
    (tmp_path / "empty").mkdir()
    code, _, err = run_cli(capfd, "analyze", model, "--data", f"audio:{tmp_path / 'empty'}", "--out",
                           tmp_path / "s.json")
    assert code != 0 and "no audio files" in err and len(err.strip().splitlines()) == 1


def test_sample_rate_is_checked_and_recorded_for_audio_data_only():
    from onnxaff.analysis.config import AnalysisConfig
    from onnxaff.errors import ConfigError

    with pytest.raises(ConfigError) as info:
        AnalysisConfig(sample_rate=0)
    assert info.value.field == "sample_rate"
    config = AnalysisConfig(sample_rate=8000)
    assert config.signature_options(64, ["m"], audio=True)["sample_rate"] == 8000
    assert "sample_rate" not in config.signature_options(64, ["m"])  # other data: their options unchanged


def test_conv1d_tiny_fixture_sites_take_the_channels_and_run_on_audio(capfd, tmp_path, audio_dir):
    from onnxaff.analysis.sitelist import list_sites
    from onnxaff.graph import load_model
    from onnxaff.graph.reduction import feature_dim
    from tests.conftest import FIXTURES

    model = FIXTURES / "audio" / "conv1d_tiny.onnx"
    sites = list_sites(load_model(model), "auto", [], []).sites
    assert [(s.layout, feature_dim(s, "mean")) for s in sites] == [(s.layout, s.input_shape[1]) for s in sites]
    assert [feature_dim(s, "mean") for s in sites] == [8, 16, 16]
    assert {s.layout for s in sites} == {"channels_first"}
    root, made = audio_dir
    out = tmp_path / "sig.json"
    code, _, err = run_cli(capfd, "analyze", model, "--data", f"audio:{root}", "--out", out, "--metrics", "affinity",
                           "--chunk-size", "8", "--quiet")
    assert code == 0, err
    sig = json.loads(out.read_text())
    assert sig["data"]["samples"] == sum(windows(len(v), rate) for v, rate, _ in made.values())
    assert [s["metrics"]["affinity"]["status"] for s in sig["sites"]] == ["ok"] * 3


def test_vad_tiny_waveform_is_its_first_float_input_of_one_axis(audio_dir):
    """input [batch, 512] is the waveform; the state [2, batch, 32] is not this source's (zeros, with a warning)
    and the int64 sr is a constant (tests/test_feeding.py)."""
    import onnx

    from onnxaff.data import model_inputs
    from tests.conftest import FIXTURES

    inputs = model_inputs(onnx.load(FIXTURES / "audio" / "vad_tiny.onnx"), {"state": 1})
    root, _ = audio_dir
    source = open_source(f"audio:{root}", inputs, constants={"sr": 16000})
    batch = next(source.batches(4))
    assert list(batch) == ["input", "state", "sr"] and batch["input"].shape == (4, 512)
    assert batch["state"].shape == (2, 4, 32) and not batch["state"].any() and int(batch["sr"]) == 16000
    assert source.describe()["input"] == "input" and source.describe()["zeros"] == ["state"]
    assert any("model inputs state are not in the data" in w for w in source.warnings)


def test_two_shards_of_an_audio_folder_merged_equal_one_run(tmp_path, audio_dir):
    """Windows are numbered the same in every process: shards cut the same examples as one run."""
    from onnxaff.analysis import analyze
    from onnxaff.results.executors import shard_state
    from onnxaff.results.shards import merge_states

    root, _ = audio_dir
    model = save(conv1d_audio_model(), tmp_path / "conv1d.onnx")
    options = {"metrics": ["affinity"], "chunk_size": 4, "batch_size": 4, "sample_rate": 32000}
    one = analyze(model, f"audio:{root}", progress=False, **options)
    merged = merge_states([shard_state(model, f"audio:{root}", (i, 2), options) for i in range(2)])
    assert one.data["samples"] == merged.data["samples"] > 20
    for a, b in zip(one.sites, merged.sites, strict=True):
        np.testing.assert_allclose(a["metrics"]["affinity"]["values"], b["metrics"]["affinity"]["values"], atol=1e-9)

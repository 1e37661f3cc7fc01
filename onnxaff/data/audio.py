"""Audio folders (`audio:FOLDER`): every file mixed to mono, resampled and cut into windows of the model's length.

Files are found recursively (`EXTENSIONS`, any case) and sorted by relative path. WAV files with integer PCM
samples (8, 16, 24 or 32 bits) are read by the standard library's `wave`; FLAC, OGG and the other formats (and a
WAV `wave` refuses, such as float samples) by `soundfile` when it is installed (`pip install onnxaff[audio]`).
Several channels are averaged to one; the signal is resampled to the sample rate asked for with
`scipy.signal.resample_poly` (the reduced fraction of the two rates), then cut into consecutive windows of the
waveform input's length T, without overlap. A file's last part shorter than T is dropped.

The windows are numbered when the source opens, from each file's header (its frame count and rate), so that
`batches(start, stop)` gives the same examples every time: shards and resumed runs depend on it. A file whose
header cannot be read holds one example that is skipped, with the reason; a file that fails while its samples
are decoded has each of its windows skipped so. Neither stops the run.
"""

from __future__ import annotations

import math
import wave
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from onnxaff import defaults
from onnxaff.data.source import DataSource, InputSpec, cast_for, folder_identity
from onnxaff.errors import OnnxaffError, first_line, option

EXTENSIONS = {".wav", ".wave", ".flac", ".ogg", ".oga", ".opus", ".mp3", ".aif", ".aiff", ".au"}
PCM_SCALE = {1: 128.0, 2: 32768.0, 3: 8388608.0, 4: 2147483648.0}  # full scale of 8/16/24/32-bit samples
PARTIAL_WINDOW = "dropped: each file's last part shorter than a window is not used"


def list_audio(root: Path) -> list[Path]:
    """Audio files under root, sorted by relative path."""
    files = [p for p in root.rglob("*") if p.suffix.lower() in EXTENSIONS and p.is_file()]
    return sorted(files, key=lambda p: p.relative_to(root).as_posix())


def _soundfile():
    try:
        import soundfile
    except ImportError:  # the optional extra: without it only PCM WAV files are read
        return None
    return soundfile


@dataclass(frozen=True)
class AudioFile:
    """One file as its header describes it (reader "wave" or "soundfile"), or why its header is unreadable."""

    path: Path
    reader: str = ""
    rate: int = 0
    channels: int = 0
    frames: int = 0
    error: str = ""

    def resampled_length(self, rate: int) -> int:
        """Samples after resample_poly to `rate` (it gives ceil(frames · up / down))."""
        return self.frames if rate == self.rate else math.ceil(self.frames * rate / self.rate)


def read_header(path: Path) -> AudioFile:
    """Rate, channels and frame count from the header alone (no samples are decoded)."""
    reasons = []
    if path.suffix.lower() in (".wav", ".wave"):
        try:
            with wave.open(str(path), "rb") as w:
                if w.getframerate() <= 0 or w.getnchannels() <= 0:
                    raise wave.Error(f"declares {w.getframerate()} Hz and {w.getnchannels()} channels")
                return AudioFile(path, "wave", w.getframerate(), w.getnchannels(), w.getnframes())
        except (wave.Error, EOFError, OSError, ValueError) as exc:
            reasons.append(f"{type(exc).__name__}: {first_line(exc)}")
    sf = _soundfile()
    if sf is None:
        reasons.append("other formats need the soundfile package (pip install onnxaff[audio])")
    else:
        try:
            info = sf.info(str(path))
            if info.samplerate <= 0 or info.channels <= 0:
                raise ValueError(f"declares {info.samplerate} Hz and {info.channels} channels")
            return AudioFile(path, "soundfile", int(info.samplerate), int(info.channels), int(info.frames))
        except Exception as exc:  # libsndfile's errors (a RuntimeError subclass), truncated headers: count, go on
            reasons.append(f"{type(exc).__name__}: {first_line(exc)}")
    return AudioFile(path, error="; ".join(reasons)[:200])


def _pcm(raw: bytes, width: int) -> np.ndarray:
    """Integer PCM bytes (little-endian; 8-bit unsigned) as float64 in [-1, 1)."""
    if width == 1:
        values = np.frombuffer(raw, np.uint8).astype(np.float64) - 128.0
    elif width == 3:
        b = np.frombuffer(raw, np.uint8).reshape(-1, 3).astype(np.int32)
        values = ((b[:, 0] | (b[:, 1] << 8) | (b[:, 2] << 16)) << 8 >> 8).astype(np.float64)  # sign-extended
    elif width in (2, 4):
        values = np.frombuffer(raw, f"<i{width}").astype(np.float64)
    else:
        raise ValueError(f"{8 * width}-bit samples are not 8, 16, 24 or 32-bit PCM")
    return values / PCM_SCALE[width]


def decode(f: AudioFile) -> np.ndarray:
    """The file's samples mixed to mono: float64 [frames] (all of them, as its header counts them)."""
    if f.reader == "wave":
        with wave.open(str(f.path), "rb") as w:
            samples = _pcm(w.readframes(f.frames), w.getsampwidth())
    else:
        samples = _soundfile().read(str(f.path), dtype="float64", always_2d=True)[0].reshape(-1)
    got = samples.size // f.channels
    if got != f.frames:
        raise ValueError(f"holds {got} of the {f.frames} frames its header declares (truncated?)")
    return samples[:got * f.channels].reshape(got, f.channels).mean(axis=1)


def resample(signal: np.ndarray, rate_in: int, rate_out: int) -> np.ndarray:
    """resample_poly by the reduced fraction rate_out / rate_in (the signal itself when they agree)."""
    if rate_in == rate_out:
        return signal
    from scipy.signal import resample_poly

    g = math.gcd(rate_in, rate_out)
    return resample_poly(signal, rate_out // g, rate_in // g)


def waveform_input(inputs: list[InputSpec], shapes: dict | None) -> tuple[InputSpec, tuple]:
    """The input audio fills: the first float input whose example shape is [T] or [1, T] (T from the declared
    shape or `shapes`), and that example shape."""
    for spec in inputs:
        shape = tuple((shapes or {}).get(spec.name) or spec.example_shape())
        if not np.issubdtype(spec.dtype, np.floating) or not (len(shape) == 1 or (len(shape) == 2 and shape[0] == 1)):
            continue
        if not (isinstance(shape[-1], int) and shape[-1] > 0):
            raise OnnxaffError(f"audio data fills input {spec.describe()}, whose length is not fixed: give it with "
                               f"{option('input_shapes')} ({spec.name}={'1x' if len(shape) == 2 else ''}LENGTH)")
        return spec, shape
    raise OnnxaffError("audio data fills a float input of shape [batch, T] or [batch, 1, T]; the model's inputs are "
                       + ", ".join(i.describe() for i in inputs))


class AudioFolderSource(DataSource):
    spec_form = "audio:FOLDER"
    fed_as_they_are = "an audio folder's clips"
    reads_folder = True

    @classmethod
    def parse(cls, spec: str) -> str | None:
        return spec[len("audio:"):] if spec.startswith("audio:") else None

    @classmethod
    def identity(cls, spec: str, path: str) -> list:
        root = Path(path)
        return folder_identity(root, list_audio(root), "audio:") if root.is_dir() else [spec]

    @classmethod
    def from_spec(cls, spec: str, path: str, inputs: list[InputSpec], **options) -> DataSource:
        if not Path(path).is_dir():
            raise OnnxaffError(f"audio folder not found: {path}")
        return cls(path, inputs, sample_rate=options.get("sample_rate", defaults.SAMPLE_RATE),
                   limit=options.get("limit"), shapes=options.get("shapes"))

    """Consecutive windows of every audio file under a folder, as one waveform input's examples."""

    def __init__(self, root: str | Path, inputs: list[InputSpec], sample_rate: int = defaults.SAMPLE_RATE,
                 limit: int | None = None, shapes: dict | None = None):
        self.root, self.rate = Path(root), int(sample_rate)
        self.spec, self.shape = waveform_input(inputs, shapes)
        self.unfilled = tuple(s.name for s in inputs if s is not self.spec)  # a recurrent state: zeros, warned
        self.window = int(self.shape[-1])
        files = list_audio(self.root)
        if not files:
            raise OnnxaffError(f"no audio files ({', '.join(sorted(EXTENSIONS))}) found under {self.root}")
        self.files = [read_header(p) for p in files]
        # Examples per file: its windows, or the one skipped example of an unreadable header.
        self.counts = [1 if f.error else f.resampled_length(self.rate) // self.window for f in self.files]
        self.windows = sum(c for f, c in zip(self.files, self.counts, strict=True) if not f.error)
        self.ends = np.cumsum(self.counts)
        self.available = int(self.ends[-1])
        self.total = min(self.available, limit) if limit else self.available
        unreadable = sum(bool(f.error) for f in self.files)
        short = sum(1 for f, c in zip(self.files, self.counts, strict=True) if not f.error and c == 0)
        if not self.windows and not unreadable:
            raise OnnxaffError(f"no audio file under {self.root} is as long as one window ({self.window} samples at "
                               f"{self.rate} Hz); {len(files)} files")
        self.warnings = [f"audio folder: {short} of {len(files)} files shorter than one window ({self.window} "
                         f"samples at {self.rate} Hz) give no example"] if short else []
        self.skipped: list[tuple[str, str]] = []

    def __len__(self) -> int:
        return self.total

    def example_shapes(self) -> dict[str, tuple]:
        return {self.spec.name: self.shape}

    def batches(self, batch_size: int, start: int = 0, stop: int | None = None, should_stop=None):
        self.skipped = []
        stop = self.total if stop is None else min(stop, self.total)
        cached: tuple[int, np.ndarray | str] | None = None  # the file last decoded (windows run in file order)
        for first in range(start, stop, batch_size):
            rows = []
            for i in range(first, min(first + batch_size, stop)):
                k = int(np.searchsorted(self.ends, i, side="right"))
                f = self.files[k]
                if cached is None or cached[0] != k:
                    cached = (k, self._signal(f))
                signal = cached[1]
                if isinstance(signal, str):
                    self.skipped.append((str(f.path), signal))
                    continue
                w = i - int(self.ends[k] - self.counts[k])
                rows.append(signal[w * self.window:(w + 1) * self.window])
            array = np.stack(rows) if rows else np.zeros((0, self.window))
            yield {self.spec.name: cast_for(self.spec, array.reshape(len(rows), *self.shape), "audio data")}

    def _signal(self, f: AudioFile) -> np.ndarray | str:
        """The file resampled, or why it cannot be read."""
        if f.error:
            return f.error
        try:
            return resample(decode(f), f.rate, self.rate)
        except Exception as exc:  # a damaged file: its windows are skipped and counted, the run goes on
            return f"{type(exc).__name__}: {first_line(exc)}"[:200]

    def describe(self) -> dict:
        return {
            "source": str(self.root), "kind": "audio_folder", "samples": self.total, "available": self.available,
            "input": self.spec.name, "sample_rate": self.rate, "window": self.window, "hop": self.window,
            "windows": self.windows, "partial_window": PARTIAL_WINDOW, "channels": "mixed to mono (their mean)",
            "resampling": "scipy.signal.resample_poly", "unreadable": sum(bool(f.error) for f in self.files),
            "files": [{"file": f.path.relative_to(self.root).as_posix(), "sample_rate": f.rate, "channels": f.channels,
                       "frames": f.frames, "windows": 0 if f.error else c}
                      for f, c in zip(self.files, self.counts, strict=True)],
            "skipped": [{"file": Path(p).relative_to(self.root).as_posix(), "reason": r} for p, r in self.skipped],
        }

"""Hangs and silently wrong numbers on the data side: dead decoders, image bombs, 16-bit images, linked
folders, too little data, lazy .npz members, Ray workers and addresses, NumPy warnings on Inf."""

import io
import os
import re
import signal
import struct
import subprocess
import sys
import time
import zipfile
import zlib
from pathlib import Path

import numpy as np
import onnx
import pytest
from PIL import Image

import onnxaff
from onnxaff.data import model_inputs, open_source
from onnxaff.errors import OnnxaffError
from onnxaff.format.signature import read_signature
from tests.builders import chain
from tests.conftest import parse, run_cli, start_cli, stderr_once_ended
from tests.test_scale import assert_same, decoding_run


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


def _start(args, ckpt: Path) -> subprocess.Popen:
    """The CLI in its own session, once it has saved a checkpoint (its decoders are running)."""
    proc = start_cli("analyze", *args, "--checkpoint-every", "1", start_new_session=True)

    def saved():
        return ckpt.stat().st_mtime_ns if ckpt.exists() else None

    before, deadline = saved(), time.monotonic() + 60
    while saved() == before and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    return proc


def _ended(proc: subprocess.Popen, since: float, what: str) -> str:
    err = stderr_once_ended(proc, what)
    assert time.monotonic() - since < 10, what
    return err


@pytest.mark.slow  # 5 s: waits out stuck decoders
def test_stuck_or_killed_decoders_stop_the_run_with_its_state_then_resume(tmp_path, capfd):
    """Decoders that stop answering: the first Ctrl-C stops the run (it waited for their batch forever), state
    saved, exit 130. A decoder SIGKILLed as the out-of-memory killer does: one line naming the batch within
    seconds (the run hung forever), the state up to the last complete batch saved, exit 2. Resumed after
    both, the result equals an uninterrupted run bit for bit."""
    args, ref = decoding_run(tmp_path, capfd)
    out, ckpt = tmp_path / "sig.json", tmp_path / "sig.json.ckpt.npz"
    args += ["--out", out]

    proc = _start(args, ckpt)
    decoders = _decoder_pids(proc.pid)
    assert decoders and proc.poll() is None
    for pid in decoders:
        os.kill(pid, signal.SIGSTOP)
    time.sleep(1)  # the loop uses up what was decoded ahead, then waits for a stopped decoder
    proc.send_signal(signal.SIGINT)
    err = _ended(proc, time.monotonic(), "Ctrl-C while waiting for stopped decoders")
    assert proc.returncode == 130 and err.startswith("onnxaff: interrupted: SIGINT after"), err
    assert all(not Path(f"/proc/{pid}").exists() or " Z " in Path(f"/proc/{pid}/stat").read_text()
               for pid in decoders), "stopped decoders left behind"

    proc = _start([*args, "--resume"], ckpt)
    victims = _decoder_pids(proc.pid)
    assert victims and proc.poll() is None
    os.kill(victims[0], signal.SIGKILL)
    err = _ended(proc, time.monotonic(), "a decoder was killed")
    assert proc.returncode == 2, err
    assert err.count("\n") == 1 and err.startswith("onnxaff: error: an image decoder process died"), err
    assert "batch" in err and "saved to" in err and "--resume" in err, err
    assert not out.exists() and ckpt.exists()

    code, _, err = run_cli(capfd, "analyze", *args, "--resume")
    assert code == 0, err
    assert_same(read_signature(ref), read_signature(out), tol=0)


# --- what one image may cost, and its real bit depth ---

def _png16(path: Path, a: np.ndarray) -> None:
    """A 16-bit PNG, gray [H, W] or RGB [H, W, 3], written chunk by chunk (Pillow has no 16-bit RGB mode)."""
    h, w = a.shape[:2]
    raw = b"".join(b"\x00" + row.astype(">u2").tobytes() for row in a)

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", w, h, 16, 2 if a.ndim == 3 else 0, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw))
                     + chunk(b"IEND", b""))


def _tiff16(path: Path, a: np.ndarray) -> None:
    """An uncompressed little-endian 16-bit TIFF, gray or RGB, written field by field."""
    h, w = a.shape[:2]
    spp = 3 if a.ndim == 3 else 1
    bits = struct.pack("<HHH", 16, 16, 16) if spp == 3 else b""
    data = a.astype("<u2").tobytes()
    data_at = 8 + len(bits)
    entries = [(256, 3, 1, w), (257, 3, 1, h), (258, 3, spp, 8 if spp == 3 else 16), (259, 3, 1, 1),
               (262, 3, 1, 2 if spp == 3 else 1), (273, 4, 1, data_at), (277, 3, 1, spp), (278, 3, 1, h),
               (279, 4, 1, len(data))]
    ifd = struct.pack("<H", len(entries)) + b"".join(
        struct.pack("<HHI", tag, kind, count)
        + (struct.pack("<HH", value, 0) if kind == 3 and count == 1 else struct.pack("<I", value))
        for tag, kind, count, value in entries) + struct.pack("<I", 0)
    path.write_bytes(b"II*\x00" + struct.pack("<I", data_at + len(data)) + bits + data + ifd)


def _batch(model, root, **images):
    source = open_source(str(root), model_inputs(model), images={"workers": 0, **images})
    return source, next(source.batches(64))["x"]


def test_an_image_whose_resize_would_be_huge_is_skipped_with_the_reason(tmp_path):
    """A 7.8 KB PNG of 1 × 4,000,000 pixels: resized to a shorter side of 16 it would be 16 × 64,000,000 pixels
    (3 GB, tens of seconds). It is skipped as unreadable, named and counted, before it is decoded."""
    from tests.test_images import image_model

    root = tmp_path / "imgs"
    root.mkdir()
    Image.fromarray(np.zeros((4_000_000, 1), np.uint8)).save(root / "a_tall.png", optimize=True)
    Image.fromarray(np.full((20, 20, 3), 99, np.uint8)).save(root / "b_fine.png")
    assert (root / "a_tall.png").stat().st_size < 20_000
    model = image_model(["N", 3, 16, 16])
    began = time.perf_counter()
    source, batch = _batch(model, root, preprocess="raw")
    assert time.perf_counter() - began < 5
    assert batch.shape == (1, 3, 16, 16)
    (path, reason), = source.skipped
    assert Path(path).name == "a_tall.png"
    assert reason.startswith("ImageTooLarge:") and "1x4000000" in reason and "16x64000000" in reason, reason


@pytest.mark.parametrize("write", [_png16, _tiff16])
@pytest.mark.parametrize("channels", [1, 3])
def test_16_bit_images_are_scaled_by_their_bit_depth(tmp_path, write, channels):
    """A 16-bit image and its 8-bit rendering give the same features to within the 8-bit quantisation (they
    were clipped at 255: nearly every pixel white)."""
    from tests.test_images import image_model

    rng = np.random.default_rng(1)
    shape = (24, 40, 3) if channels == 3 else (24, 40)
    a16 = rng.integers(0, 65536, shape).astype(np.uint16)
    deep, flat = tmp_path / "deep", tmp_path / "flat"
    deep.mkdir()
    flat.mkdir()
    write(deep / f"x.{'png' if write is _png16 else 'tif'}", a16)
    Image.fromarray(np.round(a16 / 257).astype(np.uint8)).save(flat / "x.png")
    model = image_model(["N", channels, 16, 16])
    _, got = _batch(model, deep, preprocess="raw")
    _, want = _batch(model, flat, preprocess="raw")
    assert want.mean() > 0.3 and np.abs(got - want).max() <= 1 / 255 + 1e-6


def test_float_tiffs_in_0_1_are_intensities(tmp_path):
    """A 32-bit float TIFF (Pillow mode F) with values in [0, 1] was clipped to 0–255 as if 8-bit: all black."""
    from tests.test_images import image_model

    a = np.random.default_rng(2).random((24, 40)).astype(np.float32)
    deep, flat = tmp_path / "deep", tmp_path / "flat"
    deep.mkdir()
    flat.mkdir()
    Image.fromarray(a, "F").save(deep / "x.tif")
    Image.fromarray(np.round(a * 255).astype(np.uint8)).save(flat / "x.png")
    model = image_model(["N", 1, 16, 16])
    _, got = _batch(model, deep, preprocess="raw")
    _, want = _batch(model, flat, preprocess="raw")
    assert want.mean() > 0.3 and np.abs(got - want).max() <= 1 / 255 + 1e-6


@pytest.mark.parametrize("values", ["0-100", "negative", "nan"])
def test_float_tiffs_outside_0_1_are_skipped_with_the_reason(tmp_path, values):
    """Values in 0–100 went in unscaled (anything above 255 clipped): which scale was meant cannot be told."""
    from tests.test_images import image_model

    a = np.random.default_rng(2).random((24, 40)).astype(np.float32)
    a = {"0-100": a * 100, "negative": a - 0.5, "nan": np.where(a > 0.9, np.nan, a)}[values]
    root = tmp_path / "imgs"
    root.mkdir()
    Image.fromarray(a.astype(np.float32), "F").save(root / "a.tif")
    Image.fromarray(np.full((20, 20), 99, np.uint8)).save(root / "b.png")
    source, batch = _batch(image_model(["N", 1, 16, 16]), root, preprocess="raw")
    assert batch.shape[0] == 1
    (path, reason), = source.skipped
    assert Path(path).name == "a.tif" and "float image with values outside [0, 1]" in reason, reason


# --- linked folders ---

def test_linked_class_folders_and_files_are_followed_and_loops_skipped(tmp_path):
    """A class folder that is a symbolic link was ignored without a word (half the images, one class gone)."""
    from tests.test_images import image_model

    root, elsewhere = tmp_path / "val", tmp_path / "elsewhere"
    for folder in (root / "cat", elsewhere / "dog"):
        folder.mkdir(parents=True)
        for k in range(2):
            Image.fromarray(np.full((20, 20, 3), 40 * k + 9, np.uint8)).save(folder / f"{k}.png")
    (root / "dog").symlink_to(elsewhere / "dog", target_is_directory=True)
    (root / "cat" / "more.png").symlink_to(elsewhere / "dog" / "0.png")
    (root / "cat" / "loop").symlink_to(root, target_is_directory=True)  # an ancestor: would never end
    (root / "cat" / "gone.png").symlink_to(tmp_path / "missing.png")  # dangling: not an image file
    model = image_model(["N", 3, 16, 16])
    source, batch = _batch(model, root, preprocess="raw")
    assert [f.relative_to(root).as_posix() for f in source.source.files] == [
        "cat/0.png", "cat/1.png", "cat/more.png", "dog/0.png", "dog/1.png"]
    assert batch.shape[0] == 5
    found = source.describe()["found"]
    assert found == {"files": 5, "classes": 2, "links_followed": 2, "link_loops_skipped": 1, "broken_links": 1}
    sig = onnxaff.analyze(model, str(root), metrics=["cka"], chunk_size=2, batch_size=2, progress=False,
                          images={"preprocess": "raw", "workers": 0})
    assert "image folder: 5 files in 2 classes; followed 2 symbolic links; skipped 1 link loop; " \
           "1 broken link" in sig.warnings, sig.warnings


# --- too little data ---

@pytest.mark.parametrize("n", [1, 2])
def test_too_little_data_for_any_number_is_one_line_and_non_zero(capfd, tmp_path, n):
    """One example (or data no metric can use) exited 0 with every metric no_data and no word."""
    model = tmp_path / "m.onnx"
    onnx.save(chain("Relu"), model)
    metrics = "affinity,cka" if n == 1 else "r2_heldout"  # n = 2: one partial chunk, a pair metric needs two
    code, out, err = run_cli(capfd, "analyze", model, "--data", f"synthetic:gaussian:n={n}", "--metrics", metrics,
                             "--out", tmp_path / "s.json", "--quiet")
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert err.startswith(f"onnxaff: error: no site got a number from {n} example"), err
    assert not (tmp_path / "s.json").exists()
    with pytest.raises(OnnxaffError, match="no site got a number"):
        onnxaff.analyze(str(model), f"synthetic:gaussian:n={n}", metrics=metrics.split(","), progress=False)
    # Enough for one number: no error.
    sig = onnxaff.analyze(str(model), "synthetic:gaussian:n=2", metrics=["cka"], progress=False)
    assert sig.sites[0]["metrics"]["cka"]["status"] == "ok"


# --- .npz members ---

def _npy_header(shape, dtype="<f4") -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": dtype, "fortran_order": False, "shape": shape})
    return buf.getvalue()


def _npz(path: Path, members: dict, compress: bool = True) -> Path:
    """An archive member by member: arrays, raw bytes, or a callable writing into the open member."""
    kind = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    with zipfile.ZipFile(path, "w", compression=kind, allowZip64=True) as z:
        for name, value in members.items():
            with z.open(name, "w", force_zip64=True) as f:
                if isinstance(value, np.ndarray):
                    np.lib.format.write_array(f, value, allow_pickle=False)
                elif callable(value):
                    value(f)
                else:
                    f.write(value)
    return path


def test_npz_reads_only_the_members_the_model_needs(tmp_path):
    """An unused 256 MiB member (compressed to a few hundred KB) costs neither memory nor time; a stored member
    is memory-mapped at its offset."""
    import tracemalloc

    def zeros(f):
        f.write(_npy_header((1 << 26,)))
        block = bytes(1 << 22)
        for _ in range(64):
            f.write(block)

    x = np.random.default_rng(0).standard_normal((64, 4)).astype(np.float32)
    packed = _npz(tmp_path / "packed.npz", {"x.npy": x, "unused.npy": zeros})
    assert packed.stat().st_size < 2_000_000
    inputs = model_inputs(chain("Relu"))
    tracemalloc.start()
    began = time.perf_counter()
    source = open_source(str(packed), inputs)
    batch = next(source.batches(64))["x"]
    seconds, peak = time.perf_counter() - began, tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert np.array_equal(batch, x) and seconds < 1 and peak < 8_000_000, (seconds, peak)
    assert list(source.describe()["arrays"]) == ["x"]
    stored = open_source(str(_npz(tmp_path / "stored.npz", {"x.npy": x, "y.npy": b"junk"}, compress=False)), inputs)
    assert isinstance(stored.source.arrays["x"], np.memmap) and np.array_equal(next(stored.batches(64))["x"], x)


@pytest.mark.parametrize("compress", [True, False], ids=["deflated", "stored"])
@pytest.mark.parametrize("member, fragment", [
    (b"just some bytes", "x.npy is not a .npy array"),
    (_npy_header((10 ** 12, 4)) + bytes(64), "declares shape (1000000000000, 4) of float32 (16000000000000 bytes) but "
                                             "holds 64"),
    (_npy_header((3, 4), "|O") + bytes(48), "cannot read array file"),
])
def test_npz_member_that_is_not_an_array_or_lies_about_its_size(capfd, tmp_path, compress, member, fragment):
    """One clean line, before anything of the declared size is allocated."""
    data = _npz(tmp_path / "d.npz", {"x.npy": member}, compress=compress)
    with pytest.raises(OnnxaffError, match=re.escape(fragment)):
        open_source(str(data), model_inputs(chain("Relu")))
    model = tmp_path / "m.onnx"
    onnx.save(chain("Relu"), model)
    code, out, err = run_cli(capfd, "analyze", model, "--data", data, "--out", tmp_path / "s.json", "--quiet")
    assert code == 2 and err.count("\n") == 1 and err.startswith("onnxaff: error: ") and fragment in err, err


# --- NumPy warnings on Inf/NaN activations ---

@pytest.mark.parametrize("reduce_in", ["graph", "numpy"])
def test_inf_activations_raise_no_numpy_warnings(tmp_path, reduce_in):
    """Sites with NaN/Inf are flagged with a reason; NumPy's RuntimeWarnings about the same values (from the
    network NLC's differences, a host-side mean of +Inf and −Inf) were printed on top of that."""
    import warnings

    model = parse("""<ir_version: 8, opset_import: ["" : 17]>
        g (float[N, 2, 4] x) => (float[N, 4, 4] y) {
            k = Constant<value = float {100.0}>()
            h = Mul(x, k)
            e = Exp(h)
            m = Neg(e)
            c = Concat<axis = 1>(e, m)
            y = Relu(c)
        }""")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sig = onnxaff.analyze(model, "synthetic:gaussian:n=256", metrics=["affinity", "cka", "nlc"], chunk_size=64,
                              reduce_in=reduce_in, progress=False)
    assert [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)] == []
    assert sig.sites[0]["status"] == "flagged" and sig.sites[0]["reason"].startswith("NaN/Inf")
    nlc = sig.network["nlc"]
    assert nlc["values"]["y"] is None and "NaN/Inf" in nlc["reason"], nlc  # not 0 from an infinite scatter


# --- Ray ---

@pytest.mark.slow  # 6 s: starts a local Ray cluster
def test_ray_workers_import_the_installed_package_not_a_folder_in_the_cwd(tmp_path):
    """Ray puts the driver's working directory first on its workers' sys.path: an `onnxaff` folder there (a
    checkout, a results folder of that name) was imported instead of the installed package. Ray says nothing
    else on stderr (its token-auth banner was printed on every local run)."""
    pytest.importorskip("ray")
    fake = tmp_path / "cwd" / "onnxaff"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('the onnxaff folder in the cwd was imported')\n")
    model = tmp_path / "m.onnx"
    onnx.save(chain("Relu"), model)
    out = tmp_path / "sig.json"
    env = dict(os.environ, RAY_DISABLE_USAGE_STATS="1")
    env.pop("RAY_AUTH_MODE", None)
    r = subprocess.run([str(Path(sys.executable).parent / "onnxaff"), "analyze", str(model), "--data",
                        "synthetic:gaussian:n=64", "--metrics", "cka", "--chunk-size", "32", "--executor", "ray",
                        "--shards", "2", "--quiet", "--out", str(out)], cwd=fake.parent, capture_output=True,
                       text=True, env=env, timeout=300)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert read_signature(out).runtime["executor"]["shards"] == 2


@pytest.mark.parametrize("address, fragment", [
    ("127.0.0.1:1", "cannot reach Ray at 127.0.0.1:1: "),
    ("ray://127.0.0.1:1", "cannot reach Ray at ray://127.0.0.1:1: "),
    ("nowhere", "--ray-address 'nowhere' is not HOST:PORT"),
])
def test_bad_ray_address_is_one_line_at_once(capfd, tmp_path, address, fragment):
    """An address nothing listens on: Ray retried for minutes with a wall of GCS connection warnings."""
    pytest.importorskip("ray")
    model = tmp_path / "m.onnx"
    onnx.save(chain("Relu"), model)
    began = time.monotonic()
    code, out, err = run_cli(capfd, "analyze", model, "--data", "synthetic:gaussian:n=64", "--executor", "ray",
                             "--ray-address", address, "--quiet", "--out", tmp_path / "s.json")
    assert time.monotonic() - began < 10
    assert code == 2 and out == "" and err.count("\n") == 1 and err.startswith("onnxaff: error: "), err
    assert fragment in err, err


def test_mode_i_images_are_scaled_too():
    """Older Pillow opens 16-bit grayscale PNGs as mode I (32-bit ints): the same scaling applies."""
    from onnxaff.data.preprocess import to_8bit

    a16 = np.random.default_rng(2).integers(0, 65536, (8, 8))
    img = Image.fromarray(a16.astype(np.int32))
    assert img.mode == "I"
    assert np.array_equal(np.asarray(to_8bit(img)), np.round(a16 / 257).astype(np.uint8))

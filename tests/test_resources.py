"""Resources: a run that would not fit in memory is refused before it allocates, with one line saying how much it
would take and what to lower; what still runs out of memory or threads is one line too, never an internal error.

The reproductions run in their own interpreter under an address-space limit (3 GB), so a regression fails the
test instead of the machine.
"""

from __future__ import annotations

import resource
import time
import tracemalloc
import zipfile

import numpy as np
import pytest

from onnxaff.errors import option
from tests.builders import chain_text, save
from tests.conftest import cli_process, one_line_error, parse, run_cli

CAP = 3 * 2**30  # bytes of address space a reproduction may take


def _capped():
    resource.setrlimit(resource.RLIMIT_AS, (CAP, CAP))


def capped_cli(*args, timeout: float = 60):
    """`onnxaff ARGS` in an interpreter limited to CAP bytes of address space: (status, stdout, stderr)."""
    r = cli_process(*args, preexec_fn=_capped, timeout=timeout)
    return r.returncode, r.stdout, r.stderr


def test_declared_input_too_wide_for_memory_is_refused_before_allocating(tmp_path):
    model = save(parse(chain_text("Relu", dims="N, 100000000")), tmp_path / "wide.onnx")
    start = time.monotonic()
    line = one_line_error(capped_cli("analyze", model, "--data", "synthetic:gaussian:n=64", "--out",
                                     tmp_path / "s.json", "--quiet"), "GB")
    assert time.monotonic() - start < 30
    assert "--batch-size" in line and "input x" in line


def test_input_shape_too_large_for_memory_is_refused(tmp_path):
    model = save(parse(chain_text("Relu", dims="N, C, H, W")), tmp_path / "dyn.onnx")
    line = one_line_error(capped_cli("analyze", model, "--data", "synthetic:gaussian:n=8", "--input-shape",
                                     "x=1000000x1000000x1000000", "--out", tmp_path / "s.json", "--quiet"),
                          "would take")
    assert "--input-shape" in line


def test_site_chunk_buffers_too_large_for_memory_are_refused(tmp_path):
    # 10⁶ features a site: a batch of 4 fits (16 MB), but 64-row chunks of X and Y in float64, and their copies,
    # do not fit in 3 GB.
    model = save(parse(chain_text("Relu", dims="N, 1000000")), tmp_path / "wide.onnx")
    line = one_line_error(capped_cli("analyze", model, "--data", "synthetic:gaussian:n=64", "--batch-size", "4",
                                     "--chunk-size", "64", "--out", tmp_path / "s.json", "--quiet"), "GB")
    assert "--chunk-size" in line


def test_chunk_workers_beyond_what_threads_allow_is_one_line(capfd, tmp_path):
    model = save(parse(chain_text("Relu")), tmp_path / "m.onnx")
    one_line_error(run_cli(capfd, "analyze", model, "--data", "synthetic:gaussian:n=8", "--chunk-workers", "100000",
                           "--out", tmp_path / "s.json", "--quiet"), "--chunk-workers")


def test_memory_error_anywhere_is_one_line_not_an_internal_error(capfd, tmp_path, monkeypatch):
    model = save(parse(chain_text("Relu")), tmp_path / "m.onnx")

    def exhausted(*args, **kwargs):
        raise MemoryError

    monkeypatch.setattr("onnxaff.analysis.lifecycle.Run.execute", exhausted)
    line = one_line_error(run_cli(capfd, "analyze", model, "--data", "synthetic:gaussian:n=8", "--out",
                                  tmp_path / "s.json", "--quiet"), "out of memory", code=2)
    assert "internal error" not in line


def _zeros_npz(path, rows: int, width: int) -> None:
    """A deflated .npz whose one member holds rows × width float32 zeros, written without holding them."""
    header = {"descr": "<f4", "fortran_order": False, "shape": (rows, width)}
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as z, z.open("x.npy", "w",
                                                                                  force_zip64=True) as f:
        np.lib.format.write_array_header_1_0(f, header)
        block = np.zeros((1024, width), np.float32).tobytes()
        for _ in range(rows // 1024):
            f.write(block)


def test_compressed_npz_reads_only_the_rows_asked_for(tmp_path):
    from onnxaff.data import model_inputs
    from onnxaff.data.arrays import ArraySource

    path = tmp_path / "zeros.npz"
    _zeros_npz(path, rows=1024 * 100, width=1000)  # 400 MB of zeros, a few hundred KB on disk
    inputs = model_inputs(parse(chain_text("Relu", width=1000)))
    tracemalloc.start()
    try:
        source = ArraySource(path, inputs, limit=100)
        batches = list(source.batches(32))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert sum(b["x"].shape[0] for b in batches) == 100 and not batches[0]["x"].any()
    assert source.describe()["available"] == 1024 * 100
    assert peak < 40 * 2**20, f"{peak / 2**20:.0f} MiB read for 100 rows"


def test_compressed_npz_rows_read_again_from_the_start_match(tmp_path):
    from onnxaff.data import model_inputs
    from onnxaff.data.arrays import ArraySource

    data = np.arange(300 * 4, dtype=np.float32).reshape(300, 4)
    np.savez_compressed(tmp_path / "d.npz", x=data)
    source = ArraySource(tmp_path / "d.npz", model_inputs(parse(chain_text("Relu"))))
    later = np.concatenate([b["x"] for b in source.batches(64, start=128)])
    again = np.concatenate([b["x"] for b in source.batches(64)])  # backwards: the member is read from the start
    np.testing.assert_array_equal(later, data[128:])
    np.testing.assert_array_equal(again, data)


@pytest.mark.parametrize("kind", ["npy", "npz"])
def test_a_memory_mapped_array_leaves_the_resident_set_batch_by_batch(kind, tmp_path):
    """The file's pages a run has fed stay in the page cache, not in the process (a study of three MobileNets held
    the 616 MB image file besides each model's own memory): after reading 64 MB batch by batch, the mapped part
    of the resident set has not grown by more than two batches, and the batches hold the file's values."""
    from onnxaff.data import model_inputs
    from onnxaff.data.arrays import ArraySource
    from onnxaff.foundations.memory import status_bytes

    if not status_bytes("RssFile"):
        pytest.skip("no /proc/self/status RssFile on this platform")
    width = 4096
    data = np.random.default_rng(0).standard_normal((4096, width)).astype(np.float32)  # 64 MB
    path = tmp_path / f"d.{kind}"
    np.save(path, data) if kind == "npy" else np.savez(path, x=data)
    source = ArraySource(path, model_inputs(parse(chain_text("Relu", width=width))))
    before = status_bytes("RssFile")
    sums = [float(b["x"].sum(dtype=np.float64)) for b in source.batches(256)]  # 4 MB a batch
    grown = status_bytes("RssFile") - before
    assert grown < 8 * 2**20, f"{grown / 2**20:.0f} MB of the file still mapped in"
    np.testing.assert_allclose(sums, data.reshape(16, 256, width).sum(axis=(1, 2), dtype=np.float64), rtol=1e-12)


@pytest.mark.parametrize("mode", ["r+", "c"])
def test_pages_of_a_writable_map_are_kept(mode, tmp_path):
    """Only read-only maps give their pages back: a copy-on-write map's written values would be lost."""
    from onnxaff.data.arrays import release_pages

    np.save(tmp_path / "d.npy", np.zeros((64, 1024), np.float32))
    a = np.load(tmp_path / "d.npy", mmap_mode=mode)
    a[3, 5] = 7.0
    release_pages(a[0:32])
    assert a[3, 5] == 7.0


def test_chunk_size_whose_exact_assignment_would_take_long_is_warned_with_the_time(tmp_path):
    """affinity declares its chunk's cost as its n²·D distances (AFFINITY_SECONDS_PER_ROW2_DIM): 16,384 rows of
    512 features, about 27 s a chunk; the site is rank 2, one row an example under the default sample:16, so the
    16,384 examples give it one chunk (the warning counted 16: K rows an example at every site)."""
    from onnxaff.analysis import open_run
    from onnxaff_plugins.affinity import AFFINITY_SECONDS_PER_ROW2_DIM

    model = save(parse(chain_text("Relu", width=512)), tmp_path / "m.onnx")
    run = open_run(model, "synthetic:gaussian:n=16384", chunk_size=16384, metrics=["affinity"], progress=False)
    line = next((w for w in run.plan.warnings if "assignment" in w), "")
    seconds = AFFINITY_SECONDS_PER_ROW2_DIM * 16384**2 * 512
    assert f"about {seconds:.0f} s a 16,384-row chunk" in line and option("chunk_size") in line, run.plan.warnings
    assert f"about {seconds:.0f} s for 1 chunk(s) over 1 site(s)" in line, line  # the CLI: --chunk-size
    quick = open_run(model, "synthetic:gaussian:n=16384", chunk_size=512, metrics=["affinity"], progress=False)
    assert not any("assignment" in w for w in quick.plan.warnings)


@pytest.mark.parametrize("positions, examples", [(32, 2048), (8, 4096)])
def test_the_slow_chunk_warning_counts_the_rows_each_example_gives_its_site(tmp_path, positions, examples):
    """Under the default sample:16 a site of P positions gives min(16, P) rows an example: 32,768 rows, two
    16,384-row chunks, whether from 16 of 32 positions or from all 8."""
    from onnxaff.analysis import open_run

    model = save(parse(chain_text("Relu", dims=f"N, {positions}, 512")), tmp_path / "m.onnx")
    run = open_run(model, f"synthetic:gaussian:n={examples}", chunk_size=16384, metrics=["affinity"],
                   progress=False)
    assert any("a 16,384-row chunk" in w and "for 2 chunk(s) over 1 site(s)" in w for w in run.plan.warnings), \
        run.plan.warnings


def test_report_of_a_signature_with_a_200k_character_model_name_is_quick(capfd, tmp_path):
    import json

    from tests.test_compare import fake_signature

    d = fake_signature("m", [0.5, 0.6, 0.7], 10).to_dict()
    d["model"]["name"] = "n" * 200_000
    (tmp_path / "long.json").write_text(json.dumps(d))
    start = time.monotonic()
    status, _, err = run_cli(capfd, "report", tmp_path / "long.json", "--out", tmp_path / "r.html")
    assert status == 0, err
    assert time.monotonic() - start < 15
    assert "n" * 200_000 in (tmp_path / "r.html").read_text()  # the page still holds the whole name

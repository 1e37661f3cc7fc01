"""Damaged models never crash onnxaff: small valid models, mutated (cut short, bytes flipped, an initializer
deleted, a wrong dtype, a changed input dim, a renamed input), either analyse to a valid signature or fail
with exactly one line `onnxaff: error: ...` (never `internal error`, a traceback or onnxruntime's own log).

The CLI runs in-process: over some ten thousand such models onnxruntime never crashed (load_model refuses
malformed ones before they reach it). `capfd` captures file descriptors, so whatever onnxruntime prints
from C++ counts too. ONNXAFF_FUZZ_EXAMPLES raises the number of examples per test for a longer search.
"""

from __future__ import annotations

import copy
import io
import json
import os
import tempfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, numpy_helper

from onnxaff.format.signature import read_signature
from tests.builders import HEADER, mlp, with_weights
from tests.conftest import run_cli

FUZZ = settings(max_examples=int(os.environ.get("ONNXAFF_FUZZ_EXAMPLES", "50")), deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])


def _model(text: str, **weights: np.ndarray) -> onnx.ModelProto:
    return with_weights(HEADER + text, full_check=True, **weights)


_rng = np.random.default_rng(0)
BASES = [
    mlp(_rng, full_check=True),
    _model(""" g (float[N, 3, 8, 8] x) => (float[N, 4, 8, 8] y) {
        c = Conv<pads = [1, 1, 1, 1]>(x, w, b)
        d = Div(c, sqrt2)
        e = Erf(d)
        f = Add(e, one)
        g1 = Mul(c, f)
        y = Mul(g1, half)
    }""", w=_rng.standard_normal((4, 3, 3, 3)).astype(np.float32), b=np.zeros(4, np.float32),
        sqrt2=np.array(np.sqrt(2), np.float32), one=np.array(1, np.float32), half=np.array(0.5, np.float32)),
    _model(""" g (float[N, 6] a, float[N, 6] b) => (float[N, 6] y) {
        s = Add(a, b)
        m = Mul(s, scale)
        t = Sigmoid(m)
        u = Mul(m, t)
        y = Softmax<axis = 1>(u)
    }""", scale=np.full(6, 0.5, np.float32)),
    _model(""" g (float[1, 5] x) => (float[1, 5] y) {
        c = Constant<value = float[5] {1, 2, 3, 4, 5}>()
        m = Mul(x, c)
        s = Sub(m, shift)
        y = LeakyRelu<alpha = 0.1>(s)
    }""", shift=np.array(0.5, np.float32)),
]
BLOBS = [m.SerializeToString() for m in BASES]
DTYPES = [TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.BFLOAT16, TensorProto.INT8, TensorProto.UINT8,
          TensorProto.INT32, TensorProto.INT64, TensorProto.BOOL, TensorProto.STRING, TensorProto.COMPLEX64]


def _no_nan(token: str):
    raise AssertionError(f"{token} in a signature")


def check_outcome(capfd, blob: bytes) -> None:
    """`sites` and `analyze` on the model: success with a valid result, or one `onnxaff: error:` line and no output."""
    with tempfile.TemporaryDirectory() as tmp:
        model, out = Path(tmp) / "m.onnx", Path(tmp) / "m.json"
        model.write_bytes(blob)
        for args in (["sites", model], ["analyze", model, "--data", "synthetic:gaussian:n=64", "--metrics",
                                        "affinity", "--chunk-size", "32", "--quiet", "--out", out]):
            code, stdout, stderr = run_cli(capfd, *args)
            if code == 0:
                if args[0] == "sites":
                    assert " sites in m.onnx " in stdout
                else:
                    json.loads(out.read_text(), parse_constant=_no_nan)
                    assert read_signature(out).sites
                continue
            lines = stderr.strip().splitlines()
            assert len(lines) == 1 and lines[0].startswith("onnxaff: error: "), stderr
            assert stdout == "" and not out.exists()


@pytest.fixture(autouse=True)
def _no_debug(monkeypatch):
    monkeypatch.delenv("ONNXAFF_DEBUG", raising=False)


def test_the_unmutated_models_analyse(capfd):
    """The bases themselves succeed, so the mutations below are what fails."""
    for blob in BLOBS:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "m.onnx"
            path.write_bytes(blob)
            code, _, err = run_cli(capfd, "analyze", path, "--data", "synthetic:gaussian:n=64", "--chunk-size", "32",
                                   "--quiet", "--out", Path(tmp) / "s.json")
            assert code == 0, err


@FUZZ
@given(base=st.sampled_from(range(len(BLOBS))), cut=st.floats(0, 1, exclude_max=True))
def test_truncated(capfd, base, cut):
    blob = BLOBS[base]
    check_outcome(capfd, blob[: int(cut * len(blob))])


@FUZZ
@given(base=st.sampled_from(range(len(BLOBS))),
       flips=st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.integers(1, 255)), min_size=1, max_size=8))
def test_flipped_bytes(capfd, base, flips):
    blob = bytearray(BLOBS[base])
    for where, mask in flips:
        blob[int(where * len(blob))] ^= mask
    check_outcome(capfd, bytes(blob))


@FUZZ
@given(base=st.sampled_from(range(len(BLOBS))), data=st.data(),
       kind=st.sampled_from(["delete_initializer", "initializer_dtype", "input_dtype", "input_dim", "rename_input"]))
def test_structural_mutations(capfd, base, data, kind):
    model = onnx.ModelProto()
    model.CopyFrom(BASES[base])
    graph = model.graph
    if kind == "delete_initializer":
        del graph.initializer[data.draw(st.integers(0, len(graph.initializer) - 1))]
    elif kind == "initializer_dtype":
        graph.initializer[data.draw(st.integers(0, len(graph.initializer) - 1))].data_type = data.draw(
            st.sampled_from(DTYPES))
    elif kind == "input_dtype":
        graph.input[data.draw(st.integers(0, len(graph.input) - 1))].type.tensor_type.elem_type = data.draw(
            st.sampled_from(DTYPES))
    elif kind == "input_dim":
        dims = graph.input[data.draw(st.integers(0, len(graph.input) - 1))].type.tensor_type.shape.dim
        dims[data.draw(st.integers(0, len(dims) - 1))].dim_value = data.draw(st.sampled_from([-3, 0, 1, 2, 7]))
    else:
        graph.input[data.draw(st.integers(0, len(graph.input) - 1))].name = data.draw(
            st.sampled_from(["renamed", "y", "x", ""]))
    check_outcome(capfd, model.SerializeToString())


# Regressions the mutations found.

@pytest.mark.parametrize("where", ["initializer", "constant"])
@pytest.mark.parametrize("command", ["sites", "analyze"])
def test_tensor_data_that_does_not_match_its_type(capfd, tmp_path, where, command):
    """A float tensor relabelled as a narrower type holds more bytes than it declares (the checker catches only
    too few): numpy's reshape raised an internal error reading it. Now refused at load, naming the tensor."""
    model = onnx.ModelProto()
    model.CopyFrom(BASES[1] if where == "initializer" else BASES[3])
    if where == "initializer":
        next(t for t in model.graph.initializer if t.name == "half").data_type = TensorProto.FLOAT16
        fragment = "tensor 'half' declared float16[] holds 4 bytes of data, not 2"
    else:
        value = model.graph.node[0].attribute[0].t
        value.CopyFrom(numpy_helper.from_array(np.arange(1, 6, dtype=np.float32)))  # as raw bytes
        value.data_type = TensorProto.INT16
        fragment = "a Constant tensor declared int16[5] holds 20 bytes of data, not 10"
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    args = [command, path] + (["--data", "synthetic:gaussian:n=64"] if command == "analyze" else [])
    code, out, err = run_cli(capfd, *args)
    assert code == 2 and out == "" and err == f"onnxaff: error: invalid ONNX model m.onnx: {fragment}\n"


def test_runtime_failure_is_one_line(capfd, tmp_path):
    """The checker passes an input with 2 channels into a Conv with 3-channel kernels; onnxruntime fails on the
    first batch. Its own log line used to precede ours on stderr."""
    model = onnx.ModelProto()
    model.CopyFrom(BASES[1])
    model.graph.input[0].type.tensor_type.shape.dim[1].dim_value = 2
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    code, out, err = run_cli(capfd, "analyze", path, "--data", "synthetic:gaussian:n=64", "--quiet",
                             "--out", tmp_path / "s.json")
    assert code == 2 and out == "" and len(err.splitlines()) == 1
    assert err.startswith("onnxaff: error: onnxruntime failed on a batch (x[64, 2, 8, 8]:float32): ")
    assert "Input channels C is not equal to kernel channels * group" in err


@pytest.mark.parametrize("command", ["sites", "analyze"])
def test_text_that_is_not_utf8(capfd, tmp_path, command):
    """A flipped byte in the symbolic batch dim made protobuf return bytes for it, which the signature's JSON
    could not hold (an internal TypeError at the very end). Now refused at load."""
    model = onnx.ModelProto()
    model.CopyFrom(BASES[1])
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "@@DIM@@"
    blob = model.SerializeToString()
    assert blob.count(b"@@DIM@@") == 1
    path = tmp_path / "m.onnx"
    path.write_bytes(blob.replace(b"@@DIM@@", b"\xce\xff\xfe\xfd\xfc\xfb\xfa"))
    args = [command, path] + (["--data", "synthetic:gaussian:n=64"] if command == "analyze" else [])
    code, out, err = run_cli(capfd, *args)
    assert code == 2 and out == ""
    assert err == "onnxaff: error: invalid ONNX model m.onnx: a name or string that is not UTF-8 text " \
                  "(b'\\xce\\xff\\xfe\\xfd\\xfc\\xfb\\xfa')\n"


# Damaged data and signature files: the same contract for `analyze --data X.npz` and for report/compare.

FUZZ_FILES = settings(max_examples=int(os.environ.get("ONNXAFF_FUZZ_EXAMPLES", "15")), deadline=None,
                      suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
NPZ_BASES = [(0, {"x": _rng.standard_normal((64, 8)).astype(np.float32)}),
             (2, {"a": _rng.standard_normal((64, 6)).astype(np.float32),
                  "b": _rng.standard_normal((64, 6)).astype(np.float32)})]


def _npz(arrays: dict) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def one_line_or_success(capfd, args, out: Path) -> None:
    code, stdout, stderr = run_cli(capfd, *args)
    if code == 0:
        return
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("onnxaff: error: "), stderr
    assert stdout == "" and not out.exists()


def check_data(capfd, base: int, blob: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        model, data, out = Path(tmp) / "m.onnx", Path(tmp) / "d.npz", Path(tmp) / "s.json"
        model.write_bytes(BLOBS[NPZ_BASES[base][0]])
        data.write_bytes(blob)
        one_line_or_success(capfd, ["analyze", model, "--data", data, "--metrics", "affinity", "--chunk-size", "32",
                                    "--quiet", "--out", out], out)
        if out.exists():
            json.loads(out.read_text(), parse_constant=_no_nan)


def test_the_unmutated_data_analyses(capfd):
    for k, (_, arrays) in enumerate(NPZ_BASES):
        with tempfile.TemporaryDirectory() as tmp:
            model, data = Path(tmp) / "m.onnx", Path(tmp) / "d.npz"
            model.write_bytes(BLOBS[NPZ_BASES[k][0]])
            data.write_bytes(_npz(arrays))
            code, _, err = run_cli(capfd, "analyze", model, "--data", data, "--chunk-size", "32", "--quiet",
                                   "--out", Path(tmp) / "s.json")
            assert code == 0, err


@FUZZ_FILES
@given(base=st.sampled_from(range(len(NPZ_BASES))), cut=st.floats(0, 1, exclude_max=True),
       flips=st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.integers(1, 255)), max_size=6))
def test_npz_bytes(capfd, base, cut, flips):
    blob = bytearray(_npz(NPZ_BASES[base][1]))
    for where, mask in flips:
        blob[int(where * len(blob))] ^= mask
    check_data(capfd, base, bytes(blob[: max(1, int((1 - cut / 4) * len(blob)))] if cut > 0.5 else blob))


NPZ_DTYPES = ["float16", "float64", "int8", "int64", "uint8", "bool", "complex64", "<U3", "S2", "M8[s]", "m8[s]",
              "V4"]


@FUZZ_FILES
@given(base=st.sampled_from(range(len(NPZ_BASES))), data=st.data(),
       kind=st.sampled_from(["dtype", "shape", "rows", "rename", "extra", "values", "scalar", "empty"]))
def test_npz_structure(capfd, base, data, kind):
    arrays = dict(NPZ_BASES[base][1])
    key = data.draw(st.sampled_from(sorted(arrays)))
    a = arrays[key]
    if kind == "dtype":
        arrays[key] = a.astype(data.draw(st.sampled_from(NPZ_DTYPES)))
    elif kind == "shape":
        arrays[key] = a.reshape(data.draw(st.sampled_from([(64, 2, a.shape[1] // 2), (a.size,), (64, 1, a.shape[1]),
                                                           (a.shape[1], 64)])))
    elif kind == "rows":
        arrays[key] = a[: data.draw(st.integers(0, 80))]
    elif kind == "rename":
        arrays[data.draw(st.sampled_from(["y", "renamed", "x", "arr_0"]))] = arrays.pop(key)
    elif kind == "extra":
        arrays["extra"] = np.zeros(data.draw(st.sampled_from([(), (3,), (64, 8)])))
    elif kind == "values":
        a = a.copy()
        a.flat[data.draw(st.integers(0, a.size - 1))] = data.draw(st.sampled_from([np.nan, np.inf, -np.inf, 3e38]))
        arrays[key] = a
    elif kind == "scalar":
        arrays[key] = np.float32(1.5)
    else:
        arrays[key] = a[:0]
    check_data(capfd, base, _npz(arrays))


_SIG_BASE = None


def signature_base() -> dict:
    """A real signature (one analysis of BASES[0], a pair and pooled and chunk metrics), made once."""
    global _SIG_BASE
    if _SIG_BASE is None:
        import onnxaff

        sig = onnxaff.analyze(BASES[0], "synthetic:gaussian:n=96", chunk_size=32, progress=False,
                              metrics=["affinity", "cka", "r2_pooled"], pairs=[("x", "y")])
        _SIG_BASE = json.loads(json.dumps(sig.to_dict()))
    return copy.deepcopy(_SIG_BASE)


def _positions(node, out):
    """Every (container, key) in a JSON tree."""
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else []
    for k, v in items:
        out.append((node, k))
        _positions(v, out)
    return out


JSON_VALUES = st.one_of(st.none(), st.booleans(), st.integers(-3, 10**6), st.floats(), st.text(max_size=4),
                        st.just([]), st.just({}), st.just([None]), st.just({"mean": "x"}), st.just("DELETE"))


def check_signature_text(capfd, text: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        good, bad = Path(tmp) / "good.json", Path(tmp) / "bad.json"
        good.write_text(json.dumps(signature_base()))
        bad.write_bytes(text)
        # compare writes Markdown: its HTML page draws what report draws, at twice the time
        for args, out in ((["report", bad, "--out", Path(tmp) / "r.html"], Path(tmp) / "r.html"),
                          (["compare", good, bad, "--out", Path(tmp) / "c.md"], Path(tmp) / "c.md")):
            one_line_or_success(capfd, args, out)


@pytest.mark.parametrize("value", [[["x"]], {"a": [1]}, None, 3.5])
def test_a_reduction_of_any_json_kind_is_named_not_an_internal_error(capfd, value):
    """options.reduce is read for the protocol's words: a list there (the fuzz below found it) was looked up in a
    dict, an internal TypeError in report and compare."""
    d = signature_base()
    d["options"]["reduce"] = value
    check_signature_text(capfd, json.dumps(d).encode())


@FUZZ_FILES
@given(data=st.data(), changes=st.integers(1, 4))
def test_signature_structure(capfd, data, changes):
    d = signature_base()
    for _ in range(changes):
        positions = _positions(d, [])
        if not positions:
            break
        node, key = positions[data.draw(st.integers(0, len(positions) - 1))]
        value = data.draw(JSON_VALUES)
        if value == "DELETE":
            del node[key]
        else:
            node[key] = value
    check_signature_text(capfd, json.dumps(d).encode())


@FUZZ_FILES
@given(cut=st.floats(0, 1), flips=st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.integers(1, 255)),
                                           max_size=6))
def test_signature_bytes(capfd, cut, flips):
    blob = bytearray(json.dumps(signature_base(), indent=1).encode())
    for where, mask in flips:
        blob[int(where * len(blob))] ^= mask
    check_signature_text(capfd, bytes(blob[: int(cut * len(blob))] if cut < 0.5 else blob))


def test_npz_header_declaring_a_huge_array(capfd, tmp_path):
    """An .npz whose .npy header declares 10¹² rows of 8 floats (and holds 2 KB): numpy allocates before reading,
    and its MemoryError came out as an internal error."""
    import zipfile

    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f4", "fortran_order": False, "shape": (10**12, 8)})
    with zipfile.ZipFile(tmp_path / "d.npz", "w") as z:
        z.writestr("x.npy", header.getvalue() + bytes(2048))
    (tmp_path / "m.onnx").write_bytes(BLOBS[0])
    code, out, err = run_cli(capfd, "analyze", tmp_path / "m.onnx", "--data", tmp_path / "d.npz", "--quiet",
                             "--out", tmp_path / "s.json")
    assert code == 2 and err.startswith("onnxaff: error: ") and len(err.splitlines()) == 1, err


# Accuracy tables for correlate: every cell a number, text, nan/inf, a huge value or empty, rows repeated,
# a byte order mark, bytes that are not UTF-8: a correlation with finite accuracies, or one line.

def _correlate_signatures(folder: Path) -> list[str]:
    from onnxaff.format.signature import Signature

    paths = []
    for k in range(4):
        sites = [{"index": i, "id": f"s{i}", "kind": "relu", "status": "ok",
                  "metrics": {"affinity": {"mean": 0.5 + 0.1 * k + 0.01 * i}}} for i in range(3)]
        sig = Signature(model={"name": f"m{k}", "sha256": f"{k}" * 64, "stats": {"parameters": 100 * (k + 1)}},
                        data={}, options={}, runtime={}, metrics={"affinity": {}}, sites=sites)
        paths.append(str(sig.write(folder / f"m{k}.json")))
    return paths


CELLS = st.one_of(st.floats(), st.sampled_from(["nan", "inf", "-inf", "1e308", "-1e308", "", "0x1", "1_0", " 0.5 ",
                                                "﻿0.5"]),
                  st.text(max_size=6))
NAMES = st.one_of(st.sampled_from(["m0", "m1", "m2", "m3", "﻿m0", "M1", "0" * 64]), st.text(max_size=4))


@FUZZ_FILES
@given(cells=st.lists(CELLS, min_size=4, max_size=4), extra=st.lists(st.tuples(NAMES, CELLS), max_size=3),
       bom=st.booleans(), flips=st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.integers(1, 255)), max_size=2))
def test_correlate_accuracy_tables(capfd, cells, extra, bom, flips):
    rows = [*((f"m{k}", cell) for k, cell in enumerate(cells)), *extra]
    text = "".join(f"{name},{value}\n" for name, value in rows)
    blob = bytearray(("﻿" if bom else "").encode() + text.encode("utf-8", "surrogatepass"))
    for where, mask in flips:
        if blob:
            blob[int(where * len(blob))] ^= mask
    with tempfile.TemporaryDirectory() as tmp:
        paths = _correlate_signatures(Path(tmp))
        (Path(tmp) / "acc.csv").write_bytes(bytes(blob))
        out = Path(tmp) / "corr.json"
        one_line_or_success(capfd, ["correlate", *paths, "--accuracy", Path(tmp) / "acc.csv", "--out", out], out)
        if out.exists():
            result = json.loads(out.read_text())
            assert all(np.isfinite(r["accuracy"]) for r in result["rows"])


# Damaged checkpoints: `analyze --resume` on a real small checkpoint whose counters, members or arrays were edited.

CKPT_METRICS = "affinity,cka,r2_heldout,r2_pooled,nlc"  # chunk, chunk-pair, pooled and NLC collectors
_CKPT_BASE = None


def checkpoint_base(tmp: Path) -> tuple[dict, Path, Path]:
    """(a checkpoint's state, model, data): BASES[0] on 256 examples, stopped by SIGINT in its third batch of 32.
    Made once, in a folder of its own (the checkpoint key holds the data file's mtime)."""
    import signal

    from onnxaff.analysis import open_run
    from onnxaff.analysis.checkpoint import load_state
    from onnxaff.errors import Interrupted

    global _CKPT_BASE
    if _CKPT_BASE is None:
        home = Path(tempfile.mkdtemp(prefix="onnxaff-ckpt-fuzz-"))
        model, data = home / "m.onnx", home / "d.npz"
        model.write_bytes(BLOBS[0])
        data.write_bytes(_npz({"x": np.random.default_rng(1).standard_normal((256, 8)).astype(np.float32)}))
        run = open_run(str(model), str(data), metrics=CKPT_METRICS.split(","), chunk_size=32, batch_size=32,
                       progress=False, checkpoint=home / "c.npz")
        original, count = run.runner.run, [0]

        def runner(names, feed):
            count[0] += 1
            if count[0] == 3:
                signal.raise_signal(signal.SIGINT)
            return original(names, feed)

        run.runner.run = runner
        with pytest.raises(Interrupted):
            run.execute()
        run.close()
        _CKPT_BASE = load_state(home / "c.npz"), model, data
        assert _CKPT_BASE[0]["cursor"] == 96 and _CKPT_BASE[0]["sites"][0]["unscored"]
    state, model, data = _CKPT_BASE
    return copy.deepcopy(state), model, data


def resume(capfd, tmp: Path, state: dict, model: Path, data: Path) -> tuple[int, str, str]:
    from onnxaff.analysis.checkpoint import save_state

    save_state(tmp / "c.npz", state)
    out = tmp / "s.json"
    result = run_cli(capfd, "analyze", model, "--data", data, "--metrics", CKPT_METRICS, "--chunk-size", 32,
                     "--batch-size", 32, "--quiet", "--checkpoint", tmp / "c.npz", "--resume", "--out", out)
    code, stdout, stderr = result
    if code == 0:
        sig = read_signature(out)  # the schema's checks
        assert sig.data["samples"] == 256, "a resumed run skipped examples"
    else:
        lines = stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("onnxaff: error: "), stderr
        assert "internal error" not in stderr and not out.exists()
    return result


def test_the_unmutated_checkpoint_resumes(capfd):
    with tempfile.TemporaryDirectory() as tmp:
        assert resume(capfd, Path(tmp), *checkpoint_base(Path(tmp)))[0] == 0


@pytest.mark.parametrize("field, value, named", [
    ("cursor", 10**12, "cursor: 1000000000000 is outside the window [0, 256)"),
    ("cursor", 64, "used: 96 used, 0 dropped and 0 unreadable examples do not add up to the 64"),
    ("used", 10**6, "used: 1000000 used"),
    ("used", 3.5, "used: expected a whole number"),
    ("sites.0.rows", 640, "sites[0].chunks"),  # rows against the chunks and the buffer
    ("sites.0.chunks", 7, "sites[0].chunks"),
    ("sites.0.chunk_rows", 31, "sites[0].chunk_rows"),
    ("sites.0.index", 1, "sites[0].index: 1, this run's site 0"),
    ("sites.0.buffer.size", 64, "sites[0].chunks: 3 chunks of 64"),
    ("sites.0.moments.current.n", 33, "sites[0].moments.n: the moments count 97 rows, the site 96"),
    ("sites.0.jvp.y.n", 10**6, "sites[0].jvp.y.n"),
    ("sites.0.values.affinity", [0.5] * 9, "sites[0].values.affinity"),
    ("network.examples", 4096, "network.examples"),
])
def test_counters_that_disagree_are_refused_naming_the_field(capfd, field, value, named):
    with tempfile.TemporaryDirectory() as tmp:
        state, model, data = checkpoint_base(Path(tmp))
        *path, last = field.split(".")
        node = state
        for key in path:
            node = node[int(key)] if isinstance(node, list) else node[key]
        node[last] = value
        code, _, stderr = resume(capfd, Path(tmp), state, model, data)
        assert code == 2 and "is damaged: " + named in stderr, stderr


ARRAYS = st.sampled_from([np.zeros((3, 16)), np.zeros((32, 5)), np.full((32, 16), np.nan), np.zeros(16, np.int64),
                          np.zeros((0,)), np.ones((16, 16, 1))])
STATE_VALUES = st.one_of(JSON_VALUES, st.integers(-(10**13), 10**13), ARRAYS, st.just(True))


@FUZZ_FILES
@given(data=st.data(), changes=st.integers(1, 3))
def test_checkpoint_structure(capfd, data, changes):
    with tempfile.TemporaryDirectory() as tmp:
        state, model, data_file = checkpoint_base(Path(tmp))
        for _ in range(changes):
            kept = {k: v for k, v in state.items() if k not in ("key", "header", "site_records", "stage_records")}
            positions = [(state, k) for k in kept] + _positions(kept, [])[len(kept):]
            node, key = positions[data.draw(st.integers(0, len(positions) - 1))]
            value = copy.deepcopy(data.draw(STATE_VALUES))  # never the strategy's own list (a cycle)
            if isinstance(value, str) and value == "DELETE":
                del node[key]
            else:
                node[key] = value
        resume(capfd, Path(tmp), state, model, data_file)

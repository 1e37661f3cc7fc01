"""Damaged models never crash onnxaff: small valid models, mutated (cut short, bytes flipped, an initializer
deleted, a wrong dtype, a changed input dim, a renamed input), either analyse to a valid signature or fail
with exactly one line `onnxaff: error: ...` (never `internal error`, a traceback or onnxruntime's own log).

The CLI runs in-process: over some ten thousand such models onnxruntime never crashed (load_model refuses
malformed ones before they reach it). `capfd` captures file descriptors, so whatever onnxruntime prints
from C++ counts too. ONNXAFF_FUZZ_EXAMPLES raises the number of examples per test for a longer search.
"""

from __future__ import annotations

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

from onnxaff.signature import read_signature
from tests.conftest import run_cli

FUZZ = settings(max_examples=int(os.environ.get("ONNXAFF_FUZZ_EXAMPLES", "50")), deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])
HEADER = '<ir_version: 8, opset_import: ["" : 17]>'


def _model(text: str, **weights: np.ndarray) -> onnx.ModelProto:
    model = onnx.parser.parse_model(HEADER + text)
    model.graph.initializer.extend(numpy_helper.from_array(w, name) for name, w in weights.items())
    onnx.checker.check_model(model, full_check=True)
    return model


_rng = np.random.default_rng(0)
BASES = [
    _model(""" g (float[N, 8] x) => (float[N, 4] y) {
        h = MatMul(x, w1)
        a = Add(h, b1)
        r = Relu(a)
        o = MatMul(r, w2)
        y = Tanh(o)
    }""", w1=_rng.standard_normal((8, 16)).astype(np.float32), b1=_rng.standard_normal(16).astype(np.float32),
        w2=_rng.standard_normal((16, 4)).astype(np.float32)),
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

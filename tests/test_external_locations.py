"""External data references are checked by onnxaff before anything opens them.

onnx's checker and onnxruntime 1.32 refuse locations outside the model's folder, but pyproject accepts onnx >= 1.15
and onnxruntime >= 1.17, and a FIFO or a device named as weights would block or stream forever whatever the
version. Each bad reference is one line naming the tensor, with `sites` (which never reads weights) as with
`analyze`.
"""

from __future__ import annotations

import os
import socket
import stat

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from tests.builders import chain
from tests.conftest import cli_process, run_cli

HEADER = '<ir_version: 8, opset_import: ["" : 17]>'


@pytest.fixture(autouse=True)
def _no_debug(monkeypatch):
    monkeypatch.delenv("ONNXAFF_DEBUG", raising=False)


def external_model(folder, **entries: str) -> str:
    """m.onnx in `folder` with its 4x4 weight in w.bin, then the weight's external_data entries overridden."""
    folder.mkdir(exist_ok=True)
    model = onnx.parser.parse_model(HEADER + " g (float[N, 4] x) => (float[N, 4] y) { h = MatMul(x, w)\n y = Relu(h) }")
    model.graph.initializer.append(numpy_helper.from_array(np.eye(4, dtype=np.float32), "w"))
    path = folder / "m.onnx"
    onnx.save_model(model, str(path), save_as_external_data=True, location="w.bin", size_threshold=0)
    model = onnx.load(str(path), load_external_data=False)
    tensor = model.graph.initializer[0]
    for key, value in entries.items():
        found = [e for e in tensor.external_data if e.key == key]
        if found:
            found[0].value = value
        else:
            tensor.external_data.add(key=key, value=value)
    onnx.save(model, str(path))
    return str(path)


def refused(capfd, path, fragment: str) -> None:
    for args in (["sites", path], ["analyze", path, "--data", "synthetic:gaussian:n=64", "--quiet",
                                   "--out", os.path.join(os.path.dirname(path), "s.json")]):
        code, out, err = run_cli(capfd, *args)
        assert code == 2 and out == "", err
        assert err == f"onnxaff: error: invalid ONNX model m.onnx: tensor 'w': {fragment}\n"


def test_a_good_reference_analyses(capfd, tmp_path):
    path = external_model(tmp_path / "model", offset="0", length="64")
    code, _, err = run_cli(capfd, "analyze", path, "--data", "synthetic:gaussian:n=64", "--quiet",
                           "--out", tmp_path / "s.json")
    assert code == 0, err


@pytest.mark.parametrize("key,value,fragment", [
    ("offset", "abc", "external data offset 'abc' is not a whole number of bytes"),
    ("offset", "-8", "external data offset '-8' is not a whole number of bytes"),
    ("length", "-4", "external data length '-4' is not a whole number of bytes"),
    ("length", "1e3", "external data length '1e3' is not a whole number of bytes"),
    ("length", "60", "external data length is 60 bytes, but float[4, 4] takes 64"),
    ("offset", "8", "external data (64 bytes from offset 8) runs past the end of w.bin (64 bytes)"),
    ("offset", "100", "external data (64 bytes from offset 100) runs past the end of w.bin (64 bytes)"),
    ("checksum_", "x", "unknown external data key 'checksum_'"),
])
def test_bad_offset_or_length(capfd, tmp_path, key, value, fragment):
    """A non-numeric offset or a negative length raised ValueError inside onnx (an internal error)."""
    refused(capfd, external_model(tmp_path / "model", **{key: value}), fragment)


def test_location_with_parent_folder(capfd, tmp_path):
    (tmp_path / "secret.bin").write_bytes(bytes(64))
    refused(capfd, external_model(tmp_path / "model", location="../secret.bin"),
            "external data location '../secret.bin' is outside the model's folder")


def test_absolute_location(capfd, tmp_path):
    (tmp_path / "secret.bin").write_bytes(bytes(64))
    where = str(tmp_path / "secret.bin")
    refused(capfd, external_model(tmp_path / "model", location=where),
            f"external data location '{where}' is an absolute path; it must be inside the model's folder")


def test_symlink_pointing_out(capfd, tmp_path):
    (tmp_path / "secret.bin").write_bytes(bytes(64))
    path = external_model(tmp_path / "model", location="link.bin")
    os.symlink(tmp_path / "secret.bin", tmp_path / "model" / "link.bin")
    refused(capfd, path, "external data location 'link.bin' is outside the model's folder")


@pytest.mark.parametrize("kind", ["fifo", "directory", "socket", "device"])
def test_location_that_is_not_a_regular_file(capfd, tmp_path, kind):
    """A FIFO blocked the checker's read forever; a directory or a device is no weight file either."""
    path = external_model(tmp_path / "model", location="weights")
    target = tmp_path / "model" / "weights"
    if kind == "fifo":
        os.mkfifo(target)
    elif kind == "directory":
        target.mkdir()
    elif kind == "socket":
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(target))
    else:
        try:
            os.mknod(target, stat.S_IFCHR | 0o600, os.makedev(1, 5))  # /dev/zero's numbers
        except PermissionError:
            pytest.skip("creating a device node needs privileges")
    name = {"fifo": "a FIFO", "directory": "a directory", "socket": "a socket", "device": "a device"}[kind]
    fragment = f"external data location 'weights' is {name}, not a regular file"
    if kind == "fifo":  # in a child process: if it blocks on the FIFO, the timeout ends it, not the suite
        r = cli_process("sites", path, timeout=60)
        assert r.returncode == 2 and r.stderr == f"onnxaff: error: invalid ONNX model m.onnx: tensor 'w': {fragment}\n"
    refused(capfd, path, fragment)


@pytest.mark.parametrize("location,fragment", [
    ("", "external data location is empty"),
    ("w\0.bin", "external data location 'w\\x00.bin' holds a NUL character"),
])
def test_malformed_location(capfd, tmp_path, location, fragment):
    refused(capfd, external_model(tmp_path / "model", location=location), fragment)


@pytest.mark.parametrize("elem_type,fragment", [(0, "element type 0 (undefined)"), (99, "unknown element type 99")])
@pytest.mark.parametrize("command", ["sites", "analyze"])
def test_input_element_type(capfd, tmp_path, elem_type, fragment, command):
    """An input of element type 0 or an unknown number raised KeyError (an internal error) in analyze."""
    model = chain("Relu")
    model.graph.input[0].type.tensor_type.elem_type = elem_type
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    args = [command, path] + (["--data", "synthetic:gaussian:n=64", "--out", tmp_path / "s.json"]
                              if command == "analyze" else [])
    code, out, err = run_cli(capfd, *args)
    assert code == 2 and out == ""
    assert err == f"onnxaff: error: invalid ONNX model m.onnx: input 'x' has {fragment}\n"


def test_model_path_that_is_a_fifo(tmp_path):
    """onnx.load waited forever on a FIFO given as the model; now refused before it is opened."""
    os.mkfifo(tmp_path / "m.onnx")
    r = cli_process("sites", tmp_path / "m.onnx", timeout=60)  # its own process: a hang cannot stop pytest
    assert r.returncode == 2 and r.stderr == f"onnxaff: error: model path is not a regular file: {tmp_path}/m.onnx\n"


def test_symlink_loop(capfd, tmp_path):
    """A location that is a symbolic link to itself: resolving it raised RuntimeError (Python 3.11)."""
    path = external_model(tmp_path / "model", location="loop.bin")
    os.symlink("loop.bin", tmp_path / "model" / "loop.bin")
    refused(capfd, path, "external data location 'loop.bin' cannot be resolved (a loop of symbolic links?)")


def test_input_element_type_in_memory():
    """The same check for a model handed over as a proto (the Python API)."""
    from onnxaff.errors import OnnxaffError
    from onnxaff.graph.load import from_proto

    model = chain("Relu")
    model.graph.input[0].type.tensor_type.elem_type = 0
    with pytest.raises(OnnxaffError, match=r"^invalid ONNX model g: input 'x' has element type 0 \(undefined\)$"):
        from_proto(model)

"""onnxruntime sessions: the providers actually in use, external data, and the batch loop."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx

from onnxaff.errors import OnnxaffError
from onnxaff.graph.load import LoadedModel

DEVICES = ("auto", "cpu", "cuda")
CUDA = "CUDAExecutionProvider"
CPU = "CPUExecutionProvider"


def ort():
    try:
        import onnxruntime
    except ImportError:
        raise OnnxaffError(
            "onnxruntime is not installed: pip install 'onnxaff[cpu]' (or 'onnxaff[gpu]' on a CUDA machine)"
        ) from None
    onnxruntime.set_default_logger_severity(3)  # ORT's warnings (unused initializers, ...) are not ours
    return onnxruntime


def _options(threads: int | None = None):
    so = ort().SessionOptions()
    so.log_severity_level = 3
    if threads:
        so.intra_op_num_threads = threads
    return so


_cuda_usable: bool | None = None


def cuda_usable() -> bool:
    """Whether a session can really run on CUDA: onnxruntime-gpu lists CUDA even where it cannot load."""
    global _cuda_usable
    if _cuda_usable is None:
        rt = ort()
        _cuda_usable = False
        if CUDA in rt.get_available_providers():
            probe = onnx.helper.make_model(onnx.helper.make_graph(
                [onnx.helper.make_node("Identity", ["x"], ["y"])], "probe",
                [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1])],
                [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1])]))
            rt.set_default_logger_severity(4)  # the failed CUDA load logs an error we expect
            try:
                sess = rt.InferenceSession(probe.SerializeToString(), _options(), providers=[CUDA, CPU])
                _cuda_usable = CUDA in sess.get_providers()
            except Exception:
                _cuda_usable = False
            finally:
                rt.set_default_logger_severity(3)
    return _cuda_usable


def providers_for(device: str) -> list[str]:
    if device not in DEVICES:
        raise OnnxaffError(f"unknown device {device!r}; choose one of {', '.join(DEVICES)}")
    if device == "cpu":
        return [CPU]
    if cuda_usable():
        return [CUDA, CPU]
    if device == "cuda":
        raise OnnxaffError(
            "--device cuda: onnxruntime cannot use CUDA here (is onnxruntime-gpu installed, with its CUDA libraries?)"
        )
    return [CPU]


@contextlib.contextmanager
def _model_file(loaded: LoadedModel, model: onnx.ModelProto) -> Iterator[str | bytes]:
    """Bytes for an inline model; for external data a temporary file whose data links to the originals."""
    if not loaded.has_external_data:
        yield model.SerializeToString()
        return
    with tempfile.TemporaryDirectory(prefix="onnxaff-") as tmp:
        for loc in loaded.external_locations:
            link = Path(tmp) / loc
            link.parent.mkdir(parents=True, exist_ok=True)
            os.symlink((loaded.base_dir / loc).resolve(), link)
        path = Path(tmp) / "augmented.onnx"
        onnx.save_model(model, str(path))
        yield str(path)


class Runner:
    """A session on one (augmented) model, run batch by batch."""

    def __init__(self, loaded: LoadedModel, model: onnx.ModelProto, device: str = "auto", threads: int | None = None):
        providers = providers_for(device)
        rt = ort()
        try:
            with _model_file(loaded, model) as source:
                self.session = rt.InferenceSession(source, _options(threads), providers=providers)
        except Exception as exc:
            msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise OnnxaffError(f"onnxruntime cannot load the model: {msg}") from None
        self.providers = self.session.get_providers()
        if device == "cuda" and CUDA not in self.providers:
            raise OnnxaffError("--device cuda: the session fell back to CPU")

    def run(self, names: list[str], feed: dict[str, np.ndarray]) -> list[np.ndarray]:
        try:
            return self.session.run(names, feed)
        except Exception as exc:
            msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            shapes = ", ".join(f"{k}{list(v.shape)}:{v.dtype}" for k, v in feed.items())
            raise OnnxaffError(f"onnxruntime failed on a batch ({shapes}): {msg}") from None

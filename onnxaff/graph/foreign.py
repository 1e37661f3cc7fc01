"""What a model file that is no ONNX most likely is, from its first bytes and its suffix: protobuf's bare
DecodeError says nothing to someone who passed a PyTorch checkpoint, which must be exported first."""

from __future__ import annotations

from pathlib import Path

from onnxaff.errors import OnnxaffError

_TORCH = "export the model to ONNX first (onnxaff.from_torch, or torch.onnx.export)"
_KERAS = "export the model to ONNX first (onnxaff.from_keras, or tf2onnx)"
_TORCH_SUFFIXES = (".pt", ".pth", ".ckpt", ".bin", ".pkl", ".pickle", ".tar")


def what_it_is(path: Path) -> tuple[str, str] | None:
    """(what the file is, what to do instead), or None when its bytes say nothing known."""
    try:
        with open(path, "rb") as f:
            head = f.read(16)
    except OSError:
        return None
    suffix = path.suffix.lower()
    if head.startswith(b"PK\x03\x04"):
        if suffix == ".keras":
            return "a Keras model (a zip archive)", _KERAS
        return "a zip archive (PyTorch saves its checkpoints so: .pt, .pth)", _TORCH
    if head[:1] == b"\x80" and head[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05"):
        return "a Python pickle (a PyTorch checkpoint of torch < 1.6, or another pickled object)", _TORCH
    if head.startswith(b"\x89HDF\r\n\x1a\n"):
        return "an HDF5 file (Keras .h5)", _KERAS
    if head[4:8] == b"TFL3":
        return "a TensorFlow Lite model", "convert it to ONNX first (tf2onnx --tflite)"
    if head.startswith(b"GGUF"):
        return "a GGUF file", "export the model to ONNX first"
    if len(head) >= 10 and head[8:10] == b'{"' and int.from_bytes(head[:8], "little") < 1 << 30:
        return "a safetensors file (weights without a graph)", "export the model to ONNX first"
    if suffix in _TORCH_SUFFIXES:
        return f"no ONNX file by its suffix {suffix} (a PyTorch checkpoint?)", _TORCH
    return None


def not_onnx(path: Path, fallback: str) -> OnnxaffError:
    """The one-line error for a file onnx cannot read as a model: what it is where its bytes say, else `fallback`."""
    found = what_it_is(path)
    if found is None:
        return OnnxaffError(fallback)
    return OnnxaffError(f"not an ONNX model: {path} is {found[0]}; {found[1]}")

"""What a signature was made from (model and weights, data, options, code): a rerun skips a model whose signature
records this very identity. The model and metric-code parts are the ones a checkpoint's key compares."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from onnxaff.errors import OnnxaffError
from onnxaff.signature import read_signature

# Options that change how fast a run goes, never its numbers: a signature made with others is still current.
_SPEED_ONLY = ("progress", "device", "chunk_workers", "threads", "graph_optimization")


def file_digest(path: Path) -> str | None:
    """sha256 of a regular file; None for anything else (a FIFO or /dev/zero would never end) or unreadable."""
    from onnxaff.graph.load import sha256_of

    try:
        return sha256_of(path) if Path(path).is_file() else None
    except OSError:
        return None


def model_identity(path: Path) -> str | None:
    """The model's key as a checkpoint computes it: the .onnx file's sha256, with its external weight files'."""
    import onnx

    from onnxaff.analysis.checkpoint import model_key
    from onnxaff.graph.load import external_locations_of, weight_files

    digest = file_digest(path)
    if digest is None:
        return None
    try:
        locations = external_locations_of(onnx.load(str(path), load_external_data=False))
    except Exception:  # not a model: its analysis says why
        return digest
    return model_key(digest, weight_files(path.parent, locations))  # a missing file: its analysis says why


def data_path(spec: str) -> str | None:
    """The file or folder a data spec reads (a `text:` spec's file, an `audio:` spec's folder), None for data read
    from no file (synthetic); the spec itself where no kind reads it (its analysis says why)."""
    from onnxaff.data.registry import find_kind

    found = find_kind(spec)
    if found is None:
        return spec
    return found[1] or None


def data_identity(spec: str) -> str:
    """A digest of the data a spec names, as its kind identifies them (onnxaff.data.registry): a file by path, size
    and time (a `text:` spec's file too, with the spec); a folder by every file its source would read (an image
    folder's walk, an audio folder's clips); else the spec."""
    from onnxaff.data.registry import find_kind

    found = find_kind(spec)
    parts = [spec] if found is None else found[0].identity(spec, found[1])
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()


def code_identity(fingerprints: dict) -> str:
    """A digest of the code behind the numbers: each metric's fingerprint (as a checkpoint records it) and the
    onnxaff version (everything around the metrics)."""
    import onnxaff

    return hashlib.sha256(json.dumps({"metrics": fingerprints, "onnxaff": onnxaff.__version__},
                                     sort_keys=True).encode()).hexdigest()


def options_identity(options: dict) -> str:
    """A digest of the options that change numbers (plugin files by content)."""
    numeric = {k: v for k, v in options.items() if k not in _SPEED_ONLY}
    if "images" in numeric:
        numeric["images"] = {k: v for k, v in (numeric["images"] or {}).items() if k != "workers"}
    numeric["plugins"] = [[str(p), file_digest(Path(p))] for p in numeric.get("plugins", [])]
    if isinstance(numeric.get("tokenizer"), str):  # text data: the tokenizer by content too
        numeric["tokenizer"] = [numeric["tokenizer"], file_digest(Path(numeric["tokenizer"]))]
    if numeric.get("constants"):
        numeric["constants"] = {k: _constant_identity(v) for k, v in numeric["constants"].items()}
    return hashlib.sha256(json.dumps(numeric, sort_keys=True, default=str).encode()).hexdigest()


def _constant_identity(value):
    """A constant as the study's key sees it: a .npy file by content, an array by its bytes, a number as it is."""
    if isinstance(value, str | Path):
        return [str(value), file_digest(Path(value))]
    if hasattr(value, "tobytes"):
        return hashlib.sha256(value.tobytes()).hexdigest()
    return value


def stale_reason(path: Path, key: dict) -> str | None:
    """None when the signature at `path` was made from this very model, data, options and code; else why not."""
    if not path.exists():
        return "no signature yet"
    try:
        sig = read_signature(path)
    except OnnxaffError as exc:
        return f"its signature is unreadable ({exc})"
    made = sig.runtime.get("study") or {}
    for field_, what in (("model_sha256", "the model or its weights changed"), ("data", "the data changed"),
                         ("options", "the options changed"),
                         ("code", "the metric code or the onnxaff version changed")):
        if made.get(field_) != key[field_]:
            return what
    return None

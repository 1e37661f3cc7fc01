"""What a signature was made from (model file, data, options that change numbers): a rerun skips a model
whose signature records this very identity."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from onnxaff.errors import OnnxaffError
from onnxaff.signature import read_signature

# Options that change how fast a run goes, never its numbers: a signature made with others is still current.
_SPEED_ONLY = ("progress", "device", "chunk_workers", "threads", "graph_optimization")


def file_digest(path: Path) -> str | None:
    from onnxaff.graph.load import sha256_of

    try:
        return sha256_of(path)
    except OSError:
        return None


def data_identity(spec: str) -> str:
    """A digest of the data a spec names: a file by path, size and time; a folder by every file's; else the spec."""
    path = Path(spec)
    if path.is_file():
        st = path.stat()
        parts = [str(path.resolve()), st.st_size, st.st_mtime_ns]
    elif path.is_dir():
        parts = [str(path.resolve())]
        for f in sorted(p for p in path.rglob("*") if p.is_file()):
            st = f.stat()
            parts.append([f.relative_to(path).as_posix(), st.st_size, st.st_mtime_ns])
    else:
        parts = [spec]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()


def options_identity(options: dict) -> str:
    """A digest of the options that change numbers (plugin files by content)."""
    numeric = {k: v for k, v in options.items() if k not in _SPEED_ONLY}
    if "images" in numeric:
        numeric["images"] = {k: v for k, v in (numeric["images"] or {}).items() if k != "workers"}
    numeric["plugins"] = [[str(p), file_digest(Path(p))] for p in numeric.get("plugins", [])]
    return hashlib.sha256(json.dumps(numeric, sort_keys=True, default=str).encode()).hexdigest()


def stale_reason(path: Path, key: dict) -> str | None:
    """None when the signature at `path` was made from this very model, data and options; else why not."""
    if not path.exists():
        return "no signature yet"
    try:
        sig = read_signature(path)
    except OnnxaffError as exc:
        return f"its signature is unreadable ({exc})"
    made = sig.runtime.get("study") or {}
    for field_, what in (("model_sha256", "the model file changed"), ("data", "the data changed"),
                         ("options", "the options changed")):
        if made.get(field_) != key[field_]:
            return what
    return None

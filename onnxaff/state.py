"""Collector state on disk: checkpoints and shard parts, one `.npz` with a JSON header.

Nested dicts/lists of numbers, strings and numpy arrays are stored as a JSON document in which every
array is replaced by a reference into the archive, so float64 moments and float32 row buffers come back
bit for bit (JSON floats round-trip exactly too) and nothing is unpickled.
"""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import numpy as np

from onnxaff.errors import OnnxaffError
from onnxaff.files import write_bytes_atomic

STATE_FORMAT = "onnxaff.state"
STATE_VERSION = 1
_REF = "__array__"


def _pack(obj, arrays: dict):
    if isinstance(obj, np.ndarray):
        key = f"a{len(arrays)}"
        arrays[key] = obj
        return {_REF: key}
    if isinstance(obj, dict):
        return {str(k): _pack(v, arrays) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_pack(v, arrays) for v in obj]
    if isinstance(obj, np.generic):
        return obj.item()
    return obj


def _unpack(obj, arrays):
    if isinstance(obj, dict):
        if set(obj) == {_REF}:
            return arrays[obj[_REF]]
        return {k: _unpack(v, arrays) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_unpack(v, arrays) for v in obj]
    return obj


def save_state(path: str | Path, state: dict) -> Path:
    """Write atomically (temporary file + rename): an interrupted save leaves the previous file intact."""
    arrays: dict[str, np.ndarray] = {}
    header = json.dumps({"format": STATE_FORMAT, "version": STATE_VERSION, "state": _pack(state, arrays)})
    buf = io.BytesIO()
    np.savez(buf, header=np.array(header), **arrays)
    return write_bytes_atomic(path, buf.getbuffer())


def load_state(path: str | Path) -> dict:
    path = Path(path)
    if not path.is_file():
        raise OnnxaffError(f"state file not found: {path}")
    try:
        with np.load(path, allow_pickle=False) as z:
            header = json.loads(str(z["header"]))
            arrays = {k: z[k] for k in z.files if k != "header"}
    except (OSError, EOFError, ValueError, KeyError, zipfile.BadZipFile, json.JSONDecodeError) as exc:
        raise OnnxaffError(f"{path} is not a readable onnxaff state file ({type(exc).__name__})") from None
    if header.get("format") != STATE_FORMAT or header.get("version") != STATE_VERSION:
        raise OnnxaffError(f"{path} is not an onnxaff state file of version {STATE_VERSION}")
    return _unpack(header["state"], arrays)


def state_kind(path: str | Path) -> str | None:
    """The kind of an onnxaff state file ("checkpoint", "part"), None for any other file.

    Only the JSON header is read (a .npy is not even opened as an array): this runs on whatever a user names
    as a checkpoint, which may be a data set of many gigabytes.
    """
    try:
        with open(path, "rb") as f:
            if f.read(4) != b"PK\x03\x04":  # every .npz is a zip archive
                return None
        with np.load(path, allow_pickle=False) as z:
            header = json.loads(str(z["header"]))
    except (OSError, EOFError, ValueError, KeyError, zipfile.BadZipFile, json.JSONDecodeError, AttributeError,
            TypeError):
        return None
    state = header.get("state") if isinstance(header, dict) and header.get("format") == STATE_FORMAT else None
    if not isinstance(state, dict):
        return None
    kind = state.get("kind")
    return kind if isinstance(kind, str) else None

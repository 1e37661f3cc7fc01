"""Saved run states: the `.npz` format, the key a state must match, and the checkpoint file of a run.

A state file is one `.npz` with a JSON header: nested dicts/lists of numbers, strings and numpy arrays are
stored as a JSON document in which every array is replaced by a reference into the archive, so float64
moments and float32 row buffers come back bit for bit (JSON floats round-trip exactly too) and nothing is
unpickled.

A checkpoint path is often typed by hand, so it may name a data file, a model or a signature: such a file is
refused before the run and never touched. The finished data pass is saved there before the result is written,
so a result that cannot be written (disk full, permissions) is written later from it by resuming.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

from onnxaff.errors import ConfigError, OnnxaffError, WriteError, first_line, option
from onnxaff.foundations.files import temporaries_of, write_bytes_atomic
from onnxaff.graph.load import sha256_of

STATE_FORMAT = "onnxaff.state"
STATE_VERSION = 4  # 2: features' rounding in the site state, the NLC step relative to each example's scale;
# 3: the fields saved under their own names (the header as `header`), derived from the dataclasses;
# 4: the sites' and stages' records as `site_records`, `stage_records` (a part of 3 would merge into no sites)
STATE_KIND_CHECKPOINT, STATE_KIND_PART = "checkpoint", "part"
_REF = "__array__"


# --- the state file format ---

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


# --- the key: what a saved state must match to be continued or merged ---

def run_key(data_spec: str, description: dict, total: int, options: dict, model_info: dict, unit: int,
            metrics: dict[str, str | None], reading: dict[str, int] | None = None, content: bool = True) -> dict:
    """Model (and external weights), data, result-changing options, each plugin file's content, the code of
    every metric the run uses (`metrics`: {name: fingerprint}, entry points and plugin files alike), and the
    sites read with their examples off axis 0 (`reading`: {site id: batch axis}; graph.batch): a state saved
    before they were read so holds rows that mix examples. content=False leaves the files' sha256 out, for a state
    that is never saved (no checkpoint, no shard): nothing compares its key."""
    describe = {k: v for k, v in description.items() if k not in ("skipped", "workers")}
    describe["content"] = data_content(data_spec) if content else "unkeyed"
    data = hashlib.sha256(json.dumps(describe, sort_keys=True, default=str).encode()).hexdigest()
    numeric = {k: v for k, v in options.items() if k not in ("device",)}
    model = model_key(model_info["sha256"], model_info.get("external_data"))
    plugins = [{"path": p, "sha256": sha256_of(p) if Path(p).is_file() else None} for p in options["plugins"]]
    return {"model_sha256": model, "data_sha256": data, "options": numeric, "total": total, "unit": unit,
            "plugins": plugins, "metrics": dict(metrics), "reading": dict(reading or {})}


def data_content(spec: str) -> list | None:
    """The files a data spec reads, by content as its kind identifies them (DataSource.identity: each file's
    sha256); None for data read from no file (synthetic, given in Python: their description says it all). Never
    size and modification time alone: a file rewritten with its time put back would continue the old rows."""
    from onnxaff.data.registry import find_kind

    found = find_kind(spec) if isinstance(spec, str) and spec.strip() else None
    if found is None or not found[1] or not Path(found[1]).exists():
        return None
    try:
        return found[0].identity(spec, found[1])
    except OnnxaffError:
        raise
    except Exception as exc:  # a third-party kind's identity: named in one line, as a study names it
        from onnxaff.data.registry import plugin_name

        who = plugin_name(found[0]) or f"the data {spec}"
        raise OnnxaffError(f"{who}: identity() failed ({type(exc).__name__}: {first_line(exc)})") from None


def model_key(sha256: str, external: list | None) -> str:
    """The model's identity: its .onnx file's sha256, combined with its weight files' when it has external data
    (the .onnx then holds no weights). Checkpoints, parts and study signatures all compare this."""
    if not external:
        return sha256
    return hashlib.sha256(json.dumps([sha256, external], sort_keys=True).encode()).hexdigest()


def key_mismatch(mine: dict, theirs: dict) -> str | None:
    """Why a saved state with key `theirs` cannot join this run (None when it can), as "another model"..."""
    for field_, what in (("model_sha256", "another model"), ("data_sha256", "another data set"),
                         ("options", "other options"), ("total", "another data set")):
        if theirs.get(field_) != mine.get(field_):
            if field_ == "options":
                diff = sorted(k for k in {*mine["options"], *theirs["options"]}
                              if mine["options"].get(k) != theirs["options"].get(k))
                what += f" ({', '.join(diff)})"
            return what
    if (mine.get("reading") or {}) != (theirs.get("reading") or {}):
        return "sites read on another batch axis (a state saved before the batch axis was followed to them)"
    for a, b in zip(mine.get("plugins", []), theirs.get("plugins", []), strict=False):
        if a != b:
            return f"another version of the plugin {a['path']} (the file has changed)"
    if (what := code_mismatch(mine.get("metrics"), theirs.get("metrics"))) is not None:
        return f"{what} (its code has changed)" if what.startswith("another version") else what
    return None


def code_mismatch(mine: dict | None, theirs: dict | None) -> str | None:
    """Why the metric code recorded as `theirs` ({name: fingerprint}) is not `mine`, as "another version of
    metric M" (None when every metric's code is the same)."""
    if theirs is None:
        return "an onnxaff version that recorded no metric fingerprints"
    mine = mine or {}
    for name in sorted({*mine, *theirs}):
        if name not in theirs or name not in mine:
            return f"a run with other metrics ({name})"
        if mine[name] != theirs[name]:
            return f"another version of metric {name}"
    return None


class NotThisRun(OnnxaffError):
    """A saved state that is not a checkpoint of this very run; `why` says what it is instead."""

    def __init__(self, message: str, why: str):
        super().__init__(message)
        self.why = why

    def __reduce__(self):
        return type(self), (self.template, self.why)


def check_resumable(path, mine: dict, saved: dict) -> None:
    """Refuse to continue a state that is not a checkpoint of this very run, saying why in one line."""
    if not isinstance(saved, dict) or saved.get("kind") != STATE_KIND_CHECKPOINT:
        raise NotThisRun(f"{path} is a shard part, not a checkpoint", "a shard part")
    if (what := key_mismatch(mine, saved["key"])) is not None:
        raise NotThisRun(f"checkpoint {path} is from {what}; remove it or run without {option('resume')}",
                         f"from {what}")


# --- the --checkpoint file ---

def is_checkpoint(path: str | Path) -> bool:
    return Path(path).is_file() and state_kind(path) == STATE_KIND_CHECKPOINT


def prepare(path: str | Path) -> None:
    """Refuse a path that holds anything but an onnxaff checkpoint; remove temporaries of killed saves there."""
    path = Path(path)
    if path.exists() and not path.is_dir() and not is_checkpoint(path):
        part = path.is_file() and state_kind(path) == STATE_KIND_PART  # never opened otherwise: a FIFO would block
        what = "a shard part's state" if part else "a file that is not an onnxaff checkpoint"
        raise ConfigError("checkpoint", f"{{option}} {path} holds {what}; it is left as it is: "
                                        "choose another {option}")
    for tmp in temporaries_of(path):
        with contextlib.suppress(OSError):
            tmp.unlink()


def remove(path: str | Path) -> None:
    """Remove the checkpoint once its run's result is written (a file that is not one stays)."""
    if is_checkpoint(path):
        with contextlib.suppress(FileNotFoundError):
            Path(path).unlink()


def write_result(run, write: Callable[[], tuple]) -> tuple:
    """Save the finished data pass to the run's checkpoint, call `write` (the result's files), then remove the
    checkpoint. The data pass is the long part of a run: when `write` cannot write (disk full, permissions), the
    one-line error says how to write the result from the checkpoint instead of running everything again."""
    checkpoint = run.checkpoint
    try:
        run.save()
        unsaved = None
    except WriteError as exc:  # the disk may be full already: the result is still tried
        unsaved = exc
    try:
        result = write()
    except WriteError as exc:
        if unsaved is None:
            raise WriteError(f"{exc.template}; the results are kept in {checkpoint}: rerun the same command with "
                             f"{option('resume')} {option('checkpoint', str(checkpoint))} and an output that can be "
                             "written") from None
        earlier = f"; {checkpoint} holds the last periodic checkpoint ({option('resume')})" if is_checkpoint(
            checkpoint) else ""
        raise WriteError(f"{exc.template}; the final state could not be saved either ({unsaved.template}){earlier}"
                         ) from None
    except OnnxaffError:  # nothing to write at all (no usable example): the checkpoint would only repeat this
        remove(checkpoint)
        raise
    remove(checkpoint)
    return result

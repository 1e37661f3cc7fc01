"""Output files that are either whole or absent: a failed or interrupted write never replaces a good file."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

from onnxaff.errors import OnnxaffError


def output_folder(path: Path) -> Path:
    """The folder `path` will be written in, or a one-line reason why it cannot be."""
    folder = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise OnnxaffError(f"output path is a folder, not a file: {path}")
    if not folder.is_dir():
        raise OnnxaffError(f"output folder does not exist: {folder}")
    return folder


def _temporary_beside(path: Path) -> tuple[int, str]:
    folder = output_folder(path)
    try:
        return tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
    except OSError as exc:
        raise OnnxaffError(f"cannot write to {folder}: {exc.strerror}") from None


def check_writable(path: str | Path) -> Path:
    """Fail before a long run, not after it, when its output could not be written.

    A real temporary file is created and removed: permission bits alone miss read-only mounts and ACLs,
    and say nothing true for root.
    """
    path = Path(path)
    fd, tmp = _temporary_beside(path)
    os.close(fd)
    os.unlink(tmp)
    return path


def write_bytes_atomic(path: str | Path, data: bytes | memoryview) -> Path:
    """Write to a temporary file beside the target, then rename: a reader never sees half a file.

    A full disk or a vanished folder mid-write becomes one line naming the file; the old file stays.
    """
    path = Path(path)
    fd, tmp = _temporary_beside(path)
    try:
        with os.fdopen(fd, "wb") as f:  # owns fd from here: closed whatever fails
            os.fchmod(f.fileno(), 0o666 & ~_umask())  # mkstemp makes it private; make it read like any new file
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise OnnxaffError(f"cannot write {path}: {exc.strerror or exc}") from None
        raise
    return path


def write_text_atomic(path: str | Path, text: str) -> Path:
    return write_bytes_atomic(path, text.encode("utf-8"))


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask

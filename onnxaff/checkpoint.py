"""The --checkpoint file of a run: only an onnxaff checkpoint is ever replaced or removed there.

A checkpoint path is often typed by hand, so it may name a data file, a model or a signature: such a file is
refused before the run and never touched. The finished data pass is saved there before the result is written,
so a result that cannot be written (disk full, permissions) is written later from it with --resume.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path

from onnxaff.errors import OnnxaffError, WriteError
from onnxaff.files import temporaries_of
from onnxaff.state import state_kind

KIND = "checkpoint"  # = onnxaff.analysis.STATE_KIND_CHECKPOINT (not imported: analysis imports this module)


def is_checkpoint(path: str | Path) -> bool:
    return Path(path).is_file() and state_kind(path) == KIND


def prepare(path: str | Path) -> None:
    """Refuse a path that holds anything but an onnxaff checkpoint; remove temporaries of killed saves there."""
    path = Path(path)
    if path.exists() and not path.is_dir() and not is_checkpoint(path):
        part = path.is_file() and state_kind(path) == "part"  # never opened otherwise: a FIFO would block
        what = "a shard part's state" if part else "a file that is not an onnxaff checkpoint"
        raise OnnxaffError(f"--checkpoint {path} holds {what}; it is left as it is: choose another --checkpoint")
    for tmp in temporaries_of(path):
        with contextlib.suppress(OSError):
            tmp.unlink()


def remove(path: str | Path) -> None:
    """Remove the checkpoint once its run's result is written (a file that is not one stays)."""
    if is_checkpoint(path):
        with contextlib.suppress(FileNotFoundError):
            Path(path).unlink()


def write_result(run, checkpoint: str | Path, write: Callable[[], tuple]) -> tuple:
    """Save the finished data pass to `checkpoint`, call `write` (the result's files), then remove the checkpoint.

    The data pass is the long part of a run: when `write` cannot write (disk full, permissions), the one-line
    error says how to write the result from the checkpoint instead of running everything again.
    """
    try:
        run.save(checkpoint, KIND)
        unsaved = None
    except WriteError as exc:  # the disk may be full already: the result is still tried
        unsaved = exc
    try:
        result = write()
    except WriteError as exc:
        if unsaved is None:
            raise WriteError(f"{exc}; the results are kept in {checkpoint}: rerun the same command with --resume "
                             f"--checkpoint {checkpoint} and an --out that can be written") from None
        earlier = f"; {checkpoint} holds the last periodic checkpoint (--resume)" if is_checkpoint(checkpoint) else ""
        raise WriteError(f"{exc}; the final state could not be saved either ({unsaved}){earlier}") from None
    except OnnxaffError:  # nothing to write at all (no usable example): the checkpoint would only repeat this
        remove(checkpoint)
        raise
    remove(checkpoint)
    return result

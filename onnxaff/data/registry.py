"""The kinds of data a spec can name, asked in turn: each is a DataSource class whose `parse(spec)` says whether it
reads the spec (and which file or folder), `identity` what a study keys on, `from_spec` how to open it.

Built in: synthetic inputs, audio folders, text files, .npy/.npz arrays, image folders. Another package adds a
kind through the entry point group `onnxaff.sources` (NAME = "module:Class", the class a DataSource subclass);
those are asked first, so a new prefix (`npy:FOLDER`) needs no change here. `analyze`, `study`, the dry run, the
manifests and the API all read data through `kind_of`.
"""

from __future__ import annotations

import functools
from importlib import metadata
from pathlib import Path

from onnxaff.data.arrays import ArraySource
from onnxaff.data.audio import AudioFolderSource
from onnxaff.data.images import ImageFolderSource
from onnxaff.data.source import DataSource
from onnxaff.data.synthetic import SyntheticSource
from onnxaff.data.text import TextSource
from onnxaff.errors import OnnxaffError, first_line

ENTRY_POINT_GROUP = "onnxaff.sources"
BUILT_IN: tuple[type[DataSource], ...] = (SyntheticSource, AudioFolderSource, TextSource, ArraySource,
                                          ImageFolderSource)


@functools.cache
def installed() -> tuple[type[DataSource], ...]:
    """The kinds other packages declare (read once), checked to be DataSource classes."""
    found = []
    _NAMES.clear()
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        try:
            cls = ep.load()
        except Exception as exc:
            raise OnnxaffError(f"data source entry point {ep.name} ({ep.value}) does not load: "
                               f"{type(exc).__name__}: {exc}") from None
        if not (isinstance(cls, type) and issubclass(cls, DataSource)) or cls.parse is DataSource.parse:
            raise OnnxaffError(f"data source entry point {ep.name} ({ep.value}) is no DataSource class with its own "
                               "parse(spec)")
        found.append(cls)
        _NAMES[cls] = f"data source {ep.name} ({ep.value})"
    return tuple(found)


_NAMES: dict[type, str] = {}  # an installed kind -> how messages name it: "data source npy (pkg:NpyFolder)"


def plugin_name(cls: type) -> str | None:
    """How a message names an installed kind (its entry point); None for a built-in one."""
    installed()
    return _NAMES.get(cls)


def kinds() -> tuple[type[DataSource], ...]:
    return installed() + BUILT_IN


def find_kind(spec: str) -> tuple[type[DataSource], str] | None:
    """(the kind that reads `spec`, the file or folder it names, "" for none), or None when no kind does. An
    installed kind whose parse fails is passed over (kind_of names it when no other kind reads the spec): one
    broken plugin does not break every spec."""
    return _asked(spec)[0]


def _asked(spec: str) -> tuple[tuple[type[DataSource], str] | None, list[str]]:
    """find_kind, and how each installed kind that failed to parse `spec` failed."""
    if not spec.strip():
        raise OnnxaffError("no data given: the data spec is empty (give a file, a folder or synthetic:gaussian)")
    failed = []
    for cls in kinds():
        name = plugin_name(cls)
        try:
            path = cls.parse(spec)
        except Exception as exc:
            if name is None:
                raise
            failed.append(f"{name} fails to parse it ({type(exc).__name__}: {first_line(exc)})")
            continue
        if path is None:
            continue
        if not isinstance(path, str):
            failed.append(f"{name} parses it to {type(path).__name__}, not a path (str)")
            continue
        if not path.strip() and cls.reads_folder:  # "" would be the current folder
            raise OnnxaffError(f"{spec!r} names no folder: give {cls.spec_form}")
        return (cls, path), failed
    return None, failed


def kind_of(spec: str) -> tuple[type[DataSource], str]:
    """find_kind, or a one-line error: the data are not there, or they are no kind onnxaff reads."""
    found, failed = _asked(spec)
    if found is not None:
        return found
    if failed:
        raise OnnxaffError(f"no kind of data reads {spec!r}: {'; '.join(failed)}")
    if not Path(spec).exists():
        raise OnnxaffError(f"data not found: {spec}")
    forms = ", ".join(str(cls.spec_form) for cls in kinds())
    raise OnnxaffError(f"unrecognised data {spec!r}: give {forms}")

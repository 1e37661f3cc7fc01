"""Which models a study has: files, LABEL=FILE, folders and model lists, each under a label that names its files."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from onnxaff.errors import OnnxaffError
from onnxaff.text import printable

LABEL = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+-]*$")


@dataclass
class StudyModel:
    """One model of a study: its label (file name of its signature), file, and optionally its own data."""

    label: str
    path: Path
    data: str | None = None  # None: the study's data
    accuracy: float | None = None
    columns: dict = field(default_factory=dict)  # extra table columns, after the label (framework, ...)
    model_info: dict = field(default_factory=dict)  # merged into the signature's `model`
    correlate: bool = True  # False: a second export of weights another model has (counted once)


def _check_label(label: str, where: str) -> str:
    if not LABEL.match(label):
        raise OnnxaffError(f"model label '{printable(label)}' ({printable(where)}) must be letters, digits and _ . + - "
                           "(it names the signature file); give one as LABEL=MODEL")
    return label


def _from_list(path: Path) -> list[tuple[str, Path]]:
    """A text file with one model a line (PATH or LABEL=PATH, relative to the file; # comments)."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise OnnxaffError(f"cannot read the model list {path}: {getattr(exc, 'strerror', None) or exc}") from None
    out = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            label, eq, rest = line.partition("=")
            target = Path(rest if eq else line)
            target = target if target.is_absolute() else path.parent / target
            out.append((label.strip() if eq else target.stem, target))
    if not out:
        raise OnnxaffError(f"the model list {path} names no model")
    return out


def resolve_models(specs: list[str]) -> list[StudyModel]:
    """MODEL, LABEL=MODEL, a folder (every .onnx in it, recursively) or a text file listing models."""
    found: list[tuple[str, Path, str]] = []
    for spec in specs:
        label, eq, rest = spec.partition("=")
        if eq and label and not os.path.exists(spec):
            found.append((label, Path(rest), spec))
            continue
        path = Path(spec)
        if path.is_dir():
            files = sorted(path.rglob("*.onnx"))
            if not files:
                raise OnnxaffError(f"no .onnx file in the folder {path}")
            found += [(f.stem, f, spec) for f in files]
        elif path.is_file() and path.suffix.lower() in (".txt", ".list", ".lst"):
            found += [(lab, p, spec) for lab, p in _from_list(path)]
        else:
            found.append((path.stem, path, spec))  # a missing file fails as that model, not the study
    models, seen = [], {}
    for label, path, spec in found:
        _check_label(label, spec)
        if label in seen:
            raise OnnxaffError(f"two models are labelled '{printable(label)}' ({printable(seen[label])} and "
                               f"{printable(path)}); label them apart with LABEL=MODEL")
        seen[label] = path
        models.append(StudyModel(label, path))
    if not models:
        raise OnnxaffError("the study names no model")
    return models

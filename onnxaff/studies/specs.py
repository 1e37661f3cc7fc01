"""Which models a study has: files, LABEL=FILE, folders, model lists and manifests (onnxaff.studies.manifest), each
under a label that names its files."""

from __future__ import annotations

import os
from pathlib import Path

from onnxaff.errors import OnnxaffError
from onnxaff.foundations.text import printable
from onnxaff.studies.manifest import read_manifest
from onnxaff.studies.models import LABEL, StudyModel


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
    """MODEL, LABEL=MODEL, a folder (every .onnx in it, recursively), a text file listing models, or a manifest
    (.toml: its models with their own data, options, accuracy and group)."""
    found: list[StudyModel] = []
    for spec in map(str, specs):
        label, eq, rest = spec.partition("=")
        if eq and label and not os.path.exists(spec):
            found.append(StudyModel(_check_label(label, spec), Path(rest)))
            continue
        path = Path(spec)
        if path.is_dir():
            files = sorted(path.rglob("*.onnx"))
            if not files:
                raise OnnxaffError(f"no .onnx file in the folder {path}")
            found += [StudyModel(_check_label(f.stem, spec), f) for f in files]
        elif path.suffix.lower() == ".toml":
            found += read_manifest(path)[0]
        elif path.is_file() and path.suffix.lower() in (".txt", ".list", ".lst"):
            found += [StudyModel(_check_label(lab, spec), p) for lab, p in _from_list(path)]
        else:  # a missing file fails as that model, not the study
            found.append(StudyModel(_check_label(path.stem, spec), path))
    models, seen = [], {}
    for model in found:
        if model.label in seen:
            raise OnnxaffError(f"two models are labelled '{printable(model.label)}' ({printable(seen[model.label])} "
                               f"and {printable(model.path)}); label them apart with LABEL=MODEL")
        seen[model.label] = model.path
        models.append(model)
    if not models:
        raise OnnxaffError("the study names no model")
    return models

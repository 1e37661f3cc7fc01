"""A study's models as records: each under a label that names its files, with its own data and options, and the
manifest that named it (onnxaff.studies.specs reads them from what the user gives)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

LABEL = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+-]*$")


@dataclass(frozen=True)
class Manifest:
    """A manifest's study-level settings (its `data` and `[options]`): what the study's own options, given by the
    caller, override."""

    path: Path
    data: str | None = None
    options: dict = field(default_factory=dict)  # AnalysisConfig fields


@dataclass
class StudyModel:
    """One model of a study: its label (file name of its signature), file, and optionally its own data and
    options (a manifest's model table gives them)."""

    label: str
    path: Path
    data: str | None = None  # None: the study's data
    accuracy: float | None = None
    columns: dict = field(default_factory=dict)  # extra table columns, after the label (framework, ...)
    model_info: dict = field(default_factory=dict)  # merged into the signature's `model`
    correlate: bool = True  # False: a second export of weights another model has (counted once)
    group: str | None = None
    options: dict = field(default_factory=dict)  # its own AnalysisConfig fields, over the study's
    manifest: Manifest | None = None  # the manifest naming it: defaults under the study's own options

    def data_for(self, study_data: str | None) -> str | None:
        """Its data: its own, else the study's, else its manifest's."""
        return self.data or study_data or (self.manifest.data if self.manifest else None)

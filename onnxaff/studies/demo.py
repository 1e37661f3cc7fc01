"""The main job on the embedded default: every shipped reference network on its shipped digits.

Analyses each network of `onnxaff_models` (PyTorch, scikit-learn, Keras and onnx.helper exports of
MNIST classifiers) through `onnxaff.study`, each on its own layout of the same digits: one signature
JSON per network, compare.json, a comparison report (signatures, DTW matrix, clustering, plots) and
the correlation of signature statistics with the networks' held-out accuracy.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from onnxaff import defaults
from onnxaff.analysis.config import DEFAULT_METRICS, default
from onnxaff.errors import OnnxaffError
from onnxaff.format.signature import Signature


@dataclass
class DemoRun:
    """Where the demo wrote, its signatures and the rows of its summary table."""

    folder: Path
    signatures: dict[str, Signature]
    rows: list[dict]


def _zoo(only: list[str] | None):
    from onnxaff_models import shipped_models

    zoo = shipped_models()
    if only:
        unknown = sorted(set(only) - {m.name for m in zoo})
        if unknown:
            raise OnnxaffError(f"unknown shipped model {unknown[0]!r}; shipped: {', '.join(m.name for m in zoo)}")
        zoo = [m for m in zoo if m.name in only]
    return zoo


def run_demo(out: str | os.PathLike, *, metrics=DEFAULT_METRICS, chunk_size: int | str = default("chunk_size"),
             device: str = default("device"), only: list[str] | None = None, progress: bool = defaults.PROGRESS,
             echo=None, force: bool = False) -> DemoRun:
    """Analyse the shipped networks and write signatures and reports into the folder `out`: a study of them
    (so a rerun skips the networks already analysed), rendered as the demo's page."""
    from onnxaff.reports.html import demo_page
    from onnxaff.studies.models import StudyModel
    from onnxaff.studies.run import run_study

    models = [StudyModel(m.name, m.path, data=str(m.data), accuracy=m.accuracy,
                         columns={"framework": m.framework, "architecture": m.entry["architecture"]},
                         model_info={"reference": {k: m.entry[k] for k in ("framework", "exporter", "architecture")},
                                     "test_accuracy": m.accuracy},
                         correlate=not _is_copy(m))  # second exports of the same weights would count one net twice
              for m in _zoo(only)]
    metrics = None if metrics is None else list(metrics)  # None: the default metrics (onnxaff.metrics)
    result = run_study(models, None, out, options=dict(metrics=metrics, chunk_size=chunk_size, device=device,
                                                    progress=progress),
                       force=force, echo=echo, render=lambda sigs, comps, corr, rows, metric, _failed: demo_page(
                           sigs, comps, corr, rows, metric))
    if result.failed:
        label, reason = next(iter(result.failed.items()))
        raise OnnxaffError(f"{len(result.failed)} shipped model(s) failed, first {label}: {reason}")
    return DemoRun(result.folder, result.signatures, result.rows)


def _is_copy(model) -> bool:
    """A second export of weights another shipped model already has."""
    return "copy_of" in model.entry or model.entry.get("same_weights_as") is not None

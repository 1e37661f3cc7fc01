"""The main job on the embedded default: every shipped reference network on its shipped digits.

Analyses each network of `onnxaff_models` (PyTorch, scikit-learn, Keras and onnx.helper exports of
MNIST classifiers), then writes what a study writes: one signature JSON per network, a comparison
report (signatures, DTW matrix, clustering, plots) and the correlation of signature statistics with
the networks' held-out accuracy.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from onnxaff.analysis import DEFAULT_METRICS, analyze
from onnxaff.compare import compare, correlate, shared_metrics
from onnxaff.errors import OnnxaffError
from onnxaff.files import write_text_atomic
from onnxaff.signature import Signature


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


def run_demo(out: str | os.PathLike, *, metrics=DEFAULT_METRICS, chunk_size: int = 512, device: str = "auto",
             only: list[str] | None = None, progress: bool = True, on_model=None) -> DemoRun:
    """Analyse the shipped networks and write signatures and reports into the folder `out`."""
    from onnxaff.report.html import demo_page

    folder = Path(out)
    try:
        (folder / "signatures").mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OnnxaffError(f"cannot create the demo folder {folder}: {exc.strerror}") from None
    zoo = _zoo(only)
    sigs: dict[str, Signature] = {}
    rows = []
    for model in zoo:
        if on_model is not None:
            on_model(model)
        sig = analyze(model.path, str(model.data), metrics=list(metrics), chunk_size=chunk_size, device=device,
                      progress=progress)
        sig.model["name"] = model.name  # the manifest's name, not the file stem, labels the reports
        sig.model["reference"] = {k: model.entry[k] for k in ("framework", "exporter", "architecture")}
        sig.model["test_accuracy"] = model.accuracy
        sigs[model.name] = sig
        sig.write(folder / "signatures" / f"{model.name}.json")
        stats = sig.summary().get(metrics[0], {})
        rows.append({"model": model.name, "framework": model.framework, "architecture": model.entry["architecture"],
                     "sites": len(sig.sites), "accuracy": model.accuracy, "mean": stats.get("mean"),
                     "min": stats.get("min"), "share_above_0.95": stats.get("share_above_0.95")})
    if len(sigs) >= 2:
        ordered = list(sigs.values())
        comps = [compare(ordered, metric=m) for m in shared_metrics(ordered)]
        # Exports of the same weights (a second opset, a hand-written copy) would count one network twice.
        distinct = [s for m, s in zip(zoo, ordered, strict=True) if not _is_copy(m)]
        corr = None
        if len(distinct) >= 3:
            corr = correlate(distinct, {s.model["name"]: str(s.model["test_accuracy"]) for s in distinct},
                             metric=metrics[0])
        write_text_atomic(folder / "report.html", demo_page(ordered, comps, corr, rows, metrics[0]))
    return DemoRun(folder, sigs, rows)


def _is_copy(model) -> bool:
    """A second export of weights another shipped model already has."""
    return "copy_of" in model.entry or model.entry.get("same_weights_as") is not None

"""A study's cost preview (`onnxaff study --dry-run`): every model's Estimate (onnxaff.analysis.cost) on its data,
before any model is analysed; a model that cannot be estimated keeps its one-line reason, as a study's failures
do. Nothing is written."""

from __future__ import annotations

from collections.abc import Callable

from onnxaff.errors import ConfigError, Message, OnnxaffError
from onnxaff.metrics import default_metrics, registry, resolve
from onnxaff.study.models import StudyModel


def preview_study(models: list[StudyModel], data: str | None, options: dict, startup: float = 0.0,
                  echo: Callable[[str], None] | None = None) -> dict[str, object]:
    """label -> its Estimate, or the reason (a Message) it has none. `options` are AnalysisConfig fields, checked
    once before any model is read (a bad value is a ConfigError, as in run_study)."""
    from onnxaff.analysis import AnalysisConfig
    from onnxaff.analysis.cost import estimate

    available = registry(options.get("plugins") or ())
    options = {**options, "metrics": list(options.get("metrics") or default_metrics(available))}
    config = AnalysisConfig(**options)
    resolve(options["metrics"], available=available)
    if data is None and any(m.data is None for m in models):
        raise ConfigError("data", "the study needs data: give {option}")
    out: dict[str, object] = {}
    for k, model in enumerate(models, 1):
        if echo is not None:
            echo(f"[{k}/{len(models)}] {model.label}: estimating")
        try:
            out[model.label] = estimate(model.path, model.data or data, config, startup=startup if k == 1 else 0.0)
        except OnnxaffError as exc:
            out[model.label] = Message(exc)
    return out

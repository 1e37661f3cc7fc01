"""A study's cost preview (`onnxaff study --dry-run`): every model's Estimate (onnxaff.analysis.cost) on its data,
before any model is analysed; a model that cannot be estimated keeps its one-line reason, as a study's failures
do. Nothing is written."""

from __future__ import annotations

from collections.abc import Callable, Collection

from onnxaff.errors import Message, OnnxaffError
from onnxaff.metrics import registry, resolve
from onnxaff.studies.models import StudyModel
from onnxaff.studies.settings import check_data, study_configs


def preview_study(models: list[StudyModel], data: str | None, options: dict, startup: float = 0.0,
                  echo: Callable[[str], None] | None = None, given: Collection[str] | None = None
                  ) -> dict[str, object]:
    """label -> its Estimate, or the reason (a Message) it has none. `options` are AnalysisConfig fields, checked
    once before any model is read (a bad value is a ConfigError, as in run_study); each model is estimated with
    its own options and data, as run_study analyses it (`given`: as there)."""
    from onnxaff.analysis import AnalysisConfig
    from onnxaff.analysis.cost import estimate

    options, per_model = study_configs(models, options, given)
    resolve(options["metrics"], available=registry(options.get("plugins") or ()))
    check_data(models, data)
    out: dict[str, object] = {}
    for k, model in enumerate(models, 1):
        if echo is not None:
            echo(f"[{k}/{len(models)}] {model.label}: estimating")
        try:
            out[model.label] = estimate(model.path, model.data_for(data), AnalysisConfig(**per_model[model.label]),
                                        startup=startup if k == 1 else 0.0)
        except OnnxaffError as exc:
            out[model.label] = Message(exc)
    return out

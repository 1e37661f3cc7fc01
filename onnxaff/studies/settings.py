"""Each model's own settings in a study: the options it is analysed with, layered (its own model table, then the
study's options the caller gave, then its manifest's `[options]`, then the defaults), and the preprocessing its
signature records where the models' differ. A model's options are its up-to-date key: changing one model's
preprocessing redoes that model only."""

from __future__ import annotations

import json
from collections.abc import Collection

from onnxaff.data.image_preprocess import KEY_OF_FIELD, PIXEL_FIELDS
from onnxaff.errors import ConfigError, OnnxaffError, option, render_options
from onnxaff.foundations.text import printable
from onnxaff.metrics import default_metrics, registry
from onnxaff.studies.models import StudyModel

STUDY_WIDE = ("metrics", "plugins")  # one list for the whole study (its tables, its code identity)
PREPROCESSING = tuple(KEY_OF_FIELD.get(f, f) for f in PIXEL_FIELDS)  # the image options a model's own preprocess sets


def given_keys(options: dict, given: Collection[str] | None) -> set[str]:
    """The option names the caller set (fields, and `images.KEY` for the image options): `given`, or else every
    key `options` has."""
    if given is not None:
        return set(given)
    return set(options) | {f"images.{k}" for k in options.get("images") or {}}


def study_options(models: list[StudyModel], options: dict, given: Collection[str] | None = None) -> dict:
    """The study-wide options: the caller's, the metrics and plugins of the manifests' `[options]` where the caller
    gave none (two manifests that disagree are refused), and the default metrics where nobody names any."""
    explicit = given_keys(options, given)
    out = dict(options)
    for key in STUDY_WIDE:
        found = {}
        for m in models:
            if key not in explicit and m.manifest is not None and key in m.manifest.options:
                found.setdefault(json.dumps(m.manifest.options[key]), m.manifest)
        if len(found) > 1:
            a, b = (printable(m.path) for m in list(found.values())[:2])
            raise ConfigError(key, f"the manifests {a} and {b} give different {key} in [options], and a study has "
                                   "one list: give the same in both, or give {option}")
        if found:
            out[key] = next(iter(found.values())).options[key]
    available = registry(out.get("plugins") or ())
    out["metrics"] = list(out.get("metrics") or default_metrics(available))
    return out


def model_options(model: StudyModel, options: dict, given: Collection[str] | None = None) -> dict:
    """The options `model` is analysed with: `options` (the study's, every field) over its manifest's `[options]`
    where the caller did not give them, under its own (its preprocessing replacing the study's whole)."""
    explicit = given_keys(options, given)
    out = dict(options)
    defaults = model.manifest.options if model.manifest is not None else {}
    for key, value in defaults.items():
        if key == "images":
            out["images"] = {**(out.get("images") or {}),
                             **{k: v for k, v in value.items() if f"images.{k}" not in explicit}}
        elif key not in explicit and key not in STUDY_WIDE:
            out[key] = value
    for key, value in model.options.items():
        if key == "images":
            images = dict(out.get("images") or {})
            if any(k in PREPROCESSING for k in value):
                images = {k: v for k, v in images.items() if k not in PREPROCESSING}
            out["images"] = {**images, **value}
        else:
            out[key] = value
    return out


def study_configs(models: list[StudyModel], options: dict, given: Collection[str] | None = None
                  ) -> tuple[dict, dict[str, dict]]:
    """(the study-wide options, label -> that model's options), every one checked as AnalysisConfig checks it,
    before any model is read (a bad value is a ConfigError; a model's own, named with its label)."""
    from onnxaff.analysis import AnalysisConfig

    options = study_options(models, options, given)
    AnalysisConfig(**options)
    per_model = {}
    for m in models:
        per_model[m.label] = mine = model_options(m, options, given)
        if mine != options:
            try:
                AnalysisConfig(**mine)
            except OnnxaffError as exc:
                raise OnnxaffError(f"model {printable(m.label)}: {exc.template}") from None
    return options, per_model


def preprocessing_column(models: list[StudyModel], sigs: dict) -> dict[str, str] | None:
    """label -> its preprocessing as its signature records it, naming what differs between the models (preset
    first); None when every signature records the same (or none does)."""
    recorded = {m.label: sigs[m.label].data.get("preprocessing") for m in models if m.label in sigs}
    if len({json.dumps(d, sort_keys=True) for d in recorded.values()}) < 2:
        return None
    keys = sorted({k for d in recorded.values() for k in (d or {})})
    differ = [k for k in keys if k != "preset" and len({json.dumps((d or {}).get(k)) for d in recorded.values()}) > 1]
    return {label: "-" if d is None else "; ".join([str(d.get("preset")), *(f"{k} {_text(d.get(k))}" for k in differ)])
            for label, d in recorded.items()}


def _text(value) -> str:
    if value is None:
        return "none"
    if isinstance(value, list | tuple):
        return ",".join(_text(v) for v in value)
    return f"{value:g}" if isinstance(value, float) else str(value)


def groups_of(models: list[StudyModel], digests: dict, table: dict[str, str] | None) -> dict[str, str] | None:
    """The groups correlate reads: the group file's rows (by label or sha256), else each model's own group."""
    table = table or {}
    own = {m.label: m.group for m in models if m.group is not None and not {m.label, digests.get(m.label)} & set(table)}
    return {**own, **table} or None


def own_names(model: StudyModel, template: str) -> str:
    """A model's failure with the options its own model table set named as the manifest names them
    (`preprocess.crop`), not as the flags it never gave; the others still named by `option`."""
    from onnxaff.studies.manifest import manifest_key

    own = set(model.options) | {f"images.{k}" for k in model.options.get("images") or {}}
    return render_options(template, lambda field: manifest_key(field, own=True) if field in own else option(field))


def check_data(models: list[StudyModel], data: str | None) -> None:
    """Every model has data: its own, the study's or its manifest's."""
    if any(m.data_for(data) is None for m in models):
        raise ConfigError("data", "the study needs data: give {option} (or data in a manifest)")


"""Study manifests: one TOML file naming each model of a study with its label, file, accuracy, group, and the data,
preprocessing, input shapes and options it alone needs (EfficientNet-Lite0 wants (x − 127)/128 where MobileNetV2
wants ImageNet's mean and std). Every key is checked here, before any model is read: a typo is refused, never run
with the defaults. The format is in docs/usage.md (a study's manifest).
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import sys
from pathlib import Path

from onnxaff.data.image_preprocess import CHANNEL_ORDERS, DECODING_FIELDS, KEY_OF_FIELD, PIXEL_FIELDS
from onnxaff.errors import ConfigError, OnnxaffError
from onnxaff.foundations.text import printable
from onnxaff.studies.models import LABEL, Manifest, StudyModel

if sys.version_info >= (3, 11):
    import tomllib
else:  # the backport, a dependency on Python 3.10 only
    import tomli as tomllib

MODEL_KEYS = ("label", "path", "accuracy", "group", "data", "preprocess", "input_shapes", "options")
PREPROCESS_KEYS = PIXEL_FIELDS  # a model's own preprocessing: every ImagePreprocess field but decoding (preset first)
IMAGE_KEYS = {("preprocess" if f == "preset" else f): KEY_OF_FIELD.get(f, f)
              for f in (*PIXEL_FIELDS, *DECODING_FIELDS)}  # [options] key -> key of AnalysisConfig.images
STUDY_WIDE = ("metrics", "plugins")  # one list for the whole study: never a model's own
_NOT_OPTIONS = ("images", "shard", "progress")  # the image keys stand for `images`; the others are no manifest's


def read_manifest(path: str | Path) -> tuple[list[StudyModel], Manifest]:
    """The manifest's models (their own data and options, relative paths read from the manifest's folder) and
    its study-level settings (top-level `data`, `[options]`), which each model also carries."""
    path = Path(path)
    try:
        with path.open("rb") as f:
            doc = tomllib.load(f)
    except OSError as exc:
        raise OnnxaffError(f"cannot read the manifest {path}: {exc.strerror or exc}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise OnnxaffError(f"the manifest {path} is not TOML: {exc}") from None
    reader = _Reader(path)
    reader.known(doc, ("data", "options", "model"), "")
    settings = Manifest(path, reader.data(doc.get("data"), "", "data"), reader.options(doc.get("options", {}), ""))
    tables = doc.get("model")
    if not isinstance(tables, list) or not tables or not all(isinstance(t, dict) for t in tables):
        reader.fail("", "model", "give each model as a [[model]] table with its label and path" if tables is None
                    else "must be [[model]] tables, one a model")
    models, seen = [], set()
    for k, table in enumerate(tables, 1):
        model = reader.model(table, k, settings)
        if model.label in seen:
            reader.fail(f"model '{model.label}'", "label", "another model has this label")
        seen.add(model.label)
        models.append(model)
    return models, settings


class _Reader:
    """Reads one manifest's tables; every refusal is one line naming the manifest, the model and the key."""

    def __init__(self, path: Path):
        self.path, self.base = path, path.parent

    def fail(self, where: str, key: str, what: str):
        place = ", ".join(p for p in (where, key and f"key '{key}'") if p)
        raise OnnxaffError(f"manifest {printable(self.path)}: {printable(place)}: {what}")

    def failing(self, where: str):
        return lambda key, what: self.fail(where, key, what)

    def known(self, table: dict, keys, where: str, prefix: str = "") -> None:
        """A key the manifest does not know is refused (a typo must not run with the defaults)."""
        for key in table:
            if key not in keys:
                near = difflib.get_close_matches(str(key), keys, n=1)
                self.fail(where, prefix + key, f"unknown key; did you mean '{near[0]}'?" if near else
                          f"unknown key; the keys here are {', '.join(keys)}" if len(keys) <= 10 else
                          "unknown key; not an analysis option (docs/usage.md lists them)")

    def file(self, value, where: str, key: str, folder: bool = False) -> str:
        """A path, relative to the manifest's folder, that must exist."""
        if not isinstance(value, str) or not value:
            self.fail(where, key, f"must be a path, got {value!r:.60}")
        target = Path(value) if Path(value).is_absolute() else self.base / value
        if not (target.is_dir() if folder else target.exists()):
            self.fail(where, key, f"{'folder' if folder else 'file'} not found: {printable(target)}")
        return str(target)

    def data(self, value, where: str, key: str) -> str | None:
        """A data spec as `--data` takes it, its file or folder read from the manifest's folder (its kind says
        which part of the spec that is: onnxaff.data.registry)."""
        from onnxaff.data.registry import find_kind

        if value is None:
            return value
        found = find_kind(value) if isinstance(value, str) and value else None
        if found is None:
            return self.file(value, where, key)
        cls, path = found
        if not path:  # reads no file: synthetic data
            return value
        return cls.relocate(value, path, self.file(path, where, key, folder=cls.reads_folder))

    def model(self, table: dict, k: int, settings: Manifest) -> StudyModel:
        label = table.get("label")
        where = f"model '{label}'" if isinstance(label, str) else f"model {k}"
        self.known(table, MODEL_KEYS, where)
        for key in ("label", "path"):
            if key not in table:
                self.fail(where, key, "missing; every model needs a label and a path")
        if not isinstance(label, str) or not LABEL.match(label):
            self.fail(where, "label", "must be letters, digits and _ . + - (it names the signature file)")
        accuracy = table.get("accuracy")
        if accuracy is not None and (isinstance(accuracy, bool) or not isinstance(accuracy, int | float)
                                     or not math.isfinite(accuracy)):
            self.fail(where, "accuracy", f"must be a finite number, got {accuracy!r:.60}")
        group = table.get("group")
        if group is not None and (not isinstance(group, str) or not group):
            self.fail(where, "group", f"must be a name, got {group!r:.60}")
        own = self.options(table.get("options", {}), where, own=True)
        if "input_shapes" in table:
            own["input_shapes"] = _shapes(self.failing(where), table["input_shapes"], "input_shapes")
        if "preprocess" in table:
            own["images"] = {**own.get("images", {}), **self.preprocess(table["preprocess"], where)}
        self.check(own, where, own=True)
        return StudyModel(label, Path(self.file(table["path"], where, "path")),
                          data=self.data(table.get("data"), where, "data"),
                          accuracy=None if accuracy is None else float(accuracy), group=group, options=own,
                          manifest=settings)

    def preprocess(self, value, where: str) -> dict:
        """`preprocess = "PRESET"` or a table of the preset and what it changes: the model's whole preprocessing."""
        fail = self.failing(where)
        if isinstance(value, str):
            return {"preprocess": _image_value(fail, "preprocess", value, "preprocess")}
        if not isinstance(value, dict):
            fail("preprocess", f"must be a preset name or a table, got {value!r:.60}")
        self.known(value, PREPROCESS_KEYS, where, "preprocess.")
        return {"preprocess": "torchvision", **{IMAGE_KEYS["preprocess" if k == "preset" else k]: _image_value(
            fail, IMAGE_KEYS["preprocess" if k == "preset" else k], v, f"preprocess.{k}") for k, v in value.items()}}

    def options(self, table, where: str, own: bool = False) -> dict:
        """`[options]` (or a model's own `options`) as AnalysisConfig fields, checked."""
        from onnxaff.analysis.config import AnalysisConfig

        name = "options"
        if not isinstance(table, dict):
            self.fail(where, name, f"must be a table of analysis options, got {table!r:.60}")
        fields = [f.name for f in dataclasses.fields(AnalysisConfig) if f.name not in _NOT_OPTIONS]
        keys = [k for k in (*fields, *IMAGE_KEYS) if not own or k not in (*STUDY_WIDE, *PREPROCESS_KEYS[1:],
                                                                          "preprocess", "input_shapes")]
        prefix = "options." if own else ""
        where = where or "[options]"
        self.known(table, keys, where, prefix)
        out: dict = {}
        for key, value in table.items():
            if key in IMAGE_KEYS:
                out.setdefault("images", {})[IMAGE_KEYS[key]] = _image_value(self.failing(where), IMAGE_KEYS[key],
                                                                              value, prefix + key)
            elif key == "input_shapes":
                out[key] = _shapes(self.failing(where), value, key)
            else:
                out[key] = self.paths(key, value, where, prefix + key)
        if not own:
            self.check(out, where)
        return out

    def paths(self, key: str, value, where: str, name: str):
        """Plugin, tokenizer and constant files read from the manifest's folder; metrics as --metrics takes them."""
        if key == "metrics" and isinstance(value, str):
            return [m.strip() for m in value.split(",") if m.strip()]
        if key == "plugins":
            return [self.file(p, where, name) for p in ([value] if isinstance(value, str) else value)] \
                if isinstance(value, str | list) else self.fail(where, name, "must be a path or a list of paths")
        if key == "tokenizer":
            return self.file(value, where, name)
        if key == "constants" and isinstance(value, dict):
            return {k: self.file(v, where, f"{name}.{k}") if isinstance(v, str) else v for k, v in value.items()}
        return value

    def check(self, options: dict, where: str, own: bool = False) -> None:
        """The options as AnalysisConfig checks them (and the metrics, with the plugins), named as the manifest
        names them."""
        from onnxaff.analysis.config import AnalysisConfig
        from onnxaff.metrics import registry, resolve

        def key(field: str) -> str:
            return manifest_key(field, own)

        try:
            AnalysisConfig(**options)
            if options.get("metrics"):
                resolve(options["metrics"], available=registry(options.get("plugins") or ()))
        except OnnxaffError as exc:
            name = key(exc.field) if isinstance(exc, ConfigError) else "metrics" if options.get("metrics") \
                else "plugins"
            text = exc.render(key)
            self.fail(where, name, text[len(name) + 2:] if text.startswith(f"{name}: ") else text)


def manifest_key(field: str, own: bool = False) -> str:
    """The manifest's key for a configuration field (`images.crop`): in a model's own table (`preprocess.crop`,
    `options.limit`) or in `[options]` (`crop`, `limit`)."""
    if field.startswith("images.") and field[7:] in IMAGE_KEYS.values():
        k = next(k for k, v in IMAGE_KEYS.items() if v == field[7:])
        if not own:
            return k
        return "preprocess." + ("preset" if k == "preprocess" else k) if k in ("preprocess", *PREPROCESS_KEYS) \
            else "options." + k
    return field if field == "input_shapes" or not own else "options." + field


def _image_value(fail, key: str, value, name: str):
    """One image option as AnalysisConfig.images keeps it (key: its key there; name: the manifest's; fail(name,
    what) refuses it)."""
    from onnxaff.data.preprocess import FITS, INTERPOLATIONS, PRESETS, parse_size

    what, choices = {"preprocess": ("preset", PRESETS), "interpolation": ("interpolation", INTERPOLATIONS),
                     "fit": ("fit", FITS)}.get(key, (None, None))
    if choices is not None and value not in choices:
        fail(name, f"unknown {what} {value!r:.60}; choose one of {', '.join(choices)}")
    if key == "channel_order" and value not in CHANNEL_ORDERS:
        fail(name, f"unknown channel order {value!r:.60}; choose one of {', '.join(CHANNEL_ORDERS)}")
    if key in ("scale", "offset") and (isinstance(value, bool) or not isinstance(value, int | float)
                                       or not math.isfinite(value) or (key == "scale" and value == 0)):
        fail(name, f"must be a finite number{' other than 0' if key == 'scale' else ''}, got {value!r:.60}")
    if key in ("scale", "offset"):
        return float(value)
    if key in ("mean", "std", "pad_value"):
        values = value if isinstance(value, list) else [value]
        if not values or any(isinstance(v, bool) or not isinstance(v, int | float) for v in values):
            fail(name, f"must be a number or a list of numbers, got {value!r:.60}")
        return tuple(float(v) for v in values)
    if key in ("resize", "crop"):
        text = "x".join(map(str, value)) if isinstance(value, list) and len(value) in (1, 2) else value
        if isinstance(text, bool) or not isinstance(text, int | str):
            fail(name, f"must be N, [H, W] or \"HxW\", got {value!r:.60}")
        try:
            return parse_size(str(text), name)
        except ConfigError:
            fail(name, f"must be N, [H, W] or \"HxW\" (positive integers), got {value!r:.60}")
    if key in ("shuffle", "draft") and not isinstance(value, bool):
        fail(name, f"must be true or false, got {value!r:.60}")
    if key == "workers" and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        fail(name, f"must be 0 or a positive whole number, got {value!r:.60}")
    return value


def _shapes(fail, value, key: str) -> dict:
    """{input = [D, D, D]} or {input = "DxDxD"}: the dims after the batch axis, as `input_shapes` takes them."""
    if not isinstance(value, dict):
        fail(key, f"must be a table of input = [dims after the batch axis], got {value!r:.60}")
    out = {}
    for name, dims in value.items():
        if isinstance(dims, str):
            try:
                dims = [int(d) for d in dims.lower().replace(",", "x").split("x")]
            except ValueError:
                dims = []
        if not isinstance(dims, list) or not dims or any(isinstance(d, bool) or not isinstance(d, int) or d <= 0
                                                          for d in dims):
            fail(f"{key}.{name}", "must be the positive dims after the batch axis, e.g. [3, 224, 224] or "
                                  f"\"3x224x224\", got {value[name]!r:.60}")
        out[name] = tuple(dims)
    return out

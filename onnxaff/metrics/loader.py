"""The registry: every metric by name, from entry points and plugin files; `name:key=value` specs resolved."""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import math
import numbers
import os
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import numpy as np

from onnxaff.errors import ConfigError, OnnxaffError
from onnxaff.metrics.base import RESERVED, Metric
from onnxaff.metrics.dispatch import serving, unserved
from onnxaff.metrics.output import plugin_output
from onnxaff.metrics.params import build

ENTRY_POINT_GROUP = "onnxaff.metrics"


@dataclass(frozen=True)
class Registered:
    cls: type[Metric]
    origin: str  # "entry point <dist>: module:attr" or "file <path>"
    path: Path | None = None  # the plugin file (--plugin); None: the class's module file
    helpers: tuple[Path, ...] = ()  # modules of the user's own that the plugin file imports (not installed ones)

    @property
    def source(self) -> Path | None:
        """The file the metric's code is in: the plugin file, or the entry point's module file."""
        if self.path is not None:
            return self.path
        module = sys.modules.get(self.cls.__module__)
        path = getattr(module, "__file__", None)
        return Path(path) if path else None

    @property
    def fingerprint(self) -> str | None:
        """sha256 of the metric's source file (and of the plugin's own helper modules): a saved run continued,
        or a study signature reused, after that code changed is refused."""
        if not self.helpers:
            return file_fingerprint(self.source)
        parts = [file_fingerprint(self.source)] + [[str(h), file_fingerprint(h)] for h in self.helpers]
        return hashlib.sha256(repr(parts).encode()).hexdigest()


def file_fingerprint(path: str | Path | None) -> str | None:
    """sha256 (hex) of a file's bytes; None when there is no readable file (a class defined in a session)."""
    if path is None:
        return None
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


def code_fingerprints(metrics: list[Metric], available: dict[str, Registered]) -> dict[str, str | None]:
    """{registered name: fingerprint} of the metrics a run uses (parameterised ones by their class's name)."""
    return {name: available[name].fingerprint for name in sorted({type(m).name for m in metrics})}


def _is_number(v) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, (bool, np.bool_)) and not math.isnan(v)


def check_declarations(cls, origin: str) -> None:
    """The declared attributes, checked at load time: a bad one is one line now, not a traceback mid-run."""
    if not (inspect.isclass(cls) and issubclass(cls, Metric)) or not cls.name or not isinstance(cls.name, str):
        raise OnnxaffError(f"{origin} is not an onnxaff Metric subclass with a name")
    what = f"metric {cls.name!r} ({origin})"
    unknown = unserved(cls)
    if unknown:
        raise OnnxaffError(f"{what} {unknown}")
    r = cls.range
    if not (isinstance(r, (tuple, list)) and len(r) == 2 and all(map(_is_number, r)) and r[0] <= r[1]):
        raise OnnxaffError(f"{what} declares range {r!r:.80}; it must be (low, high), two numbers with low <= high "
                           f"(float('inf') for no bound)")
    if not (cls.higher_is_more_linear is None or isinstance(cls.higher_is_more_linear, bool)):
        raise OnnxaffError(f"{what} declares higher_is_more_linear {cls.higher_is_more_linear!r:.80}; "
                           f"it must be True, False or None")
    if not callable(getattr(cls, "compute", None)):
        raise OnnxaffError(f"{what} has no compute method")
    if not (cls.default is None or (isinstance(cls.default, int) and not isinstance(cls.default, bool))):
        raise OnnxaffError(f"{what} declares default {cls.default!r:.80}; it must be None or a whole number")
    taken = [k for k in cls.parameters() if k in RESERVED]
    if taken:  # build() sets spec, and name reads it: a keyword of either name would be overwritten or refused
        raise OnnxaffError(f"{what} takes a parameter {taken[0]!r}: {' and '.join(RESERVED)} are every metric's "
                           f"own attributes; give the parameter another name")


def _add(found: dict[str, Registered], cls, origin: str, path: Path | None = None, helpers: tuple = ()) -> None:
    check_declarations(cls, origin)
    if cls.name in found:
        if found[cls.name].cls is cls:
            return  # the same class listed twice (editable installs list entry points twice)
        raise OnnxaffError(f"two metrics are named {cls.name!r}: {found[cls.name].origin} and {origin}")
    found[cls.name] = Registered(cls, origin, path, helpers)


def load_plugin_file(path: str | Path) -> list[type[Metric]]:
    return _load_plugin(path)[0]


def _load_plugin(path: str | Path) -> tuple[list[type[Metric]], tuple[Path, ...]]:
    """The plugin's Metric classes and the helper modules of its own it imports (their code is the metric's too)."""
    path = Path(path)
    if not path.is_file():
        raise OnnxaffError(f"plugin file not found: {path}")
    spec = importlib.util.spec_from_file_location(f"onnxaff_plugin_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    try:
        with plugin_output():
            spec.loader.exec_module(module)
    except SystemExit as exc:
        raise OnnxaffError(f"plugin file {path} called sys.exit({exc.code!r}) on import") from None
    except Exception as exc:
        raise OnnxaffError(f"plugin file {path} failed to import: {type(exc).__name__}: {exc}") from None
    classes = [
        c for c in vars(module).values()
        if inspect.isclass(c) and issubclass(c, Metric) and c is not Metric and c.__module__ == module.__name__
    ]
    if not classes:
        raise OnnxaffError(f"plugin file {path} defines no Metric subclass")
    return classes, _helper_files(module, path)


def _helper_files(module, path: Path) -> tuple[Path, ...]:
    """Source files of the modules a plugin's names come from, leaving out Python's, installed packages' and
    onnxaff's own (the onnxaff version stands for those). One level: what the plugin itself imports."""
    import sysconfig

    installed = {os.path.realpath(sysconfig.get_paths()[k]) for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    installed.add(os.path.realpath(Path(__file__).parent.parent))
    files = set()
    for value in vars(module).values():
        try:  # a plugin's names may be any object, one whose attributes raise too
            name = value.__name__ if inspect.ismodule(value) else getattr(value, "__module__", None)
        except Exception:
            continue
        source = getattr(sys.modules.get(name) if isinstance(name, str) else None, "__file__", None)
        if not source or os.path.realpath(source) == os.path.realpath(path):
            continue
        real = os.path.realpath(source)
        if not any(real.startswith(folder + os.sep) for folder in installed):
            files.add(Path(real))
    return tuple(sorted(files))


def registry(plugin_files: tuple[str, ...] | list[str] = ()) -> dict[str, Registered]:
    """Every available metric by name: entry points first, then plugin files."""
    found: dict[str, Registered] = {}
    seen_eps = set()
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        if (ep.name, ep.value) in seen_eps:
            continue
        seen_eps.add((ep.name, ep.value))
        dist = getattr(ep.dist, "name", None) or "?"
        origin = f"entry point of {dist}: {ep.value}"
        try:
            with plugin_output():
                cls = ep.load()
        except (Exception, SystemExit) as exc:
            raise OnnxaffError(f"metric entry point {ep.name!r} ({origin}) failed to load: {exc}") from None
        _add(found, cls, origin)
    for path in plugin_files:
        classes, helpers = _load_plugin(path)
        for cls in classes:
            _add(found, cls, f"file {path}", Path(path), helpers)
    if not found:
        raise OnnxaffError("no metrics are registered: install onnxaff (pip install -e .) so its entry points exist")
    return found


def resolve(names: list[str], plugin_files=(), available: dict[str, Registered] | None = None) -> list[Metric]:
    """Metric instances for `name` or `name:key=value:...` specs (each instance's `spec` is its entries' key)."""
    available = registry(plugin_files) if available is None else available
    metrics = [build(spec, available) for spec in names]
    seen = set()
    for m in metrics:  # two entries of one spec would store each chunk's score twice under it
        if m.spec in seen:
            raise ConfigError("metrics", f"{{option}} names {m.spec!r} twice")
        seen.add(m.spec)
    return metrics


def default_metrics(available: dict[str, Registered]) -> list[str]:
    """The metrics a run scores when none are asked for: those declaring `default`, in that order."""
    picked = sorted((r.cls.default, name) for name, r in available.items() if r.cls.default is not None)
    return [name for _, name in picked]


def default_order(names) -> list[str]:
    """Of `names` (metrics a signature holds), those declaring `default`, in that order. Only their own entry points
    are loaded, and one failing to load is passed over: showing signatures needs no other plugin's code (one broken
    installed metric took `report` down)."""
    picked = set()
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        if ep.name not in names:
            continue
        try:
            with plugin_output():
                cls = ep.load()
        except (Exception, SystemExit):
            continue
        default = getattr(cls, "default", None)
        if getattr(cls, "name", None) == ep.name and _is_number(default):
            picked.add((default, ep.name))
    return [name for _, name in sorted(picked)]


def stage_metrics(available: dict[str, Registered]) -> list[str]:
    """The tracks metrics residual stages get when the run asks for none."""
    return [name for name, r in available.items() if r.cls.stage_default and serving(r.cls).stage]


def primary_metric(available: dict[str, Registered] | None = None) -> str:
    """The metric compare, correlate and report show unless told: the first default one."""
    names = default_metrics(registry() if available is None else available)
    if not names:
        raise ConfigError("metric", "no registered metric declares itself a default: give {option}")
    return names[0]


def metric_info(metric: Metric, origin: str) -> dict:
    """A signature's `metrics.<name>` entry: the declarations, where the metric came from, its parameters."""
    info = {**type(metric).info(), "origin": origin}
    if metric.estimator:  # the protocol's estimator of this metric (onnxaff.format.protocol)
        info["estimator"] = metric.estimator
    params = metric.params()
    if params:
        info["params"] = params
    return info

"""The metric plugin interface and registry.

A metric is a class with a few declared attributes and one `compute` method. Built-ins and
third-party metrics register the same way, through the `onnxaff.metrics` entry-point group; a
single file can also be loaded with `--plugin path.py`. Example, a complete plugin:

    from onnxaff.metrics import Chunk, Metric
    import numpy as np

    class MeanAbsChange(Metric):
        name = "mean_abs_change"
        description = "mean |Y − X| over a chunk (elementwise sites)"
        higher_is_more_linear = False
        range = (0.0, float("inf"))
        needs = "chunk"
        equal_dims = True

        def compute(self, chunk: Chunk) -> float:
            return float(np.mean(np.abs(chunk.y - chunk.x)))
"""

from __future__ import annotations

import importlib.util
import inspect
import math
import numbers
import sys
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import ClassVar

import numpy as np

from onnxaff.errors import OnnxaffError

ENTRY_POINT_GROUP = "onnxaff.metrics"
# What compute() receives: a Chunk; two consecutive Chunks (earlier, later); the site's pooled Moments;
# the site's JvpStats (finite-difference Jacobian-vector products of the site's own subgraph); or the
# Tracks of a residual stage (the same rows through every block of the stage).
NEEDS = ("chunk", "chunk_pair", "moments", "jvp", "tracks")


@dataclass(frozen=True)
class Chunk:
    """n paired rows of one site's features, float64: X [n, dx], Y [n, dy]."""

    x: np.ndarray
    y: np.ndarray

    @property
    def n(self) -> int:
        return self.x.shape[0]


@dataclass(frozen=True)
class Tracks:
    """One chunk of a residual stage: h⁰ … h^L, each [n, D] float64 (read-only), row i the same example."""

    arrays: tuple

    @property
    def n(self) -> int:
        return self.arrays[0].shape[0]


@dataclass(frozen=True)
class JvpStats:
    """What the non-linearity coefficient needs of one site, accumulated over the data in float64.

    numerator = E_x[Tr(J(x) Σ_X J(x)ᵀ)], denominator = Tr(Σ_Y). Elementwise sites use the exact
    per-element form Σ_i E[σ'(x_i)²]·Var(x_i), with σ' by central differences of the site's subgraph;
    other sites use within-batch sums Σ‖J(x_i)(x_{i−1} − x̄_b)‖² and Σ‖y_i − ȳ_b‖² (exact when affine).
    """

    form: str  # "elementwise" or "directional"
    numerator: float
    denominator: float
    examples: int


_local = threading.local()
_router_lock = threading.Lock()
_router_users = 0


class _StdoutRouter:
    """sys.stdout while plugin code runs: a thread marked as running plugin code writes to stderr.

    A plain redirect_stdout is process-wide and is restored out of order by concurrent threads; this
    routes per thread, so the main thread's own output (JSON on stdout) is untouched.
    """

    def __init__(self, real):
        self._real = real

    def _target(self):
        return sys.stderr if getattr(_local, "plugin", 0) else self._real

    def write(self, text):
        return self._target().write(text)

    def __getattr__(self, name):
        return getattr(self._target(), name)


@contextmanager
def plugin_output():
    """Run plugin code (import, construction, compute) with its prints sent to stderr."""
    global _router_users
    with _router_lock:
        if _router_users == 0 and not isinstance(sys.stdout, _StdoutRouter):
            sys.stdout = _StdoutRouter(sys.stdout)
        _router_users += 1
    _local.plugin = getattr(_local, "plugin", 0) + 1
    try:
        yield
    finally:
        _local.plugin -= 1
        with _router_lock:
            _router_users -= 1
            if _router_users == 0 and isinstance(sys.stdout, _StdoutRouter):
                sys.stdout = sys.stdout._real


class Metric:
    """Subclass, set the class attributes, implement compute()."""

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    higher_is_more_linear: ClassVar[bool | None] = True  # None: descriptive, not a linearity score
    range: ClassVar[tuple[float, float]] = (0.0, 1.0)
    needs: ClassVar[str] = "chunk"  # one of NEEDS
    equal_dims: ClassVar[bool] = False  # True: only defined when X and Y have the same dimension

    def compute(self, sample) -> float:  # pragma: no cover - the interface
        raise NotImplementedError

    def caveat(self, rows: int, dx: int, dy: int) -> str | None:
        """A note on how to read this metric's value for a site of this size (or None)."""
        return None

    @classmethod
    def info(cls) -> dict:
        direction = {True: "higher = more linear", False: "lower = more linear", None: "descriptive"}
        return {
            "description": cls.description,
            "direction": direction[cls.higher_is_more_linear],
            "range": list(cls.range),
            "needs": cls.needs,
            "equal_dims": cls.equal_dims,
        }


@dataclass(frozen=True)
class Registered:
    cls: type[Metric]
    origin: str  # "entry point <dist>: module:attr" or "file <path>"


def _is_number(v) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, (bool, np.bool_)) and not math.isnan(v)


def _check(cls, origin: str) -> None:
    """The declared attributes, checked at load time: a bad one is one line now, not a traceback mid-run."""
    if not (inspect.isclass(cls) and issubclass(cls, Metric)) or not cls.name or not isinstance(cls.name, str):
        raise OnnxaffError(f"{origin} is not an onnxaff Metric subclass with a name")
    what = f"metric {cls.name!r} ({origin})"
    if not isinstance(cls.needs, str) or cls.needs not in NEEDS:
        raise OnnxaffError(f"{what} declares unknown needs {cls.needs!r}; one of {', '.join(NEEDS)}")
    r = cls.range
    if not (isinstance(r, (tuple, list)) and len(r) == 2 and all(map(_is_number, r)) and r[0] <= r[1]):
        raise OnnxaffError(f"{what} declares range {r!r:.80}; it must be (low, high), two numbers with low <= high "
                           f"(float('inf') for no bound)")
    if not (cls.higher_is_more_linear is None or isinstance(cls.higher_is_more_linear, bool)):
        raise OnnxaffError(f"{what} declares higher_is_more_linear {cls.higher_is_more_linear!r:.80}; "
                           f"it must be True, False or None")
    if not callable(getattr(cls, "compute", None)):
        raise OnnxaffError(f"{what} has no compute method")


def _add(found: dict[str, Registered], cls, origin: str, key: str) -> None:
    _check(cls, origin)
    if cls.name in found:
        if found[cls.name].cls is cls:
            return  # the same class listed twice (editable installs list entry points twice)
        raise OnnxaffError(f"two metrics are named {cls.name!r}: {found[cls.name].origin} and {origin}")
    found[cls.name] = Registered(cls, origin)


def load_plugin_file(path: str | Path) -> list[type[Metric]]:
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
    return classes


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
        _add(found, cls, origin, ep.name)
    for path in plugin_files:
        for cls in load_plugin_file(path):
            _add(found, cls, f"file {path}", cls.name)
    if not found:
        raise OnnxaffError("no metrics are registered: install onnxaff (pip install -e .) so its entry points exist")
    return found


def resolve(names: list[str], plugin_files=(), available: dict[str, Registered] | None = None) -> list[Metric]:
    available = registry(plugin_files) if available is None else available
    unknown = [n for n in names if n not in available]
    if unknown:
        raise OnnxaffError(f"unknown metric {unknown[0]!r}; available: {', '.join(sorted(available))}")
    out = []
    for n in names:
        try:
            with plugin_output():
                out.append(available[n].cls())
        except (Exception, SystemExit) as exc:
            raise OnnxaffError(f"metric {n!r} ({available[n].origin}) failed to start: "
                               f"{type(exc).__name__}: {exc}") from None
    return out

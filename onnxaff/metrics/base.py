"""The Metric base class: the declarations the core reads, and scikit-learn style parameters."""

from __future__ import annotations

import inspect
from typing import ClassVar

from onnxaff.metrics.types import Needs

_KEYWORD = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
DIRECTION = {True: "higher = more linear", False: "lower = more linear", None: "descriptive"}
RESERVED = ("name", "spec")  # instance attributes of every metric: no constructor keyword may be called so


class _RegisteredName:
    """`cls.name` is the registered name; `instance.name` reads `instance.spec`.

    The core reads `m.spec` for an entry's key and `type(m).name` for the registered name; the instance alias
    stays for plugin code that reads `self.name`. Metric's
    `__init_subclass__` wraps each class's own `name` in this, so plugins keep declaring a plain string.
    """

    __slots__ = ("registered",)

    def __init__(self, registered):
        self.registered = registered

    def __get__(self, obj, owner=None):
        return self.registered if obj is None else obj.spec

    def __set__(self, obj, value):
        raise AttributeError(f"a metric instance's name is its spec: set spec, not name ({value!r:.60})")


class Metric:
    """Subclass, set the class attributes, implement compute().

    Parameters are the constructor's keywords with defaults (`def __init__(self, eps=1e-6)`), stored under the
    same attribute names, as scikit-learn estimators do: `--metrics name:key=value` sets them. The core reads
    every declaration below from the instance, so a parameter may refine one (a shrinkage estimator needs more
    rows): set it on `self` in `__init__`.
    """

    name: ClassVar[str] = ""  # the registered name (`--metrics` names it); on an instance, an alias of `spec`
    description: ClassVar[str] = ""
    higher_is_more_linear: ClassVar[bool | None] = True  # None: descriptive, not a linearity score
    range: ClassVar[tuple[float, float]] = (0.0, 1.0)
    needs: ClassVar[Needs | str] = Needs.CHUNK  # which input compute() takes (a Needs or its value)
    equal_dims: ClassVar[bool] = False  # True: only defined when X and Y have the same dimension
    # Which runs get it unasked: `default` orders the default --metrics list (0 first, also the metric compare,
    # correlate and report show unless told); `stage_default` residual stages get when no stage metric is asked.
    default: ClassVar[int | None] = None
    stage_default: ClassVar[bool] = False
    # The finite-sample rule (docs/statistics.md): rows per chunk per feature dimension for a bias under 0.05
    # (flagged `few_rows` below it; None: just n > d).
    rows_per_dim: ClassVar[float | None] = None
    min_rows: ClassVar[int] = 2  # the fewest rows a chunk needs at all: a smaller --chunk-size is refused up front
    regularised: ClassVar[bool] = False  # adds an absolute ε to covariances: flagged `eps_dominated` where it bites
    # That ε (a parameter of the name sets it: affinity's `eps`), weighed against the site's smallest chunk variance;
    # None: no absolute ε, nothing to weigh.
    eps: ClassVar[float | None] = None
    rank_sensitive: ClassVar[bool] = False  # fits X's directions: flagged `rank_deficient` on a rank-deficient X
    # The estimator in words (a signature's protocol names it; a parameter may change it: set it on `self`), and the
    # named protocols whose metric this is with its default parameters (format.protocol.NAMED: `--protocol paper`).
    estimator: ClassVar[str] = ""
    protocols: ClassVar[tuple[str, ...]] = ()

    _spec: str | None = None

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "name" in vars(cls) and not isinstance(vars(cls)["name"], _RegisteredName):
            cls.name = _RegisteredName(vars(cls)["name"])

    @property
    def spec(self) -> str:
        """This instance as a run names it, the key of its entries: the registered name, or `name:key=value`
        for parameters set away from their defaults (one spelling, onnxaff.metrics.params.canonical_name)."""
        return self._spec or type(self).name

    @spec.setter
    def spec(self, text: str) -> None:
        self._spec = text

    def compute(self, sample) -> float:  # pragma: no cover - the interface
        raise NotImplementedError

    def chunk_seconds(self, rows: int, dx: int, dy: int) -> tuple[float, str] | None:
        """(predicted seconds a chunk of this size takes, what takes them) where that can grow large, or None:
        the core warns before the run when a chunk would take long, instead of leaving the user waiting."""
        return None

    def caveat(self, rows: int, dx: int, dy: int) -> str | None:
        """A note on how to read this metric's value for a site of this size (or None)."""
        return None

    @classmethod
    def parameters(cls) -> dict[str, object]:
        """The constructor's keywords and their defaults: what `name:key=value` may set."""
        try:
            signature = inspect.signature(cls.__init__)
        except (TypeError, ValueError):
            return {}
        return {p.name: (None if p.default is inspect.Parameter.empty else p.default)
                for p in list(signature.parameters.values())[1:] if p.kind in _KEYWORD}

    def params(self) -> dict[str, object]:
        """This instance's parameter values (a signature records them)."""
        return {k: getattr(self, k, default) for k, default in self.parameters().items()}

    @classmethod
    def info(cls) -> dict:
        return {
            "description": cls.description,
            "direction": DIRECTION[cls.higher_is_more_linear],
            "range": list(cls.range),
            "needs": Needs(cls.needs).value,
            "equal_dims": cls.equal_dims,
        }

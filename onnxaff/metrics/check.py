"""check_metric: a metric class run through what the core relies on, as scikit-learn's check_estimator does.

A plugin's own tests call it, so a broken declaration, a write into an input or a hang on a dead feature is
found there rather than as a site's error in somebody's run. onnxaff's built-ins pass it
(tests/test_check_metric.py). Each check passes or raises MetricCheckError naming the check and the metric.
"""

from __future__ import annotations

import inspect
import math
import numbers
import threading
from dataclasses import dataclass, field

import numpy as np

from onnxaff import defaults
from onnxaff.errors import OnnxaffError
from onnxaff.metrics.base import Metric
from onnxaff.metrics.dispatch import SERVING, needs_of
from onnxaff.metrics.guards import arrays, check_value, private
from onnxaff.metrics.loader import Registered, check_declarations
from onnxaff.metrics.params import build
from onnxaff.metrics.samples import samples

CHECKS = ("declarations", "parameters", "compute", "read_only", "deterministic", "degenerate", "caveat")
SPEC_SEPARATORS = (":", ",", "=")  # a name holding one cannot be given in a metrics list
CAVEAT_SIZES = ((64, 4, 4), (4, 8, 8), (2, 1, 3))  # (rows, dx, dy): n ≫ d, n ≤ d + 1, two rows


class MetricCheckError(AssertionError):
    """A metric failed one check: `check` is its name (one of CHECKS), `metric` the metric's spec."""

    def __init__(self, check: str, metric: str, message: str):
        super().__init__(f"metric {metric!r} fails check {check!r}: {message}")
        self.check, self.metric = check, metric


@dataclass(frozen=True)
class CheckReport:
    """What check_metric saw: the value of each generated input, and the degenerate ones the metric refused."""

    metric: str
    values: dict[str, float] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)  # {case: "ValueError: why"}
    checks: tuple[str, ...] = CHECKS


def check_metric(cls: type[Metric], *, timeout: float = 10.0, seed: int = defaults.SEED, **params) -> CheckReport:
    """Run `cls` (built with `params`, as `--metrics name:key=value` would build it) through every check.

    timeout: seconds one compute() call may take on the small generated inputs before it counts as hanging.
    Raises MetricCheckError at the first failure; returns a CheckReport when all pass.
    """
    name = cls.name if isinstance(getattr(cls, "name", None), str) and cls.name else repr(cls)
    _declarations(cls, name)
    metric = _construct(cls, name, params)
    _declared_values(metric, metric.spec)  # __init__ may refine a declaration: the core reads the instance
    cases = samples(needs_of(metric), bool(metric.equal_dims), seed)
    values, refused = {}, {}
    for case, sample in cases.items():
        ordinary = case.startswith("ordinary")
        outcome = _call(metric, sample, timeout, case)
        if ordinary and isinstance(outcome, BaseException):
            _fail("compute", metric, f"raises {_text(outcome)} on the {case} input")
        if not ordinary and isinstance(outcome, BaseException):
            if not isinstance(outcome, ValueError) or not str(outcome).strip():
                _fail("degenerate", metric, f"raises {_text(outcome)} on {case}: refuse it with a ValueError "
                                            f"saying why (the run records the message as the site's error)")
            refused[case] = _text(outcome)
            continue
        try:
            values[case] = check_value(metric, outcome)
        except (TypeError, ValueError) as exc:
            _fail("compute" if ordinary else "degenerate", metric,
                  f"{exc} on {'the ' + case + ' input' if ordinary else case}" +
                  ("" if ordinary else ": return a value in range, or raise a ValueError saying why"))
        again = _call(metric, sample, timeout, case)
        if isinstance(again, BaseException) or not _same(outcome, again):
            _fail("deterministic", metric, f"gave {outcome!r:.40} and then {_text(again)} on the same {case} "
                                           f"input: the core may score a chunk again and expects the same value")
    _notes(metric)
    return CheckReport(metric.spec, values, refused)


def _fail(check: str, metric, message: str):
    raise MetricCheckError(check, metric if isinstance(metric, str) else metric.spec, message)


def _text(outcome) -> str:
    return f"{type(outcome).__name__}: {outcome}" if isinstance(outcome, BaseException) else f"{outcome!r:.60}"


def _same(a, b) -> bool:
    try:
        return float(a) == float(b)
    except (TypeError, ValueError):
        return False


# --- declarations ---

def _declarations(cls, name: str) -> None:
    """What the loader checks, and what it takes on trust: a nameable name, a description, flags that apply."""
    try:
        check_declarations(cls, "check_metric")
    except OnnxaffError as exc:
        _fail("declarations", name, str(exc))
    bad = [c for c in SPEC_SEPARATORS if c in cls.name] or [c for c in cls.name if c.isspace()]
    if bad:
        _fail("declarations", name, f"its name holds {bad[0]!r}, which a metrics list cannot name")
    if not isinstance(cls.description, str) or not cls.description.strip():
        _fail("declarations", name, "declares no description (the plugins listing and the signature show it)")
    _declared_values(cls, name)


def _declared_values(obj, name: str) -> None:
    """The declarations the core reads from the class or, after __init__, from the instance."""
    for flag in ("equal_dims", "stage_default", "regularised", "rank_sensitive"):
        if not isinstance(getattr(obj, flag), bool):
            _fail("declarations", name, f"declares {flag} {getattr(obj, flag)!r:.60}; it must be True or False")
    needs = needs_of(obj)
    serving = SERVING[needs]
    per_dim = obj.rows_per_dim
    if per_dim is not None:
        if isinstance(per_dim, bool) or not isinstance(per_dim, numbers.Real) or not 0 < per_dim < math.inf:
            _fail("declarations", name, f"declares rows_per_dim {per_dim!r:.60}; it must be None or a positive number")
        if not serving.row_rule:
            _fail("declarations", name, f"declares rows_per_dim, which the core never reads for needs {needs.value!r}")
    least = obj.min_rows
    if isinstance(least, bool) or not isinstance(least, numbers.Integral) or least < 1:
        _fail("declarations", name, f"declares min_rows {least!r:.60}; it must be a whole number of at least 1")
    if obj.stage_default and not serving.stage:
        _fail("declarations", name, f"declares stage_default with needs {needs.value!r}: only metrics that score "
                                    f"residual stages (needs 'tracks') are given to stages")
    for flag in ("regularised", "rank_sensitive"):
        if getattr(obj, flag) and serving.stage:
            _fail("declarations", name, f"declares {flag}, a flag of sites' X, with needs 'tracks' (stages only)")
    eps = obj.eps
    if obj.regularised and eps is not None and (isinstance(eps, bool) or not isinstance(eps, numbers.Real)
                                                or not 0 <= eps < math.inf):
        _fail("declarations", name, f"is regularised with eps {eps!r:.60}; the eps_dominated flag needs a number ≥ 0")


# --- parameters ---

def _spec_text(value) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else repr(value) if isinstance(value, float) \
        else str(value)


def _build(cls, name: str, params: dict) -> Metric:
    spec = ":".join([name, *(f"{k}={_spec_text(v)}" for k, v in params.items())])
    try:
        return build(spec, {name: Registered(cls, "check_metric")})
    except OnnxaffError as exc:
        _fail("parameters", name, str(exc))


def _construct(cls, name: str, params: dict) -> Metric:
    """The metric built as a run builds it: from no arguments, from each default written out, from `params`."""
    try:
        keywords = list(inspect.signature(cls.__init__).parameters.values())[1:]
    except (TypeError, ValueError):
        keywords = []
    required = [p.name for p in keywords if p.default is inspect.Parameter.empty
                and p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)]
    if required:
        _fail("parameters", name, f"parameter {required[0]!r} has no default: a metric named without parameters "
                                  f"is built with none")
    odd = [k for k, v in params.items() if not isinstance(v, (bool, int, float, str))]
    if odd:
        _fail("parameters", name, f"check_metric got {odd[0]}={params[odd[0]]!r:.40}: a metrics list gives only "
                                  f"true/false, numbers and text")
    plain = _build(cls, name, {})
    missing = [k for k in cls.parameters() if not hasattr(plain, k)]
    if missing:
        _fail("parameters", name, f"keeps its parameter {missing[0]!r} under another name; store each constructor "
                                  f"keyword as an attribute of the same name (the signature records it)")
    for key, default in cls.parameters().items():
        if isinstance(default, (bool, int, float, str)) and _build(cls, name, {key: default}).spec != name:
            _fail("parameters", name, f"{key}={_spec_text(default)}, its own default written out, does not read "
                                      f"back as the default")
    return _build(cls, name, params) if params else plain


# --- compute, with a timeout and read-only inputs ---

def _call(metric: Metric, sample, timeout: float, case: str):
    """compute() on a read-only private copy of `sample`, on a thread: the value, or the exception it raised.

    A write the read-only flag stops, or one past it (the copy compared with the original afterwards), fails
    read_only; a call still running after `timeout` seconds fails compute or degenerate (it is left running:
    a thread cannot be killed)."""
    own, result = private(sample), []

    def run():
        try:
            result.append(metric.compute(own))
        except BaseException as exc:  # noqa: BLE001 - SystemExit and KeyboardInterrupt are the metric's fault too
            result.append(exc)

    thread = threading.Thread(target=run, name=f"check_metric {metric.spec}", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        _fail("degenerate" if not case.startswith("ordinary") else "compute", metric,
              f"compute() did not return within {timeout:g} s on {case}")
    outcome = result[0]
    if isinstance(outcome, ValueError) and "read-only" in str(outcome):
        _fail("read_only", metric, f"writes into its input ({outcome}); copy it first")
    if any(not np.array_equal(a, b, equal_nan=True) for a, b in zip(arrays(own), arrays(sample), strict=True)):
        _fail("read_only", metric, f"changed its {case} input past the read-only flag; copy it first")
    return outcome


# --- caveat and chunk_seconds ---

def _notes(metric: Metric) -> None:
    for rows, dx, dy in CAVEAT_SIZES:
        try:
            note = metric.caveat(rows, dx, dy)
            cost = metric.chunk_seconds(rows, dx, dy)
        except Exception as exc:
            _fail("caveat", metric, f"caveat or chunk_seconds({rows}, {dx}, {dy}) raises {_text(exc)}")
        if note is not None and not (isinstance(note, str) and note.strip()):
            _fail("caveat", metric, f"caveat({rows}, {dx}, {dy}) returned {note!r:.60}; it must be None or text")
        if cost is not None and not (isinstance(cost, tuple) and len(cost) == 2 and isinstance(cost[1], str) and
                                     isinstance(cost[0], numbers.Real) and 0 <= cost[0] < math.inf):
            _fail("caveat", metric, f"chunk_seconds({rows}, {dx}, {dy}) returned {cost!r:.60}; it must be None or "
                                    f"(seconds, what takes them)")

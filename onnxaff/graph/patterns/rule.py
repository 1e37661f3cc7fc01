"""What a decomposed-activation rule is: a kind, the ops it may be anchored on, where its region lies around the
anchor, and a test of f."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

# Probe points: symmetric, dense near 0 where activations differ, and reaching the saturated tails.
PROBE = np.concatenate([np.linspace(-8.0, 8.0, 161), np.linspace(-1.0, 1.0, 41), [-3.0, 3.0, 6.0]])
# Exporters store constants in float32 (relative error ~6e-8); the closest pair of kinds we separate,
# GELU (erf) and its tanh approximation, differ by up to 4.7e-4, so 1e-5 splits them safely.
TOLERANCE = 1e-5


class Miss(NamedTuple):
    """Why a rule or a library entry refused a candidate, so that `sites` can explain a near-miss.

    The text is formatted only when read (`reason`): discovery makes thousands of refusals and reads
    none. `gap` is the relative deviation at the deciding point (inf where no value decided it), so
    that the nearest named function can be told from the far ones.
    """

    rule: str
    why: str
    args: tuple = ()
    gap: float = float("inf")

    @property
    def reason(self) -> str:
        return self.why.format(*self.args) if self.args else self.why


def gap(got: float, want: float) -> float:
    """The relative deviation `close_to` measures: |got − want| / (1 + |want|)."""
    return abs(got - want) / (1.0 + abs(want)) if np.isfinite(got) else float("inf")


def deviation(rule: str, name: str, x: np.ndarray, values: np.ndarray, reference: np.ndarray) -> Miss:
    """The refusal of values ≠ reference on x: where they differ most, or where values are not finite."""
    bad = ~np.isfinite(values)
    if bad.any():
        return Miss(rule, "not finite at x={:g}", (float(x[np.argmax(bad)]),))
    err = np.abs(values - reference) / (1.0 + np.abs(reference))
    k = int(np.argmax(err))
    return Miss(rule, "differs from {} by {:.2g} at x={:g} ({:.6g}, not {:.6g})",
                (name, float(err[k]), float(x[k]), float(values[k]), float(reference[k])), float(err[k]))


def close_to(values: np.ndarray, reference: np.ndarray) -> bool:
    if not np.all(np.isfinite(values)):
        return False
    return bool(np.all(np.abs(values - reference) <= TOLERANCE * (1.0 + np.abs(reference))))


@dataclass(frozen=True)
class Region:
    """Where a rule's candidate regions lie around its anchor, in steps, so that a rule says what it needs and the
    others keep theirs (`region.candidates` reads it).

    The entry is the anchor's input or at most `before` steps above it, through ops of one variable operand and
    constants (Mul, Div, Add, Sub, Neg: the β of log(1+exp(βx))/β); the exit is the anchor's output or at most `after`
    elementwise steps below it. Either way a gate (x·g(x), x/g(x)) below the anchor moves the entry to the tensor it
    gates. The default is what every rule had before rules declared one.
    """

    before: int = 0
    after: int = 8


AT_ANCHOR = Region()  # the default: the entry at the anchor's input


@dataclass(frozen=True)
class Rule:
    kind: str
    anchors: frozenset[str]
    # Given f (the candidate's elementwise function), the site's parameters if it matches, else the Miss.
    classify: Callable[[Callable[[np.ndarray], np.ndarray]], dict | Miss]
    description: str = ""
    region: Region = AT_ANCHOR


def reference_rule(kind: str, anchors: set[str], reference: Callable, description: str,
                   params: dict | None = None, region: Region = AT_ANCHOR) -> Rule:
    """A rule for a fixed function (its values computed at the first candidate, not on import: GELU's erf would
    import scipy.special for every command); `params`: its fixed constants, reported on every site it finds."""
    expected = functools.cache(lambda: reference(PROBE))

    def classify(f):
        values = f(PROBE)
        return dict(params or {}) if close_to(values, expected()) else deviation(kind, kind, PROBE, values,
                                                                                  expected())

    return Rule(kind, frozenset(anchors), classify, description, region)

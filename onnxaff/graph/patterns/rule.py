"""What a decomposed-activation rule is: a kind, the ops it may be anchored on, and a test of f."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

# Probe points: symmetric, dense near 0 where activations differ, and reaching the saturated tails.
PROBE = np.concatenate([np.linspace(-8.0, 8.0, 161), np.linspace(-1.0, 1.0, 41), [-3.0, 3.0, 6.0]])
# Exporters store constants in float32 (relative error ~6e-8); the closest pair of kinds we separate,
# GELU (erf) and its tanh approximation, differ by up to 4.7e-4, so 1e-5 splits them safely.
TOLERANCE = 1e-5


def close_to(values: np.ndarray, reference: np.ndarray) -> bool:
    if not np.all(np.isfinite(values)):
        return False
    return bool(np.all(np.abs(values - reference) <= TOLERANCE * (1.0 + np.abs(reference))))


@dataclass(frozen=True)
class Rule:
    kind: str
    anchors: frozenset[str]
    # Given f (the candidate's elementwise function), the site's parameters if it matches, else None.
    classify: Callable[[Callable[[np.ndarray], np.ndarray]], dict | None]
    description: str = ""


def reference_rule(kind: str, anchors: set[str], reference: Callable, description: str) -> Rule:
    """A rule for a fixed, parameter-free function (its values computed at the first candidate, not on import:
    GELU's erf would import scipy.special for every command)."""
    expected = functools.cache(lambda: reference(PROBE))

    def classify(f):
        return {} if close_to(f(PROBE), expected()) else None

    return Rule(kind, frozenset(anchors), classify, description)

"""What the core does around a metric's compute(): read-only private inputs, and the returned value checked.

check_metric (onnxaff.metrics.check) holds a metric to the same rules the run applies, so it uses these; the
scoring threads (onnxaff/collection/scoring.py) keep their own copy of the same two rules for now.
"""

from __future__ import annotations

import dataclasses
import math
import numbers

import numpy as np

RANGE_SLACK = 1e-9  # relative beyond 1: a score of 1 + 2e-16 is a 1, not a fault


def check_value(metric, value) -> float:
    """The metric's value as a float, or ValueError/TypeError saying why it cannot be stored."""
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value[()]
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"returned {type(value).__name__} {value!r:.60}, not a number")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"returned {value}")
    lo, hi = metric.range
    if not within(value, lo, hi):
        raise ValueError(f"out of range [{lo:g}, {hi:g}]: {value!r}")
    return value


def within(value: float, lo: float, hi: float) -> bool:
    """`value` in [lo, hi] up to RANGE_SLACK of rounding (relative beyond 1)."""
    return lo - RANGE_SLACK * max(1.0, abs(lo)) <= value <= hi + RANGE_SLACK * max(1.0, abs(hi))


def private(sample):
    """A metric's own copy of its input, arrays read-only and owning their memory (`.base` is None): a write
    past the flag reaches only that metric's copy."""
    if isinstance(sample, np.ndarray):
        own = np.array(sample, copy=True)
        own.flags.writeable = False
        return own
    if isinstance(sample, tuple):
        items = [private(v) for v in sample]
        return type(sample)(*items) if hasattr(sample, "_fields") else tuple(items)
    if dataclasses.is_dataclass(sample) and not isinstance(sample, type):
        return dataclasses.replace(sample, **{f.name: private(getattr(sample, f.name))
                                              for f in dataclasses.fields(sample) if f.init})
    return sample


def arrays(sample) -> list[np.ndarray]:
    """Every array of an input, in a fixed order (to compare an input before and after a metric saw it)."""
    if isinstance(sample, np.ndarray):
        return [sample]
    if isinstance(sample, tuple):
        return [a for v in sample for a in arrays(v)]
    if dataclasses.is_dataclass(sample) and not isinstance(sample, type):
        return [a for f in dataclasses.fields(sample) for a in arrays(getattr(sample, f.name))]
    return []

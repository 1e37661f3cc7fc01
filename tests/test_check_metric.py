"""check_metric: every built-in passes it, and each check fails on a metric that breaks what it checks."""

import math
import threading

import numpy as np
import pytest

from onnxaff.metrics import (
    CheckReport,
    Chunk,
    Metric,
    MetricCheckError,
    Needs,
    Tracks,
    check_metric,
    registry,
)
from onnxaff.metrics.check import CHECKS

BUILT_INS = sorted(n for n, r in registry().items() if r.cls.__module__.startswith("onnxaff_plugins"))


@pytest.mark.parametrize("name", BUILT_INS)
def test_every_built_in_metric_passes(name):
    cls = registry()[name].cls
    report = check_metric(cls)
    assert isinstance(report, CheckReport) and report.metric == name and report.checks == CHECKS
    assert "ordinary" in report.values
    lo, hi = cls.range
    assert all(lo - 1e-9 <= v <= hi + 1e-9 for v in report.values.values())  # the core's rounding slack
    assert all(text.startswith("ValueError: ") for text in report.refused.values())


@pytest.mark.parametrize("params", [{"shrinkage": "ledoit_wolf"}, {"relative_eps": True, "eps": 1e-5},
                                    {"method": "span"}])
def test_parameters_are_built_as_a_metrics_list_builds_them(params):
    report = check_metric(registry()["affinity"].cls, **params)
    assert report.metric.startswith("affinity:")


class Good(Metric):
    """A well-behaved chunk metric, the base every broken one below changes in one way."""

    name = "good"
    description = "mean |tanh(Y − X)|"
    range = (0.0, 1.0)

    def compute(self, chunk: Chunk) -> float:
        return float(np.mean(np.abs(np.tanh(chunk.y[:, :1] - chunk.x[:, :1]))))


def fails(cls, check, match, **kwargs):
    with pytest.raises(MetricCheckError, match=match) as exc:
        check_metric(cls, **kwargs)
    assert exc.value.check == check and isinstance(exc.value, AssertionError)
    assert f"fails check {check!r}" in str(exc.value)
    return exc.value


def test_a_good_metric_passes():
    report = check_metric(Good)
    assert report.metric == "good" and set(report.values) >= {"ordinary", "n == 2 rows"} and not report.refused


# --- declarations ---

class BadRange(Good):
    range = (1.0, 0.0)


class ColonName(Good):
    name = "good:v2"


class NoDescription(Good):
    name = "undescribed"
    description = ""


class RowsOnTracks(Metric):
    name = "rows_on_tracks"
    description = "a stage metric with a row rule the core never applies"
    range = (0.0, math.inf)
    needs = Needs.TRACKS
    rows_per_dim = 4

    def compute(self, tracks: Tracks) -> float:
        return float(np.abs(tracks.arrays[-1] - tracks.arrays[0]).mean())


class StageDefaultOnChunks(Good):
    stage_default = True


class RegularisedStage(RowsOnTracks):
    rows_per_dim = None
    regularised = True


class NumberFlag(Good):
    equal_dims = 1


class RefinedBadly(Good):
    def __init__(self, strict: bool = False):
        self.strict = strict
        self.rows_per_dim = -1 if strict else None


@pytest.mark.parametrize("cls, match, kwargs", [
    (BadRange, "declares range", {}),
    (ColonName, "its name holds ':'", {}),
    (NoDescription, "declares no description", {}),
    (RowsOnTracks, "declares rows_per_dim, which the core never reads for needs 'tracks'", {}),
    (StageDefaultOnChunks, "declares stage_default with needs 'chunk'", {}),
    (RegularisedStage, "declares regularised, a flag of sites' X, with needs 'tracks'", {}),
    (NumberFlag, "declares equal_dims 1; it must be True or False", {}),
    (RefinedBadly, "declares rows_per_dim -1", {"strict": True}),  # __init__'s refinement is checked too
])
def test_declarations(cls, match, kwargs):
    fails(cls, "declarations", match, **kwargs)


# --- parameters ---

class Required(Good):
    def __init__(self, power):
        self.power = power


class Hidden(Good):
    def __init__(self, power: float = 1.0):
        self._power = power


class InfiniteDefault(Good):
    def __init__(self, cap: float = math.inf):
        self.cap = cap


class Positive(Good):
    def __init__(self, power: float = 1.0):
        if power <= 0:
            raise ValueError(f"power must be positive, not {power}")
        self.power = power


@pytest.mark.parametrize("cls, match, kwargs", [
    (Required, "parameter 'power' has no default", {}),
    (Hidden, "keeps its parameter 'power' under another name", {}),
    (InfiniteDefault, "cap must be a finite number", {}),  # inf cannot be written back in a metrics list
    (Positive, "power must be positive, not -1.0", {"power": -1.0}),
    (Positive, "has no parameter 'powr'", {"powr": 2.0}),
    (Positive, "a metrics list gives only true/false, numbers and text", {"power": [1, 2]}),
])
def test_parameters(cls, match, kwargs):
    fails(cls, "parameters", match, **kwargs)


# --- compute ---

class Raises(Good):
    def compute(self, chunk):
        raise RuntimeError("not implemented yet")


class OutOfRange(Good):
    def compute(self, chunk):
        return 1.5


class ReturnsNaN(Good):
    def compute(self, chunk):
        return float("nan")


class ReturnsText(Good):
    def compute(self, chunk):
        return "0.5"


class Hangs(Good):
    def compute(self, chunk):
        threading.Event().wait(2.0)
        return 0.5


@pytest.mark.parametrize("cls, match", [
    (Raises, "raises RuntimeError: not implemented yet on the ordinary input"),
    (OutOfRange, r"out of range \[0, 1\]: 1.5 on the ordinary input"),
    (ReturnsNaN, "returned nan on the ordinary input"),
    (ReturnsText, "returned str '0.5', not a number"),
])
def test_compute(cls, match):
    fails(cls, "compute", match)


def test_a_hanging_compute_is_reported_not_waited_for():
    fails(Hangs, "compute", "did not return within 0.2 s on ordinary", timeout=0.2)


# --- read-only inputs ---

class Vandal(Good):
    def compute(self, chunk):
        chunk.x[...] = 0.0
        return 0.5


class SlyVandal(Good):
    def compute(self, chunk):
        chunk.y.flags.writeable = True
        chunk.y *= 2.0
        return 0.5


@pytest.mark.parametrize("cls, match", [(Vandal, "writes into its input .*read-only"),
                                        (SlyVandal, "changed its ordinary input past the read-only flag")])
def test_read_only(cls, match):
    fails(cls, "read_only", match)


# --- deterministic ---

class Noisy(Good):
    def compute(self, chunk):
        return float(np.random.default_rng().uniform())


def test_deterministic():
    fails(Noisy, "deterministic", "on the same ordinary input")


# --- degenerate inputs ---

class DividesByZero(Good):
    def compute(self, chunk):
        spread = float(np.ptp(chunk.y))
        return 0.5 if spread else 1 / int(spread)


class NaNOnConstant(Good):
    def compute(self, chunk):
        y = chunk.y - chunk.y.mean(0)
        with np.errstate(invalid="ignore"):
            return float(np.abs(y).mean() / np.abs(y).mean() / 2)


class HangsOnTwoRows(Good):
    def compute(self, chunk):
        if chunk.n == 2:
            threading.Event().wait(2.0)
        return 0.5


class BareValueError(Good):
    def compute(self, chunk):
        if chunk.n == 2:
            raise ValueError
        return 0.5


@pytest.mark.parametrize("cls, match, kwargs", [
    (DividesByZero, "raises ZeroDivisionError: .* on a constant Y: refuse it with a ValueError saying why", {}),
    (NaNOnConstant, "returned nan on a constant Y: return a value in range, or raise a ValueError", {}),
    (HangsOnTwoRows, "did not return within 0.2 s on n == 2 rows", {"timeout": 0.2}),
    (BareValueError, "raises ValueError:  on n == 2 rows", {}),  # a refusal must say why
])
def test_degenerate(cls, match, kwargs):
    fails(cls, "degenerate", match, **kwargs)


# --- caveat and chunk_seconds ---

class NumberCaveat(Good):
    def caveat(self, rows, dx, dy):
        return 3


class TextCost(Good):
    def chunk_seconds(self, rows, dx, dy):
        return "slow"


@pytest.mark.parametrize("cls, match", [(NumberCaveat, r"caveat\(64, 4, 4\) returned 3; it must be None or text"),
                                        (TextCost, r"chunk_seconds\(64, 4, 4\) returned 'slow'")])
def test_caveat(cls, match):
    fails(cls, "caveat", match)


def test_every_check_is_shown_to_fail():
    """Each name in CHECKS has a test above with a metric that breaks it."""
    tested = {"declarations", "parameters", "compute", "read_only", "deterministic", "degenerate", "caveat"}
    assert tested == set(CHECKS)

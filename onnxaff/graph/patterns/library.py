"""The named functions an elementwise island is identified against, with their parameters fitted.

An island is evaluated on probe points (float64); each entry below reads its parameters off a few
values (a slope at -1, a bound far out, a threshold found by bisection) and is accepted only when it
then reproduces the island everywhere to `rule.TOLERANCE`. Order matters where two names coincide:
ReLU before Clip(0, ∞) and ThresholdedReLU(0); ELU(α) before CELU(α = 1), which is the same function.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np

from onnxaff.graph import special
from onnxaff.graph.patterns import gelu, hardswish, mish, rule, softsign, swish
from onnxaff.graph.patterns.rule import PROBE, Miss, deviation, gap

FAR = 1.0e4
# The rule probes plus far points (bounds, saturation) and a few off-grid values near 0.
WIDE = np.unique(np.concatenate([PROBE, [-FAR, -200.0, -50.0, -20.0, -12.0, 12.0, 20.0, 50.0, 200.0, FAR],
                                 [-0.37, -0.013, 0.013, 0.37, 2.71, -2.71]]))


def close_to(g: np.ndarray, reference: np.ndarray) -> bool:
    """rule.close_to on the points where g is finite; the probes within ±50 must all be (exp(1e4) is not)."""
    # A few points first: most candidates fail there, and the full comparison is the costly part.
    if not rule.close_to(g[_SAMPLE], reference[_SAMPLE]):
        return False
    ok = np.isfinite(g)
    if not ok[_NEAR].all() or not np.isfinite(reference[ok]).all():
        return False
    return rule.close_to(g[ok], reference[ok])


_NEAR = np.abs(WIDE) <= 50
_SAMPLE = np.searchsorted(WIDE, [-3.0, -1.0, -0.37, 0.37, 1.0, 3.0])


def _differs(kind: str, name: str, g: np.ndarray, reference: np.ndarray) -> Miss:
    """Why `close_to(g, reference)` failed, on the points it compares."""
    ok = np.isfinite(g) | ~_NEAR
    return deviation(kind, name, WIDE[ok], g[ok], reference[ok])


def f32(v: float) -> float:
    """Parameters as the float32 the model stores: a fit and the attribute it came from compare equal."""
    return float(np.float32(v))


_INDEX = {float(x): k for k, x in enumerate(WIDE)}
# Values every fitter reads first, as Python floats: most candidates are turned down on these alone.
_KEYS = (-FAR, -1.0, -0.37, 0.0, 0.37, 1.0, 2.0, FAR)
_KEY_INDEX = [_INDEX[x] for x in _KEYS]


def _near(a: float, b: float) -> bool:
    return abs(a - b) <= rule.TOLERANCE * (1.0 + abs(b))


def _fixed(kind, reference):
    """A parameter-free function; its values are computed at the first candidate, not on import (sigmoid and
    GELU's erf would import scipy.special for every command)."""
    values = functools.cache(lambda: reference(WIDE))

    def fit(g, f, k):
        expected = values()
        for x in (-1.0, 0.37, 1.0, 2.0):
            if not _near(k[x], want := float(expected[_INDEX[x]])):
                return Miss(kind, "f({:g}) = {:.6g}, {} gives {:.6g}", (x, k[x], kind, want), gap(k[x], want))
        return (kind, {}) if close_to(g, expected) else _differs(kind, kind, g, expected)

    return fit


def _clip(g, f, k):
    lo, hi = k[-FAR], k[FAR]
    lo = None if not np.isfinite(lo) or lo < -FAR / 2 else lo
    hi = None if not np.isfinite(hi) or hi > FAR / 2 else hi
    if (lo is None and hi is None) or (lo is not None and hi is not None and lo >= hi):
        return Miss("clip", "unbounded at both ends, or f(-1e4) ≥ f(1e4): no clamp")
    lo_, hi_ = -np.inf if lo is None else lo, np.inf if hi is None else hi
    for x in (-1.0, 0.37, 1.0):
        if not _near(k[x], want := min(max(x, lo_), hi_)):
            return Miss("clip", "f({:g}) = {:.6g}, clip({:.6g}, {:.6g}) gives {:.6g}", (x, k[x], lo_, hi_, want),
                        gap(k[x], want))
    if not close_to(g, reference := np.clip(WIDE, lo_, hi_)):
        return _differs("clip", f"clip(x, {lo_:g}, {hi_:g})", g, reference)
    if lo == 0.0 and hi is None:
        return "relu", {}
    if lo == 0.0 and hi == 6.0:
        return "relu6", {"min": 0.0, "max": 6.0}
    return "clip", {"min": None if lo is None else f32(lo), "max": None if hi is None else f32(hi)}


def _leaky(g, f, k):
    alpha = -k[-1.0]
    if k[2.0] != 2.0:
        return Miss("leaky_relu", "f(2) = {:.6g}, not 2", (k[2.0],), gap(k[2.0], 2.0))
    if alpha in (0.0, 1.0) or not _near(k[-0.37], -0.37 * alpha):
        return Miss("leaky_relu", "slope {:.6g} read at -1 does not give f(-0.37) = {:.6g}", (alpha, k[-0.37]),
                    gap(k[-0.37], -0.37 * alpha))
    if not close_to(g, reference := np.where(WIDE < 0, alpha * WIDE, WIDE)):
        return _differs("leaky_relu", f"leaky_relu(α={alpha:.6g})", g, reference)
    return "leaky_relu", {"alpha": f32(alpha)}


def _thresholded(g, f, k):
    if k[FAR] != FAR or k[-FAR] != 0.0:
        return Miss("thresholded_relu", "f(-1e4) = {:.6g} and f(1e4) = {:.6g}, not 0 and 1e4", (k[-FAR], k[FAR]))
    zero, ident = g == 0.0, np.isclose(g, WIDE, rtol=1e-7, atol=0) & (WIDE != 0)
    if not np.all(zero | ident) or not zero.any() or not ident.any():
        return Miss("thresholded_relu", "neither 0 nor x at x={:g}", (float(WIDE[np.argmin(zero | ident)]),))
    lo, hi = WIDE[zero & (WIDE != 0)].max(initial=-np.inf), WIDE[ident].min()
    if not WIDE[zero].max() < hi or not np.isfinite(lo):
        return Miss("thresholded_relu", "no single jump from 0 to x")
    lo = max(lo, WIDE[zero].max())
    for _ in range(80):  # the jump from 0 to x: y = x where x > alpha
        mid = 0.5 * (lo + hi)
        v = float(f(np.array([mid]))[0])
        if v == mid and mid != 0:
            hi = mid
        else:
            lo = mid
    return "thresholded_relu", {"alpha": f32(hi)}


def _selu_elu(g, f, k):
    gamma = k[1.0]
    if gamma <= 0 or not _near(k[2.0], 2.0 * gamma):
        return Miss("elu/selu", "not γ·x for x > 0: f(1) = {:.6g}, f(2) = {:.6g}", (gamma, k[2.0]),
                    gap(k[2.0], 2.0 * gamma))
    alpha = k[-1.0] / (gamma * np.expm1(-1.0))
    want = gamma * alpha * np.expm1(-0.37)
    if alpha <= 0 or not _near(k[-0.37], want):
        return Miss("elu/selu", "α = {:.6g} read at -1 gives f(-0.37) = {:.6g}, not {:.6g}", (alpha, want, k[-0.37]),
                    gap(k[-0.37], want))
    if not close_to(g, reference := gamma * np.where(WIDE > 0, WIDE, alpha * np.expm1(np.minimum(WIDE, 0.0)))):
        return _differs("elu/selu", f"{gamma:.6g}·elu(α={alpha:.6g})", g, reference)
    if f32(gamma) == 1.0:
        return "elu", {"alpha": f32(alpha)}
    return "selu", {"alpha": f32(alpha), "gamma": f32(gamma)}


def _celu(g, f, k):
    alpha = -k[-FAR]
    if k[2.0] != 2.0 or not 0 < alpha < FAR / 20:
        return Miss("celu", "f(2) = {:.6g} and f(-1e4) = {:.6g}: not x for x > 0 with a bound -α below",
                    (k[2.0], k[-FAR]), gap(k[2.0], 2.0))
    if not _near(k[-1.0], want := alpha * np.expm1(-1.0 / alpha)):
        return Miss("celu", "α = {:.6g} read at -1e4 gives f(-1) = {:.6g}, not {:.6g}", (alpha, want, k[-1.0]),
                    gap(k[-1.0], want))
    if not close_to(g, reference := np.where(WIDE > 0, WIDE, alpha * np.expm1(np.minimum(WIDE, 0.0) / alpha))):
        return _differs("celu", f"celu(α={alpha:.6g})", g, reference)
    return "celu", {"alpha": f32(alpha)}


def _hard_sigmoid(g, f, k):
    if k[-FAR] != 0.0 or k[FAR] != 1.0:
        return Miss("hard_sigmoid", "f(-1e4) = {:.6g} and f(1e4) = {:.6g}, not 0 and 1", (k[-FAR], k[FAR]))
    inner = np.flatnonzero((g > 1e-9) & (g < 1 - 1e-9))
    if len(inner) < 2:
        return Miss("hard_sigmoid", "fewer than two probes strictly between 0 and 1: no slope to read")
    (x1, x2), (y1, y2) = WIDE[inner[[0, -1]]], g[inner[[0, -1]]]
    alpha = (y2 - y1) / (x2 - x1)
    beta = y1 - alpha * x1
    if alpha <= 0:
        return Miss("hard_sigmoid", "slope {:.6g} between its ends is not positive", (alpha,))
    if not close_to(g, reference := np.clip(alpha * WIDE + beta, 0.0, 1.0)):
        return _differs("hard_sigmoid", f"hard_sigmoid(α={alpha:.6g}, β={beta:.6g})", g, reference)
    return "hard_sigmoid", {"alpha": f32(alpha), "beta": f32(beta)}


def _swish(g, f, k):
    # x·σ(βx) at x = 1 is σ(β): read β off one probe, then demand agreement everywhere.
    at_one = k[1.0]
    if not 0.0 < at_one < 1.0:
        return Miss("swish", "f(1) = {:.6g} is outside (0, 1): no σ(β) to read β from", (at_one,))
    beta = float(special.logit(at_one))
    if beta <= 0:
        return Miss("swish", "β = {:.6g} read at 1 is not positive", (beta,))
    if not _near(k[2.0], want := 2.0 * special.expit(2.0 * beta)):
        return Miss("swish", "β = {:.6g} read at 1 gives f(2) = {:.6g}, not {:.6g}", (beta, want, k[2.0]),
                    gap(k[2.0], want))
    if not close_to(g, reference := WIDE * special.expit(beta * WIDE)):
        return _differs("swish", f"x·σ({beta:.6g}x)", g, reference)
    if abs(beta - 1.0) <= 1e-4:
        return "silu", {}
    if abs(beta - swish.QUICK_GELU_BETA) <= 1e-4:
        return "quick_gelu", {}
    return "swish", {"beta": round(beta, 6)}


NAMED: list[Callable] = [
    _clip, _leaky, _thresholded, _selu_elu, _celu, _hard_sigmoid,
    _fixed("sigmoid", special.expit), _fixed("tanh", np.tanh),
    _fixed("softplus", lambda x: np.logaddexp(0.0, x)), _fixed("softsign", softsign.softsign),
    _fixed("gelu", gelu.gelu_erf), _fixed("gelu_tanh", gelu.gelu_tanh), _fixed("mish", mish.mish),
    _fixed("hardswish", hardswish.hardswish), _swish,
]


def identify(g: np.ndarray, f: Callable[[np.ndarray], np.ndarray],
             misses: list[Miss] | None = None) -> tuple[str, dict] | None:
    """(kind, params) of the named function g = f(WIDE) is, or None; each entry's refusal goes to `misses`."""
    if not np.isfinite(g[_NEAR]).all():  # every named function is finite on [-50, 50]
        if misses is not None:
            x = float(WIDE[_NEAR][np.argmin(np.isfinite(g[_NEAR]))])
            misses.append(Miss("library", "not finite at x={:g}, where every named function is", (x,)))
        return None
    k = dict(zip(_KEYS, g[_KEY_INDEX].tolist(), strict=True))
    with np.errstate(all="ignore"):
        for entry in NAMED:
            hit = entry(g, f, k)
            if type(hit) is not Miss:
                return hit
            if misses is not None:
                misses.append(hit)
    return None


def identify_columns(g: np.ndarray, slope_shape: tuple, misses: list[Miss] | None = None) -> tuple[str, dict] | None:
    """An island with per-position constants: PReLU when each position is a leaky ReLU of its own slope."""
    slopes = -g[np.searchsorted(WIDE, -1.0)]
    with np.errstate(all="ignore"):  # an island of −inf constants (a Where writing a −inf mask): no warning, no fit
        reference = np.where(WIDE[:, None] < 0, slopes[None, :] * WIDE[:, None], WIDE[:, None])
        fits = close_to(g, reference)
    if not fits:
        if misses is not None:
            misses.append(Miss("prelu", "its constants vary by position and no position-wise leaky ReLU fits it"))
        return None
    return "prelu", {"slope": np.float32(slopes).astype(np.float64).reshape(slope_shape).tolist()}

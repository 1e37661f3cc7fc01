"""The named functions an elementwise island is identified against, with their parameters fitted.

An island is evaluated on probe points (float64); each entry below reads its parameters off a few
values (a slope at -1, a bound far out, a threshold found by bisection) and is accepted only when it
then reproduces the island everywhere to `rule.TOLERANCE`. Order matters where two names coincide:
ReLU before Clip(0, ∞) and ThresholdedReLU(0); ELU(α) before CELU(α = 1), which is the same function.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from scipy import special

from onnxaff.graph.patterns import gelu, hardswish, mish, rule, softsign, swish
from onnxaff.graph.patterns.rule import PROBE

FAR = 1.0e4
# The rule probes plus far points (bounds, saturation) and a few off-grid values near 0.
WIDE = np.unique(np.concatenate([PROBE, [-FAR, -200.0, -50.0, -20.0, -12.0, 12.0, 20.0, 50.0, 200.0, FAR],
                                 [-0.37, -0.013, 0.013, 0.37, 2.71, -2.71]]))


def close_to(g: np.ndarray, reference: np.ndarray) -> bool:
    """rule.close_to on the points where g is finite; the probes within ±50 must all be (exp(1e4) is not)."""
    ok = np.isfinite(g)
    if not ok[np.abs(WIDE) <= 50].all():
        return False
    return rule.close_to(g[ok], reference[ok])


def f32(v: float) -> float:
    """Parameters as the float32 the model stores: a fit and the attribute it came from compare equal."""
    return float(np.float32(v))


def _at(g: np.ndarray, x: float) -> float:
    return float(g[np.searchsorted(WIDE, x)])


def _fixed(kind, reference):
    expected = reference(WIDE)
    return lambda g, f: (kind, {}) if close_to(g, expected) else None


def _clip(g, f):
    lo, hi = _at(g, -FAR), _at(g, FAR)
    lo = None if lo < -FAR / 2 else lo
    hi = None if hi > FAR / 2 else hi
    if (lo is None and hi is None) or (lo is not None and hi is not None and lo >= hi):
        return None
    if not close_to(g, np.clip(WIDE, -np.inf if lo is None else lo, np.inf if hi is None else hi)):
        return None
    if lo == 0.0 and hi is None:
        return "relu", {}
    if lo == 0.0 and hi == 6.0:
        return "relu6", {}
    return "clip", {"min": None if lo is None else f32(lo), "max": None if hi is None else f32(hi)}


def _leaky(g, f):
    alpha = -_at(g, -1.0)
    if alpha in (0.0, 1.0) or not close_to(g, np.where(WIDE < 0, alpha * WIDE, WIDE)):
        return None
    return "leaky_relu", {"alpha": f32(alpha)}


def _thresholded(g, f):
    zero, ident = np.isclose(g, 0.0, atol=0), np.isclose(g, WIDE, rtol=1e-7, atol=0) & (WIDE != 0)
    if not np.all(zero | ident) or not zero.any() or not ident.any():
        return None
    lo, hi = WIDE[zero & (WIDE != 0)].max(initial=-np.inf), WIDE[ident].min()
    if not WIDE[zero].max() < hi or not np.isfinite(lo):
        return None
    lo = max(lo, WIDE[zero].max())
    for _ in range(80):  # the jump from 0 to x: y = x where x > alpha
        mid = 0.5 * (lo + hi)
        v = float(f(np.array([mid]))[0])
        if v == mid and mid != 0:
            hi = mid
        else:
            lo = mid
    return "thresholded_relu", {"alpha": f32(hi)}


def _selu_elu(g, f):
    gamma = _at(g, 1.0)
    if gamma <= 0:
        return None
    alpha = _at(g, -1.0) / (gamma * np.expm1(-1.0))
    if alpha <= 0 or not close_to(g, gamma * np.where(WIDE > 0, WIDE, alpha * np.expm1(np.minimum(WIDE, 0.0)))):
        return None
    if f32(gamma) == 1.0:
        return "elu", {"alpha": f32(alpha)}
    return "selu", {"alpha": f32(alpha), "gamma": f32(gamma)}


def _celu(g, f):
    alpha = -_at(g, -FAR)
    if not 0 < alpha < FAR / 20:
        return None
    if not close_to(g, np.where(WIDE > 0, WIDE, alpha * np.expm1(np.minimum(WIDE, 0.0) / alpha))):
        return None
    return "celu", {"alpha": f32(alpha)}


def _hard_sigmoid(g, f):
    inner = np.flatnonzero((g > 1e-9) & (g < 1 - 1e-9))
    if len(inner) < 2 or _at(g, -FAR) != 0.0 or _at(g, FAR) != 1.0:
        return None
    (x1, x2), (y1, y2) = WIDE[inner[[0, -1]]], g[inner[[0, -1]]]
    alpha = (y2 - y1) / (x2 - x1)
    beta = y1 - alpha * x1
    if alpha <= 0 or not close_to(g, np.clip(alpha * WIDE + beta, 0.0, 1.0)):
        return None
    return "hard_sigmoid", {"alpha": f32(alpha), "beta": f32(beta)}


def _swish(g, f):
    params = swish._classify(f)
    if params is None:
        return None
    if abs(params["beta"] - 1.0) <= 1e-4:
        return "silu", {}
    if abs(params["beta"] - swish.QUICK_GELU_BETA) <= 1e-4:
        return "quick_gelu", {}
    return "swish", params


NAMED: list[Callable] = [
    _clip, _leaky, _thresholded, _selu_elu, _celu, _hard_sigmoid,
    _fixed("sigmoid", special.expit), _fixed("tanh", np.tanh),
    _fixed("softplus", lambda x: np.logaddexp(0.0, x)), _fixed("softsign", softsign.softsign),
    _fixed("gelu", gelu.gelu_erf), _fixed("gelu_tanh", gelu.gelu_tanh), _fixed("mish", mish.mish),
    _fixed("hardswish", hardswish.hardswish), _swish,
]


def is_affine(g: np.ndarray) -> bool:
    """g = a + b·x on WIDE (per column), to float rounding: a scale or shift is no non-linearity."""
    g = np.atleast_2d(g.T).T
    ok = np.all(np.isfinite(g), axis=1)
    if ok.sum() < 3:
        return False
    x = WIDE[ok]
    a = np.stack([np.ones_like(x), x], axis=1)
    coef, *_ = np.linalg.lstsq(a, g[ok], rcond=None)
    resid = np.abs(a @ coef - g[ok])
    return bool(np.all(resid <= 1e-9 * (1.0 + np.abs(g[ok]) + FAR * np.abs(coef[1]))))


def identify(g: np.ndarray, f: Callable[[np.ndarray], np.ndarray]) -> tuple[str, dict] | None:
    """(kind, params) of the named function g = f(WIDE) is, or None."""
    with np.errstate(all="ignore"):
        for entry in NAMED:
            hit = entry(g, f)
            if hit is not None:
                return hit
    return None


def identify_columns(g: np.ndarray, slope_shape: tuple) -> tuple[str, dict] | None:
    """An island with per-position constants: PReLU when each position is a leaky ReLU of its own slope."""
    slopes = -g[np.searchsorted(WIDE, -1.0)]
    if not close_to(g, np.where(WIDE[:, None] < 0, slopes[None, :] * WIDE[:, None], WIDE[:, None])):
        return None
    return "prelu", {"slope": np.float32(slopes).astype(np.float64).reshape(slope_shape).tolist()}

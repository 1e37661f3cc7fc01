"""scipy.special's erf, expit and logit, imported on first use.

Discovery evaluates them only when a graph has a candidate pattern or constant island that needs them;
importing scipy.special up front cost every command 0.1 s, most models (ReLU networks) never call them.
"""

from __future__ import annotations


def erf(x):
    from scipy.special import erf as f

    return f(x)


def expit(x):
    from scipy.special import expit as f

    return f(x)


def logit(x):
    from scipy.special import logit as f

    return f(x)

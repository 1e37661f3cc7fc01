"""The figures of the reports, as inline PNG data URIs (matplotlib, no display needed)."""

from __future__ import annotations

import base64
import functools
import io
import warnings

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from scipy.cluster import hierarchy  # noqa: E402

from onnxaff.text import printable  # noqa: E402

# Names are text: `$x\y$` must not go through mathtext (it raised) nor LaTeX, whatever the user's matplotlibrc says.
_PLAIN_TEXT = {"text.parse_math": False, "text.usetex": False}


def _plain_text(plot):
    """Draw inside an rc context where every label is literal text (only this figure, not the caller's pyplot).

    A name in letters the plot font lacks shows as boxes in the figure (the tables beside it have it right):
    matplotlib's warning per missing glyph, per figure, would bury the command's one line of output.
    """
    @functools.wraps(plot)
    def wrapper(*args, **kwargs):
        with plt.rc_context(_PLAIN_TEXT), warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=r"Glyph \d+ .*missing from", category=UserWarning)
            return plot(*args, **kwargs)
    return wrapper


def _uri(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


@_plain_text
def signatures(named: dict[str, list[float]], metric: str, flagged: dict[str, list[bool]] | None = None) -> str:
    """Signatures along normalised depth; scores with flags (docs/statistics.md) drawn hollow."""
    metric = printable(metric)
    fig, ax = plt.subplots(figsize=(8, 4))
    styles = ("-", "--", ":", "-.")  # past ten models the colour cycle repeats: the line style tells them apart
    for k, (name, values) in enumerate(named.items()):
        depth = np.linspace(0, 1, len(values)) if len(values) > 1 else [0.0]
        line, = ax.plot(depth, values, marker="o", markersize=3, label=printable(name),
                        linestyle=styles[(k // 10) % len(styles)])
        hollow = [i for i, f in enumerate((flagged or {}).get(name, [])) if f and i < len(values)]
        if hollow:
            ax.plot(np.asarray(depth)[hollow], np.asarray(values)[hollow], "o", markersize=6, mfc="white",
                    color=line.get_color())
    if flagged and any(any(f) for f in flagged.values()):
        ax.plot([], [], "o", mfc="white", color="grey", label="flagged score")
    ax.set_xlabel("normalised depth (site index / last)")
    ax.set_ylabel(metric)
    ax.set_title(f"non-linearity signatures ({metric})")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    return _uri(fig)


@_plain_text
def signature_detail(name: str, entries: list[dict], metric: str) -> str:
    """One model's signature with ci95 error bars; flagged scores hollow (docs/statistics.md)."""
    name, metric = printable(name), printable(metric)
    fig, ax = plt.subplots(figsize=(8, 4))
    n = len(entries)
    depth = np.linspace(0, 1, n) if n > 1 else np.zeros(1)
    mean = np.array([e["mean"] for e in entries])
    ax.plot(depth, mean, color="C0", lw=1, label=name)
    for x, e in zip(depth, entries, strict=True):
        if e.get("ci95"):
            ax.errorbar(x, e["mean"], yerr=[[e["mean"] - e["ci95"][0]], [e["ci95"][1] - e["mean"]]], color="C0",
                        capsize=2, lw=0.8)
        ax.plot(x, e["mean"], "o", markersize=5, color="C0", mfc="white" if e.get("flags") else "C0")
    ax.plot([], [], "o", color="C0", mfc="white", label="flagged (see the flags column)")
    ax.set_xlabel("normalised depth (site index / last)")
    ax.set_ylabel(metric)
    ax.set_title(f"non-linearity signature ({metric}), 95 % intervals over chunks")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    return _uri(fig)


@_plain_text
def histograms(named: dict[str, list[float]], metric: str) -> str:
    n = len(named)
    cols = min(n, 4)
    rows = int(np.ceil(n / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.4 * rows), squeeze=False)
    for ax, (name, values) in zip(axes.ravel(), named.items(), strict=False):
        ax.hist(values, bins=20, range=(min(0.0, min(values)), max(1.0, max(values))), color="#4c72b0")
        ax.set_title(printable(name), fontsize=9)
        ax.set_xlabel(printable(metric), fontsize=8)
    for ax in axes.ravel()[n:]:
        ax.axis("off")
    fig.tight_layout()
    return _uri(fig)


@_plain_text
def heatmap(names: list[str], distances: np.ndarray, order: list[int], title: str) -> str:
    d = distances[np.ix_(order, order)]
    labels = [printable(names[i]) for i in order]
    fig, ax = plt.subplots(figsize=(1.0 + 0.5 * len(names), 0.8 + 0.5 * len(names)))
    im = ax.imshow(d, cmap="viridis")
    ax.set_xticks(range(len(labels)), labels, rotation=90, fontsize=8)
    ax.set_yticks(range(len(labels)), labels, fontsize=8)
    fig.colorbar(im, ax=ax, fraction=0.046)
    ax.set_title(title, fontsize=9)
    return _uri(fig)


@_plain_text
def dendrogram(names: list[str], linkage) -> str:
    fig, ax = plt.subplots(figsize=(max(4, 0.6 * len(names)), 3))
    hierarchy.dendrogram(linkage, labels=[printable(n) for n in names], ax=ax, leaf_rotation=90)
    ax.set_ylabel("DTW distance")
    ax.set_title("hierarchical clustering of signatures", fontsize=9)
    return _uri(fig)


@_plain_text
def scatter(x: list[float], y: list[float], labels: list[str], xlabel: str, fit: dict,
            hollow: list[bool] | None = None) -> str:
    """Accuracy against a statistic; models whose statistic includes flagged scores drawn hollow."""
    fig, ax = plt.subplots(figsize=(4, 3))
    hollow = hollow or [False] * len(x)
    solid = [i for i, h in enumerate(hollow) if not h]
    empty = [i for i, h in enumerate(hollow) if h]
    ax.scatter(np.asarray(x)[solid], np.asarray(y)[solid], color="C0")
    if empty:
        ax.scatter(np.asarray(x)[empty], np.asarray(y)[empty], facecolors="white", edgecolors="C0",
                   label="flagged scores")
    for xi, yi, lab in zip(x, y, labels, strict=True):
        ax.annotate(printable(lab), (xi, yi), fontsize=7, xytext=(3, 3), textcoords="offset points")
    if np.isfinite(fit.get("slope", np.nan)):
        xs = np.linspace(min(x), max(x), 10)
        ax.plot(xs, fit["slope"] * xs + fit["intercept"], color="C3", label=f"R² = {fit['r2']:.3f}")
    if empty or np.isfinite(fit.get("slope", np.nan)):
        ax.legend(fontsize=8)
    ax.set_xlabel(printable(xlabel), fontsize=8)
    ax.set_ylabel("accuracy", fontsize=8)
    return _uri(fig)

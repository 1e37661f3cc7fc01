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

from onnxaff.foundations.text import label  # noqa: E402

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
def histograms(named: dict[str, list[float]], metric: str) -> str:
    n = len(named)
    cols = min(n, 4)
    rows = int(np.ceil(n / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.4 * rows), squeeze=False)
    for ax, (name, values) in zip(axes.ravel(), named.items(), strict=False):
        ax.hist(values, bins=20, range=(min(0.0, min(values)), max(1.0, max(values))), color="#4c72b0")
        ax.set_title(label(name), fontsize=9)
        ax.set_xlabel(label(metric), fontsize=8)
    for ax in axes.ravel()[n:]:
        ax.axis("off")
    fig.tight_layout()
    return _uri(fig)


@_plain_text
def heatmap(names: list[str], distances: np.ndarray, order: list[int], title: str) -> str:
    d = distances[np.ix_(order, order)]
    labels = [label(names[i]) for i in order]
    fig, ax = plt.subplots(figsize=(1.0 + 0.5 * len(names), 0.8 + 0.5 * len(names)))
    im = ax.imshow(d, cmap="viridis")
    ax.set_xticks(range(len(labels)), labels, rotation=90, fontsize=8)
    ax.set_yticks(range(len(labels)), labels, fontsize=8)
    fig.colorbar(im, ax=ax, fraction=0.046)
    ax.set_title(label(title, 160), fontsize=9)
    return _uri(fig)


CLUSTER_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#bcbd22",
                   "#17becf", "#7f7f7f")


def cluster_colour(cluster: int) -> str:
    return CLUSTER_COLOURS[(cluster - 1) % len(CLUSTER_COLOURS)]


@_plain_text
def dendrogram(names: list[str], linkage, clusters: dict[str, int] | None = None) -> str:
    """The tree, each link coloured by the cluster of the cut (the cluster table's) when all its leaves
    share one, grey above the cut; leaf labels (printable) in their cluster's colour."""
    fig, ax = plt.subplots(figsize=(max(4, 0.6 * len(names)), 3))
    n = len(names)
    kwargs = {}
    if clusters is not None:
        leaves: dict[int, list[int]] = {i: [i] for i in range(n)}
        for k, row in enumerate(linkage):
            leaves[n + k] = leaves[int(row[0])] + leaves[int(row[1])]

        def link_colour(node: int) -> str:
            found = {clusters[names[i]] for i in leaves[node]}
            return cluster_colour(found.pop()) if len(found) == 1 else "#999999"

        kwargs["link_color_func"] = link_colour
    with warnings.catch_warnings():  # every distance 0 (the same model twice): scipy warns of a flat y range
        warnings.filterwarnings("ignore", "Attempting to set identical low and high ylims")
        tree = hierarchy.dendrogram(linkage, labels=[label(name) for name in names], ax=ax, leaf_rotation=90,
                                    **kwargs)
    if not np.asarray(linkage)[:, 2].any():
        ax.set_ylim(0, 1)
    if clusters is not None:  # by leaf index, not label text: two names may print alike
        for tick, leaf in zip(ax.get_xticklabels(), tree["leaves"], strict=True):
            tick.set_color(cluster_colour(clusters[names[leaf]]))
    ax.set_ylabel("DTW distance")
    ax.set_title("hierarchical clustering of signatures (coloured by the cut)", fontsize=9)
    return _uri(fig)

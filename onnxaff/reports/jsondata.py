"""The JSON form of comparisons, written alike by `compare --format json` and the study's compare.json."""

from __future__ import annotations


def comparison_metrics(comps, clusters: int) -> dict:
    """Per metric: the DTW matrix, the dendrogram order, the cut into `clusters` and each model's neighbours."""
    return {c.metric: {"dtw": c.distances.tolist(), "order": c.order, "clusters": c.clusters(clusters),
                       "neighbours": c.neighbours()} for c in comps}

"""Markdown pieces of `compare --format md` beside the DTW matrices: each metric's signature statistics."""

from __future__ import annotations

from onnxaff.signature import signature_stats
from onnxaff.text import md_cell, md_table

STAT_COLUMNS = [("sites", "sites"), ("mean", "mean"), ("median", "median"), ("min", "min"), ("max", "max"),
                ("std", "std"), ("max_over_mean", "max/mean")]


def _num(v) -> str:
    if v is None:
        return "–"
    return str(v) if isinstance(v, int) else f"{v:.4f}"


def statistics_table(sigs, comp) -> list[str]:
    """Lines of one metric's statistics table: a row per model, the near-linear share where the metric
    defines one (by its declared direction and range). Every cell, names first, goes through md_cell."""
    stats = [signature_stats(s.scores(comp.metric), s.metrics.get(comp.metric)) for s in sigs]
    near = any("near_linear" in st for st in stats)
    header = ["model", *[h for _, h in STAT_COLUMNS], *(["near-linear"] if near else [])]
    rows = []
    for name, st in zip(comp.names, stats, strict=True):
        cells = [name, *[_num(st.get(k)) for k, _ in STAT_COLUMNS]]
        if near:
            nl = st.get("near_linear")
            cells.append(f"{100 * nl['share']:.0f}% ({nl['rule']})" if nl else "–")
        rows.append(cells)
    return [f"**{md_cell(comp.metric)}: signature statistics**", "", *md_table(header, rows), ""]

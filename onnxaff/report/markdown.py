"""Markdown pieces of `compare --format md` beside the DTW matrices: each metric's signature statistics."""

from __future__ import annotations

from onnxaff.signature import signature_stats

STAT_COLUMNS = [("sites", "sites"), ("mean", "mean"), ("median", "median"), ("min", "min"), ("max", "max"),
                ("std", "std"), ("max_over_mean", "max/mean")]


def _cell(text) -> str:
    """A table cell: pipes and line breaks would end the cell or the row."""
    return str(text).replace("\\", "\\\\").replace("|", "\\|").replace("\r", " ").replace("\n", " ")


def _num(v) -> str:
    if v is None:
        return "–"
    return str(v) if isinstance(v, int) else f"{v:.4f}"


def statistics_table(sigs, comp) -> list[str]:
    """Lines of one metric's statistics table: a row per model, the near-linear share where the metric
    defines one (by its declared direction and range)."""
    stats = [signature_stats(s.scores(comp.metric), s.metrics.get(comp.metric)) for s in sigs]
    near = any("near_linear" in st for st in stats)
    header = ["model", *[h for _, h in STAT_COLUMNS], *(["near-linear"] if near else [])]
    lines = [f"**{_cell(comp.metric)}: signature statistics**", "", "| " + " | ".join(header) + " |",
             "|" + "---|" * len(header)]
    for name, st in zip(comp.names, stats, strict=True):
        cells = [_cell(name), *[_num(st.get(k)) for k, _ in STAT_COLUMNS]]
        if near:
            nl = st.get("near_linear")
            cells.append(f"{100 * nl['share']:.0f}% ({_cell(nl['rule'])})" if nl else "–")
        lines.append("| " + " | ".join(cells) + " |")
    return [*lines, ""]

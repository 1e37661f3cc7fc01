"""Markdown renderings of comparisons and correlations (GFM tables; every name through md_cell)."""

from __future__ import annotations

from onnxaff.format.signature import DAGGER, DAGGER_NOTE, signature_stats
from onnxaff.format.tables import flagged_share
from onnxaff.foundations.text import md_cell, md_table
from onnxaff.reports.csv import correlation_rows
from onnxaff.results.differences import differences, differences_line, line_of

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
    header = ["model", *[h for _, h in STAT_COLUMNS], *(["near-linear"] if near else []), "flagged sites"]
    rows, marked = [], False
    for name, sig, st in zip(comp.names, sigs, stats, strict=True):
        mark = DAGGER if sig.mostly_flagged(comp.metric) else ""
        marked = marked or bool(mark)
        cells = [name, *[_num(st.get(k)) + (mark if k != "sites" else "") for k, _ in STAT_COLUMNS]]
        if near:
            nl = st.get("near_linear")
            cells.append(f"{100 * nl['share']:.0f}%{mark} ({nl['rule']})" if nl else "–")
        rows.append([*cells, flagged_share(sig.flag_summary(comp.metric))])
    return [f"**{md_cell(comp.metric)}: signature statistics**", "", *md_table(header, rows), "",
            *([md_cell(DAGGER_NOTE), ""] if marked else [])]


def comparison_markdown(comps, sigs=None) -> str:
    """A DTW table per metric, each followed by its signature statistics table when `sigs` are given."""
    lines = []
    if sigs is not None:
        line = differences_line(differences(sigs, [c.metric for c in comps]), comps[0].names)
        lines += [f"> **warning**: {md_cell(line)}", ""] if line else []
    for c in comps:
        lines += [f"### {md_cell(c.metric)}", "",
                  *md_table(["model", *c.names], [[n, *c.distances[i]] for i, n in enumerate(c.names)]), ""]
        if sigs is not None:
            lines += statistics_table(sigs, c)
    return "\n".join(lines) + "\n"


def flagged_sites(row: dict) -> str:
    """'k of n': a model's scores behind its signature statistics, and how many of them carry flags."""
    return f"{row.get('flagged', 0)} of {row.get('scored', 0)}"


def correlation_markdown(result: dict) -> str:
    """The correlation table, then the models with their accuracy, group and flagged scores."""
    header, rows = correlation_rows(result)
    title = f"### correlation with accuracy: {md_cell(result['metric'])}"
    models = [[r["model"], r["accuracy"], r["group"], flagged_sites(r)] for r in result["rows"]]
    warn = [f"> **warning**: {md_cell(w)}" for w in [*result.get("warnings", ()), line_of(result.get("differences"))]
            if w]
    notes = [f"p: {md_cell(result.get('p_method', ''))}, two-sided; {md_cell(result.get('interval_method', ''))}."]
    return "\n".join([title, "", *[x for w in warn for x in (w, "")], *md_table(header, rows), "", *notes, "",
                      "#### models (flags: docs/statistics.md)", "",
                      *md_table(["model", "accuracy", "group", "flagged sites"], models)]) + "\n"


def plain_table(header: list[str], rows: list[list[str]]) -> str:
    """A GFM table of cells the caller formatted itself (trusted text, written as given: `0.548*` stays)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows]) + "\n"

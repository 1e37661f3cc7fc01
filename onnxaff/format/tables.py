"""A signature as a table: one row per site, one column per metric statistic (pandas, or HTML in notebooks); the
plain table helpers the comparison's and the study's notebook views use too."""

from __future__ import annotations

import html
import math

from onnxaff.format.siteentry import ScoreEntry
from onnxaff.foundations.text import printable

STATISTICS = ("mean", "std", "chunks", "partial", "status")
NO_ENTRY = ScoreEntry(present=())  # a metric a site has no entry for: no field at all


def flagged_share(flags: dict) -> str:
    """`34 of 35 (97 %)` from Signature.flag_summary: the scores with flags among those scored."""
    k, n = flags["flagged"], flags["scored"]
    return f"{k} of {n} ({100 * k / n:.0f} %)" if n else "0 of 0"


def site_rows(sig) -> list[dict]:
    """Plain dicts (no pandas needed): the site's fields, then `METRIC.STAT` for every metric and statistic
    a site entry carries (mean, std over chunks, chunk count, partial flag, and a status where it failed), and
    always `METRIC.ci95_low`, `METRIC.ci95_high` (None without an interval) and `METRIC.flags` (the flags
    comma-separated, "" when none; None where the entry has no number)."""
    rows = []
    for s in sig.sites:
        row = {"index": s.index, "id": s.id, "kind": s.kind, "group": s.group, "status": s.status, "dim": s.dim,
               "rows": s.rows, "chunks": s.chunks, "op_types": "+".join(s.op_types)}
        for name in sig.metrics:
            entry = s.metrics.get(name) or NO_ENTRY
            for stat in STATISTICS:
                if stat in entry or stat in ("mean", "std"):  # the columns an entry has (a file may leave some out)
                    row[f"{name}.{stat}"] = getattr(entry, stat)
            lo, hi = entry.ci95 or (None, None)
            row[f"{name}.ci95_low"], row[f"{name}.ci95_high"] = lo, hi
            row[f"{name}.flags"] = ", ".join(entry.flags) if entry.mean is not None else None
        rows.append(row)
    return rows


def to_pandas(sig):
    """A pandas DataFrame indexed by site index; pandas is optional (`pip install pandas`)."""
    return frame(site_rows(sig), "index", "Signature")


def frame(rows: list[dict], index: str, what: str):
    """A DataFrame of plain rows (every row's keys as columns, first-seen order) indexed by `index`; without
    pandas, one line saying so (`what`.to_pandas needs it)."""
    try:
        import pandas as pd
    except ImportError:
        from onnxaff.errors import OnnxaffError

        raise OnnxaffError(f"{what}.to_pandas needs pandas: pip install pandas") from None
    columns = list(dict.fromkeys([index, *(k for r in rows for k in r)]))
    return pd.DataFrame(rows, columns=columns).set_index(index)


def html_table(header: list[str], rows: list[list]) -> str:
    """The notebook view of a table: escaped cells, numbers right-aligned, text left-aligned."""
    def td(k, v):
        return f"<td style='text-align:{'right' if isinstance(v, int | float) else 'left'}'>{_cell(v)}</td>"

    return ("<table><thead><tr>" + "".join(f"<th>{_esc(h)}</th>" for h in header) + "</tr></thead><tbody>"
            + "".join("<tr>" + "".join(td(k, v) for k, v in enumerate(r)) + "</tr>" for r in rows)
            + "</tbody></table>")


def _cell(v) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "–"
    if isinstance(v, float):
        return f"{v:.4f}"
    return _esc(v)


def _esc(v) -> str:
    """A name as HTML text: printable (no control characters, lone surrogates) and escaped."""
    return html.escape(printable(v))


def to_html(sig, max_rows: int = 200) -> str:
    """The notebook view: the model line, then the per-site table (escaped; numbers right-aligned)."""
    rows = site_rows(sig)
    metrics = list(sig.metrics)
    head = ["#", "site", "kind", "status", "D", *[h for m in metrics for h in (f"{m} mean±ci95", f"{m} flags")]]
    out = [f"<p><b>{_esc(sig.model.get('name', 'model'))}</b>: {len(sig.sites)} sites, "
           f"{_esc(sig.data.get('samples', '?'))} samples from "
           f"{_esc(sig.data.get('source', '?'))}</p>",
           "<table><thead><tr>" + "".join(f"<th>{_esc(h)}</th>" for h in head) + "</tr></thead><tbody>"]
    for r in rows[:max_rows]:
        cells = [f"<td style='text-align:right'>{_cell(r['index'])}</td>",
                 *(f"<td style='text-align:left'>{_cell(r[c])}</td>" for c in ("id", "kind", "status")),
                 f"<td style='text-align:right'>{_cell(r['dim'])}</td>"]
        for m in metrics:
            mean, lo, hi = r.get(f"{m}.mean"), r.get(f"{m}.ci95_low"), r.get(f"{m}.ci95_high")
            half = None if mean is None or lo is None or hi is None else max(hi - mean, mean - lo)
            text = _cell(mean) if half is None else f"{_cell(mean)}±{_cell(half)}"
            cells.append(f"<td style='text-align:right'>{text}</td>")
            cells.append(f"<td style='text-align:left'>{_esc(r.get(f'{m}.flags') or '')}</td>")
        out.append("<tr>" + "".join(cells) + "</tr>")
    out.append("</tbody></table>")
    out.append("<p>± half-width of the 95 % interval over chunks (clipped: the longer side); flags: "
               "docs/statistics.md</p>")
    marked = [m for m in metrics if sig.mostly_flagged(m)]
    if marked:
        out.append("<p><b>Most scores carry flags</b>: " + _esc("; ".join(
            f"{m} {flagged_share(sig.flag_summary(m))}" for m in marked)) + "</p>")
    if len(rows) > max_rows:
        out.append(f"<p>… {len(rows) - max_rows} more sites (Signature.to_pandas() has them all)</p>")
    return "\n".join(out)

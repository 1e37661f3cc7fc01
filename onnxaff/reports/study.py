"""The study's page: its models, the failures, then the comparison and the correlation with accuracy."""

from __future__ import annotations

from onnxaff.format.signature import Signature
from onnxaff.reports.console import ROW_KEYS
from onnxaff.reports.html import _comparison_body, _correlation_body, _page, _table, networks_table
from onnxaff.results.comparison import Comparison


def study_page(sigs: list[Signature], comps: list[Comparison], corr: dict | None, rows: list[dict], metric: str,
               failed: dict[str, str], clusters: int = 3) -> str:
    """Every model's statistics of `metric`, the models that failed and why, signatures, DTW, clustering."""
    extra = [k for k in (rows[0] if rows else {}) if k not in ROW_KEYS]
    keys = ["model", *extra, *_KEYS[1:]]
    header = [*keys[:-3], f"{metric} mean", f"{metric} min", "share > 0.95"]
    same = " on the same data" if not any(d.field == "data" for c in comps[:1] for d in c.differences) else ""
    parts = [f"<p>{len(sigs)} models analysed{same}"
             + (f"; {len(failed)} failed (below)" if failed else "") + ".</p>",
             "<h2>Networks</h2>", networks_table(header, keys, rows, left=1 + len(extra))]
    if failed:
        parts.append("<h2>Failed</h2>" + _table(["model", "reason"], [[k, v] for k, v in failed.items()], left=2))
    if comps:
        parts.append(_comparison_body(sigs, comps, k_clusters=clusters))
    elif len(sigs) < 2:
        parts.append("<p class='note'>Fewer than two signatures: nothing to compare.</p>")
    if corr is not None:
        parts.append("<h2>Correlation with accuracy</h2>" + _correlation_body(corr, level=3))
    return _page("onnxaff study", "".join(parts))


_KEYS = ["model", "sites", "accuracy", "mean", "min", "share_above_0.95"]

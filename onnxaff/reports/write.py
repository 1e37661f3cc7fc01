"""Writing a report file in the format its name asks for, atomically: the command line and the Python API
(onnxaff.report) write the same files through these."""

from __future__ import annotations

import os
from pathlib import Path

from onnxaff.format.signature import Signature, write_json_atomic
from onnxaff.foundations.files import write_text_atomic
from onnxaff.foundations.text import did_you_mean

COMPARISON_FORMATS = {".md": "md", ".csv": "csv", ".json": "json"}  # any other suffix: html


def comparison_format(out: str | os.PathLike) -> str:
    return COMPARISON_FORMATS.get(os.path.splitext(str(out))[1], "html")


def write_comparison(out: str | os.PathLike, sigs: list[Signature], comps: list, clusters: int, diffs: list,
                     fmt: str | None = None) -> Path:
    """The comparisons `comps` (one per metric) of `sigs` as HTML, Markdown, CSV or JSON (`fmt`, default: from the
    suffix of `out`); `diffs`: the options that change the numbers and differ between the signatures."""
    fmt = fmt or comparison_format(out)
    if fmt == "json":
        from onnxaff.reports.jsondata import comparison_metrics

        return write_json_atomic(out, {"normalized": comps[0].normalized, "models": comps[0].names,
                                       "metrics": comparison_metrics(comps, clusters),
                                       "differences": [d.as_dict(comps[0].names) for d in diffs]})
    if fmt == "html":
        from onnxaff.reports.html import comparison_page

        return write_text_atomic(out, comparison_page(sigs, comps, clusters))
    if fmt == "csv":
        from onnxaff.reports.csv import comparison_csv

        return write_text_atomic(out, comparison_csv(comps))
    from onnxaff.reports.markdown import comparison_markdown

    return write_text_atomic(out, comparison_markdown(comps, sigs))


def write_correlation(out: str | os.PathLike, result: dict) -> Path:
    """A correlation with accuracy (onnxaff.results.comparison.correlate) as .json, .csv, .md or else HTML."""
    suffix = os.path.splitext(str(out))[1]
    if suffix == ".json":
        return write_json_atomic(out, dict(result))
    if suffix == ".csv":
        from onnxaff.reports.csv import correlation_csv

        return write_text_atomic(out, correlation_csv(result))
    if suffix == ".md":
        from onnxaff.reports.markdown import correlation_markdown

        return write_text_atomic(out, correlation_markdown(result))
    from onnxaff.reports.html import correlation_page

    return write_text_atomic(out, correlation_page(result))


def write_single(out: str | os.PathLike, sig: Signature, metric: str) -> Path:
    """One model's page (HTML), for a metric the signature has scores of (else a one-line error listing them)."""
    from onnxaff.errors import ConfigError
    from onnxaff.reports.html import single_page

    scored = [m for m in sig.metrics if any(v is not None for v in sig.scores(m))]
    if metric not in scored:
        raise ConfigError("metric", f"{{option}} {metric!r}: the signature has no {metric} scores; it has: "
                          f"{', '.join(scored) or 'none'}" + did_you_mean(metric, scored))
    return write_text_atomic(out, single_page(sig, metric))

"""CSV renderings (RFC 4180, numbers kept as numbers, names as text) of comparisons and correlations."""

from __future__ import annotations

from onnxaff.foundations.text import csv_text

CORRELATION_COLUMNS = ["r2", "pearson_r", "r_ci95_low", "r_ci95_high", "p_value", "p_method", "slope", "intercept",
                       "models", "flagged_models"]


def _cell(v: dict, key: str):
    ci = v.get("r_ci95") or [None, None]
    return {"r_ci95_low": ci[0], "r_ci95_high": ci[1]}.get(key, v.get(key))


def correlation_rows(result: dict) -> tuple[list[str], list[list]]:
    """correlate's table as a header and one row per group and statistic (the CSV and Markdown share it): R², r
    with its bootstrap interval, the permutation p-value and how it was computed (exact or monte_carlo)."""
    rows = [[group, feat, *[_cell(v, k) for k in CORRELATION_COLUMNS]]
            for group, table in result["table"].items() for feat, v in table.items()]
    return ["group", "statistic", *CORRELATION_COLUMNS], rows


def correlation_csv(result: dict) -> str:
    header, rows = correlation_rows(result)
    return csv_text([header, *rows])


def comparison_csv(comps) -> str:
    """The DTW matrices: one row per metric and model."""
    return csv_text([["metric", "model", *comps[0].names],
                     *[[c.metric, n, *c.distances[i]] for c in comps for i, n in enumerate(c.names)]])


def records_csv(records: list[dict]) -> str:
    """One row per record under a header of the first record's keys (the examples' tables of every number)."""
    keys = list(records[0])
    return csv_text([keys, *[[r[k] for k in keys] for r in records]])

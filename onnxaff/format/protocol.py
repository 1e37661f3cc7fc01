"""A signature's protocol: how its rows were made and scored, derived from its recorded options (never stored apart).

Whether a score means something depends less on the formula than on the protocol: rows per chunk (the
finite-sample bias, docs/statistics.md), rows per example (the reduction), each metric's estimator and the
interval method. `protocol_of` reads them off a signature's `options` and `metrics`, so a signature written
before the record existed gets the same protocol as a new one; `compare` and the reports name it.
"""

from __future__ import annotations

import json

# Named protocols: the options each sets (AnalysisConfig's `protocol`); its metrics are those declaring the name in
# `protocols` (onnxaff.metrics.Metric), with their default parameters. width: the defaults (onnxaff.defaults), rows
# that follow each site's width; paper: Bouniot et al.'s protocol.
NAMED = {"width": {"chunk_size": "4d", "reduce": "sample:16"}, "paper": {"chunk_size": 512, "reduce": "mean"}}
CUSTOM = "custom"  # the name of a protocol no named one matches
SAMPLE = "sample:"  # onnxaff.graph.reduction's sample:K (not imported: the signature format knows no graph)
ROWS_PER_EXAMPLE = {
    "mean": "one row per example (the mean over positions)",
    "reference": "one row per example (the mean over the axes after the second, as the reference code)",
    "positions": "one row per position of each example",
    "flatten": "one row per example (every position's features flattened into one)",
}
INTERVALS = {"auto": "intervals over chunks (a site's only chunk: from its half-samples)",
             "chunks": "intervals over chunks", "half": "intervals from the first chunk's half-samples",
             "none": "no intervals"}


def rows_per_example(reduce) -> str:
    """The reduction in words: how many rows an example gives (a damaged file's value, whatever its JSON kind, is
    shown as it is)."""
    if not isinstance(reduce, str):
        return f"reduce={json.dumps(reduce)}"
    if reduce.startswith(SAMPLE):
        return f"{reduce[len(SAMPLE):]} positions per example (seeded samples of the activation's own rows)"
    return ROWS_PER_EXAMPLE.get(reduce, f"reduce={reduce}")


def rows_per_chunk(chunk_size) -> str:
    return f"{chunk_size:,} rows per chunk" if isinstance(chunk_size, int) else f"rows per chunk: {chunk_size}"


def name_of(options: dict) -> str:
    """The named protocol whose options these are (paper), else `custom`."""
    return next((name for name, sets in NAMED.items()
                 if all(options.get(k) == v for k, v in sets.items())), CUSTOM)


def estimators(metrics: dict) -> dict[str, str]:
    """Per metric, its estimator as the signature records it (`estimator`); where a file has none (written before
    it was recorded, or a metric declaring none), the metric's name says which estimator it is."""
    return {name: str((info if isinstance(info, dict) else {}).get("estimator") or f"as {name} defines it")
            for name, info in metrics.items()}


def protocol_of(options: dict, metrics: dict) -> dict:
    """The protocol record of a signature (its `protocol` field): name, rows per chunk and per example, each
    metric's estimator, the interval method, and `text`, the whole in one line."""
    name = name_of(options)
    chunk, per = rows_per_chunk(options.get("chunk_size")), rows_per_example(options.get("reduce"))
    intervals = str(options.get("intervals", "auto"))
    record = {"name": name, "chunk_size": options.get("chunk_size"), "reduce": options.get("reduce"),
              "rows_per_chunk": chunk, "rows_per_example": per, "estimators": estimators(metrics),
              "intervals": intervals}
    record["text"] = text(record)
    return record


def text(record: dict, metrics: list[str] | None = None) -> str:
    """`paper: 512 rows per chunk, one row per example (the mean over positions); affinity: plain ...`; the
    estimators of `metrics` only (default: all)."""
    ests = record["estimators"]
    shown = [m for m in (ests if metrics is None else metrics) if m in ests]
    parts = [f"{record['name']}: {record['rows_per_chunk']}, {record['rows_per_example']}"]
    parts += [f"{m}: {ests[m]}" for m in shown]
    if record["intervals"] != "auto":
        parts.append(INTERVALS.get(record["intervals"], f"intervals={record['intervals']}"))
    return "; ".join(parts)


def key(record: dict) -> str:
    """What two protocols must share for their scores to be compared (as text: a rule is JSON). Not the estimator:
    one metric's scores are compared, and its parameters are a difference of their own (onnxaff.results.differences); a
    file written before `estimator` was recorded has the same protocol as a new one."""
    return json.dumps([record["chunk_size"], record["reduce"], record["intervals"]], sort_keys=True, default=str)


def short(record: dict) -> str:
    """`paper (512 rows per chunk, reduce=mean)`: the protocol in a comparison's one line."""
    extra = "" if record["intervals"] == "auto" else f", intervals={record['intervals']}"
    return f"{record['name']} ({record['chunk_size']} rows per chunk, reduce={record['reduce']}{extra})"

"""Comparing signatures: DTW distances, hierarchical clustering, neighbours, correlation with accuracy."""

from __future__ import annotations

import csv
import dataclasses
import html
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from dtaidistance import dtw
from scipy.cluster import hierarchy
from scipy.spatial.distance import squareform

from onnxaff.errors import ConfigError, OnnxaffError
from onnxaff.format.signature import Signature, signature_stats
from onnxaff.foundations.text import did_you_mean, printable
from onnxaff.metrics import primary_metric
from onnxaff.metrics.loader import default_order
from onnxaff.results.differences import Difference, differences, differences_line, refuse

DTW_DESCRIPTION = ("DTW (dtaidistance, C implementation, float64): sqrt of the summed squared differences "
                   "along the optimal warping path, no window, no z-normalisation")


def _esc(v) -> str:
    return html.escape(printable(v))


def dtw_distance(a, b, normalized: bool = False) -> float:
    """DTW between two signatures of any lengths; normalized divides by the longer length's sqrt
    (so the value is an RMS difference along the path, comparable across depths)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.size == 0 or b.size == 0:
        raise OnnxaffError("cannot compare an empty signature")
    d = float(dtw.distance_fast(a, b, use_pruning=False))
    return d / math.sqrt(max(a.size, b.size)) if normalized else d


def distance_matrix(series: list[np.ndarray], normalized: bool = False) -> np.ndarray:
    n = len(series)
    m = np.zeros((n, n))
    for i in range(n):
        for j in range(i + 1, n):
            m[i, j] = m[j, i] = dtw_distance(series[i], series[j], normalized)
    return m


@dataclass
class Comparison:
    """DTW distances between signatures of one metric, their clustering, and what their options disagree on.

    `names` label the signatures (the rows and columns of `distances`); `order` is the dendrogram's leaf order
    (`linkage`: scipy's, None for two signatures); `signatures` are the ones compared (what a report draws).
    """

    names: list[str]
    metric: str
    distances: np.ndarray
    linkage: np.ndarray | None
    order: list[int]
    normalized: bool
    differences: list[Difference] = dataclasses.field(default_factory=list)  # options that change the numbers, unequal
    signatures: list[Signature] = dataclasses.field(default_factory=list, repr=False)

    def to_pandas(self):
        """The DTW distance matrix as a DataFrame, one row and one column per signature (needs pandas)."""
        from onnxaff.format.tables import frame

        return frame([{"model": n, **dict(zip(self.names, row, strict=True))}
                      for n, row in zip(self.names, self.distances.tolist(), strict=True)], "model", "Comparison")

    def _repr_html_(self) -> str:  # a notebook shows the matrix, each signature's nearest neighbour, the differences
        from onnxaff.format.tables import html_table

        kind = "length-normalised DTW" if self.normalized else "DTW"
        nearest = "; ".join(f"{n} → {nb[0][0]} ({nb[0][1]:.4f})" for n, nb in self.neighbours(1).items())
        parts = [f"<p><b>{kind} distances of {_esc(self.metric)}</b> between {len(self.names)} signatures. "
                 f"Nearest: {_esc(nearest)}</p>",
                 html_table(["", *self.names], [[n, *row] for n, row in zip(self.names, self.distances.tolist(),
                                                                             strict=True)])]
        line = differences_line(self.differences, self.names)
        if line:
            parts.append(f"<p><b>Warning</b>: {_esc(line)}</p>")
        return "\n".join(parts)

    def neighbours(self, k: int = 3) -> dict[str, list[tuple[str, float]]]:
        out = {}
        for i, name in enumerate(self.names):
            others = sorted((self.distances[i, j], self.names[j]) for j in range(len(self.names)) if j != i)
            out[name] = [(n, float(d)) for d, n in others[:k]]
        return out

    def clusters(self, k: int) -> dict[str, int]:
        if self.linkage is None:
            return dict.fromkeys(self.names, 1)
        labels = hierarchy.fcluster(self.linkage, t=k, criterion="maxclust")
        return {n: int(c) for n, c in zip(self.names, labels, strict=True)}


def _data_tag(sig: Signature) -> str:
    source = str(sig.data.get("source") or "?")
    return source if source.startswith("synthetic:") else (Path(source).name or source)


def run_labels(sigs: list[Signature]) -> list[str]:
    """What names each signature in tables, plots and files: its LABEL (`compare LABEL=PATH`), else the
    model name; runs of one model told apart by their data source (`name [val.npz]`), then by #k."""
    bases = [s.model.get("name") or s.model.get("sha256", "model")[:12] for s in sigs]
    explicit = [s.model.get("label") for s in sigs]
    given = [x for x in explicit if x]
    if len(set(given)) != len(given):
        raise OnnxaffError(f"label '{printable(next(x for x in given if given.count(x) > 1))}' is given twice")
    out = []
    for s, base, label in zip(sigs, bases, explicit, strict=True):
        if label:
            out.append(label)
        elif bases.count(base) > 1 or base in given:
            out.append(f"{base} [{_data_tag(s)}]")
        else:
            out.append(base)
    taken: set[str] = set(given)
    final = []
    for name, label in zip(out, explicit, strict=True):
        if label:
            final.append(name)
            continue
        unique, k = name, 1
        while unique in taken:
            k += 1
            unique = f"{name}#{k}"
        taken.add(unique)
        final.append(unique)
    return final


def label_signature(sig: Signature, label: str | None) -> Signature:
    """Name a signature for this comparison (not written back to its file)."""
    if label is not None:
        if not label.strip():
            raise OnnxaffError("an empty label: give LABEL=PATH with a non-empty LABEL")
        sig.model["label"] = label.strip()
    return sig


def compare(sigs: list[Signature], metric: str | None = None, normalized: bool = False,
            method: str = "average", strict: bool = False) -> Comparison:
    """DTW distances and clustering of `metric`'s signatures; `differences` lists the options that change the
    numbers and differ between them (onnxaff.results.differences), and `strict` refuses to compare such signatures."""
    if len(sigs) < 2:
        raise OnnxaffError("compare needs at least two signatures")
    metric = metric or default_metric(sigs)
    names = run_labels(sigs)
    diffs = differences(sigs, [metric])
    if strict:
        refuse(diffs, names)
    series = []
    for name, s in zip(names, sigs, strict=True):
        values = [v for v in s.scores(metric) if v is not None]
        if not values:
            raise OnnxaffError(f"signature of {name} has no {metric!r} scores")
        series.append(np.array(values))
    d = distance_matrix(series, normalized)
    linkage = hierarchy.linkage(squareform(d, checks=False), method=method) if len(sigs) > 2 else None
    order = list(hierarchy.leaves_list(linkage)) if linkage is not None else [0, 1]
    return Comparison(names, metric, d, linkage, [int(i) for i in order], normalized, diffs, list(sigs))


def shared_metrics(sigs: list[Signature]) -> list[str]:
    """Metrics with a score in every signature, in the first signature's order."""
    return [m for m in sigs[0].metrics if all(any(v is not None for v in s.scores(m)) for s in sigs)]


def default_metric(sigs: list[Signature]) -> str:
    """The metric compare, correlate and report show unless told: the first of the declared default metrics (in
    their declared order) that every signature has scores of, else the first metric they share (in the first
    signature's order); where they share none, the first default metric (the caller's check names what each has)."""
    shared = shared_metrics(sigs) if sigs else []
    if not shared:
        return primary_metric()
    return next(iter(default_order(shared)), shared[0])


def metrics_to_compare(sigs: list[Signature], metric: str) -> list[str]:
    """`metric`, or with "all" every metric each signature has scores of; a one-line error naming what they
    share when that is none, or not `metric`."""
    shared = shared_metrics(sigs)
    if metric == "all" and not shared:
        raise OnnxaffError(f"the signatures share no metric with scores ({scored_by_each(sigs)})")
    if metric != "all" and metric not in shared:
        raise ConfigError("metric", f"{{option}} {metric!r} is not scored in every signature; they share: "
                          f"{', '.join(shared) or 'none'} ({unscored(sigs, metric)})" + did_you_mean(metric, shared))
    return shared if metric == "all" else [metric]


def _scored(sig: Signature) -> list[str]:
    return [m for m in sig.metrics if any(v is not None for v in sig.scores(m))]


def scored_by_each(sigs: list[Signature]) -> str:
    """`a: affinity, cka; b: r2`: what each signature has scores of."""
    return "; ".join(f"{name} has {', '.join(_scored(s)) or 'no scores'}"
                     for s, name in zip(sigs, run_labels(sigs), strict=True))


def unscored(sigs: list[Signature], metric: str) -> str:
    """Which signatures have no `metric` score, and what each has instead: what an error must say, so that the
    user knows which run to redo (`b.json: no affinity scores (it has cka, r2)`)."""
    parts = []
    for s, name in zip(sigs, run_labels(sigs), strict=True):
        if metric not in _scored(s):
            parts.append(f"{name}: no {metric} scores (it has {', '.join(_scored(s)) or 'none'})")
    return "; ".join(parts)


# -- correlation with accuracy ----------------------------------------------------------------------

BASELINES = {"depth (sites)": ("stats", "depth_sites"), "depth (weighted layers)": ("stats", "depth_weighted_layers"),
             "parameters": ("stats", "parameters"), "GFLOPs": ("stats", "gflops")}


def read_table(path: str | Path, what: str) -> dict[str, str]:
    """A two-column CSV (model name or sha256, value); a header row and a UTF-8 byte order mark are allowed.

    A name listed twice is refused: which row was meant cannot be guessed (the last one used to win silently).
    """
    path = Path(path)
    if not path.exists():
        raise OnnxaffError(f"{what} file not found: {path}")
    if not path.is_file():  # a FIFO would be waited on forever
        raise OnnxaffError(f"{what} path is not a regular file: {path}")
    table, first = {}, {}
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            for number, row in enumerate(csv.reader(f, strict=True), 1):
                if len(row) >= 2 and row[0].strip() and not row[0].startswith("#"):
                    key = row[0].strip()
                    if key in first:
                        raise OnnxaffError(f"{path}: {what} file lists {key!r} twice (rows {first[key]} and {number})")
                    first[key], table[key] = number, row[1].strip()
    except UnicodeDecodeError as exc:
        raise OnnxaffError(f"{path}: {what} file is not UTF-8 text: {exc.reason} at byte {exc.start}") from None
    except csv.Error as exc:
        raise OnnxaffError(f"{path}: {what} file is not a readable CSV: {exc}") from None
    except OSError as exc:
        raise OnnxaffError(f"cannot read {path}: {exc.strerror or exc}") from None
    return table


def accuracy_value(name: str, text: str) -> float:
    """A model's accuracy from its table cell: a finite number (nan or inf would make every statistic nan)."""
    try:
        value = float(text)
    except ValueError:
        raise OnnxaffError(f"accuracy of {name} is not a number: {text!r}") from None
    if not math.isfinite(value):
        raise OnnxaffError(f"accuracy of {name} is not a finite number: {text!r}")
    return value


def _flag_counts(sig: Signature, metric: str) -> tuple[int, int]:
    """(flagged, scored) among the scores signature_stats reads (ok activation sites with a mean)."""
    f = sig.flag_summary(metric)
    return f["flagged"], f["scored"]


def fit_r2(x: np.ndarray, y: np.ndarray) -> tuple[float, float, float, float]:
    """(R², Pearson r, slope, intercept) of the least-squares line y ≈ a·x + b."""
    if np.ptp(x) == 0 or np.ptp(y) == 0:
        return float("nan"), float("nan"), float("nan"), float("nan")
    sx, sy = np.abs(x).max(), np.abs(y).max()  # fitted in units of the largest value: 1e308 would overflow
    r = float(np.corrcoef(x / sx, y / sy)[0, 1])
    slope, intercept = np.polyfit(x / sx, y / sy, 1)
    with np.errstate(over="ignore"):
        return r * r, r, float(slope * sy / sx), float(intercept * sy)


class Correlation(dict):
    """What `correlate` returns: a dict (``metric``, ``rows``, ``table`` by group, ``p_method``, ``warnings``, ...)
    that a notebook shows as its table of the group "all"."""

    def ranked(self, group: str = "all") -> list[tuple[str, dict]]:
        """The group's (statistic, entry) pairs, highest R² first (an undefined R², NaN, last)."""
        return sorted(self["table"].get(group, {}).items(),
                      key=lambda kv: -(kv[1]["r2"] if kv[1]["r2"] == kv[1]["r2"] else -1))

    def to_pandas(self):
        """One row per group and statistic: R², Pearson r with its 95 % interval, p-value, fit (needs pandas)."""
        from onnxaff.format.tables import frame

        rows = []
        for group, table in self["table"].items():
            for statistic, v in table.items():
                low, high = v.get("r_ci95") or (None, None)
                rows.append({"statistic": statistic, "group": group, "r2": v["r2"], "pearson_r": v["pearson_r"],
                             "r_ci95_low": low, "r_ci95_high": high, "p_value": v["p_value"], "slope": v["slope"],
                             "intercept": v["intercept"], "models": v["models"],
                             "flagged_models": v["flagged_models"]})
        return frame(rows, "statistic", "Correlation")

    def _repr_html_(self) -> str:
        from onnxaff.format.tables import html_table

        rows = [[f, v["r2"], v["pearson_r"], *(v.get("r_ci95") or (None, None)), v["p_value"]]
                for f, v in self.ranked()]
        lines = [f"<p><b>Accuracy against {_esc(self['metric'])} statistics</b>, {len(self['rows'])} models; p: "
                 f"{_esc(self['p_method'])}</p>", html_table(["statistic", "R²", "r", "r low", "r high", "p"], rows)]
        return "\n".join(lines + [f"<p><b>Warning</b>: {_esc(w)}</p>" for w in self["warnings"]])


def correlate(sigs: list[Signature], accuracy: dict[str, str], metric: str | None = None,
              groups: dict[str, str] | None = None, strict: bool = False) -> Correlation:
    """R², Pearson r, its permutation p-value and bootstrap interval (onnxaff.results.significance) of the accuracy
    against each signature statistic and model baseline, per group; `differences` and `warnings` say what the
    reader must know (options that change the numbers and differ; few models); `strict` refuses the former."""
    from onnxaff.results.significance import BOOTSTRAP_TEXT, few_models_warning, method_text, significance

    metric = metric or default_metric(sigs)
    if not all(any(v is not None for v in s.scores(metric)) for s in sigs):
        have = ", ".join(shared_metrics(sigs)) or "none shared"
        raise ConfigError("metric", f"{{option}} {metric!r}: not every signature has {metric} scores (they share: "
                                    f"{have}; {unscored(sigs, metric)})")
    rows, partial = [], []
    for s, name in zip(sigs, run_labels(sigs), strict=True):
        key = next((k for k in (name, s.model.get("name"), s.model.get("sha256")) if k in accuracy), None)
        if key is None:
            raise OnnxaffError(f"no accuracy for model {name} (sha256 {s.model.get('sha256', '?')[:12]}…)")
        acc = accuracy_value(name, accuracy[key])
        stats = signature_stats(s.scores(metric), s.metrics.get(metric))
        features = {f"{metric} {k}": v for k, v in stats.items() if k not in ("sites", "near_linear") and v is not None}
        for label, (section, field) in BASELINES.items():
            value = s.model.get(section, {}).get(field)
            if field == "gflops" and s.model.get(section, {}).get("macs_unknown_nodes"):
                partial.append(name)  # a count of some nodes only: not the model's GFLOPs
            elif value is not None:
                features[label] = float(value)
        group = (groups or {}).get(name) or (groups or {}).get(s.model.get("sha256", "")) or "all"
        flagged, scored = _flag_counts(s, metric)
        rows.append({"model": name, "accuracy": acc, "group": group, "features": features, "flagged": flagged,
                     "scored": scored})
    if len(rows) < 3:
        raise OnnxaffError("correlate needs at least three models")
    labels = [r["model"] for r in rows]
    diffs = differences(sigs, [metric])
    if strict:
        refuse(diffs, labels)
    everything = set.union(*[set(r["features"]) for r in rows])
    common = set.intersection(*[set(r["features"]) for r in rows])
    table = {}
    for group in sorted({"all", *[r["group"] for r in rows]}):
        members = [r for r in rows if group == "all" or r["group"] == group]
        if len(members) < 3:
            continue
        names = sorted(set.intersection(*[set(r["features"]) for r in members]))
        y = np.array([r["accuracy"] for r in members])
        table[group] = {}
        for feat in names:
            x = np.array([r["features"][feat] for r in members])
            r2, r, slope, intercept = fit_r2(x, y)
            own = feat.startswith(f"{metric} ")  # a signature statistic, not a model baseline
            table[group][feat] = {"r2": r2, "pearson_r": r, "slope": slope, "intercept": intercept,
                                  **significance(x, y), "models": len(members),
                                  "flagged_models": sum(own and m["flagged"] > 0 for m in members)}
    sizes = {g: next(iter(t.values()))["models"] for g, t in table.items() if t}
    warnings = [f"{'' if g == 'all' else f'group {g}: '}{w}" for g, n in sizes.items()
                if (w := few_models_warning(n))]  # the differences: differences.line_of
    if partial:
        warnings.append(f"GFLOPs left out: the MACs of some nodes of {', '.join(partial)} are unknown "
                        "(model.stats.macs_unknown_nodes)")
    # a statistic some signature lacks (an older file without model.stats) is left out, and said so
    return Correlation({"metric": metric, "rows": rows, "table": table, "left_out": sorted(everything - common),
                        "p_method": method_text(*sorted(set(sizes.values()) or {len(rows)})),
                        "interval_method": BOOTSTRAP_TEXT,
                        "differences": [d.as_dict(labels) for d in diffs], "warnings": warnings})

"""What a comparison compares: the options and data that change the numbers, and where signatures differ in them.

A score depends on more than the network: the chunk size (the finite-sample bias, docs/statistics.md), the
reduction, the metric's parameters, the data and its preprocessing. `differences(sigs)` lists those that differ
between the signatures being compared; `compare`, `correlate`, a study and the reports say so in one line, and a
strict comparison refuses them (`refuse`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from onnxaff.errors import Message, OnnxaffError, option
from onnxaff.format.protocol import key as protocol_key
from onnxaff.format.protocol import short
from onnxaff.foundations.text import printable

# Options of AnalysisConfig.signature_options that change the numbers, with what an absent one means (a signature
# records some only where they are not the default). limit, seed, batch_size: more or other rows of the same
# distribution (the seed of synthetic data is part of the data's identity below).
NUMBER_OPTIONS = {"chunk_size": None, "reduce": None, "reduce_in": "graph", "layout": "auto", "input_shapes": {},
                  "intervals": "auto", "nlc_directions": "default", "batch_axes": {}, "input_ranges": {},
                  "pad": 0.0, "sample_rate": None, "tokenizer": None, "max_length": None, "pack": False,
                  "mask": "auto"}
# What the data were, beyond the options: the source and its content, preprocessing, per-input constants.
DATA_FIELDS = ("kind", "sha256", "seed", "params", "constants", "window", "hop", "padded_to")
IDENTITY = ("data.kind", "data.sha256", "data.seed", "data.params")  # said once, by `data`, when the source differs
SHOWN = 4  # models named one by one; past this, grouped by value


@dataclass(frozen=True)
class Difference:
    """One option (an AnalysisConfig field) or data field with unequal values across the signatures."""

    field: str
    values: tuple[str, ...]  # per signature, as shown
    is_option: bool = True

    def text(self, names: list[str]) -> str:
        """`chunk_size differs: a=512, b=256` (the option named with errors.option: a flag on the command line)."""
        head = option(self.field) if self.is_option else self.field
        if len(names) <= SHOWN:
            return f"{head} differs: " + ", ".join(f"{n}={v}" for n, v in zip(names, self.values, strict=True))
        groups: dict[str, list[str]] = {}
        for n, v in zip(names, self.values, strict=True):
            groups.setdefault(v, []).append(n)
        return f"{head} differs: " + ", ".join(f"{v} ({', '.join(ns)})" for v, ns in groups.items())

    def as_dict(self, names: list[str]) -> dict:
        return {"field": self.field, "option": self.is_option,
                "values": dict(zip(names, self.values, strict=True))}


def _key(value) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def _shown(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, dict | list):
        return printable(json.dumps(value, sort_keys=True, separators=(",", ":"), default=str))
    return printable(value)


def _metric_spec(sig, metric: str):
    """The metric as the run named it (`affinity:eps=1e-08`), with its declared parameters where recorded."""
    asked = sig.options.get("metrics")
    spec = next((m for m in (asked if isinstance(asked, list) else ()) if str(m).split(":")[0] == metric), metric)
    params = (sig.metrics.get(metric) or {}).get("params") if isinstance(sig.metrics.get(metric), dict) else None
    return spec, params


def _data_source(sig) -> str:
    """The data's identity: a text file's sha256, an array file's resolved path (the same file named relative or
    absolute is one; another file of the same name in another folder is not), else the source as given."""
    return sig.data.get("sha256") or str(sig.data.get("path") or sig.data.get("source") or "?")


def _columns(sig, metrics: list[str]) -> list[tuple[str, bool, object, object]]:
    """(field, is an option, value compared, value shown) of one signature."""
    out = []
    for name, absent in NUMBER_OPTIONS.items():
        value = sig.options.get(name, absent)
        if name == "sample_rate" and value is None:
            value = sig.data.get("sample_rate")
        if name == "max_length" and value is None:
            value = sig.data.get("max_length")
        out.append((name, True, value, value))
    for m in metrics:
        spec, params = _metric_spec(sig, m)
        out.append((f"metrics:{m}", True, spec if params is None else params, spec))
    source = str(sig.data.get("source") or "?")
    out.append(("data", False, _data_source(sig), source if source.startswith("synthetic:") else Path(source).name))
    prep = sig.data.get("preprocessing")
    if isinstance(prep, dict):
        out += [(f"preprocessing.{k}", False, v, v) for k, v in prep.items()]
    else:
        out.append(("preprocessing", False, prep, prep))
    out += [(f"data.{k}", False, sig.data.get(k), sig.data.get(k)) for k in DATA_FIELDS]
    return out


def differences(sigs, metrics: list[str] | None = None) -> list[Difference]:
    """The options and data fields that change the numbers and differ between `sigs`, in a fixed order; the
    parameters of `metrics` only (default: every metric all of them scored)."""
    if len(sigs) < 2:
        return []
    if metrics is None:
        metrics = [m for m in sigs[0].metrics if all(m in s.metrics for s in sigs)]
    columns = [_columns(s, metrics) for s in sigs]
    fields = list(dict.fromkeys(f for cols in columns for f, *_ in cols))
    found = _protocols(sigs)
    for name in fields:
        cells = [next(((opt, v, shown) for f, opt, v, shown in cols if f == name), (False, None, None))
                 for cols in columns]
        if len({_key(v) for _, v, _ in cells}) < 2 or name in IDENTITY and any(d.field == "data" for d in found):
            continue
        shown = [_shown(s) for _, _, s in cells]
        if name.startswith("metrics:"):
            shown = _param_text(name[8:], [v for _, v, _ in cells], shown)
        elif name == "data" and len(set(shown)) < len({_key(v) for _, v, _ in cells}):
            shown = [_shown(s.data.get("source")) for s in sigs]  # same file names, other files: the paths
        found.append(Difference("metrics" if name.startswith("metrics:") else name, tuple(shown),
                                any(opt for opt, _, _ in cells)))
    return found


def _protocols(sigs) -> list[Difference]:
    """`protocol differs: a=paper (512 rows per chunk, reduce=mean), b=custom (...)`, first, where the protocols
    (onnxaff.format.protocol: rows per chunk and per example, intervals) differ."""
    records = [s.protocol() for s in sigs]
    if len({protocol_key(r) for r in records}) < 2:
        return []
    return [Difference("protocol", tuple(printable(short(r)) for r in records), False)]


def _param_text(metric: str, values: list, specs: list[str]) -> list[str]:
    """A metric's parameters as `affinity:eps=1e-06`, only those that differ (its spec where none are recorded)."""
    if not all(isinstance(v, dict) for v in values):
        return specs
    keys = [k for k in dict.fromkeys(k for v in values for k in v) if len({_key(v.get(k)) for v in values}) > 1]
    return [f"{metric}:" + ",".join(f"{k}={_shown(v.get(k))}" for k in keys) for v in values]


def differences_line(diffs: list[Difference], names: list[str]) -> Message | None:
    """One line: every difference, `; `-separated (options named with errors.option); None when there is none."""
    if not diffs:
        return None
    return Message("signatures made with different options: " + "; ".join(d.text(names) for d in diffs))


def refuse(diffs: list[Difference], names: list[str]) -> None:
    """A strict comparison: a one-line error when the signatures differ in what changes the numbers."""
    if diffs:
        raise OnnxaffError(f"refusing to compare {', '.join(names)}: "
                           + "; ".join(d.text(names) for d in diffs) + " (strict)")


def line_of(found: list[dict]) -> Message | None:
    """differences_line of differences as a JSON file keeps them (Difference.as_dict)."""
    if not found:
        return None
    names = list(found[0]["values"])
    return differences_line([Difference(d["field"], tuple(d["values"].values()), d["option"]) for d in found], names)

"""What the readers of a signature file (report, compare, correlate, merge) rely on, checked before they run.

A hand-edited or truncated file fails here with the field's path, e.g. `sig.json: sites[3].metrics.affinity.mean:
expected a number`, instead of a KeyError or TypeError deep inside a report. The top level's fields
readers use are checked here; a site's, a stage's and a score's are those their records declare, of the kinds
declared there (onnxaff.format.siteentry); anything else in the file is carried along untouched.
"""

from __future__ import annotations

import json
import math
import numbers
from pathlib import Path

from onnxaff.errors import OnnxaffError
from onnxaff.format.siteentry import JsonRecord, ScoreEntry, SiteEntry, StageEntry
from onnxaff.foundations.text import printable

SCHEMA = "onnxaff.signature"
SCHEMA_VERSION = 1
# model.stats fields correlate reads as numbers (compare.BASELINES)
NUMERIC_STATS = ("depth_sites", "depth_weighted_layers", "parameters", "gflops")


class _Bad(Exception):
    def __init__(self, field: str, problem: str):
        super().__init__(f"{field}: {problem}")


# Scores are squared and summed (DTW, std) and fitted (correlate): a larger magnitude would overflow into inf or
# NaN, a silently wrong number. No metric comes near it; NaN and Infinity are never written (they become null).
LARGEST = 1e100


def _is_number(v) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v) and abs(v) <= LARGEST


def _is_whole(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


_FINITE = f"expected a finite number (at most {LARGEST:g} in size)"
_KINDS = {
    "object": (lambda v: isinstance(v, dict), "expected an object"),
    "list": (lambda v: isinstance(v, list), "expected a list"),
    "object?": (lambda v: v is None or isinstance(v, dict), "expected an object or null"),
    "list?": (lambda v: v is None or isinstance(v, list), "expected a list or null"),
    "text": (lambda v: isinstance(v, str), "expected text"),
    "text?": (lambda v: v is None or isinstance(v, str), "expected text or null"),
    "number": (_is_number, _FINITE),
    "number?": (lambda v: v is None or _is_number(v), f"{_FINITE} or null"),
    "whole": (_is_whole, "expected a whole number"),
    "whole?": (lambda v: v is None or _is_whole(v), "expected a whole number or null"),
    "count?": (lambda v: v is None or (_is_whole(v) and v >= 0), "expected a whole number ≥ 0 or null"),
    "spread?": (lambda v: v is None or (_is_number(v) and v >= 0), "expected a finite number ≥ 0 or null"),
    "bool": (lambda v: isinstance(v, bool), "expected true or false"),
}


def _field(obj: dict, key: str, kind: str, where: str, required: bool = True):
    path = f"{where}.{key}" if where else key
    if key not in obj:
        if required:
            raise _Bad(path, "missing")
        return None
    test, problem = _KINDS[kind]
    if not test(obj[key]):
        raise _Bad(path, problem)
    return obj[key]


def _items(values: list, kind: str, where: str) -> None:
    test, problem = _KINDS[kind]
    for k, v in enumerate(values):
        if not test(v):
            raise _Bad(f"{where}[{k}]", problem)


def _within(value, bounds, where: str) -> None:
    """A score inside its metric's declared range (every score is checked against it when computed, so one
    outside was edited by hand); the same 1e-9 (relative beyond 1) of rounding as scoring allows."""
    if value is None or not bounds:
        return
    low, high = bounds
    if (low is not None and value < low - 1e-9 * max(1.0, abs(low))) or \
            (high is not None and value > high + 1e-9 * max(1.0, abs(high))):
        shown = ", ".join("∞" if b is None else f"{b:g}" for b in bounds)
        raise _Bad(where, f"{value:g} is outside the metric's range [{shown}]")


def _check_fields(obj: dict, record: type[JsonRecord], where: str) -> None:
    """The fields `record` declares (onnxaff.format.siteentry): each of its kind, its items of theirs, those without a
    default there."""
    for f in record.json_fields():
        value = _field(obj, f.name, f.metadata["kind"], where, required=record.required(f))
        if value is not None and f.metadata["items"] is not None:
            _items(value, f.metadata["items"], f"{where}.{f.name}")


def _check_scores(entry: dict, where: str, ranges: dict) -> None:
    """One site's (or stage's) `metrics`: per metric, the numbers the tables and plots read."""
    for name, score in entry.items():
        at = f"{where}.{printable(name)}"
        if not isinstance(score, dict):
            raise _Bad(at, "expected an object")
        _check_fields(score, ScoreEntry, at)
        _within(score.get("mean"), ranges.get(name), f"{at}.mean")
        for k, v in enumerate(score.get("values") or ()):
            _within(v, ranges.get(name), f"{at}.values[{k}]")
        if (ci := score.get("ci95")) is not None and (len(ci) != 2 or ci[0] > ci[1]):
            raise _Bad(f"{at}.ci95", "expected [low, high] with low ≤ high, or null")


def _check_entries(d: dict, key: str, record: type[SiteEntry] | type[StageEntry], ranges: dict) -> None:
    entries = _field(d, key, "list", "", required=key == "sites") or []
    for k, entry in enumerate(entries):
        at = f"{key}[{k}]"
        if not isinstance(entry, dict):
            raise _Bad(at, "expected an object")
        _check_fields(entry, record, at)
        if entry["index"] != k and key == "sites":  # reports and merges look sites up by it
            raise _Bad(f"{at}.index", f"expected {k} (sites are numbered in their order)")
        if entry.get("neighbourhood") is not None:
            _check_neighbourhood(entry["neighbourhood"], f"{at}.neighbourhood")
        _check_scores(entry["metrics"], f"{at}.metrics", ranges)


def check(d) -> None:
    """Raise _Bad for the first field a reader would trip on."""
    if not isinstance(d, dict) or d.get("schema") != SCHEMA:
        raise _Bad("schema", "not an onnxaff signature (missing schema field)")
    if d.get("schema_version") != SCHEMA_VERSION:
        raise _Bad("schema_version", f"version {d.get('schema_version')!r} is not {SCHEMA_VERSION}")
    model = _field(d, "model", "object", "")
    _field(model, "name", "text", "model", required=False)
    _field(model, "sha256", "text", "model", required=False)
    _field(model, "label", "text", "model", required=False)  # compare and correlate name a run by it
    if (stats := _field(model, "stats", "object", "model", required=False)) is not None:
        for key in NUMERIC_STATS:
            _field(stats, key, "number?", "model.stats", required=False)
    for key in ("data", "options", "runtime"):
        _field(d, key, "object", "")
    ranges = {}
    for name, info in _field(d, "metrics", "object", "").items():
        if not isinstance(info, dict):
            raise _Bad(f"metrics.{printable(name)}", "expected an object")
        at = f"metrics.{printable(name)}"
        _field(info, "needs", "text", at, required=False)
        _field(info, "direction", "text", at, required=False)  # the near-linear rule reads these two
        if (bounds := _field(info, "range", "list", at, required=False)) is not None:
            if len(bounds) != 2:
                raise _Bad(f"{at}.range", "expected two bounds")
            _items(bounds, "number?", f"{at}.range")
            ranges[name] = bounds
    _check_entries(d, "sites", SiteEntry, ranges)
    _check_entries(d, "stages", StageEntry, ranges)
    if (warnings := _field(d, "warnings", "list", "", required=False)) is not None:
        _items(warnings, "text", "warnings")
    _field(d, "network", "object", "", required=False)


def _check_neighbourhood(nb, where: str) -> None:
    """The graph around a site, as the report draws it: named nodes and edges between them (optional: older
    signatures have none)."""
    if not isinstance(nb, dict):
        raise _Bad(where, "expected an object or null")
    nodes = _field(nb, "nodes", "list", where)
    for k, node in enumerate(nodes):
        if not isinstance(node, dict):
            raise _Bad(f"{where}.nodes[{k}]", "expected an object")
        for key, kind in (("name", "text"), ("op", "text"), ("at", "whole")):
            _field(node, key, kind, f"{where}.nodes[{k}]")
    for k, edge in enumerate(_field(nb, "edges", "list", where)):
        if not (isinstance(edge, list) and len(edge) == 2 and all(_is_whole(v) and 0 <= v < len(nodes)
                                                                   for v in edge)):
            raise _Bad(f"{where}.edges[{k}]", f"expected two node positions below {len(nodes)}")
    _field(nb, "omitted", "count?", where, required=False)


def validate(d, where: str) -> None:
    """One line naming the file and the field when `d` is not a signature every reader can use."""
    try:
        check(d)
    except _Bad as exc:
        raise OnnxaffError(f"{where}: {exc}") from None


def load_json(path: str | Path, what: str = "signature"):
    """A JSON document from a regular file, or one line saying why not (a FIFO is refused, not waited on)."""
    path = Path(path)
    if not path.exists():
        raise OnnxaffError(f"{what} file not found: {path}")
    if not path.is_file():
        raise OnnxaffError(f"{what} path is not a regular file: {path}")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise OnnxaffError(f"{path} is not valid JSON: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except RecursionError:
        raise OnnxaffError(f"{path} is not valid JSON: nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError, and integers longer than Python converts
        raise OnnxaffError(f"{path} is not valid JSON: {exc}") from None
    except OSError as exc:
        raise OnnxaffError(f"cannot read {path}: {exc.strerror or exc}") from None

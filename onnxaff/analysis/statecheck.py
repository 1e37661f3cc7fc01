"""The counters of a saved run state checked against each other before any of it is used.

A checkpoint or a part is a file a user can edit: its key says which run it belongs to, but a cursor of 10¹²
instead of 3072 would make --resume skip the rest of the data and write a signature from the examples seen so
far. Every counter the state can cross-check is checked here (the window against the cursor, the examples
against the cursor, each site's rows against its chunks, buffer, moments and NLC sums, each array's shape
against the site's dims); a mismatch is one line naming the field.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from onnxaff.analysis.records import StageRecord
from onnxaff.errors import OnnxaffError
from onnxaff.graph.site import Site

MAX_LEVEL = 62  # a block tree deeper than 2^62 blocks cannot come from a real run
JVP_FORMS = ("elementwise", "directional")


class Damaged(Exception):
    """A field of the state and what is wrong with it."""

    def __init__(self, field: str, why: str):
        super().__init__(f"{field}: {why}")


def _int(d: dict, key: str, at: str, low: int = 0) -> int:
    v = _get(d, key, at)
    if isinstance(v, bool) or not isinstance(v, int) or v < low:
        raise Damaged(at + key, f"expected a whole number ≥ {low}, got {_show(v)}")
    return v


def _number(v, field: str, low: float = 0.0, none: bool = False) -> float | None:
    if v is None and none:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < low:
        raise Damaged(field, f"expected a finite number ≥ {low:g}, got {_show(v)}")
    return float(v)


def _get(d, key, at: str):
    if not isinstance(d, dict):
        raise Damaged(at.rstrip("."), "expected an object")
    if key not in d:
        raise Damaged(at + str(key), "missing")
    return d[key]


def _show(v) -> str:
    return type(v).__name__ if isinstance(v, (dict, list, np.ndarray)) else repr(v)[:40]


def _array(v, field: str, shape: tuple) -> np.ndarray:
    """A finite float array of `shape` (None in it: any length)."""
    if not isinstance(v, np.ndarray) or v.dtype.kind != "f":
        raise Damaged(field, f"expected a float array, got {_show(v)}")
    if v.ndim != len(shape) or any(s is not None and s != n for s, n in zip(shape, v.shape, strict=True)):
        raise Damaged(field, f"shape {v.shape}, expected {tuple('any' if s is None else s for s in shape)}")
    if not np.isfinite(v).all():
        raise Damaged(field, "holds NaN or infinity")
    return v


def check_state(d: dict, label: str) -> None:
    """Refuse a state whose counters disagree, in one line: `{label} is damaged: FIELD: why`."""
    try:
        _check(d)
    except Damaged as exc:
        raise OnnxaffError(f"{label} is damaged: {exc}") from None


def _check(d: dict) -> None:
    if not isinstance(d, dict):
        raise Damaged("state", "expected an object")
    start, stop, cursor = _int(d, "start", ""), _int(d, "stop", ""), _int(d, "cursor", "")
    total = _get(d, "key", "").get("total") if isinstance(d.get("key"), dict) else None
    if not start <= stop or (isinstance(total, int) and stop > total):
        raise Damaged("stop", f"the window [{start}, {stop}) is not within the data's {total} examples")
    if not start <= cursor <= stop:
        raise Damaged("cursor", f"{cursor} is outside the window [{start}, {stop})")
    used, dropped = _int(d, "used", ""), _int(d, "dropped", "")
    skipped = _get(d, "skipped", "")
    if not isinstance(skipped, list) or not all(
            isinstance(s, list) and len(s) == 2 and all(isinstance(t, str) for t in s) for s in skipped):
        raise Damaged("skipped", "expected a list of [file, reason]")
    if used + dropped + len(skipped) != cursor - start:
        raise Damaged("used", f"{used} used, {dropped} dropped and {len(skipped)} unreadable examples do not add up "
                              f"to the {cursor - start} before the cursor")
    _number(_get(d, "seconds", ""), "seconds")
    shard = _get(d, "shard", "")
    if shard is not None and not (isinstance(shard, list) and len(shard) == 2
                                  and all(isinstance(k, int) and not isinstance(k, bool) for k in shard)
                                  and 0 <= shard[0] < shard[1]):
        raise Damaged("shard", f"expected [index, count], got {_show(shard)}")
    for group in ("sites", "stages"):
        if not isinstance(_get(d, group, ""), list):
            raise Damaged(group, "expected a list")
    _records(d)
    # A site inside a subgraph sees only the batches that run it (an If's other branch, a Loop run 0 times).
    inside = {r["index"] for r in d["site_records"] if isinstance(r.get("params"), dict) and "inside" in r["params"]}
    for group in ("sites", "stages"):
        for k, s in enumerate(d[group]):
            _site(s, f"{group}[{k}].", used, stage=group == "stages",
                  may_be_empty=group == "sites" and isinstance(s, dict) and s.get("index") in inside)
    if (network := _get(d, "network", "")) is not None:
        _network(network, used)


# What a record cannot be restored without (onnxaff.analysis.records): the fields without a default.
_SITE_FIELDS, _STAGE_FIELDS = (frozenset(f.name for f in dataclasses.fields(record)
                                         if f.default is dataclasses.MISSING
                                         and f.default_factory is dataclasses.MISSING)
                               for record in (Site, StageRecord))


def _records(d: dict) -> None:
    """The sites' and stages' records the signature is made of: one for every collector (else sites vanish)."""
    for group, key, fields in (("sites", "site_records", _SITE_FIELDS), ("stages", "stage_records", _STAGE_FIELDS)):
        records = _get(d, key, "")
        if not isinstance(records, list) or not all(isinstance(r, dict) and fields <= set(r) for r in records):
            raise Damaged(key, f"expected a list of records with {', '.join(sorted(fields))}")
        if group == "sites":
            unrecorded = {s["index"] for s in d[group] if isinstance(s, dict) and "index" in s} - {
                r["index"] for r in records}
            if unrecorded:
                raise Damaged(key, f"no record of site {min(unrecorded)}")
        elif (ok := sum(r["status"] == "ok" for r in records)) != len(d[group]):
            raise Damaged(key, f"{len(d[group])} stage collectors for {ok} stages that are ok")


def _site(s: dict, at: str, used: int, stage: bool, may_be_empty: bool = False) -> None:
    """One site's counters: rows against the examples, the chunks, the buffer, the moments and the NLC sums.
    `may_be_empty`: a site that no batch may have run (inside a subgraph) has 0 rows whatever the examples."""
    index = _get(s, "index", at)
    if not stage and (isinstance(index, bool) or not isinstance(index, int) or index < 0):
        raise Damaged(at + "index", f"expected a site index, got {_show(index)}")
    rows, bad = _int(s, "rows", at), _int(s, "nonfinite_rows", at)
    chunks, chunk_rows = _int(s, "chunks", at), _int(s, "chunk_rows", at)
    if bad > rows:
        raise Damaged(at + "nonfinite_rows", f"{bad} of {rows} rows")
    # Not a multiple of `used`: a sequence-first site ([S, N, E]) adds S rows a batch, whatever its size.
    masked = _int(s, "masked_rows", at) if isinstance(s, dict) and "masked_rows" in s else 0  # rows masks left out
    if (rows + masked == 0) != (used == 0) and not (may_be_empty and rows + masked == 0):
        raise Damaged(at + "rows", f"{rows} rows from {used} examples")
    dims = _get(s, "dims", at)
    if dims is None and rows == 0:
        dx = dy = None
    elif isinstance(dims, list) and len(dims) == 2 and all(isinstance(n, int) and not isinstance(n, bool)
                                                           and n >= 0 for n in dims):
        dx, dy = dims
    else:
        raise Damaged(at + "dims", f"expected [X dims, Y dims] for {rows} rows, got {_show(dims)}")
    buffer = _get(s, "buffer", at)
    size = _int(buffer, "size", at + "buffer.", low=1)  # 1: a symbolic D's chunk under "Kd" before its first batch
    held = _rows(buffer, at + "buffer.", dx, dy, none=True)
    if held >= size:
        raise Damaged(at + "buffer.x", f"{held} rows held back, a chunk is {size}")
    partial, finished = _get(s, "partial", at), _get(s, "finished", at)
    if not isinstance(partial, bool) or not isinstance(finished, bool):
        raise Damaged(at + "partial", "expected true or false (and finished)")
    if partial and (chunks != 1 or chunk_rows != held):
        raise Damaged(at + "partial", f"a partial chunk of {held} rows, yet {chunks} chunks of {chunk_rows}")
    full = chunks - partial
    if (rows != full * size + held) if not bad else rows < full * size + held:
        raise Damaged(at + "chunks", f"{chunks} chunks of {size} and {held} held back are not the {rows} rows")
    if chunk_rows != (0 if not chunks else held if partial else size):
        raise Damaged(at + "chunk_rows", f"{chunk_rows}, with {chunks} chunks of {size}")
    values = _get(s, "values", at)
    if not isinstance(values, dict):
        raise Damaged(at + "values", "expected an object")
    for name, v in values.items():
        if not isinstance(v, list) or len(v) > max(chunks, 1):
            raise Damaged(f"{at}values.{name}", f"expected at most {max(chunks, 1)} scores, one a chunk")
        for x in v:
            _number(x, f"{at}values.{name}", low=-math.inf)
    errors = _get(s, "errors", at)
    if not isinstance(errors, dict) or not all(isinstance(e, str) for e in errors.values()):
        raise Damaged(at + "errors", "expected an object of texts")
    for key in ("first", "previous", "solo"):
        if _chunk(_get(s, key, at), at + key, dx, dy) not in (None, chunk_rows):
            raise Damaged(at + key, f"not a chunk of {chunk_rows} rows")
    unscored = _get(s, "unscored", at)
    if not isinstance(unscored, list) or len(unscored) > chunks:
        raise Damaged(at + "unscored", f"expected at most {chunks} chunks")
    for k, u in enumerate(unscored):
        if _chunk(_get(u, "chunk", f"{at}unscored[{k}]."), f"{at}unscored[{k}].chunk", dx, dy) != chunk_rows:
            raise Damaged(f"{at}unscored[{k}].chunk", f"not a chunk of {chunk_rows} rows")
        _chunk(_get(u, "previous", f"{at}unscored[{k}]."), f"{at}unscored[{k}].previous", dx, dy)
    _flags(s, at, stage)
    if (moments := _get(s, "moments", at)) is not None:
        _moments(moments, at + "moments.", rows if not bad else None, dx, dy)
    if (jvp := _get(s, "jvp", at)) is not None:
        _jvp(jvp, at + "jvp.", used)


def _rows(d: dict, at: str, dx, dy, none: bool = False) -> int | None:
    """The rows of {x, y} (None when both are None and `none`), each [rows, dims]."""
    x, y = _get(d, "x", at), _get(d, "y", at)
    if none and x is None and y is None:
        return 0
    x = _array(x, at + "x", (None, dx))
    _array(y, at + "y", (x.shape[0], dy))
    return x.shape[0]


def _chunk(c, at: str, dx, dy) -> int | None:
    if c is None:
        return None
    n = _rows(c, at + ".", dx, dy)
    _number(_get(c, "rounding", at + "."), at + ".rounding")
    return n


def _flags(s: dict, at: str, stage: bool) -> None:
    tracks = _get(s, "tracks", at)
    if tracks is not None if not stage else (isinstance(tracks, bool) or not isinstance(tracks, int) or tracks < 1):
        raise Damaged(at + "tracks", f"got {_show(tracks)}")
    seen = _get(s, "seen", at)
    if not isinstance(seen, list) or not all(isinstance(t, str) for t in seen):
        raise Damaged(at + "seen", "expected a list of texts")
    _number(_get(s, "scale", at), at + "scale", none=True)
    _number(_get(s, "rounding", at), at + "rounding", none=True)
    halves = _get(s, "halves", at)
    if not isinstance(halves, dict):
        raise Damaged(at + "halves", "expected an object")
    for name, v in halves.items():
        if not isinstance(v, list):
            raise Damaged(f"{at}halves.{name}", "expected a list")
        for x in v:
            _number(x, f"{at}halves.{name}", low=-math.inf)


def _moments(m: dict, at: str, rows: int | None, dx, dy) -> None:
    """Pooled moments: their dims are the site's and their counts add up to its rows."""
    if (_int(m, "dx", at), _int(m, "dy", at)) != (dx, dy):
        raise Damaged(at + "dx", f"moments of [{m['dx']}, {m['dy']}] features, the site has {[dx, dy]}")
    block, current = _get(m, "block", at), _get(m, "current", at)
    if (block is None) != (current is None):
        raise Damaged(at + "block", "the block being filled and its moments go together")
    if block is not None:
        _int(m, "block", at)
    nodes = _get(m, "nodes", at)
    if not isinstance(nodes, list):
        raise Damaged(at + "nodes", "expected a list")
    n = 0
    for k, node in enumerate(nodes):
        if not (isinstance(node, list) and len(node) == 3):
            raise Damaged(f"{at}nodes[{k}]", "expected [level, first block, moments]")
        level, first = node[0], node[1]
        for v, what in ((level, "level"), (first, "first block")):
            if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= (MAX_LEVEL if v is level else 2**62):
                raise Damaged(f"{at}nodes[{k}]", f"{what} {_show(v)}")
        n += _pooled(node[2], f"{at}nodes[{k}].", dx, dy)
    if current is not None:
        n += _pooled(current, at + "current.", dx, dy)
    if rows is not None and n != rows:
        raise Damaged(at + "n", f"the moments count {n} rows, the site {rows}")


def _pooled(m: dict, at: str, dx, dy) -> int:
    if (_int(m, "dx", at), _int(m, "dy", at)) != (dx, dy):
        raise Damaged(at + "dx", "not the site's dims")
    n = _int(m, "n", at)
    for key, shape in (("mean_x", (dx,)), ("mean_y", (dy,)), ("m_xx", (dx, dx)), ("m_yy", (dy, dy)),
                       ("m_xy", (dx, dy))):
        _array(_get(m, key, at), at + key, shape)
    if set(m) != {"dx", "dy", "n", "mean_x", "mean_y", "m_xx", "m_yy", "m_xy"}:
        raise Damaged(at.rstrip("."), "unexpected fields")
    return n


def _jvp(j: dict, at: str, used: int) -> None:
    """The NLC sums of a site: no more examples than the run used, arrays of one shape."""
    if _get(j, "form", at) not in JVP_FORMS:
        raise Damaged(at + "form", f"expected one of {', '.join(JVP_FORMS)}")
    shape = None
    for side in ("x", "y"):
        e = _get(j, side, at)
        n = _int(e, "n", f"{at}{side}.")
        if n > used:
            raise Damaged(f"{at}{side}.n", f"{n} examples, the run used {used}")
        for key in ("mean", "m2"):
            a = _get(e, key, f"{at}{side}.")
            if (a is None) != (n == 0):
                raise Damaged(f"{at}{side}.{key}", f"does not match n = {n}")
            if a is not None:
                shape = _array(a, f"{at}{side}.{key}", shape or (None,) * np.ndim(a)).shape
        if set(e) != {"n", "mean", "m2"}:
            raise Damaged(f"{at}{side}", "unexpected fields")
    if (d2 := _get(j, "d2sum", at)) is not None:
        _array(d2, at + "d2sum", shape or (None,) * np.ndim(d2))
    for key in ("jv2_sum", "scatter_sum"):
        _number(_get(j, key, at), at + key)
    if _int(j, "dof", at) > used or _int(j, "short_batches", at) > used:
        raise Damaged(at + "dof", f"more than the {used} examples used")
    if "nonfinite_batches" in j and _int(j, "nonfinite_batches", at) > used:
        raise Damaged(at + "nonfinite_batches", f"more than the {used} examples used")
    if set(j) - {"nonfinite_batches"} != {"form", "x", "y", "d2sum", "jv2_sum", "scatter_sum", "dof", "short_batches"}:
        raise Damaged(at.rstrip("."), "unexpected fields")


def _network(n: dict, used: int) -> None:
    """The network NLC's sums: one per output, over no more examples than the run used."""
    # Whole batches are added until the limit is reached, so the count may pass the limit by up to a batch.
    _int(n, "limit", "network.")
    if _int(n, "examples", "network.") > used:
        raise Damaged("network.examples", f"{n['examples']}, more than the {used} examples used")
    _int(n, "short_batches", "network.")
    outputs = _get(n, "outputs", "network.")
    for key in ("jv2", "scatter"):
        sums = _get(n, key, "network.")
        if not isinstance(sums, dict) or not isinstance(outputs, list) or set(sums) != set(outputs):
            raise Damaged(f"network.{key}", "expected one sum for each output")
        for name, v in sums.items():
            _number(v, f"network.{key}.{name}")


def check_ranges(d: dict, ranges: dict[str, tuple[float, float]], label: str) -> None:
    """Every saved score within its metric's declared range (the rounding slack of onnxaff.metrics.guards): a
    value edited into a file would otherwise end in the signature, which its schema then refuses."""
    from onnxaff.metrics.guards import within

    for group in ("sites", "stages"):
        for k, s in enumerate(d[group]):
            for key in ("values", "halves"):
                for name, values in s[key].items():
                    lo, hi = ranges.get(name, (-math.inf, math.inf))
                    bad = next((v for v in values if not within(v, lo, hi)), None)
                    if bad is not None:
                        raise OnnxaffError(f"{label} is damaged: {group}[{k}].{key}.{name}: {bad!r} is outside the "
                                           f"metric's range [{lo:g}, {hi:g}]")


def check_same_run(d: dict, live, label: str) -> None:
    """The saved collectors against the live ones of the run that continues them (a RunState): the same site at
    each place, the same chunk size, stage width and NLC form."""
    try:
        if d["shard"] != (None if live.shard is None else list(live.shard)):
            raise Damaged("shard", f"{d['shard']}, this run {live.shard}")
        for group, mine in (("sites", live.sites), ("stages", live.stages)):
            for k, (s, st) in enumerate(zip(d[group], mine, strict=True)):
                at = f"{group}[{k}]."
                if group == "sites" and s["index"] != live.indices[k]:
                    raise Damaged(at + "index", f"{s['index']}, this run's site {live.indices[k]} is at its place")
                if st.schedule.buffer.size not in (s["buffer"]["size"], 1):  # 1: a symbolic D under chunk_size "Kd"
                    # (its size comes with the first batch: the saved one is it)
                    raise Damaged(at + "buffer.size",
                                  f"{s['buffer']['size']}, this run's chunks are {st.schedule.buffer.size}")
                if s["tracks"] != st.tracks:
                    raise Damaged(at + "tracks", f"{s['tracks']}, this run {st.tracks}")
                form = None if st.jvp is None else st.jvp.form
                if (None if s["jvp"] is None else s["jvp"]["form"]) != form:
                    raise Damaged(at + "jvp", f"not this run's Jacobian statistics ({form or 'none'})")
    except Damaged as exc:
        raise OnnxaffError(f"{label} is damaged: {exc}") from None

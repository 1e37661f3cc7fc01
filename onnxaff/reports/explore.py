"""What makes a report explorable, still as one offline file: the page's script (explore.js, written in this
project) and the data it reads, both inline.

The data (one block per page, beside its signature plots) are the plotted sites of each model in page order (the
plots' `data-m`): per-chunk scores, interval and flags of every metric, op types, parameters and the
neighbourhood in the graph. They are JSON in a
`<script type="application/json">`; every `<`, `>` and `&` in it is a \\u escape, so no name (`</script>`,
`<!--`) can end the block or start markup, and every string went through `printable` as elsewhere on the page.
"""

from __future__ import annotations

import json
import math
from functools import lru_cache
from importlib import resources

from onnxaff.collection.chunks import site_chunk_rows
from onnxaff.format.siteentry import ScoreEntry, SiteEntry
from onnxaff.foundations.text import printable

DATA_ID = "onnxaff-data"
# Characters that must not appear raw inside a <script> element (and two that end a JavaScript line).
_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}
_METRIC_KEYS = ("mean", "std", "ci95", "flags", "status", "values", "chunks", "partial", "reason", "pooled_rows")


@lru_cache(maxsize=1)
def script() -> str:
    """explore.js, shipped beside this module (package data)."""
    return resources.files("onnxaff.reports").joinpath("explore.js").read_text(encoding="utf-8")


def _clean(v):
    """JSON the browser parses: finite numbers (NaN and inf become null), printable text, plain containers."""
    if isinstance(v, bool) or v is None:
        return v
    if isinstance(v, int):
        return v
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, str):
        return printable(v)
    if isinstance(v, dict):
        return {printable(str(k)): _clean(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_clean(x) for x in v]
    return printable(str(v))


def scored_rows(s: SiteEntry, chunk_size) -> int | None:
    """The rows the chunk scores saw: whole chunks (the rows short of one are dropped), or the one partial chunk's;
    a site's `rows` counts every row collected (600 collected, 512 scored at chunk size 512). Under chunk_size
    "Kd" a chunk holds the site's own rows (onnxaff.collection.chunks.site_chunk_rows of its dims, as the run sized
    it)."""
    if s.partial_chunk:
        return s.rows
    rows = site_chunk_rows(chunk_size, (s.dim, s.dim_y or s.dim))
    if isinstance(s.chunks, int) and isinstance(rows, int):
        return s.chunks * rows
    return None


def _fields(e: ScoreEntry) -> dict:
    """The score fields a tooltip reads, those the file has (the page tells an absent field from a null one)."""
    held = e.to_json()
    return {k: held[k] for k in _METRIC_KEYS if k in held}


def _site(s: SiteEntry, chunk_size=None) -> dict:
    return {"id": s.id, "kind": s.kind, "op_types": s.op_types or [], "nodes": len(s.nodes or []),
            "params": s.params or {}, "dim": s.dim, "dim_y": s.dim_y, "rows": s.rows,
            "scored_rows": scored_rows(s, chunk_size), "chunks": s.chunks, "input_shape": s.input_shape,
            "input": s.input, "output": s.output, "metrics": {m: _fields(e) for m, e in s.metrics.items() if e},
            "neighbourhood": s.neighbourhood if "neighbourhood" in s else "absent"}


def page_data(named_sigs) -> dict:
    """{"models": [{"name", "sites": {index: site}}]}: the ok activation sites (those the plots draw)."""
    models = []
    for name, sig in named_sigs:
        sites = {str(s.index): _site(s, (sig.options or {}).get("chunk_size")) for s in sig.sites if s.in_signature}
        models.append({"name": name, "sites": sites})
    return {"models": models}


def embed(data: dict) -> str:
    """`data` as a JSON script block that no text inside it can close."""
    text = json.dumps(_clean(data), ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    for raw, escaped in _ESCAPES.items():
        text = text.replace(raw, escaped)
    return f'<script type="application/json" id="{DATA_ID}">{text}</script>'


def script_block() -> str:
    """The script, for the end of the page's body: it reads the data block of the page's signature plots."""
    return f'<script id="onnxaff-explore">{script()}</script>'

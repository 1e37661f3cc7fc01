"""Names are text, never markup: how a model, site or file name is written into each output format.

Names come from files a user did not write (a model's node names, a file name, a signature JSON), so every
writer treats them as hostile: no name may change the layout of a CSV or Markdown table, run as a spreadsheet
formula, inject HTML, drive a terminal with escape sequences, or crash an encoder with the lone surrogates
`os.fsdecode` makes of a file name that is not UTF-8.
"""

from __future__ import annotations

import csv
import difflib
import io
import math
import numbers
import re

# What a spreadsheet runs as a formula when a text cell starts with it (OWASP "CSV injection").
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_PLAIN_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")  # "-0.25" is data, not a formula
_MARKDOWN = {"\\": "\\\\", "`": "\\`", "|": "\\|", "*": "\\*", "_": "\\_", "~": "\\~", "[": "\\[", "]": "\\]",
             "&": "&amp;", "<": "&lt;", ">": "&gt;"}


def _escape(ch: str) -> str:
    code = ord(ch)
    if 0xDC80 <= code <= 0xDCFF:  # os.fsdecode's surrogate escape of a byte that is not UTF-8: show the byte
        return f"\\x{code - 0xDC00:02x}"
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def json_safe(text: str) -> str:
    """`text` that encodes as UTF-8: lone surrogates become the backslash escape of the byte or code point."""
    if text.isascii():
        return text
    return "".join(_escape(ch) if 0xD800 <= ord(ch) <= 0xDFFF else ch for ch in text)


def printable(text) -> str:
    """One line of printable text: control and format characters (newlines, ESC, bidi overrides) and lone
    surrogates become backslash escapes, so a name can neither break a line nor be invisible or unencodable."""
    text = str(text)
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else _escape(ch) for ch in text)


def label(text, width: int = 80) -> str:
    """A printable name short enough for a figure: the middle of a long one elided (`abc…xyz`). Drawing every
    glyph of a 200,000-character title took minutes and gigabytes; tables and text keep the whole name."""
    text = printable(text)
    if len(text) <= width:
        return text
    keep = (width - 1) // 2
    return f"{text[:keep]}…{text[-keep:]}"


def short_names(names, limit: int) -> list[str]:
    """Printable names of at most `limit` characters that stay as distinct as the names: a long name keeps its
    end (`…/conv/conv.2/Clip`), and names whose ends coincide keep the text from a little before where they
    first differ (`…features.10/conv…` against `…features.11/conv…`), so two sites never read the same."""
    texts = [printable(n) for n in names]
    shown = [t if len(t) <= limit else "…" + t[len(t) - limit + 1:] for t in texts]
    groups: dict[str, list[int]] = {}
    for i, s in enumerate(shown):
        groups.setdefault(s, []).append(i)
    for members in groups.values():
        if len({texts[i] for i in members}) < 2:
            continue
        for i in members:
            t = texts[i]
            first = min(_common_prefix(t, texts[j]) for j in members if texts[j] != t)
            start = max(0, first - 8)
            s = ("…" if start else "") + t[start:]
            shown[i] = s if len(s) <= limit else s[:limit - 1] + "…"
    seen: dict[str, int] = {}
    for i, s in enumerate(shown):  # names a single window cannot tell apart: the later ones numbered
        if s in seen and texts[i] != texts[seen[s]]:
            tag = f"~{i}"
            shown[i] = s[:max(1, limit - len(tag) - 1)] + "…" + tag if len(s) + len(tag) > limit else s + tag
        seen.setdefault(shown[i], i)
    return shown


def _common_prefix(a: str, b: str) -> int:
    return next((k for k, (ca, cb) in enumerate(zip(a, b, strict=False)) if ca != cb), min(len(a), len(b)))


def csv_cell(value) -> str | float | int:
    """A CSV cell: numbers stay numbers (a negative score is not a formula); text is printable and gets a
    leading `'` when a spreadsheet would run it as a formula."""
    if value is None:
        return ""
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        if isinstance(value, numbers.Integral):
            return int(value)
        value = float(value)
        return f"{value:.6g}" if math.isfinite(value) else str(value)
    text = printable(value)
    return "'" + text if text.startswith(_FORMULA_START) and not _PLAIN_NUMBER.fullmatch(text) else text


def csv_text(rows: list[list]) -> str:
    """RFC 4180 CSV (the csv module's quoting, CRLF line ends) of rows of numbers and text."""
    buf = io.StringIO()
    writer = csv.writer(buf, quoting=csv.QUOTE_MINIMAL, lineterminator="\r\n")
    writer.writerows([[csv_cell(v) for v in row] for row in rows])
    return buf.getvalue()


def md_cell(value) -> str:
    """Text for a Markdown table cell or heading: printable, with the characters Markdown or HTML would act on
    (`|` ending a cell, backticks, emphasis, link brackets, tags and entities) escaped."""
    if value is None:
        return ""
    if isinstance(value, numbers.Real) and not isinstance(value, bool) and not isinstance(value, numbers.Integral):
        return f"{float(value):.6g}"
    text = printable(value)
    return "".join(ch if ch == "_" and _intraword(text, i) else _MARKDOWN.get(ch, ch) for i, ch in enumerate(text))


def _intraword(text: str, i: int) -> bool:
    """An `_` between two letters or digits never opens or closes emphasis (CommonMark): torch_cnn stays as is."""
    return 0 < i < len(text) - 1 and text[i - 1].isalnum() and text[i + 1].isalnum()


def md_table(header: list, rows: list[list]) -> list[str]:
    """The lines of a Markdown (GFM) table, every cell through md_cell."""
    lines = ["| " + " | ".join(md_cell(h) for h in header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(md_cell(c) for c in row) + " |" for row in rows]


def did_you_mean(name: str, choices) -> str:
    """"; did you mean 'affinity'?" for a misspelt name (case aside), else "": for the end of a one-line error."""
    lower = {str(c).lower(): str(c) for c in choices}
    close = difflib.get_close_matches(str(name).lower(), list(lower), n=1, cutoff=0.6)
    return f"; did you mean {lower[close[0]]!r}?" if close else ""

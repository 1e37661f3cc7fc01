"""Terminal tables that fit: columns past the width wrap into further blocks, never a 250-column line."""

from __future__ import annotations

from onnxaff.foundations.text import printable

WIDTH = 120
GAP = 2


def _widths(rows: list[list[str]], header: list[str]) -> list[int]:
    return [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]


def table(rows: list[list], header: list[str]) -> str:
    """Aligned columns; every cell printable (a name can neither break a line nor send escape sequences)."""
    rows, header = [[printable(c) for c in r] for r in rows], [printable(h) for h in header]
    widths = _widths(rows, header)
    lines = [(" " * GAP).join(str(c).ljust(w) for c, w in zip(header, widths, strict=True)).rstrip()]
    lines.append((" " * GAP).join("-" * w for w in widths))
    lines += [(" " * GAP).join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return "\n".join(lines)


def wrapped(rows: list[list], header: list[str], fixed: int, repeat: int = 1, width: int = WIDTH) -> str:
    """The first `fixed` columns, then as many of the others as fit in `width`; the rest go to further
    blocks that repeat the first `repeat` columns (the site number), so every line fits. Cells printable."""
    rows, header = [[printable(c) for c in r] for r in rows], [printable(h) for h in header]
    widths = _widths(rows, header)
    blocks, start = [], fixed
    lead = list(range(fixed))
    while True:
        used = sum(widths[i] + GAP for i in lead)
        cols = []
        for i in range(start, len(header)):
            if cols and used + widths[i] > width:
                break
            cols.append(i)
            used += widths[i] + GAP
        keep = lead + cols
        blocks.append(table([[r[i] for i in keep] for r in rows], [header[i] for i in keep]))
        start = cols[-1] + 1 if cols else len(header)
        if start >= len(header):
            return "\n\n".join(blocks)
        lead = list(range(repeat))

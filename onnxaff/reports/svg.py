"""Signature plots as inline SVG: hovering a point shows its site (id, kind, ops, D) and score ± spread.

Plain SVG with a <title> per point: browsers show it as a tooltip with no script and nothing fetched, so a
report stays one file that opens offline. Each model has its own colour *and* marker (10 colours × 7
markers: distinct up to 70 models); the legend sits outside the plot area, right of it. The elements carry
their data coordinates (`data-x`, `data-y`, `data-xy`, the frame in `data-frame`) and their model (`data-m`,
`data-s` the site index), which the page's script (explore.js) reads to zoom, pan, hide a model and open a
site: the drawing itself is complete without it.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass

from onnxaff.foundations.text import printable

COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
           "#17becf")
MARKERS = ("circle", "square", "triangle", "diamond", "down", "plus", "cross")


def style(k: int) -> tuple[str, str]:
    """Model k's (colour, marker): the pair differs for every k below 70."""
    return COLOURS[k % len(COLOURS)], MARKERS[k % len(MARKERS)]


def _marker(kind: str, x: float, y: float, colour: str, hollow: bool, r: float = 3.6) -> str:
    fill = "white" if hollow else colour
    common = f'fill="{fill}" stroke="{colour}" stroke-width="1.3"'
    if kind == "circle":
        return f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{r}" {common}/>'
    if kind == "square":
        return f'<rect x="{x - r:.1f}" y="{y - r:.1f}" width="{2 * r}" height="{2 * r}" {common}/>'
    if kind in ("triangle", "down", "diamond"):
        pts = {"triangle": [(0, -1.2), (1.1, 0.9), (-1.1, 0.9)], "down": [(0, 1.2), (1.1, -0.9), (-1.1, -0.9)],
               "diamond": [(0, -1.3), (1.1, 0), (0, 1.3), (-1.1, 0)]}[kind]
        return f'<polygon points="{" ".join(f"{x + r * a:.1f},{y + r * b:.1f}" for a, b in pts)}" {common}/>'
    if kind == "plus":
        d = f"M{x - r:.1f},{y:.1f}H{x + r:.1f}M{x:.1f},{y - r:.1f}V{y + r:.1f}"
    else:
        d = f"M{x - r:.1f},{y - r:.1f}L{x + r:.1f},{y + r:.1f}M{x - r:.1f},{y + r:.1f}L{x + r:.1f},{y - r:.1f}"
    return f'<path d="{d}" stroke="{colour}" stroke-width="2" fill="none"/>'


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """Round tick values covering [lo, hi] (1, 2, 2.5 or 5 times a power of ten apart)."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        return [lo]
    raw = (hi - lo) / count
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)
    first = math.ceil(lo / step - 1e-9) * step
    return [round(first + k * step, 12) for k in range(int((hi - first) / step + 1e-9) + 1)]


def _tick_label(v: float) -> str:
    return f"{v:.6g}"


def _esc(v) -> str:
    """A name as SVG text: printable (no control characters, lone surrogates) and escaped."""
    return html.escape(printable(v))


def point_title(model: str, p: dict, metric: str) -> str:
    """The tooltip text (plain, not yet escaped): one line each for the model, the site, D and the score; every
    name printable, so only these line breaks are line breaks."""
    one = p.get("chunks") == 1
    spread = (" (pooled)" if p.get("std") is None else " (1 chunk)" if one else
              f" ± {p['std']:.4f} over {printable(p['chunks'])} chunks (std)")
    partial = " — partial chunk" if p.get("partial") else ""
    ci = (f"\n95 % interval [{p['ci95'][0]:.4f}, {p['ci95'][1]:.4f}] ({_interval_source(p)})"
          if p.get("ci95") else "")
    flags = f"\nflags: {', '.join(printable(f) for f in p['flags'])}" if p.get("flags") else ""
    return (f"{printable(model)}\n#{p['index']} {printable(p['site'])} ({printable(p['kind'])}; "
            f"{printable(p['ops'])})\nD = {printable(p.get('dim') or '?')}\n"
            f"{printable(metric)} = {p['y']:.4f}{spread}{partial}{ci}{flags}")


def _interval_source(p: dict) -> str:
    """How the point's ci95 was made (docs/statistics.md, "Confidence intervals"): one chunk's from its half-chunks,
    else Student t over the chunks, or under `intervals` half the first chunk's half-chunks."""
    if p.get("chunks") == 1:
        return "from 4 half-chunks of the one chunk"
    if p.get("intervals") == "half":
        return f"from the first chunk's half-chunks, over {printable(p['chunks'])} chunks"
    return f"Student t over the {printable(p['chunks'])} chunks"


@dataclass(frozen=True)
class _Frame:
    """The plot area in pixels and the score range it shows: where a (depth, score) point lands."""

    left: int
    top: int
    plot_w: int
    plot_h: int
    lo: float
    hi: float

    def sx(self, v: float) -> float:
        return self.left + v * self.plot_w

    def sy(self, v: float) -> float:
        return self.top + (self.hi - v) / (self.hi - self.lo) * self.plot_h


def _score_range(series: list[tuple[str, list[dict]]]) -> tuple[float, float]:
    """Every finite score (and, with one series, its error bars), padded by 6 %."""
    ys = [p["y"] for _, pts in series for p in pts if p["y"] is not None and math.isfinite(p["y"])]
    if len(series) == 1:  # its error bars are drawn: the axis takes them in
        ys += [c for p in series[0][1] if p["y"] is not None and p.get("ci95") for c in p["ci95"]
               if c is not None and math.isfinite(c)]
    lo, hi = (min(ys), max(ys)) if ys else (0.0, 1.0)
    if hi - lo < 1e-9:
        lo, hi = lo - 0.05, hi + 0.05
    pad = 0.06 * (hi - lo)
    return lo - pad, hi + pad


def _num(v: float) -> str:
    """A data coordinate for the script: enough digits to zoom far in."""
    return f"{v:.10g}"


def _axes(f: _Frame, metric: str, height: int) -> list[str]:
    """Title, frame, grid lines with their ticks (in `yaxis` and `xaxis` groups: the script redraws them when
    zooming), and the two axis labels."""
    out = [f'<text x="{f.left + f.plot_w / 2:.0f}" y="16" text-anchor="middle" font-size="13">'
           f'non-linearity signatures ({_esc(metric)}) — hover a point for its site</text>',
           f'<rect class="frame" x="{f.left}" y="{f.top}" width="{f.plot_w}" height="{f.plot_h}" fill="white" '
           'stroke="#999"/><g class="yaxis">']
    for t in nice_ticks(f.lo, f.hi):
        y = f.sy(t)
        out.append(f'<line x1="{f.left}" x2="{f.left + f.plot_w}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e4e4e4"/>'
                   f'<text x="{f.left - 5}" y="{y + 4:.1f}" text-anchor="end">{_tick_label(t)}</text>')
    out.append('</g><g class="xaxis">')
    for k in range(6):
        x = f.sx(k / 5)
        out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{f.top}" y2="{f.top + f.plot_h}" stroke="#f0f0f0"/>'
                   f'<text x="{x:.1f}" y="{f.top + f.plot_h + 15}" text-anchor="middle">{k / 5:.1f}</text>')
    out.append("</g>")
    out.append(f'<text x="{f.left + f.plot_w / 2:.0f}" y="{height - 8}" text-anchor="middle">'
               f'normalised depth (site index / last)</text>')
    out.append(f'<text transform="translate(14,{f.top + f.plot_h / 2:.0f}) rotate(-90)" text-anchor="middle">'
               f'{_esc(metric)}</text>')
    return out


def _series(f: _Frame, k: int, name: str, pts: list[dict], metric: str, bars: bool) -> list[str]:
    """Series `k`: its line, its points (hollow when flagged or partial, with error bars when `bars`)."""
    colour, marker = style(k)
    good = [p for p in pts if p["y"] is not None and math.isfinite(p["y"])]
    out = [f'<g class="series" data-m="{k}">']
    if len(good) > 1:
        path = " ".join(f"{f.sx(p['x']):.1f},{f.sy(p['y']):.1f}" for p in good)
        data = " ".join(f"{_num(p['x'])},{_num(p['y'])}" for p in good)
        out.append(f'<polyline points="{path}" data-xy="{data}" fill="none" stroke="{colour}" stroke-width="1.4" '
                   f'stroke-dasharray="{"" if k < 10 else "5,3"}" opacity="0.85"/>')
    for p in good:
        ci = p.get("ci95")
        if bars and ci and all(math.isfinite(c) for c in ci):
            out.append(f'<line class="bar" data-x="{_num(p["x"])}" data-lo="{_num(ci[0])}" data-hi="{_num(ci[1])}" '
                       f'x1="{f.sx(p["x"]):.1f}" x2="{f.sx(p["x"]):.1f}" y1="{f.sy(max(ci[0], f.lo)):.1f}" '
                       f'y2="{f.sy(min(ci[1], f.hi)):.1f}" stroke="{colour}" stroke-width="1" opacity="0.7"/>')
        title = html.escape(point_title(name, p, metric))
        hollow = bool(p.get("partial") or p.get("flags"))
        x, y = f.sx(p["x"]), f.sy(p["y"])
        out.append(f'<g class="pt" data-s="{p["index"]}" data-x="{_num(p["x"])}" data-y="{_num(p["y"])}" '
                   f'data-px="{x:.1f}" data-py="{y:.1f}"><title>{title}</title>{_marker(marker, x, y, colour, hollow)}'
                   '</g>')
    return [*out, "</g>"]


def _legend_row(x: int, y: float, marker: str, colour: str, hollow: bool, text: str, model: int | None = None) -> str:
    """One legend entry; a model's (`data-m`) is the button that hides and shows it on the page."""
    which = "" if model is None else f' data-m="{model}"'
    return (f'<g class="legend"{which}>{_marker(marker, x + 8, y, colour, hollow)}'
            f'<text x="{x + 18}" y="{y + 4}">{text}</text></g>')


def signatures_svg(series: list[tuple[str, list[dict]]], metric: str, width: int = 1100, height: int = 400) -> str:
    """series: (model label, points) with points {x (normalised depth), y, std, chunks, partial, index, site,
    kind, ops, dim, ci95, flags}. Hollow markers: flagged scores (docs/statistics.md) and partial chunks. With one
    series, each point's 95 % interval over chunks as an error bar."""
    left, right, top, bottom = 58, 16, 28, 44
    marked = any(p.get("partial") or p.get("flags") for _, pts in series for p in pts)
    labels = [printable(name) for name, _ in series] + (["flagged / partial"] if marked else [])
    legend_w = 16 + 7 * max((len(t) for t in labels), default=4)
    frame = _Frame(left, top, width - left - right, height - top - bottom, *_score_range(series))
    total_w, total_h = width + legend_w, max(height, 30 + 18 * (len(series) + marked))  # + the hollow marker's row
    # inline in HTML5: no namespace attribute needed (and no URL in a page that fetches nothing)
    box = f"{frame.left} {frame.top} {frame.plot_w} {frame.plot_h} 0 1 {_num(frame.lo)} {_num(frame.hi)}"
    out = [f'<svg class="sig" width="{total_w}" height="{total_h}" viewBox="0 0 {total_w} {total_h}" '
           f'data-frame="{box}" data-metric="{_esc(metric)}" font-family="sans-serif" font-size="11" role="img">',
           *_axes(frame, metric, height), '<g class="plot">']
    for k, (name, pts) in enumerate(series):
        out += _series(frame, k, name, pts, metric, bars=len(series) == 1)
    out.append("</g>")
    for k, (name, _) in enumerate(series):
        out.append(_legend_row(width, top + 6 + 18 * k, style(k)[1], style(k)[0], False, _esc(name), k))
    if marked:
        out.append(_legend_row(width, top + 6 + 18 * len(series), "circle", "#777", True, "flagged / partial"))
    out.append("</svg>")
    return "".join(out)


def site_points(sig, metric: str) -> list[dict]:
    """The ok activation sites with a `metric` score, along normalised depth, with what a tooltip shows."""
    sites = [s for s in sig.sites if s.in_signature and metric in s.metrics and s.metrics[metric].mean is not None]
    n = len(sites)
    out = []
    for k, s in enumerate(sites):
        e = s.metrics[metric]
        out.append({"x": k / (n - 1) if n > 1 else 0.0, "y": e.mean, "std": e.std, "chunks": e.chunks,
                    "partial": bool(e.partial), "index": s.index, "site": s.id, "kind": s.kind,
                    "ops": "+".join(s.op_types or []), "dim": s.dim, "ci95": e.ci95, "flags": list(e.flags or []),
                    "intervals": (sig.options or {}).get("intervals", "auto")})
    return out

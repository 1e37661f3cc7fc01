"""Signature plots as inline SVG: hovering a point shows its site (id, kind, ops, D) and score ± spread.

Plain SVG with a <title> per point: browsers show it as a tooltip with no script and nothing fetched, so a
report stays one file that opens offline. Each model has its own colour *and* marker (10 colours × 7
markers: distinct up to 70 models); the legend sits outside the plot area, right of it.
"""

from __future__ import annotations

import html
import math

from onnxaff.text import printable

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
    spread = f" ± {p['std']:.4f} over {printable(p['chunks'])} chunks" if p.get("std") is not None else " (pooled)"
    partial = " — partial chunk" if p.get("partial") else ""
    ci = f"\n95 % interval [{p['ci95'][0]:.4f}, {p['ci95'][1]:.4f}]" if p.get("ci95") else ""
    flags = f"\nflags: {', '.join(printable(f) for f in p['flags'])}" if p.get("flags") else ""
    return (f"{printable(model)}\n#{p['index']} {printable(p['site'])} ({printable(p['kind'])}; "
            f"{printable(p['ops'])})\nD = {printable(p.get('dim') or '?')}\n"
            f"{printable(metric)} = {p['y']:.4f}{spread}{partial}{ci}{flags}")


def signatures_svg(series: list[tuple[str, list[dict]]], metric: str, width: int = 760, height: int = 340) -> str:
    """series: (model label, points) with points {x (normalised depth), y, std, chunks, partial, index, site,
    kind, ops, dim, ci95, flags}. Hollow markers: flagged scores (docs/statistics.md) and partial chunks. With one
    series, each point's 95 % interval over chunks as an error bar."""
    left, right, top, bottom = 58, 16, 28, 44
    marked = any(p.get("partial") or p.get("flags") for _, pts in series for p in pts)
    labels = [printable(name) for name, _ in series] + (["flagged / partial"] if marked else [])
    legend_w = 16 + 7 * max((len(t) for t in labels), default=4)
    plot_w, plot_h = width - left - right, height - top - bottom
    ys = [p["y"] for _, pts in series for p in pts if p["y"] is not None and math.isfinite(p["y"])]
    if len(series) == 1:  # its error bars are drawn: the axis takes them in
        ys += [c for p in series[0][1] if p["y"] is not None and p.get("ci95") for c in p["ci95"]
               if c is not None and math.isfinite(c)]
    lo, hi = (min(ys), max(ys)) if ys else (0.0, 1.0)
    if hi - lo < 1e-9:
        lo, hi = lo - 0.05, hi + 0.05
    pad = 0.06 * (hi - lo)
    lo, hi = lo - pad, hi + pad

    def sx(v):
        return left + v * plot_w

    def sy(v):
        return top + (hi - v) / (hi - lo) * plot_h

    total_w, total_h = width + legend_w, max(height, 30 + 18 * (len(series) + marked))  # + the hollow marker's row
    # inline in HTML5: no namespace attribute needed (and no URL in a page that fetches nothing)
    out = [f'<svg class="sig" width="{total_w}" height="{total_h}" viewBox="0 0 {total_w} {total_h}" '
           f'font-family="sans-serif" font-size="11" role="img">',
           f'<text x="{left + plot_w / 2:.0f}" y="16" text-anchor="middle" font-size="13">'
           f'non-linearity signatures ({_esc(metric)}) — hover a point for its site</text>',
           f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="white" stroke="#999"/>']
    for t in nice_ticks(lo, hi):
        y = sy(t)
        out.append(f'<line x1="{left}" x2="{left + plot_w}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e4e4e4"/>'
                   f'<text x="{left - 5}" y="{y + 4:.1f}" text-anchor="end">{_tick_label(t)}</text>')
    for k in range(6):
        x = sx(k / 5)
        out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top}" y2="{top + plot_h}" stroke="#f0f0f0"/>'
                   f'<text x="{x:.1f}" y="{top + plot_h + 15}" text-anchor="middle">{k / 5:.1f}</text>')
    out.append(f'<text x="{left + plot_w / 2:.0f}" y="{height - 8}" text-anchor="middle">'
               f'normalised depth (site index / last)</text>')
    out.append(f'<text transform="translate(14,{top + plot_h / 2:.0f}) rotate(-90)" text-anchor="middle">'
               f'{_esc(metric)}</text>')
    for k, (name, pts) in enumerate(series):
        colour, marker = style(k)
        good = [p for p in pts if p["y"] is not None and math.isfinite(p["y"])]
        if len(good) > 1:
            path = " ".join(f"{sx(p['x']):.1f},{sy(p['y']):.1f}" for p in good)
            out.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="1.4" '
                       f'stroke-dasharray="{"" if k < 10 else "5,3"}" opacity="0.85"/>')
        for p in good:
            ci = p.get("ci95")
            if len(series) == 1 and ci and all(math.isfinite(c) for c in ci):
                out.append(f'<line x1="{sx(p["x"]):.1f}" x2="{sx(p["x"]):.1f}" y1="{sy(max(ci[0], lo)):.1f}" '
                           f'y2="{sy(min(ci[1], hi)):.1f}" stroke="{colour}" stroke-width="1" opacity="0.7"/>')
            title = html.escape(point_title(name, p, metric))
            hollow = bool(p.get("partial") or p.get("flags"))
            out.append(f'<g class="pt"><title>{title}</title>'
                       f'{_marker(marker, sx(p["x"]), sy(p["y"]), colour, hollow)}</g>')
        ly = top + 6 + 18 * k
        out.append(f'<g class="legend">{_marker(marker, width + 8, ly, colour, False)}'
                   f'<text x="{width + 18}" y="{ly + 4}">{_esc(name)}</text></g>')
    if marked:
        ly = top + 6 + 18 * len(series)
        out.append(f'<g class="legend">{_marker("circle", width + 8, ly, "#777", True)}'
                   f'<text x="{width + 18}" y="{ly + 4}">flagged / partial</text></g>')
    out.append("</svg>")
    return "".join(out)


def site_points(sig, metric: str) -> list[dict]:
    """The ok activation sites with a `metric` score, along normalised depth, with what a tooltip shows."""
    sites = [s for s in sig.sites if s.get("status") == "ok" and s.get("group", "activation") == "activation"
             and (s.get("metrics", {}).get(metric) or {}).get("mean") is not None]
    n = len(sites)
    out = []
    for k, s in enumerate(sites):
        e = s["metrics"][metric]
        out.append({"x": k / (n - 1) if n > 1 else 0.0, "y": e["mean"], "std": e.get("std"),
                    "chunks": e.get("chunks"), "partial": bool(e.get("partial")), "index": s["index"],
                    "site": s["id"], "kind": s["kind"], "ops": "+".join(s.get("op_types") or []),
                    "dim": s.get("dim"), "ci95": e.get("ci95"), "flags": list(e.get("flags") or [])})
    return out

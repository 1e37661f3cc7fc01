"""Accuracy against one statistic as inline SVG, with point labels that do not overlap.

Each label takes the first place around its point, nearest first (around it, then stacked beside it), where
its box meets no other label, no point and stays inside the plot; a label placed away from its point gets a
leader line. Widths are estimated from DejaVu Sans's advance widths (what "sans-serif" is on Linux, wider than
Helvetica or Arial), 5 % added, a full em for any other character: the browser test measures the real boxes.
Hovering a point shows the model and its two numbers (an SVG <title>, as the signature plots).
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass

from onnxaff.foundations.text import printable
from onnxaff.reports.svg import nice_ticks

FONT = 10  # px, the labels'
# Advance widths (em) of DejaVu Sans for the printable ASCII characters, space to tilde.
_EM = [.318, .401, .460, .838, .636, .950, .780, .275, .390, .390, .500, .838, .318, .361, .318, .337, *[.636] * 10,
       .337, .337, .838, .838, .838, .531, 1.0, .684, .686, .698, .770, .632, .575, .775, .752, .295, .295, .656, .557,
       .863, .748, .787, .603, .787, .695, .635, .611, .732, .684, .989, .685, .611, .685, .390, .337, .390, .838,
       .500, .500, .613, .635, .550, .635, .615, .352, .635, .634, .278, .278, .579, .278, .974, .634, .612, .635,
       .635, .411, .521, .392, .634, .592, .818, .592, .592, .525, .636, .337, .636, .838]
CHAR_W = 0.65 * FONT  # for the fixed texts whose width is reserved (R², the flagged legend)
LABEL_H = FONT + 3
LABEL_MAX = 28  # characters shown of a name (the tooltip has it whole)
RADIUS = 4
# (dx, dy) unit directions tried in order at each distance: right, left, above, below, then the diagonals.
DIRECTIONS = ((1, 0), (-1, 0), (0, -1), (0, 1), (1, -1), (-1, -1), (1, 1), (-1, 1))
RINGS = (6, 16, 30, 48, 70)
STACK = 10  # labels stacked above and below a point, each side


@dataclass(frozen=True)
class Box:
    x: float
    y: float
    w: float
    h: float

    def overlap(self, o: Box) -> float:
        """The area the two boxes share."""
        return max(0.0, min(self.x + self.w, o.x + o.w) - max(self.x, o.x)) * \
            max(0.0, min(self.y + self.h, o.y + o.h) - max(self.y, o.y))

    def inside(self, o: Box) -> bool:
        return self.x >= o.x and self.y >= o.y and self.x + self.w <= o.x + o.w and self.y + self.h <= o.y + o.h


def text_width(text: str) -> float:
    """The label's width in px, a little over what the browser draws."""
    return 1.05 * FONT * sum(_EM[ord(c) - 32] if 32 <= ord(c) < 127 else 1.0 for c in text)


def short(name: str) -> str:
    text = printable(name)
    return text if len(text) <= LABEL_MAX else text[:LABEL_MAX - 1] + "…"


def _candidates(px: float, py: float, w: float, h: float) -> list[Box]:
    """Places for a w×h label around (px, py), nearest first: the eight directions at growing distances, then
    columns of labels stacked left and right of the point (where a cluster of points puts its names)."""
    out = []
    for ring in RINGS:
        for dx, dy in DIRECTIONS:
            cx, cy = px + dx * (ring + (w / 2 if dx else 0)), py + dy * (ring + (h / 2 if dy else 0))
            out.append(Box(cx - w / 2, cy - h / 2, w, h))
    for k in range(1, STACK + 1):
        for side in (1, -1):
            for up in (-1, 1):
                cx = px + side * (RINGS[0] + w / 2)
                out.append(Box(cx - w / 2, py + up * k * h - h / 2, w, h))

    def gap(b: Box) -> float:
        return math.hypot(max(b.x - px, 0, px - b.x - b.w), max(b.y - py, 0, py - b.y - b.h))

    return sorted(out, key=gap)


def place_labels(points: list[tuple[float, float]], texts: list[str], area: Box, avoid: tuple[Box, ...] = ()
                 ) -> list[Box]:
    """A box per label, in pixels: greedy, in the points' order, the first free place nearest its point; where
    none is free, the place overlapping least. `avoid`: other text already in the plot."""
    marks = [Box(x - RADIUS, y - RADIUS, 2 * RADIUS, 2 * RADIUS) for x, y in points] + list(avoid)
    placed: list[Box] = []
    for (px, py), text in zip(points, texts, strict=True):
        w, h = text_width(text), LABEL_H
        best, best_cost = None, math.inf
        for box in _candidates(px, py, w, h):
            if not box.inside(area):
                continue
            cost = sum(box.overlap(b) for b in placed) + sum(box.overlap(m) for m in marks)
            if cost < best_cost:
                best, best_cost = box, cost
            if cost == 0:
                break
        placed.append(best or Box(px + RADIUS, py - h / 2, w, h))
    return placed


def scatter_svg(x: list[float], y: list[float], labels: list[str], xlabel: str, fit: dict,
                hollow: list[bool] | None = None, width: int = 440, height: int = 320) -> str:
    """Accuracy (y) against a statistic (x): a point per model (hollow where its statistic includes flagged
    scores), its label, the least-squares line with its R²."""
    left, right, top, bottom = 52, 12, 26, 46
    area = Box(left, top, width - left - right, height - top - bottom)
    hollow = hollow or [False] * len(x)

    def span(vs):
        lo, hi = min(vs), max(vs)
        pad = 0.12 * (hi - lo) if hi > lo else 0.05 * (abs(lo) or 1.0)
        return lo - pad, hi + pad

    (x0, x1), (y0, y1) = span(x), span(y)

    def sx(v):
        return area.x + (v - x0) / (x1 - x0) * area.w

    def sy(v):
        return area.y + (y1 - v) / (y1 - y0) * area.h

    title = f"accuracy against {printable(xlabel)}"
    out = [f'<svg class="scatter" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
           f'font-family="sans-serif" font-size="{FONT}" role="img">',
           f'<text x="{width / 2:.0f}" y="15" text-anchor="middle" font-size="11">{html.escape(title)}</text>',
           f'<rect x="{area.x}" y="{area.y}" width="{area.w}" height="{area.h}" fill="white" stroke="#999"/>']
    for t in nice_ticks(y0, y1, 4):
        out.append(f'<line x1="{area.x}" x2="{area.x + area.w}" y1="{sy(t):.1f}" y2="{sy(t):.1f}" stroke="#eee"/>'
                   f'<text x="{area.x - 4}" y="{sy(t) + 3:.1f}" text-anchor="end">{t:.3g}</text>')
    for t in nice_ticks(x0, x1, 4):
        out.append(f'<line x1="{sx(t):.1f}" x2="{sx(t):.1f}" y1="{area.y}" y2="{area.y + area.h}" stroke="#eee"/>'
                   f'<text x="{sx(t):.1f}" y="{area.y + area.h + 13}" text-anchor="middle">{t:.3g}</text>')
    out.append(f'<text x="{area.x + area.w / 2:.0f}" y="{height - 8}" text-anchor="middle">'
               f'{html.escape(short(xlabel) if len(xlabel) > 60 else printable(xlabel))}</text>'
               f'<text transform="translate(12,{area.y + area.h / 2:.0f}) rotate(-90)" text-anchor="middle">'
               'accuracy</text>')
    avoid = []
    if math.isfinite(fit.get("slope", math.nan)):
        a, b = fit["slope"], fit["intercept"]
        avoid.append(Box(area.x + area.w - 4 - 11 * CHAR_W, area.y + 2, 11 * CHAR_W, LABEL_H))
        out.append(f'<line x1="{sx(min(x)):.1f}" y1="{sy(a * min(x) + b):.1f}" x2="{sx(max(x)):.1f}" '
                   f'y2="{sy(a * max(x) + b):.1f}" stroke="#d62728" stroke-width="1.3"/>'
                   f'<text x="{area.x + area.w - 4}" y="{area.y + 12}" text-anchor="end" fill="#d62728">'
                   f'R² = {fit["r2"]:.3f}</text>')
    points = [(sx(a), sy(b)) for a, b in zip(x, y, strict=True)]
    texts = [short(n) for n in labels]
    if any(hollow):
        avoid.append(Box(area.x + 2, area.y + 3, 15 + 14 * CHAR_W, LABEL_H))
    boxes = place_labels(points, texts, area, tuple(avoid))
    for (px, py), box, text, name, xi, yi, h in zip(points, boxes, texts, labels, x, y, hollow, strict=True):
        tip = html.escape(f"{printable(name)}\n{printable(xlabel)} = {xi:.6g}\naccuracy = {yi:.6g}"
                          + ("\nits statistic includes flagged scores" if h else ""))
        out.append(f'<g class="spt"><title>{tip}</title><circle cx="{px:.1f}" cy="{py:.1f}" r="{RADIUS}" '
                   f'fill="{"white" if h else "#1f77b4"}" stroke="#1f77b4" stroke-width="1.3"/></g>')
        cx, cy = box.x + box.w / 2, box.y + box.h / 2
        if math.hypot(cx - px, cy - py) > max(box.w, box.h) / 2 + 12:  # far from its point: a leader line
            out.append(f'<line x1="{px:.1f}" y1="{py:.1f}" x2="{min(max(px, box.x), box.x + box.w):.1f}" '
                       f'y2="{min(max(py, box.y), box.y + box.h):.1f}" stroke="#aaa" stroke-width="0.7"/>')
        out.append(f'<text class="lab" x="{cx:.1f}" y="{cy + FONT * 0.35:.1f}" text-anchor="middle" '
                   f'data-box="{box.x:.1f} {box.y:.1f} {box.w:.1f} {box.h:.1f}">{html.escape(text)}</text>')
    if any(hollow):
        out.append(f'<circle cx="{area.x + 8}" cy="{area.y + 10}" r="{RADIUS}" fill="white" stroke="#1f77b4"/>'
                   f'<text x="{area.x + 15}" y="{area.y + 13}">flagged scores</text>')
    out.append("</svg>")
    return "".join(out)

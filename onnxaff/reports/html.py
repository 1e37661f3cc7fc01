"""Self-contained HTML: styles inline, plots as data URIs, nothing fetched from a network."""

from __future__ import annotations

import html
import math

from onnxaff.format.protocol import text as protocol_text
from onnxaff.format.signature import DAGGER, DAGGER_NOTE, Signature, signature_stats
from onnxaff.format.siteentry import ScoreEntry
from onnxaff.format.tables import flagged_share
from onnxaff.foundations.text import printable
from onnxaff.metrics.dispatch import stage_entry
from onnxaff.reports import explore, plots, svg
from onnxaff.reports.scatter import scatter_svg
from onnxaff.results.comparison import DTW_DESCRIPTION, Comparison
from onnxaff.results.differences import differences, differences_line, line_of

STYLE = """body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:1em 1.5em;color:#222}
table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:3px 7px;text-align:right}
th{background:#f2f2f2;position:sticky;top:0;z-index:1}td.l,th.l{text-align:left}img{max-width:100%;margin:0.5em 0}
.note{color:#666;font-size:13px}h2{margin-top:1.6em;border-bottom:1px solid #ddd}
.warn{background:#fff4e5;border-left:4px solid #e69500;padding:4px 8px}
.scroll{overflow:auto;max-width:100%;max-height:75vh;margin:1em 0;width:fit-content}
.scroll.matrix tr>:first-child{position:sticky;left:0;background:#f8f8f8}
.scroll.matrix tr:first-child>:first-child{z-index:2}
svg.sig{width:100%;height:auto;display:block}svg.scatter{display:inline-block;margin:0.3em;vertical-align:top}
.tools{font-size:12px;color:#555;margin:0.6em 0 0.2em}.tools button{font-size:12px;margin-right:0.8em}
svg.sig .xaxis,svg.sig .yaxis{pointer-events:none}
.legend{cursor:pointer}.legend.off{opacity:0.35}.legend.off text{text-decoration:line-through}g.pt{cursor:pointer}
#onnxaff-tip{position:fixed;pointer-events:none;background:#fffff4;border:1px solid #999;padding:4px 7px;
font-size:12px;white-space:pre;display:none;z-index:9;box-shadow:1px 1px 4px #aaa}
.detail{border:1px solid #bbb;background:#fcfcfc;padding:0.4em 0.9em;margin:0.5em 0 1em;overflow-x:auto}
.detail h4{margin:0.3em 0}.detail .chunks{font-size:12px;color:#444;word-break:break-all}"""

def _esc(v) -> str:
    """Any value as HTML text: printable (no lone surrogates, control characters) and escaped."""
    return html.escape(printable(v))


def _fmt(v) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return "nan" if math.isnan(v) else f"{v:.4g}"
    if isinstance(v, list | tuple) and all(isinstance(x, str | int | float) for x in v):
        return _esc(", ".join(str(x) for x in v))  # a list of names or dims, not a Python repr
    return _esc(str(v))


def _table(header: list[str], rows: list[list], left: int | set[int] = 1, box: str = "") -> str:
    """left: the first `left` columns, or this set of columns, hold text (left-aligned); the rest numbers. In a
    box that scrolls (the header row stays in view); `box="matrix"` keeps the first column in view too."""
    lefts = set(range(left)) if isinstance(left, int) else set(left)
    head = "".join(f'<th class="{"l" if i in lefts else ""}">{_esc(h)}</th>' for i, h in enumerate(header))
    body = "".join("<tr>" + "".join(f'<td class="{"l" if i in lefts else ""}">{_fmt(c)}</td>'
                                    for i, c in enumerate(r)) + "</tr>" for r in rows)
    return _scroll(f"<table><tr>{head}</tr>{body}</table>", box)


def _scroll(table: str, box: str = "") -> str:
    """A table in a box of the page's width that scrolls, instead of a page that runs off the window."""
    return f'<div class="scroll {box}">{table}</div>' if box else f'<div class="scroll">{table}</div>'


def fmt_shape(shape) -> str:
    """[N, 16, 112, 112] -> N×16×112×112 (the symbolic batch dim whatever its name)."""
    if not shape:
        return "?"
    first = shape[0] if isinstance(shape[0], int) else "N"
    return "×".join(str(d) for d in [first, *shape[1:]])


def fmt_preprocessing(p) -> str:
    """The preprocessing dict of an image folder as one readable line (as it is, where a hand-edited file
    gives it fields of other types: the report is still written)."""
    if not isinstance(p, dict):
        return str(p)
    try:
        return _fmt_preprocessing(p)
    except (TypeError, ValueError, KeyError, IndexError, AttributeError):
        return str(p)


def _fmt_preprocessing(p: dict) -> str:
    parts = [f"preset {p.get('preset')}"]
    if p.get("fit") in ("letterbox", "pad"):
        h, w = p.get("size", ["?", "?"])
        parts.append(f"{p['fit']} to {h}×{w} (pad value {','.join(str(v) for v in p.get('pad_value', []))}, "
                     f"{p.get('anchor')})")
    elif p.get("resize"):
        parts.append(f"resize to {'×'.join(str(d) for d in p['resize'])}")
    elif p.get("resize_shorter_side"):
        parts.append(f"resize shorter side to {p['resize_shorter_side']}")
    if p.get("center_crop"):
        parts.append(f"centre crop {'×'.join(str(d) for d in p['center_crop'])}")
    parts.append(f"{p.get('interpolation')} interpolation")
    scale = p.get("scale")
    parts.append(f"× {scale:.6g}" + (f" {p['offset']:+g}" if p.get("offset") else "") if scale is not None else "")
    if p.get("mean") is not None:
        parts.append(f"− mean ({', '.join(f'{v:g}' for v in p['mean'])})")
    if p.get("std") is not None:
        parts.append(f"÷ std ({', '.join(f'{v:g}' for v in p['std'])})")
    parts.append(f"{p.get('channel_order')}, {p.get('layout')}, {p.get('dtype')}")
    return "; ".join(x for x in parts if x)


def _page(title: str, body: str) -> str:
    """The page with its styles and script inline (explore.js: zoom, hide a model, a site's detail)."""
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{_esc(title)}</title>"
            f"<style>{STYLE}</style></head><body><h1>{_esc(title)}</h1>{body}{explore.script_block()}"
            "</body></html>\n")


def _warnings(lines) -> list[str]:
    """Lines the reader must see before the numbers (options that differ, few models), highlighted."""
    return [f"<p class='warn'>{_esc(line)}</p>" for line in lines if line]


def _img(uri: str, alt: str) -> str:
    return f'<img src="{uri}" alt="{_esc(alt)}">'


STAT_KEYS = ["sites", "mean", "median", "min", "max", "std", "max_over_mean", "share_above_0.95"]


def comparison_page(sigs: list[Signature], comps: list[Comparison], k_clusters: int = 2) -> str:
    """One section per metric: signatures, histograms, statistics, DTW heatmap, dendrogram, neighbours."""
    return _page("onnxaff: signature comparison", _comparison_body(sigs, comps, k_clusters))


def _comparison_body(sigs: list[Signature], comps: list[Comparison], k_clusters: int) -> str:
    parts = [f"<p class='note'>{len(sigs)} models; metrics: {', '.join(_esc(c.metric) for c in comps)}. "
             f"{DTW_DESCRIPTION}{'; length-normalised: divided by sqrt(max length)' if comps[0].normalized else ''}."
             "</p>"]
    parts += _warnings([differences_line(differences(sigs, [c.metric for c in comps]), comps[0].names)])
    parts.append(_protocols(comps[0].names, sigs, [c.metric for c in comps]))
    if len(comps) > 1:
        parts.append(_nav([c.metric for c in comps]))
    parts.append(explore.embed(explore.page_data(zip(comps[0].names, sigs, strict=True))))  # the plots' models
    for comp in comps:
        parts.append(f"<h2 id='m-{_esc(comp.metric)}'>{_esc(comp.metric)}</h2>"
                     + _comparison_section(sigs, comp, k_clusters))
    return "".join(parts)


def _protocols(names: list[str], sigs: list[Signature], metrics: list[str]) -> str:
    """How each model's numbers were made (onnxaff.format.protocol): one line when they share it, else one row each."""
    texts = [protocol_text(s.protocol(), metrics) for s in sigs]
    if len(set(texts)) == 1:
        return f"<p class='note'>Protocol: {_esc(texts[0])}.</p>"
    return "<h3>Protocols</h3>" + _table(["model", "protocol"], [[n, t] for n, t in zip(names, texts, strict=True)],
                                         left={0, 1})


DEMO_INTRO = (
    "<p>The reference networks onnxaff ships, each trained on MNIST digits in its own framework (PyTorch, "
    "scikit-learn, TensorFlow/Keras) or written node by node with onnx.helper, exported to ONNX and analysed "
    "on the same 1024 held-out digits. Accuracies were measured by onnxruntime on those digits.</p>"
    "<p class='note'>What to look for: the residual CNN's scores sit higher than the plain CNN's, with more "
    "sites above 0.95 (the near-linear mode a skip connection creates); GELU and SiLU networks score lower "
    "than the ReLU network of the same architecture; the two exports of the same GELU weights (opsets 17 and "
    "20) and the hand-written copy of the ReLU CNN land at DTW distance 0 from their twins.</p>")


def demo_page(sigs: list[Signature], comps: list[Comparison], corr: dict | None, rows: list[dict],
              metric: str) -> str:
    """The demo's report: the shipped networks (rows' statistics are of `metric`), comparison, correlation."""
    keys = ["model", "framework", "architecture", "sites", "accuracy", "mean", "min", "share_above_0.95"]
    header = [*keys[:5], f"{metric} mean", f"{metric} min", "share > 0.95"]
    parts = [DEMO_INTRO, "<h2>Networks</h2>", networks_table(header, keys, rows, left=3)]
    if comps:
        parts.append(_comparison_body(sigs, comps, k_clusters=3))
    if corr is not None:
        parts.append("<h2>Correlation with accuracy</h2><p class='note'>Distinct networks only (second exports "
                     "of the same weights left out).</p>" + _correlation_body(corr, level=3))
    return _page("onnxaff demo: the shipped reference networks", "".join(parts))


def networks_table(header: list[str], keys: list[str], rows: list[dict], left: int) -> str:
    """The demo's and the study's table of models: statistics marked † where most of their scores carry flags,
    and a column of each model's flagged scores by metric and kind (the rows of a study)."""
    from onnxaff.reports.console import flag_text

    def cell(r, k):
        v = r.get(k)
        if r.get("mostly_flagged") and k in ("mean", "min", "share_above_0.95") and isinstance(v, float):
            return f"{v:.4g}{DAGGER}"
        return v

    body = _table([*header, "flagged sites"], [[*[cell(r, k) for k in keys], flag_text(r.get("flags") or {}) or "-"]
                                               for r in rows], left={*range(left), len(keys)})
    return body + (f"<p class='note'>{_esc(DAGGER_NOTE)}</p>" if any(r.get("mostly_flagged") for r in rows) else "")


def _comparison_section(sigs: list[Signature], comp: Comparison, k_clusters: int) -> str:
    named = {n: [v for v in s.scores(comp.metric) if v is not None] for n, s in zip(comp.names, sigs, strict=True)}
    parts = ["<h3>Signatures</h3>" + _signature_svg(list(zip(comp.names, sigs, strict=True)), comp.metric)]
    parts.append("<h3>Distribution of scores per model</h3>" + _img(plots.histograms(named, comp.metric), "hist"))
    infos = {n: s.metrics.get(comp.metric) for n, s in zip(comp.names, sigs, strict=True)}
    stats = {n: signature_stats(v, infos[n]) for n, v in named.items()}
    keys = STAT_KEYS[:-1]  # the near-linear share by the metric's own direction and range, where it has one
    near = any("near_linear" in st for st in stats.values())

    def share(st):
        nl = st.get("near_linear")
        return f"{100 * nl['share']:.0f}% ({nl['rule']})" if nl else None

    flags = {n: s.flag_summary(comp.metric) for n, s in zip(comp.names, sigs, strict=True)}
    marked = {n: s.mostly_flagged(comp.metric) for n, s in zip(comp.names, sigs, strict=True)}

    def mark(n, v):
        if not marked[n] or v is None or isinstance(v, int):
            return v
        return (f"{v:.4g}" if isinstance(v, float) else v) + DAGGER

    rows = [[n, *[mark(n, st.get(k)) for k in keys], *([mark(n, share(st))] if near else []), flagged_share(flags[n])]
            for n, st in stats.items()]
    parts.append("<h3>Signature statistics</h3>" + _table(["model", *keys, *(["near-linear"] if near else []),
                                                          "flagged sites"], rows)
                 + (f"<p class='note'>{_esc(DAGGER_NOTE)}</p>" if any(marked.values()) else ""))
    parts.append("<h3>DTW distances</h3>" + _img(plots.heatmap(comp.names, comp.distances, comp.order,
                                                              "DTW distance, ordered by the clustering"), "heatmap"))
    parts.append(_table(["model", *comp.names], [[n, *comp.distances[i]] for i, n in enumerate(comp.names)],
                        box="matrix"))
    if comp.linkage is not None:
        clusters = comp.clusters(k_clusters)
        parts.append("<h3>Clustering</h3>" + _img(plots.dendrogram(comp.names, comp.linkage, clusters), "dendrogram"))
        rows = "".join(f"<tr><td class='l'>{_esc(n)}</td><td><span style='color:"
                       f"{plots.cluster_colour(clusters[n])}'>■</span> {clusters[n]}</td></tr>" for n in comp.names)
        parts.append(_scroll(f"<table><tr><th class='l'>model</th><th>cluster (of {k_clusters})</th></tr>{rows}"
                             "</table>"))
    nb = comp.neighbours()
    parts.append("<h3>Nearest neighbours</h3>" + _table(
        ["model", "nearest", "distance", "second", "distance"],
        [[n, *[x for pair in nb[n][:2] for x in pair]] for n in comp.names], left={0, 1, 3}))
    return "".join(parts)


def correlation_page(result: dict) -> str:
    return _page("onnxaff: correlation with accuracy", _correlation_body(result))


def _correlation_body(result: dict, level: int = 2) -> str:
    parts = [*_warnings([*result.get("warnings", ()), line_of(result.get("differences") or [])]),
             f"<p class='note'>R² of a 1-D least-squares line accuracy ≈ a·statistic + b, and Pearson r; "
             f"signature statistics of <b>{_esc(result['metric'])}</b> and model-level baselines. "
             f"p: {_esc(result.get('p_method', ''))}, two-sided (|r| at least the observed). "
             f"{_esc(result.get('interval_method', ''))}.</p>"]
    if result.get("left_out"):
        parts.append(f"<p class='note'>Not in every signature, left out: {_esc(', '.join(result['left_out']))}"
                     "</p>")
    for group, table in result["table"].items():
        ranked = sorted(table.items(), key=lambda kv: -(kv[1]["r2"] if math.isfinite(kv[1]["r2"]) else -1))
        parts.append(f"<h{level}>Group: {_esc(group)}</h{level}>")
        parts.append(_table(["statistic", "R²", "Pearson r", "r 95 % interval", "p", "slope", "intercept", "models",
                             "flagged models"],
                            [[f, v["r2"], v["pearson_r"], _interval(v.get("r_ci95")), v.get("p_value"), v["slope"],
                              v["intercept"], v["models"], v.get("flagged_models", 0)] for f, v in ranked]))
        members = [r for r in result["rows"] if group == "all" or r["group"] == group]
        plotted = []
        for feat, fit in ranked[:6]:
            x = [r["features"][feat] for r in members]
            own = feat.startswith(f"{result['metric']} ")  # baselines do not come from site scores
            hollow = [own and r.get("flagged", 0) > 0 for r in members]
            plotted.append(scatter_svg(x, [r["accuracy"] for r in members], [r["model"] for r in members], feat, fit,
                                       hollow))
        parts.append(f"<div>{''.join(plotted)}</div>")
    from onnxaff.reports.markdown import flagged_sites

    parts.append(f"<h{level}>Models</h{level}><p class='note'>Flagged sites: scores behind the signature "
                 "statistics that carry flags (few rows, partial chunk, ...; docs/statistics.md); their models are "
                 "drawn hollow above. Comparisons can leave such scores out: the exclude-flagged option of compare and "
                 "correlate, onnxaff.format.signature.drop_flagged in Python.</p>"
                 + _table(["model", "accuracy", "group", "flagged sites"],
                          [[r["model"], r["accuracy"], r["group"], flagged_sites(r)] for r in result["rows"]]))
    return "".join(parts)


def _interval(ci) -> str | None:
    return None if not ci else f"[{ci[0]:.3f}, {ci[1]:.3f}]"


def _score_cell(entry: ScoreEntry | None, ci: bool = False):
    """A per-site score for the tables: the mean (with `ci`, ± the half-width of its ci95, the longer side where
    clipped), marked * when scored on one partial chunk."""
    if entry is None or entry.mean is None:
        return None if entry is None else entry.status
    mean, (lo, hi) = entry.mean, entry.ci95 or (None, None)
    text = f"{mean:.4g}" + (f" ±{max(hi - mean, mean - lo):.2g}" if ci and lo is not None and hi is not None else "")
    return text + "*" if entry.partial else (text if ci else mean)


def _signature_svg(named_sigs: list[tuple[str, Signature]], metric: str) -> str:
    return svg.signatures_svg([(name, svg.site_points(sig, metric)) for name, sig in named_sigs], metric)


def _nav(metrics: list[str]) -> str:
    links = " · ".join(f'<a href="#m-{_esc(m)}">{_esc(m)}</a>' for m in metrics)
    return f"<p class='note'>Metrics: {links}</p>"


def single_page(sig: Signature, metric: str | None = None) -> str:
    """One model: a section per metric (`metric` first) with its signature (hover a point for its site) and
    histogram, the per-site table of every metric, residual stages, model and data."""
    name = sig.model.get("name", "model")
    metrics = [m for m, info in sig.metrics.items() if not stage_entry(info)]
    scored = [m for m in metrics if any(v is not None for v in sig.scores(m))]
    order = [metric, *[m for m in scored if m != metric]] if metric in scored else scored
    parts = [_nav(order) if len(order) > 1 else "", explore.embed(explore.page_data([(name, sig)])),
             f"<p class='note'>Protocol: {_esc(protocol_text(sig.protocol()))}.</p>"]
    for m in order:
        values = [v for v in sig.scores(m) if v is not None]
        parts.append(f"<h2 id='m-{_esc(m)}'>{_esc(m)}</h2>" + _signature_svg([(name, sig)], m)
                     + _img(plots.histograms({name: values}, m), f"histogram of {m}"))
    rows = [[s.index, s.id, s.kind, fmt_shape(s.input_shape), s.dim, s.status,
             *[c for m in metrics for c in (_score_cell(s.metrics.get(m), ci=True),
                                            ", ".join(s.metrics[m].flags if m in s.metrics else ()) or "-")]]
            for s in sig.sites]
    parts.append("<h2>Sites</h2><p class='note'>Scores: mean ± half-width of the 95 % interval over the chunks; "
                 "flags per metric (docs/statistics.md).</p>"
                 + _table(["#", "id", "kind", "shape", "D", "status", *[h for m in metrics for h in (m, f"{m} flags")]],
                          rows, left={1, 2, 3, 5, *range(7, 6 + 2 * len(metrics), 2)}))
    marked = [m for m in order if sig.mostly_flagged(m)]
    if marked:
        parts.append(f"<p class='warn'>Most {_esc(', '.join(marked))} scores of this model carry flags: "
                     + _esc("; ".join(f"{m} {flagged_share(sig.flag_summary(m))}" for m in marked)) + "</p>")
    if any(e.partial for s in sig.sites for e in s.metrics.values()):
        parts.append("<p class='note'>* scored on one partial chunk: the data has fewer rows than the chunk size.</p>")
    if sig.stages:
        track = [m for m in sig.metrics if m not in metrics]
        rows = [[st.index, st.id, st.length, st.dim, st.status, *[_score_cell(st.metrics.get(m)) for m in track]]
                for st in sig.stages]
        described = "; ".join(f"{m}: {(sig.metrics[m] or {}).get('description', '')}" for m in track)
        parts.append(f"<h2>Residual stages</h2><p>Trajectory metrics: {html.escape(printable(described))}.</p>"
                     + _table(["#", "stage", "blocks", "D", "status", *track], rows, left={1, 4}))
    stats = sig.model.get("stats", {})
    parts.append("<h2>Model</h2>" + _table(["field", "value"], [[k, v] for k, v in sig.model.items() if k != "stats"]
                                            + [[k, v] for k, v in stats.items()], left={0, 1}))
    data = {k: (fmt_preprocessing(v) if k == "preprocessing" else v) for k, v in sig.data.items() if k != "files"}
    parts.append("<h2>Data</h2>" + _table(["field", "value"], [[k, v] for k, v in data.items()], left={0, 1}))
    if sig.warnings:
        parts.append("<h2>Warnings</h2><ul>" + "".join(f"<li>{_esc(w)}</li>" for w in sig.warnings) + "</ul>")
    return _page(f"onnxaff: {name}", "".join(parts))

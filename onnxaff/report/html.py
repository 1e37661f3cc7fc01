"""Self-contained HTML: styles inline, plots as data URIs, nothing fetched from a network."""

from __future__ import annotations

import html
import math

from onnxaff.compare import DTW_DESCRIPTION, Comparison
from onnxaff.report import plots
from onnxaff.signature import Signature, signature_stats
from onnxaff.text import printable

STYLE = """body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse;margin:1em 0;font-size:13px}td,th{border:1px solid #ccc;padding:3px 7px;text-align:right}
th{background:#f2f2f2}td.l,th.l{text-align:left}img{max-width:100%;margin:0.5em 0}.note{color:#666;font-size:13px}
h2{margin-top:1.6em;border-bottom:1px solid #ddd}"""


def _esc(v) -> str:
    """Any value as HTML text: printable (no lone surrogates, control characters) and escaped."""
    return html.escape(printable(v))


def _fmt(v) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return "nan" if math.isnan(v) else f"{v:.4g}"
    return _esc(str(v))


def _table(header: list[str], rows: list[list], left: int = 1) -> str:
    head = "".join(f'<th class="{"l" if i < left else ""}">{_esc(h)}</th>' for i, h in enumerate(header))
    body = "".join("<tr>" + "".join(f'<td class="{"l" if i < left else ""}">{_fmt(c)}</td>'
                                    for i, c in enumerate(r)) + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _page(title: str, body: str) -> str:
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{_esc(title)}</title>"
            f"<style>{STYLE}</style></head><body><h1>{_esc(title)}</h1>{body}</body></html>\n")


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
    for comp in comps:
        parts.append(f"<h2>{_esc(comp.metric)}</h2>" + _comparison_section(sigs, comp, k_clusters))
    return "".join(parts)


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
    parts = [DEMO_INTRO, "<h2>Networks</h2>", _table(header, [[r[k] for k in keys] for r in rows], left=3)]
    if comps:
        parts.append(_comparison_body(sigs, comps, k_clusters=3))
    if corr is not None:
        parts.append("<h2>Correlation with accuracy</h2><p class='note'>Distinct networks only (second exports "
                     "of the same weights left out).</p>" + _correlation_body(corr, level=3))
    return _page("onnxaff demo: the shipped reference networks", "".join(parts))


def _comparison_section(sigs: list[Signature], comp: Comparison, k_clusters: int) -> str:
    named = {n: [v for v in s.scores(comp.metric) if v is not None] for n, s in zip(comp.names, sigs, strict=True)}
    flagged = {n: [bool(x["metrics"][comp.metric].get("flags")) for x in s.sites if x["status"] == "ok"
                   and x.get("group", "activation") == "activation" and x["metrics"].get(comp.metric, {}).get("mean")
                   is not None] for n, s in zip(comp.names, sigs, strict=True)}
    parts = ["<h3>Signatures</h3>" + _img(plots.signatures(named, comp.metric, flagged), "signatures")]
    parts.append("<h3>Distribution of scores per model</h3>" + _img(plots.histograms(named, comp.metric), "hist"))
    rows = [[n, *[signature_stats(v).get(k) for k in STAT_KEYS]] for n, v in named.items()]
    parts.append("<h3>Signature statistics</h3>" + _table(["model", *STAT_KEYS], rows))
    parts.append("<h3>DTW distances</h3>" + _img(plots.heatmap(comp.names, comp.distances, comp.order,
                                                              "DTW distance, ordered by the clustering"), "heatmap"))
    parts.append(_table(["model", *comp.names], [[n, *comp.distances[i]] for i, n in enumerate(comp.names)]))
    if comp.linkage is not None:
        parts.append("<h3>Clustering</h3>" + _img(plots.dendrogram(comp.names, comp.linkage), "dendrogram"))
        clusters = comp.clusters(k_clusters)
        parts.append(_table(["model", f"cluster (of {k_clusters})"], [[n, clusters[n]] for n in comp.names]))
    nb = comp.neighbours()
    parts.append("<h3>Nearest neighbours</h3>" + _table(
        ["model", "nearest", "distance", "second", "distance"],
        [[n, *[x for pair in nb[n][:2] for x in pair]] for n in comp.names]))
    return "".join(parts)


def correlation_page(result: dict) -> str:
    return _page("onnxaff: correlation with accuracy", _correlation_body(result))


def _correlation_body(result: dict, level: int = 2) -> str:
    parts = [f"<p class='note'>R² of a 1-D least-squares line accuracy ≈ a·statistic + b, and Pearson r; "
             f"signature statistics of <b>{_esc(result['metric'])}</b> and model-level baselines.</p>"]
    if result.get("left_out"):
        parts.append(f"<p class='note'>Not in every signature, left out: {_esc(', '.join(result['left_out']))}"
                     "</p>")
    for group, table in result["table"].items():
        ranked = sorted(table.items(), key=lambda kv: -(kv[1]["r2"] if math.isfinite(kv[1]["r2"]) else -1))
        parts.append(f"<h{level}>Group: {_esc(group)}</h{level}>")
        parts.append(_table(["statistic", "R²", "Pearson r", "slope", "intercept", "models", "flagged models"],
                            [[f, v["r2"], v["pearson_r"], v["slope"], v["intercept"], v["models"],
                              v.get("flagged_models", 0)] for f, v in ranked]))
        members = [r for r in result["rows"] if group == "all" or r["group"] == group]
        for feat, fit in ranked[:6]:
            x = [r["features"][feat] for r in members]
            own = feat.startswith(f"{result['metric']} ")  # baselines do not come from site scores
            hollow = [own and r.get("flagged", 0) > 0 for r in members]
            parts.append(_img(plots.scatter(x, [r["accuracy"] for r in members], [r["model"] for r in members],
                                            feat, fit, hollow), feat))
    from onnxaff.compare import flagged_sites

    parts.append(f"<h{level}>Models</h{level}><p class='note'>Flagged sites: scores behind the signature "
                 "statistics that carry flags (few rows, partial chunk, ...; docs/statistics.md); their models are "
                 "drawn hollow above. --exclude-flagged leaves such scores out.</p>"
                 + _table(["model", "accuracy", "group", "flagged sites"],
                          [[r["model"], r["accuracy"], r["group"], flagged_sites(r)] for r in result["rows"]]))
    return "".join(parts)


def single_page(sig: Signature, metric: str = "affinity") -> str:
    name = sig.model.get("name", "model")
    values = [v for v in sig.scores(metric) if v is not None]
    parts = []
    entries = [s["metrics"][metric] for s in sig.sites if s["status"] == "ok" and s.get("group", "activation")
               == "activation" and s["metrics"].get(metric, {}).get("mean") is not None]
    if values:
        parts.append(_img(plots.signature_detail(name, entries, metric), "signature"))
        parts.append(_img(plots.histograms({name: values}, metric), "histogram"))
    metrics = [m for m, info in sig.metrics.items() if info.get("needs") != "tracks"]
    rows = [[s["index"], s["id"], s["kind"], str(s.get("input_shape")), s.get("dim"), s["status"],
             *[s["metrics"].get(m, {}).get("mean") for m in metrics],
             ", ".join(sorted({f for m in metrics for f in s["metrics"].get(m, {}).get("flags", [])})) or "-"]
            for s in sig.sites]
    parts.append("<h2>Sites</h2>" + _table(["#", "id", "kind", "shape", "D", "status", *metrics,
                                            "flags (docs/statistics.md)"], rows, left=4))
    if sig.stages:
        track = [m for m in sig.metrics if m not in metrics]
        rows = [[st["index"], st["id"], st["length"], st.get("dim"), st["status"],
                 *[st["metrics"].get(m, {}).get("mean") for m in track]] for st in sig.stages]
        parts.append("<h2>Residual stages</h2><p>Trajectory metrics: lss = path length / net displacement per "
                     "example (1 = straight), ots = W2²(h⁰, h^L) / mean ‖h^L − h⁰‖² (1 = optimal-transport-like)."
                     "</p>" + _table(["#", "stage", "blocks", "D", "status", *track], rows, left=2))
    stats = sig.model.get("stats", {})
    parts.append("<h2>Model</h2>" + _table(["field", "value"], [[k, v] for k, v in sig.model.items() if k != "stats"]
                                            + [[k, v] for k, v in stats.items()]))
    data = {k: v for k, v in sig.data.items() if k not in ("files",)}
    parts.append("<h2>Data</h2>" + _table(["field", "value"], [[k, v] for k, v in data.items()]))
    if sig.warnings:
        parts.append("<h2>Warnings</h2><ul>" + "".join(f"<li>{_esc(w)}</li>" for w in sig.warnings) + "</ul>")
    return _page(f"onnxaff: {name}", "".join(parts))

"""Plain-text renderings for the terminal: a run's summary, score cells, and the tables of the demo and study."""

from __future__ import annotations

from collections.abc import Mapping

from onnxaff.errors import option
from onnxaff.format.protocol import short
from onnxaff.format.signature import DAGGER, DAGGER_NOTE
from onnxaff.format.siteentry import ScoreEntry, SiteEntry
from onnxaff.foundations.terminal import table, wrapped
from onnxaff.foundations.text import printable, short_names

# One letter per flag in the terminal table (a legend line follows it); the signature keeps the names.
FLAG_CODES = {"few_rows": "F", "partial": "P", "eps_dominated": "E", "rank_deficient": "R", "rank_ambiguous": "A",
              "constant_output": "C"}
STAT_HEADER = ["signature", "sites", "mean", "median", "min", "max", "std", "near-linear"]


def fmt_shape(shape) -> str:
    return "?" if shape is None else "[" + ",".join(str(d) for d in shape) + "]"


def fmt_value(v, spec: str = ".4f") -> str:
    return "-" if v is None else format(v, spec)


def fmt_score(entry: Mapping | None, chunks: bool = True, ci: bool = False) -> str:
    """mean±std (chunks); with `ci`, ± is the ci95's half-width instead; without `chunks`, no chunk count. `entry`:
    a signature's ScoreEntry, or the dict onnxaff.collection.entries builds."""
    if not entry:
        return "-"
    e = ScoreEntry.from_json(entry)
    if e.mean is None:
        return e.status or "-"
    mark = "*" if e.partial else ""
    if e.std is None:  # pooled metrics: one value over all rows
        return f"{e.mean:.4f} (pooled)"
    spread = f"±{e.std:.4f}"
    if ci:  # symmetric about the mean (t or half-sampling) until clipped to the metric's range: the longer side
        lo, hi = e.ci95 or (None, None)
        spread = f"±{max(hi - e.mean, e.mean - lo):.4f}" if lo is not None and hi is not None else ""
    if not chunks:
        return f"{e.mean:.4f}{spread}{mark}"
    return f"{e.mean:.4f}{spread} ({e.chunks}){mark}"


def _site_chunks(s: SiteEntry) -> str:
    counts = {e.chunks for e in s.metrics.values() if e.std is not None}
    counts.discard(None)
    return "/".join(str(c) for c in sorted(counts)) or "-"


def _flag_code(flag: str) -> str:
    return FLAG_CODES.get(flag, f"[{flag}]")


def site_lines(sig, names: list[str]) -> list[str]:
    """The per-site table (scores as mean±ci half-width) and its legend lines, within 120 columns."""
    rows, seen_flags = [], set()
    ids = short_names([s.id for s in sig.sites], 32)
    for s, shown in zip(sig.sites, ids, strict=True):
        cells = [fmt_score(s.metrics.get(n), chunks=False, ci=True) for n in names]
        flags = sorted({f for n in names if n in s.metrics for f in s.metrics[n].flags})
        seen_flags.update(flags)
        rows.append([s.index, shown, s.kind, s.dim or "-", s.status, _site_chunks(s),
                     "".join(_flag_code(f) for f in flags) or "-", *cells])
    lines = [wrapped(rows, ["#", "site", "kind", "D", "status", "chunks", "flags", *names], fixed=7, repeat=2),
             "scores: mean±half-width of the 95 % interval over the chunks (the std is in the signature)"]
    if seen_flags:
        legend = ", ".join(f"{_flag_code(f)} {f}" for f in sorted(seen_flags))
        lines.append(f"flags: {legend} (docs/statistics.md)")
    return lines


def stage_lines(sig, track_names: list[str]) -> list[str]:
    """The residual stages' trajectory scores (mean±std (chunks)), or nothing when the run has no stage."""
    if not sig.stages:
        return []
    ids = short_names([st.id for st in sig.stages], 40)
    rows = [[st.index, shown, st.length, st.dim or "-", st.status, *[fmt_score(st.metrics.get(n)) for n in track_names]]
            for st, shown in zip(sig.stages, ids, strict=True)]
    header = ["#", "residual stage", "blocks", "D", "status", *[f"{n} mean±std (chunks)" for n in track_names]]
    return [wrapped(rows, header, fixed=5), ""]


def statistics_lines(sig) -> list[str]:
    """Each metric's signature statistics over its scored sites, with the near-linear share where defined."""
    rows, marked = [], False
    for n, st in sig.summary().items():
        if st.get("sites"):
            near, mark = st.get("near_linear"), DAGGER if sig.mostly_flagged(n) else ""
            marked = marked or bool(mark)
            rows.append([n, st["sites"], *(f"{st[k]:.4f}{mark}" for k in ("mean", "median", "min", "max", "std")),
                         f"{100 * near['share']:.0f}%{mark} ({near['rule']})" if near else "-"])
    return ([table(rows, STAT_HEADER)] + ([DAGGER_NOTE] if marked else [])) if rows else []


def run_lines(sig) -> list[str]:
    """The model, its data and how fast the run went."""
    d, rt = sig.data, sig.runtime
    lines = ["", printable(f"{sig.model['name']}: {d['samples']} samples from {d['source']}"),
             printable(f"protocol {short(sig.protocol())}, "
                       f"{rt['providers'][0]}, {rt['seconds']:.1f} s ({rt['samples_per_second']} samples/s)")]
    if any(e.partial for s in sig.sites for e in s.metrics.values()):
        lines.append(f"* scored on one partial chunk: the data has fewer rows than the chunk size "
                     f"({sig.options['chunk_size']})")
    return lines


def summary_lines(sig) -> list[str]:
    """What a person reads after a run: sites, stages, signature statistics, then the run itself."""
    from onnxaff.metrics.dispatch import stage_entry

    names = [n for n, info in sig.metrics.items() if not stage_entry(info)]
    track_names = [n for n in sig.metrics if n not in names]
    return [*site_lines(sig, names), "", *stage_lines(sig, track_names), *statistics_lines(sig), *run_lines(sig)]


ROW_KEYS = ("model", "sites", "accuracy", "mean", "min", "share_above_0.95", "flags", "mostly_flagged")


def flag_text(flags: dict) -> str | None:
    """`affinity 34 of 35 (eps_dominated 34, few_rows 2); affinity_lw ...` from {metric: Signature.flag_summary},
    the metrics with flagged scores only; None when none has any."""
    parts = [f"{m} {f['flagged']} of {f['scored']} ("
             + ", ".join(f"{k} {n}" for k, n in sorted(f["kinds"].items(), key=lambda kv: -kv[1])) + ")"
             for m, f in flags.items() if f["flagged"]]
    return "; ".join(parts) or None


def flag_lines(rows: list[dict]) -> list[str]:
    """A line per model whose scores carry flags, with each flag's count, and the legend of the dagger."""
    lines = [printable(f"{r['model']}: flagged sites: {text}") for r in rows
             if (text := flag_text(r.get("flags") or {}))]
    if any(r.get("mostly_flagged") for r in rows):
        lines.append(DAGGER_NOTE)
    return lines


def models_table(rows: list[dict], metric: str, extra: list[str] | None = None) -> str:
    """The demo's and the study's table: a row per model with its `metric` statistics (marked † where most of
    their scores carry flags), after the `extra` columns (default: every column a row has beyond those), then a
    line per model whose scores carry flags."""
    extra = [k for k in (rows[0] if rows else {}) if k not in ROW_KEYS] if extra is None else extra

    def mark(r, text):
        return text + DAGGER if r.get("mostly_flagged") and text != "-" else text

    body = table([[r["model"], *[r[k] for k in extra], r["sites"], fmt_value(r["accuracy"]),
                   mark(r, fmt_value(r["mean"])), mark(r, fmt_value(r["min"])),
                   mark(r, fmt_value(r["share_above_0.95"], ".0%"))] for r in rows],
                 ["model", *extra, "sites", "accuracy", f"{metric} mean", "min", ">0.95"])
    return "\n".join([body, *flag_lines(rows)])


def fmt_seconds(s: float) -> str:
    """Seconds as a person reads them: 0.42 s, 12 s, 3.5 min, 1.2 h."""
    if s < 10:
        return f"{s:.2f} s"
    if s < 120:
        return f"{s:.0f} s"
    return f"{s / 60:.1f} min" if s < 7200 else f"{s / 3600:.1f} h"


def estimate_lines(est: dict) -> list[str]:
    """A run's cost preview (onnxaff.analysis.cost.Estimate.to_dict()): a row per site, then the totals."""
    from onnxaff.foundations.memory import size

    metrics = est["metrics"]
    items = est["sites"] + est["stages"]
    ids = short_names([s["id"] for s in items], 40)
    rows = []
    for s, shown in zip(items, ids, strict=True):
        if s["status"] != "ok":
            rows.append([s["index"], shown, s["kind"], "-", "-", "-", "-", s["status"], *["-"] * len(metrics)])
            continue
        chunks = f"{s['chunks']}{' (partial)' if s['partial'] else ''}"
        cells = [fmt_seconds(s["seconds"][m]) if m in s["seconds"] else "-" for m in metrics]
        needs = "/".join(f"{s['rows_needed'][m]:,}" if m in s.get("rows_needed", {}) else "-" for m in metrics)
        rows.append([s["index"], shown, s["kind"], s["dim"] if s["dim"] is not None else "?", f"{s['rows']:,}", needs,
                     chunks, ", ".join(s["few_rows"]) or "-", *cells])
    secs = est["seconds"]
    scoring = ", ".join(f"{m} {fmt_seconds(t)}" for m, t in secs["scoring"].items())
    plain = secs["plain_inference"]
    ratio = f", {secs['wall'] / plain:.1f}× the plain model's inference" if plain else ""
    plain = f" (the plain model: {fmt_seconds(plain)})" if plain is not None else ""
    return [
        printable(f"{est['model']}: {est['examples']:,} examples from {est['data']} in {est['batches']} batches of "
                  f"{est['batch_size']}, chunks of {est['chunk_size']}, reduce={est['reduce']}, {est['provider']}"),
        wrapped(rows, ["#", "site", "kind", "D", "rows/chunk", f"needs ({'/'.join(metrics)})", "chunks", "few_rows",
                       *[f"{m} s" for m in metrics]], fixed=8, repeat=2),
        f"predicted: inference {fmt_seconds(secs['inference'])}{plain}, scoring "
        f"{fmt_seconds(sum(secs['scoring'].values()))} ({scoring}), start and setup "
        f"{fmt_seconds(secs['startup'] + secs['setup'])}",
        f"predicted: wall {fmt_seconds(secs['wall'])}{ratio}, peak memory {size(est['peak_bytes'])} "
        f"(this preview took {fmt_seconds(est['calibration_seconds'])}; docs/cost.md)",
        data_need_line(est),
    ]


def data_need_line(est: dict) -> str:
    """How many examples (and what chunk size) make every site unflagged few_rows."""
    examples, chunk = est.get("examples_needed"), est.get("chunk_size_needed")
    if examples is None:
        return f"data: no site flagged few_rows with {est['examples']:,} examples"
    with_chunk = f" with {option('chunk_size', str(chunk))}" if chunk is not None else ""
    return (f"data: every site unflagged few_rows from {max(examples, est['examples']) if chunk else examples:,} "
            f"examples{with_chunk} (now {est['examples']:,}, chunks of {est['chunk_size']})")


def estimates_table(estimates: dict[str, dict]) -> str:
    """A study's cost preview: a row per model (label -> Estimate.to_dict()), then the study's totals (time adds
    up; memory is the largest model's, as the models run one after another)."""
    from onnxaff.foundations.memory import size

    rows = [[label, len(e["sites"]), f"{e['examples']:,}", fmt_seconds(e["seconds"]["inference"]),
             fmt_seconds(sum(e["seconds"]["scoring"].values())), fmt_seconds(e["seconds"]["wall"]),
             size(e["peak_bytes"])] for label, e in estimates.items()]
    wall = sum(e["seconds"]["wall"] for e in estimates.values())
    peak = max((e["peak_bytes"] for e in estimates.values()), default=0)
    return "\n".join([table(rows, ["model", "sites", "examples", "inference", "scoring", "wall", "peak memory"]),
                      f"predicted for the study: wall {fmt_seconds(wall)}, peak memory {size(peak)} (one model's)"])

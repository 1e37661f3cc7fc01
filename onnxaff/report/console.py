"""Plain-text renderings for the terminal: a run's summary, score cells, and the tables of the demo and study."""

from __future__ import annotations

from onnxaff.signature import DAGGER, DAGGER_NOTE
from onnxaff.terminal import table, wrapped
from onnxaff.text import printable, short_names

# One letter per flag in the terminal table (a legend line follows it); the signature keeps the names.
FLAG_CODES = {"few_rows": "F", "partial": "P", "eps_dominated": "E", "rank_deficient": "R", "rank_ambiguous": "A",
              "constant_output": "C"}
STAT_HEADER = ["signature", "sites", "mean", "median", "min", "max", "std", "near-linear"]


def fmt_shape(shape) -> str:
    return "?" if shape is None else "[" + ",".join(str(d) for d in shape) + "]"


def fmt_value(v, spec: str = ".4f") -> str:
    return "-" if v is None else format(v, spec)


def fmt_score(entry: dict | None, chunks: bool = True, ci: bool = False) -> str:
    """mean±std (chunks); with `ci`, ± is the ci95's half-width instead; without `chunks`, no chunk count."""
    if not entry:
        return "-"
    if entry.get("mean") is None:
        return entry.get("status", "-")
    mark = "*" if entry.get("partial") else ""
    if entry.get("std") is None:  # pooled metrics: one value over all rows
        return f"{entry['mean']:.4f} (pooled)"
    spread = f"±{entry['std']:.4f}"
    if ci:  # symmetric about the mean (t or half-sampling) until clipped to the metric's range: the longer side
        lo, hi = entry.get("ci95") or (None, None)
        spread = f"±{max(hi - entry['mean'], entry['mean'] - lo):.4f}" if lo is not None and hi is not None else ""
    if not chunks:
        return f"{entry['mean']:.4f}{spread}{mark}"
    return f"{entry['mean']:.4f}{spread} ({entry['chunks']}){mark}"


def _site_chunks(s: dict) -> str:
    counts = {e.get("chunks") for e in s.get("metrics", {}).values() if e and e.get("std") is not None}
    counts.discard(None)
    return "/".join(str(c) for c in sorted(counts)) or "-"


def _flag_code(flag: str) -> str:
    return FLAG_CODES.get(flag, f"[{flag}]")


def site_lines(sig, names: list[str]) -> list[str]:
    """The per-site table (scores as mean±ci half-width) and its legend lines, within 120 columns."""
    rows, seen_flags = [], set()
    ids = short_names([s["id"] for s in sig.sites], 32)
    for s, shown in zip(sig.sites, ids, strict=True):
        cells = [fmt_score(s["metrics"].get(n), chunks=False, ci=True) for n in names]
        flags = sorted({f for n in names for f in (s["metrics"].get(n) or {}).get("flags") or []})
        seen_flags.update(flags)
        rows.append([s["index"], shown, s["kind"], s.get("dim") or "-", s["status"], _site_chunks(s),
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
    ids = short_names([st["id"] for st in sig.stages], 40)
    rows = [[st["index"], shown, st["length"], st.get("dim") or "-", st["status"],
             *[fmt_score(st["metrics"].get(n)) for n in track_names]]
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
             printable(f"chunks of {sig.options['chunk_size']}, reduce={sig.options['reduce']}, "
                       f"{rt['providers'][0]}, {rt['seconds']:.1f} s ({rt['samples_per_second']} samples/s)")]
    if any(e.get("partial") for s in sig.sites for e in s["metrics"].values()):
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

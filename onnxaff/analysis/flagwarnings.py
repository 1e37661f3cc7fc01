"""Where people look: one warning line per flag kind over a signature's sites, with counts and what to do.

Read off the typed entries assembly builds (onnxaff.format.siteentry: a SiteEntry's `dim`, `dim_y` and `metrics`, a
ScoreEntry's `status`, `flags` and `dead`), the same records every reader of the signature gets; the flags themselves
are the collection's (onnxaff.collection.stats.metric_flags).
"""

from __future__ import annotations

from onnxaff.collection.stats import rows_needed
from onnxaff.errors import option
from onnxaff.format.siteentry import SiteEntry

# Warnings name options with errors.option: the signature's text says the field, the CLI prints the flag.
_FLAG_TEXT = {
    "few_rows": ("have fewer rows per chunk than their dimension needs",
                 f"raise {option('chunk_size')} and the number of examples, or see docs/statistics.md"),
    "partial": (f"were scored on one partial chunk (fewer rows than {option('chunk_size')})", "give more examples"),
    "eps_dominated": ("have activations so small that the metric's absolute ε{eps} moves the score",
                      "a metric whose ε is relative to the covariance does not have this (docs/statistics.md)"),
    "rank_deficient": ("have a numerically rank-deficient input X", "in-sample R² fits fewer directions there"),
    "rank_ambiguous": ("have a direction of X at r2's rank cutoff, which another correct reduction of the same "
                       "data could fit or drop", f"their R² may differ by 1e-2 between {option('reduce_in', 'graph')} "
                       f"and {option('reduce_in', 'numpy')} (docs/statistics.md)"),
    "constant_output": ("have constant (dead) output features that move the score by more than its interval "
                        "(dropped, the live features score differently{dead})", "{dead_todo}"),
}
# What a dead feature is to a metric, by its own declaration (higher_is_more_linear None: descriptive)
_DEAD_TODO = {False: "a linearity score reads a constant feature as an affine map of its input",
              True: "a descriptive metric, not a linearity score, describes the dead features with the live ones"}


def _dead_todo(names: list[str], metrics) -> str:
    """The constant_output advice in the flagged metrics' own terms (a descriptive one is never 'linear')."""
    kinds = {m.higher_is_more_linear is None for m in metrics if m.spec in names}
    return "; ".join(_DEAD_TODO[k] for k in sorted(kinds or {False})) + (
        "; each entry's `dead` says how many (docs/statistics.md)")


def _eps_text(names: list[str], metrics) -> str:
    """` (ε)` of the flagged metrics as the run set it, saying so where each is its metric's default (the
    constructor's, Metric.parameters); empty where none of them is among `metrics`."""
    flagged = [m for m in metrics if m.spec in names and m.eps is not None]
    if not flagged:
        return ""
    text = ", ".join(f"{e:g}" for e in sorted({float(m.eps) for m in flagged}))
    default = all(m.eps == type(m).parameters().get("eps") for m in flagged)
    return f" ({text}, its default)" if default else f" ({text})"


def flag_warnings(sites: list[SiteEntry], metrics=()) -> list[str]:
    """One line per flag kind over all sites and metrics, with counts and what to do (replaces per-site lines);
    `metrics` (the run's Metric instances) give the rows a few_rows site would need."""
    per_dim = {m.spec: m.rows_per_dim for m in metrics}
    lines = []
    for kind, (what, todo) in _FLAG_TEXT.items():
        counts, worst, dead = {}, None, None
        for s in sites:
            for name, e in s.metrics.items():
                if e.status != "ok":
                    continue
                hit, total = counts.get(name, (0, 0))
                flagged = kind in (e.flags or ())
                counts[name] = (hit + flagged, total + 1)
                if flagged and e.dead:
                    dead = max(dead or (0, 1), tuple(e.dead), key=lambda t: t[0] / t[1])
                if flagged and kind == "few_rows" and s.dim:
                    need = rows_needed(per_dim.get(name), max(s.dim, s.dim_y or 0))
                    worst = max(worst or (0, 0), (need, s.dim))
        parts = [f"{name} {hit} of {total}" for name, (hit, total) in counts.items() if hit]
        if parts:
            extra = f" (up to {worst[0]:,} rows for d = {worst[1]:,})" if worst else ""
            names = [n for n, (hit, _) in counts.items() if hit]
            text = what.format(eps=_eps_text(names, metrics), dead=f"; dead: up to {dead[0]:,} of {dead[1]:,}"
                               if dead else "")
            lines.append(f"{'; '.join(parts)} sites {text}{extra}; {todo.format(dead_todo=_dead_todo(names, metrics))}")
    return lines

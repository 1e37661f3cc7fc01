"""Every number of the shipped models' runs, written to numbers.json, so a refactor can prove it changed none.

Three runs per shipped network on its shipped digits: the demo's (the default protocol and metrics), the paper's
protocol with the metrics that were the defaults before it (affinity and affinity_lw at 512 rows per chunk, one
row per example: those numbers have not moved since they were first frozen), and every built-in metric with
`--blocks all` under the paper's rows. numbers.json also records the environment that froze them. Rerun this
only when a change of numbers is intended, and say why in the commit:
`python -m tests.golden.freeze [MODEL ...] [--runs RUN,...]` from the repository root.
How closely another machine reproduces them is measured by `python -m tests.golden.perturb` (tolerances.json).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ALL_METRICS = ["affinity", "affinity_lw", "affinity_rel", "affinity_bc", "cka", "cka_pooled", "r2", "r2_heldout",
               "r2_pooled", "nlc", "sparsity_change", "entropy_change", "lss", "ots"]
PAPER_ROWS = {"chunk_size": 512, "reduce": "mean"}  # onnxaff.format.protocol.NAMED["paper"]: kept literal, frozen here
RUNS = {"demo": {}, "paper": {"metrics": ["affinity", "affinity_lw"], **PAPER_ROWS},
        "all": {"metrics": ALL_METRICS, "blocks": ["residual", "attention", "mlp"], **PAPER_ROWS}}


def _numbers(entry: dict) -> dict:
    """A metric entry's numbers and flags: mean, std and per-chunk values (None where there is no number)."""
    def clean(v):
        return None if v is None or (isinstance(v, float) and not math.isfinite(v)) else v
    out = {k: ([clean(x) for x in entry[k]] if isinstance(entry.get(k), list) else clean(entry.get(k)))
           for k in ("mean", "std", "values", "status")}
    out["flags"] = list(entry.get("flags") or [])
    return out


def numbers(sig) -> dict:
    """What a signature says in numbers, keyed by site id and metric."""
    sites = {s["id"]: {"kind": s["kind"], "status": s["status"],
                       "metrics": {m: _numbers(e) for m, e in sorted(s.get("metrics", {}).items())}}
             for s in sig.sites}
    stages = [{m: _numbers(e) for m, e in sorted(st.get("metrics", {}).items())} for st in sig.stages]
    return {"sites": sites, "stages": stages, "network": sig.network}


def run_all(models=None, runs=tuple(RUNS), **runtime) -> dict:
    """{"model/run": numbers} of the shipped models; `runtime` (threads, graph_optimization, reduce_in) as
    analyze takes them: what another machine changes."""
    from onnxaff import analyze
    from onnxaff_models import shipped_models

    out = {}
    for model in shipped_models():
        if models and model.name not in models:
            continue
        for run in runs:
            options = RUNS[run]
            sig = analyze(model.path, str(model.data), progress=False, chunk_workers=0, **options, **runtime)
            out[f"{model.name}/{run}"] = json.loads(json.dumps(numbers(sig)))  # through JSON, as the file goes
    return out


if __name__ == "__main__":
    from tests.golden.environment import environment

    args = sys.argv[1:]
    chosen = tuple(RUNS)
    if "--runs" in args:
        at = args.index("--runs")
        chosen, args = tuple(args[at + 1].split(",")), args[:at] + args[at + 2:]
    models = args or None
    runs = run_all(models, chosen)
    if models or chosen != tuple(RUNS):  # some runs refrozen: the others stay as they were
        runs = {**json.loads((HERE / "numbers.json").read_text())["runs"], **runs}
    frozen = {"environment": environment(), "runs": runs}
    (HERE / "numbers.json").write_text(json.dumps(frozen, indent=1, sort_keys=True) + "\n")
    print(f"wrote {len(runs)} runs to {HERE / 'numbers.json'}")

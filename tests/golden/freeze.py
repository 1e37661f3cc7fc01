"""Every number of the shipped models' runs, written to numbers.json, so a refactor can prove it changed none.

Two runs per shipped network on its shipped digits: the demo's (default metrics) and one with every
built-in metric and `--blocks all`. Rerun this script only when a change of numbers is intended, and
say why in the commit: `python tests/golden/freeze.py`.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ALL_METRICS = ["affinity", "affinity_lw", "cka", "cka_pooled", "r2", "r2_heldout", "r2_pooled", "nlc",
               "sparsity_change", "entropy_change", "lss", "ots"]
RUNS = {"demo": {}, "all": {"metrics": ALL_METRICS, "blocks": ["residual", "attention", "mlp"]}}


def _numbers(entry: dict) -> dict:
    """A metric entry's numbers: mean, std and per-chunk values (None where there is no number)."""
    def clean(v):
        return None if v is None or (isinstance(v, float) and not math.isfinite(v)) else v
    return {k: ([clean(x) for x in entry[k]] if isinstance(entry.get(k), list) else clean(entry.get(k)))
            for k in ("mean", "std", "values", "status")}


def numbers(sig) -> dict:
    """What a signature says in numbers, keyed by site id and metric."""
    sites = {s["id"]: {"kind": s["kind"], "status": s["status"],
                       "metrics": {m: _numbers(e) for m, e in sorted(s.get("metrics", {}).items())}}
             for s in sig.sites}
    stages = [{m: _numbers(e) for m, e in sorted(st.get("metrics", {}).items())} for st in sig.stages]
    return {"sites": sites, "stages": stages, "network": sig.network}


def run_all(models=None) -> dict:
    from onnxaff import analyze
    from onnxaff_models import shipped_models

    out = {}
    for model in shipped_models():
        if models and model.name not in models:
            continue
        for run, options in RUNS.items():
            sig = analyze(model.path, str(model.data), progress=False, chunk_workers=0, **options)
            out[f"{model.name}/{run}"] = numbers(sig)
    return out


if __name__ == "__main__":
    result = run_all(sys.argv[1:] or None)
    (HERE / "numbers.json").write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    print(f"wrote {len(result)} runs to {HERE / 'numbers.json'}")

"""How far the golden numbers move under what another machine changes: the tolerances of the golden test.

Float32 features from onnxruntime differ between machines: the instruction set picks other kernels, the core
count another split of each reduction, and onnxruntime's graph optimisations fuse nodes into kernels that
round differently. This study runs the golden models (freeze.RUNS) under every combination of intra-op
threads (1, 2, 4), graph optimisation (all, disabled) and where the site features are reduced (in the graph,
in float64 numpy), and records for every metric the largest spread of any of its numbers over these
configurations, scaled as the golden test compares: |a − b| / max(1, |b|). The golden test's tolerance for a
metric is MULTIPLE times that spread (at least FLOOR). Written to tolerances.json; the table of
docs/reproducibility.md is rendered from it (tests/test_docs.py holds them equal).

    python -m tests.golden.perturb            # about 15 minutes on 2 cores
"""

from __future__ import annotations

import itertools
import json
import sys
import time

from tests.golden.compare import HERE, leaves, scaled
from tests.golden.environment import environment
from tests.golden.freeze import run_all

FACTORS = {"threads": (1, 2, 4), "graph_optimization": ("all", "disable"), "reduce_in": ("graph", "numpy")}
# Another CPU's kernels are not among the perturbations here: a factor of 10 over the largest spread seen
# covers them (the differences reported from another CPU, docs/reproducibility.md, are all inside it).
MULTIPLE = 10.0
FLOOR = 1e-10  # a metric no perturbation moves still gets this much (its numbers are sums of float64 terms)


def configurations() -> list[dict]:
    return [dict(zip(FACTORS, values, strict=True)) for values in itertools.product(*FACTORS.values())]


def spreads(results: list[tuple[dict, dict]]) -> dict[str, dict]:
    """Per tolerance key: the largest scaled spread over configurations, where it was, and per factor the
    largest spread between two configurations that differ in that factor alone."""
    flat = [(config, {p: (k, v) for run, nums in runs.items() for p, k, v in leaves(nums, run)})
            for config, runs in results]
    out: dict[str, dict] = {}

    def note(key, value, path, factor=None):
        slot = out.setdefault(key, {"spread": 0.0, "where": None, "by": dict.fromkeys(FACTORS, 0.0)})
        if factor:
            slot["by"][factor] = max(slot["by"][factor], value)
        elif value >= slot["spread"]:
            slot["spread"], slot["where"] = value, path if value > 0 else slot["where"]

    paths = set.intersection(*(set(f) for _, f in flat))
    for path in sorted(paths):
        key = flat[0][1][path][0]
        values = [f[path][1] for _, f in flat]
        if key is None or not all(isinstance(v, float) for v in values):
            continue
        lo, hi = min(values), max(values)
        note(key, scaled(hi, lo) if abs(lo) >= abs(hi) else scaled(lo, hi), path)
        for (ca, fa), (cb, fb) in itertools.combinations(flat, 2):
            changed = [k for k in FACTORS if ca[k] != cb[k]]
            if len(changed) == 1:
                note(key, scaled(fa[path][1], fb[path][1]), path, changed[0])
    return out


def labels_that_move(results) -> list[str]:
    """Statuses, kinds, flags or shapes that differ between configurations: these cannot take a tolerance."""
    flat = [{p: v for run, nums in runs.items() for p, k, v in leaves(nums, run)} for _, runs in results]
    paths = set.union(*(set(f) for f in flat))
    moved = []
    for path in sorted(paths):
        values = [f.get(path, "(missing)") for f in flat]
        if not all(isinstance(v, float) for v in values) and len({json.dumps(v) for v in values}) > 1:
            moved.append(f"{path}: {values}")
    return moved


DOC = HERE.parents[1] / "docs" / "reproducibility.md"
BEGIN, END = "<!-- tolerance table: python -m tests.golden.perturb writes it -->", "<!-- end of tolerance table -->"


def table(study: dict) -> str:
    """The per-metric table of docs/reproducibility.md, from tolerances.json."""
    rows = ["| metric | largest spread | threads | graph optimisation | reduction path | golden tolerance | "
            "where the largest spread was |", "|---|---|---|---|---|---|---|"]
    for key, found in sorted(study["spread"].items()):
        by = found["by"]
        rows.append(f"| `{key}` | {found['spread']:.1e} | {by['threads']:.1e} | {by['graph_optimization']:.1e} | "
                    f"{by['reduce_in']:.1e} | {study['tolerance'][key]:.1e} | {found['where'] or '-'} |")
    return "\n".join(rows)


def write_table(study: dict) -> None:
    text = DOC.read_text()
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    DOC.write_text(f"{head}{BEGIN}\n{table(study)}\n{END}{tail}")


def main(models=None) -> None:
    results, seconds = [], {}
    for config in configurations():
        started = time.perf_counter()
        results.append((config, run_all(models, **config)))
        name = ",".join(f"{k}={v}" for k, v in config.items())
        seconds[name] = round(time.perf_counter() - started, 1)
        print(f"{name}: {seconds[name]} s", file=sys.stderr, flush=True)
    found = spreads(results)
    moved = labels_that_move(results)
    study = {"factors": {k: list(v) for k, v in FACTORS.items()}, "models": models or "all shipped",
             "multiple": MULTIPLE, "floor": FLOOR, "environment": environment(), "seconds": seconds,
             "labels_that_moved": moved}
    out = {"study": study, "spread": found,
           "tolerance": {k: max(FLOOR, float(f"{MULTIPLE * v['spread']:.2g}")) for k, v in sorted(found.items())}}
    (HERE / "tolerances.json").write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    if not models:
        write_table(out)
    print(f"wrote {HERE / 'tolerances.json'}: {len(found)} metrics, {len(moved)} labels moved", file=sys.stderr)
    for line in moved[:20]:
        print("  moved:", line, file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1:] or None)

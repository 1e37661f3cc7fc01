"""The candidates for a bias-corrected affinity score (issue 29), on the finite-sample study's sites and draws.

Each chunk of the study's grid (the same sites, the same seed, so `affinity` reproduces docs/statistics.md's
table) is scored by:

- aff: the paper's estimator (affinity_score);
- rich2: Richardson extrapolation in 1/n of D = (1 − ρ)² from the chunk and its two halves (a + b/n);
- rich3: the same with the four quarters too (a + b/n + c/n²): affinity_bc's default;
- xfit_lw: cross-fitting: the affine map (Ledoit–Wolf covariances, means) fitted on one half, the other half
  transported and matched to its own Y rows (exact assignment), both ways averaged, over 2 tr Σ_Y of the chunk
  (with the unbiased covariances instead of Ledoit–Wolf the map off the fitting half's span is ε^{-1/2}: ρ ≪ 0);
- floor: the noise floor of empirical transport subtracted, as debiased Sinkhorn divergences do:
  D − ½·W2²(Y_a, Y_b)/(2 tr Σ_Y), Y_a and Y_b the two halves of Y.

Usage: python benchmarks/affinity_bc_candidates.py [--max-d 512] [--out docs/affinity_bc_candidates.json]
Prints per cell the worst site's bias (and the largest sd) of each candidate.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from finite_sample_study import study_cells  # noqa: E402

from plugins.affinity import affine_ot_map, affinity_score, exact_w2_squared  # noqa: E402
from plugins.affinity_bc import SEED, _parts, affinity_bc_score  # noqa: E402
from plugins.linalg import EPS, ledoit_wolf  # noqa: E402

CANDIDATES = ("aff", "rich2", "rich3", "xfit_lw", "floor")


def scores(x: np.ndarray, y: np.ndarray) -> dict:
    n, d = x.shape
    aff = affinity_score(x, y)
    dist = (1.0 - aff) ** 2
    yc = y - y.mean(axis=0)
    tr = float(np.einsum("ij,ij->", yc, yc)) / (n - 1) + EPS * d
    halves = _parts(n, 2, SEED + 1)
    cross = []
    for a, b in ((halves[0], halves[1]), (halves[1], halves[0])):
        sx, sy = ledoit_wolf(x[a])[0], ledoit_wolf(y[a])[0]
        amap = affine_ot_map(sx + EPS * np.eye(d), sy + EPS * np.eye(d))
        cross.append(exact_w2_squared((x[b] - x[a].mean(axis=0)) @ amap + y[a].mean(axis=0), y[b]))
    floor = exact_w2_squared(y[halves[0]], y[halves[1]])
    rho = lambda v: 1.0 - math.sqrt(min(max(v, 0.0), 1.0))  # noqa: E731
    return {"aff": aff, "rich2": affinity_bc_score(x, y, order=2), "rich3": affinity_bc_score(x, y, order=3),
            "xfit_lw": rho(float(np.mean(cross)) / (2 * tr)), "floor": rho(dist - 0.5 * floor / (2 * tr))}


def run(max_d: int) -> list[dict]:
    rng = np.random.default_rng(20261204)  # the study's seed: the same sites and chunks
    out = []
    for d, n, reps, sites in study_cells(rng, False):
        t0 = time.perf_counter()
        for site in sites:
            vals = {c: [] for c in CANDIDATES}
            for _ in range(reps):
                x, y = site.draw(n, rng)  # drawn even where not scored: keeps the study's stream of draws
                if d > max_d or n < 8:
                    continue
                for c, v in scores(x, y).items():
                    vals[c].append(v)
            if not vals["aff"]:
                continue
            pop = site.population["affinity"]
            out.append({"d": d, "n": n, "sigma": site.sigma, "spectrum": site.spectrum, "reps": reps,
                        "population": pop,
                        **{c: [float(np.mean(v) - pop), float(np.std(v, ddof=1))] for c, v in vals.items()}})
        if d <= max_d:
            print(f"d={d} n={n} {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
    return out


def table(rows: list[dict]) -> str:
    ratios = sorted({r["n"] / r["d"] for r in rows})
    lines = ["| candidate | d | " + " | ".join(f"n/d={r:g}" for r in ratios) + " |", "|---|---|" + "---|" * len(ratios)]
    for c in CANDIDATES:
        for d in sorted({r["d"] for r in rows}):
            row = []
            for ratio in ratios:
                cs = [r for r in rows if r["d"] == d and r["n"] / r["d"] == ratio]
                if not cs:
                    row.append("")
                    continue
                worst = max(cs, key=lambda r: abs(r[c][0]))
                row.append(f"{worst[c][0]:+.3f} (±{max(r[c][1] for r in cs):.3f})")
            lines.append(f"| {c} | {d} | " + " | ".join(row) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-d", type=int, default=512)
    ap.add_argument("--out", default="docs/affinity_bc_candidates.json")
    args = ap.parse_args()
    rows = run(args.max_d)
    Path(args.out).write_text(json.dumps(rows, separators=(",", ":")))
    print(table(rows))


if __name__ == "__main__":
    main()

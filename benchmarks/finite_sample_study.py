"""Finite-sample study: bias and spread of affinity (plain, _lw, _bc), cka and in-sample r2 against rows per chunk.

Why: every metric here is a plug-in estimator from one chunk of n rows of dimension d; below some n/d its
expected value is not the population value. This measures how far, on synthetic sites whose population
values are known exactly, and derives the rows-per-chunk rule onnxaff's `few_rows` flag uses.

Sites ("rotated elementwise sites"): pre-activations z_k ~ N(μ_k, s_k²) independent, with s_k² following a
flat or a 1/k spectrum and μ_k/s_k in [−1, 1]; Y_k = σ(z_k), σ ∈ {ReLU, tanh, GELU}; then X = z Qᵀ and
Y = σ(z) Qᵀ with one random orthogonal Q, so both covariances are dense (correlated features). affinity,
affinity_lw and cka are invariant under this joint rotation, and the population values follow from 1-D
integrals per coordinate (the affine OT map pushes the Gaussian X onto N(m_Y, Σ_Y) exactly, so W2² is the
sum over coordinates of the 1-D W2² between σ(z_k) and its Gaussian fit, through quantile functions);
in-sample r2's population value is the mean over Y's rotated columns of 1 − Σ_k Q_jk² r_k / Σ_k Q_jk² v_k.
Integrals: midpoint rule on 2^16 quantiles (error ≲ 1e-5, checked against the closed forms for ReLU).

Confidence intervals (what onnxaff reports as ci95), checked for coverage on the same draws:
k ≥ 2 chunks: mean ± t_{k−1} · sd/√k; one chunk: half-sampling (H random halves, ± t_{H−1} · sd of the halves'
scores around each other), see docs/statistics.md. Each half-sampled chunk keeps its 8 half scores, so the
coverage of H = 4, 6 and 8 halves (the first H of the same 8: half_sample_rows draws them in turn) and of the
`half` method over k chunks (mean ± t_{H−1} · sd_halves/√k, the halves of the group's first chunk) come from the
same draws.

Also measured: how often the same intervals cover the *population* value (population_coverage), and affinity_bc
beside affinity against issue 29's target (bc_table).

Usage: python benchmarks/finite_sample_study.py [--quick] [--intervals-only] [--seed S] [--out docs/statistics]
--intervals-only scores only the cells whose one-chunk interval is measured (n·d ≤ 2^16): the same draws as the
full study (every other cell is drawn, not scored), so the interval figures are the full study's, in minutes.
Writes OUT.json (every cell) and OUT.png (the plot); prints the markdown tables for docs/statistics.md.
--protocol-grid: `affinity`'s bias under the default protocol (4·d-row chunks) and the paper's (512-row chunks),
σ ∈ {ReLU, tanh, GELU} × d ∈ {32 … 512} × both spectra, the same sites and population values; writes
docs/statistics_default_grid.json (or OUT.json) and prints its table (2 CPU minutes; --quick: d ≤ 64).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

# One BLAS thread: the chunks are small, and a pool per process spins against the other process's on 2 cores.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402
from scipy.special import erf, ndtri  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from onnxaff.collection.stats import entry_ci, half_sample_rows, mean_ci, t975  # noqa: E402
from plugins.affinity import affinity_score  # noqa: E402
from plugins.affinity_bc import affinity_bc_score  # noqa: E402
from plugins.cka import linear_cka  # noqa: E402
from plugins.r2 import r2_in_sample  # noqa: E402

METRICS = ("affinity", "affinity_lw", "affinity_bc", "cka", "r2")
SIGMAS = {
    "relu": lambda z: np.maximum(z, 0.0),
    "tanh": np.tanh,
    "gelu": lambda z: 0.5 * z * (1.0 + erf(z / math.sqrt(2.0))),
}
LEVELS = 64  # distinct (μ, s) pairs per site; coordinates cycle through them
GRID = 2**16


def score(metric: str, x: np.ndarray, y: np.ndarray) -> float:
    if metric == "affinity":
        return affinity_score(x, y)
    if metric == "affinity_lw":
        return affinity_score(x, y, shrinkage="ledoit_wolf")
    if metric == "affinity_bc":
        return affinity_bc_score(x, y) if len(x) >= 8 else math.nan  # needs 2 rows per quarter
    if metric == "cka":
        return linear_cka(x, y)
    return r2_in_sample(x, y)


class Site:
    """One synthetic site of dimension d with its exact population values."""

    def __init__(self, sigma: str, spectrum: str, d: int, rng: np.random.Generator):
        self.sigma, self.spectrum, self.d = sigma, spectrum, d
        levels = min(LEVELS, d)
        k = np.arange(1, levels + 1)
        var = np.ones(levels) if spectrum == "flat" else 1.0 / k
        shift = rng.uniform(-1.0, 1.0, levels)
        idx = np.arange(d) % levels
        self.s, self.mu = np.sqrt(var)[idx], (shift * np.sqrt(var))[idx]
        q, r = np.linalg.qr(rng.standard_normal((d, d)))
        self.q = q * np.sign(np.diag(r))
        self.population = self._population(levels, idx)

    def _population(self, levels: int, idx: np.ndarray) -> dict:
        u = ndtri((np.arange(GRID) + 0.5) / GRID)
        u = u - u.mean()
        f = SIGMAS[self.sigma]
        m, v, c, w2 = (np.empty(levels) for _ in range(4))
        for j in range(levels):
            s, mu = self.s[j], self.mu[j]
            y = f(mu + s * u)
            m[j] = y.mean()
            yc = y - m[j]
            v[j] = yc @ yc / GRID
            c[j] = s * (u @ yc) / GRID
            w2[j] = np.mean((np.sort(y) - m[j] - np.sqrt(v[j]) * u) ** 2)  # quantile coupling: 1-D W2²
        vx = self.s[:levels] ** 2 * (u @ u / GRID)
        v, c, w2, vx = v[idx], c[idx], w2[idx], vx[idx]
        resid = v - c**2 / vx
        q2 = self.q**2
        return {
            "affinity": 1.0 - math.sqrt(w2.sum() / (2.0 * v.sum())),
            "cka": float((c**2).sum() / math.sqrt((vx**2).sum() * (v**2).sum())),
            "r2": float(np.mean(1.0 - (q2 @ resid) / (q2 @ v))),
        }

    def draw(self, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        z = self.mu + self.s * rng.standard_normal((n, self.d))
        return z @ self.q.T, SIGMAS[self.sigma](z) @ self.q.T


def check_relu_closed_form() -> float:
    """Largest gap between the quadrature and the closed forms of ReLU's moments (zero-mean input)."""
    site = Site("relu", "flat", 8, np.random.default_rng(0))
    site.mu[:] = 0.0
    pop = site._population(8, np.arange(8))
    v = 0.5 - 1.0 / (2.0 * math.pi)
    w2 = 2.0 * v - 2.0 * math.sqrt(v) * 0.5  # E[σ(u)u] = 1/2; σ monotone so the quantile coupling is u ↔ u
    return max(abs(pop["affinity"] - (1.0 - math.sqrt(w2 / (2.0 * v)))), abs(pop["cka"] - 0.25 / v))


RATIOS = (0.25, 0.5, 1, 2, 4, 8, 16, 32)
TAIL = (64, 128)  # beyond the grid, where cheap (d ≤ 32): does the affinity's bias keep shrinking?


def cells(quick: bool):
    dims = (8, 32, 128) if quick else (8, 32, 128, 512, 2048)
    for d in dims:
        for r in RATIOS + (TAIL if d <= 32 else ()):
            n = int(d * r)
            # d = 2048 only at the paper's 512 rows: one more cell there costs ~5 min on 2 cores.
            if n < 4 or n > (1024 if quick else 2048) or (d >= 512 and n > 2 * d) or (d >= 2048 and n > 512):
                continue
            yield d, n


def reps_for(d: int, n: int, quick: bool) -> int:
    """Independent chunks per site and cell: many where they are cheap, a few where the spread is small."""
    budget = 2e5 if quick else 1e6
    return int(np.clip(budget // (n * max(d, 64)), 3 if d >= 512 else 4, 32))


SITE_KINDS = tuple((s, sp) for s in SIGMAS for sp in ("flat", "power"))  # (σ, spectrum): "power" is 1/k


def sites_for(d: int) -> list[tuple[str, str]]:
    pairs = list(SITE_KINDS)
    return pairs if d < 512 else pairs[::2] if d < 2048 else [("relu", "flat"), ("gelu", "power")]


HALVES_MEASURED = (4, 6, 8)  # half-sample counts whose coverage is measured (the first H of 8 each time)


def half_cell(d: int, n: int) -> bool:
    """Cells whose draws also get a one-chunk interval (the first 4 chunks): the cheap ones."""
    return n >= 16 and n * d <= 2**16


def half_scores(metric: str, x: np.ndarray, y: np.ndarray, seed: int) -> list:
    """[chunk score, [its 8 half scores]]: the rows onnxaff's runs take (half_sample_rows, seeded)."""
    return [score(metric, x, y), [score(metric, x[r], y[r]) for r in half_sample_rows(x.shape[0], 8, seed)]]


def study_cells(rng: np.random.Generator, quick: bool):
    """(d, n, reps, sites) of every cell in the study's order: each width's sites are drawn from `rng` before its
    cells, so a caller that draws its chunks from the same `rng` between them replays the study's stream."""
    for d in sorted({d for d, _ in cells(quick)}):
        sites = [Site(s, sp, d, rng) for s, sp in sites_for(d)]
        for dd, n in cells(quick):
            if dd == d:
                yield d, n, reps_for(d, n, quick), sites


SEED = 20261204  # the study's draws; another --seed draws fresh ones (coverage measured on more than one stream)


def run(quick: bool, intervals_only: bool = False, seed: int = SEED) -> dict:
    rng = np.random.default_rng(seed)
    out = {"closed_form_gap": check_relu_closed_form(), "cells": []}
    for d, n, reps, sites in study_cells(rng, quick):
        t0 = time.perf_counter()
        if intervals_only and not half_cell(d, n):  # drawn (the same random stream), not scored
            for site in sites:
                for _ in range(reps):
                    site.draw(n, rng)
            continue
        for site in sites:
            vals = {m: [] for m in METRICS}
            halves = {m: [] for m in METRICS}
            for rep in range(reps):
                x, y = site.draw(n, rng)
                for m in METRICS:
                    vals[m].append(score(m, x, y))
                if rep < 4 and half_cell(d, n):  # one-chunk CI: half-sampling, on cheap cells
                    for m in METRICS:
                        halves[m].append(half_scores(m, x, y, seed=rep))
            for m in METRICS:
                v = np.array(vals[m])
                if np.isnan(v).any():  # affinity_bc below 8 rows (d = 8, n = 4): not scored
                    continue
                pop = site.population["affinity" if m.startswith("affinity") else m]
                out["cells"].append({
                    "d": d, "n": n, "metric": m, "sigma": site.sigma, "spectrum": site.spectrum, "reps": reps,
                    "population": pop, "mean": float(v.mean()), "sd": float(v.std(ddof=1)),
                    "bias": float(v.mean() - pop), "bias_se": float(v.std(ddof=1) / math.sqrt(reps)),
                    "values": v.tolist(), "halves": halves[m],
                })
        print(f"d={d:5d} n={n:5d} reps={reps:3d} sites={len(sites)} {time.perf_counter() - t0:6.1f} s",
              file=sys.stderr, flush=True)
    return out


def _keys(cell: dict, label: str) -> list[tuple[str, str]]:
    """Every cell counts in its metric's row; cells with n ≥ 4d (not `few_rows` for any metric) also in a second."""
    keys = [(cell["metric"], label)]
    if cell["n"] >= 4 * cell["d"]:
        keys.append((cell["metric"], label + ", n ≥ 4d"))
    return keys


def coverage(result: dict) -> dict:
    """Measured coverage of the reported ci95 (nominal 95 %) for the expected score at n.

    The target, E[score at n], is estimated by the mean of the cell's other chunks; its own error is accounted
    for by widening the interval by sqrt(1 + k/(R − k)) (exact for normal scores), so a 95 % interval for the
    true expectation reads as 95 % here too.
    """
    hits, total = {}, {}
    for cell in result["cells"]:
        v = np.array(cell["values"])
        reps = len(v)
        for k in (2, 4):
            for g in range(reps // k - (1 if reps % k == 0 and reps // k > 1 else 0)):
                grp = v[g * k:(g + 1) * k]
                rest = np.delete(v, np.s_[g * k:(g + 1) * k])
                if len(rest) < 2:
                    continue
                lo, hi = mean_ci(grp)
                half = (hi - lo) / 2 * math.sqrt(1 + k / len(rest))
                for key in _keys(cell, f"{k} chunks"):
                    hits[key] = hits.get(key, 0) + (abs(grp.mean() - rest.mean()) <= half)
                    total[key] = total.get(key, 0) + 1
        for h in HALVES_MEASURED:
            label = "1 chunk (half-sampling)" if h == 8 else f"1 chunk ({h} halves)"
            for i, (est, scores) in enumerate(cell["halves"]):
                rest = np.delete(v, i)
                lo, hi = entry_ci([est], scores[:h])
                half = (hi - lo) / 2 * math.sqrt(1 + 1 / len(rest))
                for key in _keys(cell, label):
                    hits[key] = hits.get(key, 0) + (abs(est - rest.mean()) <= half)
                    total[key] = total.get(key, 0) + 1
            for k in (2, 4):  # the `half` method over k chunks: the first chunk's halves as the chunk sd
                for g in range(reps // k):
                    if g * k >= len(cell["halves"]):
                        break
                    grp = v[g * k:(g + 1) * k]
                    rest = np.delete(v, np.s_[g * k:(g + 1) * k])
                    if len(rest) < 2:
                        continue
                    sd = float(np.std(cell["halves"][g * k][1][:h], ddof=1))
                    half = t975(h - 1) * sd / math.sqrt(k) * math.sqrt(1 + k / len(rest))
                    for key in _keys(cell, f"{k} chunks, {h} halves"):
                        hits[key] = hits.get(key, 0) + (abs(grp.mean() - rest.mean()) <= half)
                        total[key] = total.get(key, 0) + 1
    return {f"{m} / {k}": [hits[(m, k)] / total[(m, k)], total[(m, k)]] for (m, k) in sorted(total)}


def population_coverage(result: dict) -> dict:
    """Measured coverage of the *population* value by the same intervals (nominal 95 %), every cell, and the
    cells a metric does not flag `few_rows` (n ≥ rows_per_dim·d and n > d, its declaration in plugins/)."""
    from onnxaff.collection.stats import rows_needed
    from onnxaff.metrics import registry

    per_dim = {m: registry()[m].cls().rows_per_dim for m in METRICS}
    hits, total = {}, {}

    def count(cell, label, hit):
        keys = [(cell["metric"], label)]
        if cell["n"] >= rows_needed(per_dim[cell["metric"]], cell["d"]):
            keys.append((cell["metric"], label + ", not few_rows"))
        for key in keys:
            hits[key] = hits.get(key, 0) + bool(hit)
            total[key] = total.get(key, 0) + 1

    for cell in result["cells"]:
        v, pop = np.array(cell["values"]), cell["population"]
        for k in (2, 4):
            for g in range(len(v) // k):
                lo, hi = mean_ci(v[g * k:(g + 1) * k])
                count(cell, f"{k} chunks", lo <= pop <= hi)
        for _est, lo, hi in cell["halves"]:
            count(cell, "1 chunk (half-sampling)", lo <= pop <= hi)
    return {f"{m} / {k}": [hits[(m, k)] / total[(m, k)], total[(m, k)]] for (m, k) in sorted(total)}


def rule(result: dict, tol: float) -> dict:
    """Per metric and d: the smallest n on the grid from which every site's |bias| stays under tol."""
    out = {}
    for m in METRICS:
        for d in sorted({c["d"] for c in result["cells"]}):
            ns = sorted({c["n"] for c in result["cells"] if c["d"] == d})
            worst = {n: max((abs(c["bias"]) for c in result["cells"] if c["d"] == d and c["n"] == n
                             and c["metric"] == m), default=0.0) for n in ns}
            ok = [n for n in ns if all(worst[k] < tol for k in ns if k >= n)]
            out.setdefault(m, {})[d] = ok[0] if ok else None
    return out


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(METRICS), figsize=(4.2 * len(METRICS), 4.2), sharey=True)
    dims = sorted({c["d"] for c in result["cells"]})
    colours = plt.cm.viridis(np.linspace(0, 0.9, len(dims)))
    for ax, m in zip(axes, METRICS, strict=True):
        for d, col in zip(dims, colours, strict=True):
            ns = sorted({c["n"] for c in result["cells"] if c["d"] == d and c["metric"] == m})
            worst = [max(abs(c["bias"]) for c in result["cells"] if c["d"] == d and c["n"] == n and c["metric"] == m)
                     for n in ns]
            spread = [max(c["sd"] for c in result["cells"] if c["d"] == d and c["n"] == n and c["metric"] == m)
                      for n in ns]
            r = np.array(ns) / d
            ax.loglog(r, np.maximum(worst, 1e-5), "o-", color=col, label=f"d = {d}")
            ax.loglog(r, np.maximum(spread, 1e-5), ":", color=col)
        for tol in (0.01, 0.05):
            ax.axhline(tol, color="grey", lw=0.8, ls="--")
        ax.axvline(512 / 2048, color="red", lw=0.8, alpha=0.5)
        ax.set_title(m)
        ax.set_xlabel("rows per chunk / d")
    axes[0].set_ylabel("|bias| (worst site, solid); chunk sd (dotted)")
    axes[0].legend(fontsize=8)
    fig.suptitle("Finite-sample bias against n/d (red: the paper's 512 rows at d = 2048)")
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def tables(result: dict) -> str:
    ratios = RATIOS + TAIL
    lines = ["| metric | d | " + " | ".join(f"n/d={r:g}" for r in ratios) + " |",
             "|---|---|" + "---|" * len(ratios)]
    for m in METRICS:
        for d in sorted({c["d"] for c in result["cells"]}):
            row = []
            for r in ratios:
                cs = [c for c in result["cells"] if c["d"] == d and c["n"] == int(d * r) and c["metric"] == m]
                if not cs:
                    row.append("")
                    continue
                worst = max(cs, key=lambda c: abs(c["bias"]))
                row.append(f"{worst['bias']:+.3f} (±{max(c['sd'] for c in cs):.3f})")
            lines.append(f"| {m} | {d} | " + " | ".join(row) + " |")
    return "\n".join(lines)


def target_misses(bias: float, bias_aff: float, ratio: float, se: float = 0.0) -> list[str]:
    """Issue 29's target for affinity_bc in one cell: |bias| ≤ 0.02 where n ≥ 2d, ≤ 0.05 where n ≥ d/2, and never
    more than half of affinity's |bias|; the parts it misses. "half" counts only beyond 2 standard errors of the
    measured bias (se): where affinity's bias is itself ~0.002, half of it is below what the chunks resolve."""
    miss = []
    if ratio >= 2 and abs(bias) > 0.02:
        miss.append("0.02")
    elif ratio >= 0.5 and abs(bias) > 0.05:
        miss.append("0.05")
    if abs(bias) > 0.5 * abs(bias_aff) + 2.0 * se:
        miss.append("half")
    return miss


def bc_table(result: dict) -> str:
    """affinity beside affinity_bc, per d and n/d: the worst site's bias of each (bc's sd in brackets), and the
    target parts affinity_bc misses in that cell (✗0.02, ✗0.05, ✗half), judged site by site."""
    ratios = RATIOS + TAIL
    lines = ["| d | " + " | ".join(f"n/d={r:g}" for r in ratios) + " |", "|---|" + "---|" * len(ratios)]
    for d in sorted({c["d"] for c in result["cells"]}):
        row = []
        for r in ratios:
            n = int(d * r)
            aff = {(c["sigma"], c["spectrum"]): c for c in result["cells"]
                   if c["d"] == d and c["n"] == n and c["metric"] == "affinity"}
            bc = [c for c in result["cells"] if c["d"] == d and c["n"] == n and c["metric"] == "affinity_bc"]
            if not bc:
                row.append("")
                continue
            misses = sorted({m for c in bc for m in target_misses(
                c["bias"], aff[(c["sigma"], c["spectrum"])]["bias"], n / d, c["bias_se"])})
            wa = max(aff.values(), key=lambda c: abs(c["bias"]))["bias"]
            wb = max(bc, key=lambda c: abs(c["bias"]))
            mark = " " + " ".join(f"✗{m}" for m in misses) if misses else ""
            row.append(f"{wa:+.3f} → **{wb['bias']:+.3f}** (±{max(c['sd'] for c in bc):.3f}){mark}")
        lines.append(f"| {d} | " + " | ".join(row) + " |")
    return "\n".join(lines)


def _rounded(obj):
    """Floats to 1e-8 for the committed JSON (every figure in the docs is at 1e-3 or coarser)."""
    if isinstance(obj, float):
        return round(obj, 8)
    if isinstance(obj, dict):
        return {k: _rounded(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_rounded(v) for v in obj]
    return obj


# --protocol-grid: `affinity` under the default protocol (4·d-row chunks, the score the mean over chunks) and the
# paper's (512-row chunks) on every (σ, d, spectrum), against the same population values. The rows are iid, so
# this measures the chunk-size part of the default protocol only (sample:16's rows are correlated within an
# example on real feature maps: docs/statistics.md measures that part on a conv net, not here).
GRID_DIMS = (32, 64, 128, 256, 512)
GRID_PROTOCOLS = {"default": "4d", "paper": 512}  # chunk_size as onnxaff takes it (onnxaff.collection.chunks)
GRID_ROWS = 2**15  # rows per site and protocol (chunks = GRID_ROWS // n, at least 8): standard errors ≤ 0.001


def protocol_grid(seed: int = SEED, dims: tuple = GRID_DIMS, rows: int = GRID_ROWS) -> dict:
    """Per site and protocol: the bias of the mean over chunks against the site's population value, its standard
    error (sd/√chunks) and the chunks used. Each width draws its six sites, then their chunks, from its own stream
    (seed, d), so a run over fewer widths draws the same sites and chunks for those it has."""
    from onnxaff.collection.chunks import site_chunk_rows

    cells = []
    for d in dims:
        t0 = time.perf_counter()
        rng = np.random.default_rng([seed, d])
        for site in [Site(s, sp, d, rng) for s, sp in SITE_KINDS]:
            pop = site.population["affinity"]
            for protocol, size in GRID_PROTOCOLS.items():
                n = site_chunk_rows(size, (d, d))
                v = np.array([score("affinity", *site.draw(n, rng)) for _ in range(max(8, rows // n))])
                cells.append({
                    "d": d, "sigma": site.sigma, "spectrum": site.spectrum, "protocol": protocol,
                    "chunk_size": size, "n": n, "chunks": len(v), "population": pop, "mean": float(v.mean()),
                    "sd": float(v.std(ddof=1)), "bias": float(v.mean() - pop),
                    "bias_se": float(v.std(ddof=1) / math.sqrt(len(v))), "values": v.tolist(),
                })
        print(f"d={d:4d} {time.perf_counter() - t0:6.1f} s", file=sys.stderr, flush=True)
    return {"metric": "affinity", "seed": seed, "rows": rows, "cells": cells}


GRID_NAMES = {"relu": "ReLU", "tanh": "tanh", "gelu": "GELU", "flat": "flat", "power": "1/k"}


def grid_table(result: dict) -> str:
    """Rows σ × spectrum × protocol, columns d: bias (± its standard error); the chunks per site in the last rows."""
    cells = result["cells"]
    dims = sorted({c["d"] for c in cells})
    lines = ["| σ | spectrum | chunks of | " + " | ".join(f"d = {d}" for d in dims) + " |",
             "|---|---|---|" + "---|" * len(dims)]
    label = {p: "4·d rows" if p == "default" else f"{size} rows" for p, size in GRID_PROTOCOLS.items()}
    for sigma, spectrum in SITE_KINDS:
        for protocol in GRID_PROTOCOLS:
            row = {c["d"]: f"{c['bias']:+.4f} (±{c['bias_se']:.4f})" for c in cells
                   if (c["sigma"], c["spectrum"], c["protocol"]) == (sigma, spectrum, protocol)}
            lines.append(f"| {GRID_NAMES[sigma]} | {GRID_NAMES[spectrum]} | {label[protocol]} | "
                         + " | ".join(row.get(d, "") for d in dims) + " |")
    for protocol in GRID_PROTOCOLS:
        per_d = {c["d"]: f"{c['n']} rows × {c['chunks']}" for c in cells if c["protocol"] == protocol}
        lines.append(f"| chunks per site | | {label[protocol]} | " + " | ".join(per_d.get(d, "") for d in dims) + " |")
    return "\n".join(lines)


def run_protocol_grid(args) -> None:
    t0 = time.perf_counter()
    result = protocol_grid(args.seed, GRID_DIMS[:2] if args.quick else GRID_DIMS)
    result["seconds"] = time.perf_counter() - t0
    out = Path(args.out or "docs/statistics_default_grid").with_suffix(".json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(_rounded(result), separators=(",", ":")))
    print(grid_table(result))
    print(f"{result['seconds']:.0f} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small grid (d ≤ 128; --protocol-grid: d ≤ 64)")
    ap.add_argument("--intervals-only", action="store_true",
                    help="score only the cells whose one-chunk interval is measured (coverage figures only)")
    ap.add_argument("--protocol-grid", action="store_true",
                    help="affinity's bias under the default protocol (4·d-row chunks) and the paper's (512 rows) on "
                         "ReLU/tanh/GELU × d = 32…512 × both spectra; writes OUT.json (docs/statistics_default_grid)")
    ap.add_argument("--out", default=None, help="OUT.json and OUT.png (default docs/statistics)")
    ap.add_argument("--seed", type=int, default=SEED, help="another stream of draws (the docs' figures: the default)")
    args = ap.parse_args()
    if args.protocol_grid:
        run_protocol_grid(args)
        return
    args.out = args.out or "docs/statistics"
    t0 = time.perf_counter()
    result = run(args.quick, args.intervals_only, args.seed)
    if args.intervals_only:
        result["coverage"] = coverage(result)
        result["seconds"] = time.perf_counter() - t0
        Path(args.out).with_suffix(".json").write_text(json.dumps(_rounded(result), separators=(",", ":")))
        print(json.dumps(result["coverage"], indent=1))
        print(f"{result['seconds']:.0f} s")
        return
    result["coverage"] = coverage(result)
    result["population_coverage"] = population_coverage(result)
    result["rule"] = {str(tol): rule(result, tol) for tol in (0.01, 0.05)}
    result["seconds"] = time.perf_counter() - t0
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(_rounded(result), separators=(",", ":")))
    plot(result, out.with_suffix(".png"))
    print(f"closed-form check (ReLU): {result['closed_form_gap']:.2e}")
    print(tables(result))
    print(bc_table(result))
    print(json.dumps(result["rule"], indent=1))
    print(json.dumps(result["coverage"], indent=1))
    print(json.dumps(result["population_coverage"], indent=1))
    print(f"{result['seconds']:.0f} s")


if __name__ == "__main__":
    main()

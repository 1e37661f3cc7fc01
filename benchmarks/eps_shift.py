"""How far the affinity's absolute ε moves the score, against ε over the site's mean variance (`eps_dominated`).

Why: docs/statistics.md states the shift per ratio ε / (mean variance) that `eps_dominated` (ratio ≥ 1e-3) flags.
Sites: ReLU of rotated Gaussian pre-activations (as benchmarks/finite_sample_study.py: z_k ~ N(μ_k, s_k²), s_k²
flat or 1/k over 64 levels, μ_k/s_k in [−1, 1], X = zQᵀ, Y = relu(z)Qᵀ), d = 16 and 128, n = 512 rows, SEEDS
draws of each. Both X and
Y are scaled by c so that ε / min(var_X, var_Y) (onnxaff.collection.stats.chunk_scale, what the flag reads) takes each
ratio; the shift is the score at that ratio minus the score of the same rows at ratio 1e-9 (where ε moves nothing).

Usage: python benchmarks/eps_shift.py [--seeds 5]; prints one markdown row per ratio.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from onnxaff.collection.stats import chunk_scale  # noqa: E402
from plugins.affinity import affinity_score  # noqa: E402

RATIOS = (3e-4, 3e-3, 3e-2, 0.3, 0.9, 1.1, 3.0, 30.0)


def site(d: int, n: int, spectrum: str, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    s = np.ones(d) if spectrum == "flat" else 1.0 / np.sqrt(1.0 + np.arange(d) % 64)
    mu = rng.uniform(-1, 1, d) * s
    z = mu + s * rng.standard_normal((n, d))
    q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    return z @ q.T, np.maximum(z, 0.0) @ q.T


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=5)
    args = ap.parse_args()
    shifts: dict[float, list[float]] = {r: [] for r in RATIOS}
    spectra: dict[str, dict[float, list[float]]] = {"flat": {r: [] for r in RATIOS}, "1/k": {r: [] for r in RATIOS}}
    for d, spectrum in [(d, sp) for d in (16, 128) for sp in ("flat", "1/k")]:
        for seed in range(args.seeds):
            x, y = site(d, 512, spectrum, np.random.default_rng(seed))
            scale = chunk_scale(x, y)
            base = affinity_score(x * np.sqrt(1e-6 / (1e-9 * scale)), y * np.sqrt(1e-6 / (1e-9 * scale)))
            for r in RATIOS:
                c = np.sqrt(1e-6 / (r * scale))  # ε / (c² · scale) = r
                shifts[r].append(affinity_score(c * x, c * y) - base)
                spectra[spectrum][r].append(shifts[r][-1])
    print(f"n = 512, d = 16 and 128, {args.seeds} seeds each")
    print("| ε / mean variance | shift, flat spectrum | shift, 1/k spectrum | all: min … max (draws) |")
    print("|---|---|---|---|")
    for r in RATIOS:
        cols = [f"{min(spectra[sp][r]):+.4f} … {max(spectra[sp][r]):+.4f}" for sp in ("flat", "1/k")]
        print(f"| {r:g} | {cols[0]} | {cols[1]} | {min(shifts[r]):+.4f} … {max(shifts[r]):+.4f} ({len(shifts[r])}) |")


if __name__ == "__main__":
    main()

"""What a one-chunk interval costs against the chunk's own scoring, on MobileNet-like site shapes.

A site of MobileNetV2 on a few hundred images has one chunk of n = 512 rows and d = 32 … 1280; its ci95 comes
from half-samples of that chunk (onnxaff.collection.stats.half_sample_rows). This times, per d, the chunk's own scores
(the default metrics, affinity and affinity_lw) against its H half-sample rescorings, one BLAS thread.

Usage: python benchmarks/interval_cost.py [--n 512] [--dims 32 96 160 320 576 960 1280] [--halves 8] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from onnxaff.collection.stats import half_sample_rows  # noqa: E402
from plugins.affinity import affinity_score  # noqa: E402

METRICS = {"affinity": {}, "affinity_lw": {"shrinkage": "ledoit_wolf"}}


def site(n: int, d: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """relu6 of correlated Gaussian pre-activations, as a pooled MobileNet feature map looks."""
    mix = rng.standard_normal((d, d)) / np.sqrt(d)
    z = rng.standard_normal((n, d)) @ mix + rng.uniform(-1, 1, d)
    return z, np.clip(z, 0.0, 6.0)


def seconds(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=512)
    ap.add_argument("--dims", type=int, nargs="+", default=[32, 96, 160, 320, 576, 960, 1280])
    ap.add_argument("--halves", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    print(f"n = {args.n}, {args.halves} halves, metrics {', '.join(METRICS)}, one BLAS thread, medians of "
          f"{args.repeats}")
    print("| d | chunk s | one half s | halves s | halves ÷ chunk |")
    print("|---|---|---|---|---|")
    for d in args.dims:
        x, y = site(args.n, d, rng)
        rows = half_sample_rows(args.n, args.halves)
        chunk = seconds(lambda x=x, y=y: [affinity_score(x, y, **kw) for kw in METRICS.values()], args.repeats)
        halves = seconds(lambda x=x, y=y, rows=rows: [affinity_score(x[r], y[r], **kw) for r in rows
                                                      for kw in METRICS.values()], args.repeats)
        print(f"| {d} | {chunk:.3f} | {halves / args.halves:.3f} | {halves:.3f} | {halves / chunk:.2f} |",
              flush=True)


if __name__ == "__main__":
    main()

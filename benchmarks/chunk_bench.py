"""Seconds per chunk of the affinity scores, the d×d ("direct") path against the span-of-rows ("span") path.

    python benchmarks/chunk_bench.py [--n 512] [--dims 64 512 2048 4096] [--repeats 5] [--max-direct-d 4096]
                                     [--blas-threads 1]

One chunk of n rows, X ~ N(0, D²) with feature scales D in [0.5, 2], Y = ReLU(X) − 0.2·tanh(X) (a typical
non-linearity site with d_in = d_out). Each cell is the median (and the minimum: what survives other load on a
shared machine) of --repeats calls after one warm-up call, timed with time.perf_counter. "auto" is the path
affinity_score takes by default (span when 2n < d). Prints a markdown table with the machine, numpy/scipy
versions and the BLAS thread pools. A busy BLAS pool spins against other load; --blas-threads 1 (needs
threadpoolctl) gives steadier numbers on a shared machine.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

import numpy as np
import scipy

from onnxaff_plugins.affinity import affinity_score

METRICS = {"affinity": "none", "affinity_lw": "ledoit_wolf"}


def blas_info() -> str:
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return "threadpoolctl not installed"
    pools = [f"{p.get('internal_api')} {p.get('version')} ({p.get('num_threads')} threads)"
             for p in threadpool_info() if p.get("user_api") == "blas"]
    return ", ".join(pools) or "no BLAS pool found"


def chunk(n: int, d: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d)) * rng.uniform(0.5, 2.0, d)
    return x, np.maximum(x, 0.0) - 0.2 * np.tanh(x)


def seconds(x: np.ndarray, y: np.ndarray, repeats: int, **kwargs) -> tuple[float, float, float]:
    """Median and minimum seconds of affinity_score(x, y, **kwargs), and its value."""
    value = affinity_score(x, y, **kwargs)  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        affinity_score(x, y, **kwargs)
        times.append(time.perf_counter() - t0)
    return statistics.median(times), min(times), value


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=512)
    ap.add_argument("--dims", type=int, nargs="+", default=[64, 512, 2048, 4096])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--max-direct-d", type=int, default=None, help="skip the direct path above this d (it is O(d³))")
    ap.add_argument("--blas-threads", type=int, default=None, help="limit the BLAS pool (needs threadpoolctl)")
    args = ap.parse_args()
    if args.blas_threads is not None:
        from threadpoolctl import threadpool_limits

        threadpool_limits(limits=args.blas_threads, user_api="blas")

    print(f"- machine: {platform.platform()}, {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} CPUs, Python {platform.python_version()}")
    print(f"- numpy {np.__version__}, scipy {scipy.__version__}; BLAS: {blas_info()}")
    print(f"- n = {args.n} rows per chunk, {args.repeats} timed repeats after a warm-up, seconds per chunk; "
          "|Δρ| = |ρ_direct − ρ_span|\n")
    print("| d | metric | direct: median (min) s | span: median (min) s | auto takes | auto: median s | |Δρ| |")
    print("|---:|---|---:|---:|---|---:|---:|")
    for d in args.dims:
        x, y = chunk(args.n, d)
        for metric, shrinkage in METRICS.items():
            res = {}
            for method in ("direct", "span"):
                if method == "direct" and args.max_direct_d is not None and d > args.max_direct_d:
                    continue
                res[method] = seconds(x, y, args.repeats, shrinkage=shrinkage, method=method)
            auto = "span" if 2 * args.n < d else "direct"
            cells = [f"{res[m][0]:.4f} ({res[m][1]:.4f})" if m in res else "—" for m in ("direct", "span")]
            diff = f"{abs(res['direct'][2] - res['span'][2]):.1e}" if len(res) == 2 else "—"
            auto_cell = f"{res[auto][0]:.4f}" if auto in res else "—"
            print(f"| {d} | {metric} | {cells[0]} | {cells[1]} | {auto} | {auto_cell} | {diff} |", flush=True)

if __name__ == "__main__":
    main()

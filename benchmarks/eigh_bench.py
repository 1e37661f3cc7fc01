"""The symmetric eigen-solver behind the affinity score's pseudo-inverse root: drivers, threads, batching.

    python benchmarks/eigh_bench.py [--dims 32 96 144 192 384 576 960] [--repeats 5]

Each matrix is what the metrics decompose (Lᵀ Σ_X L is congruent to it): c·BᵀB + α·I from 512 rows of a
ReLU-like chunk, d × d, float64. Per d, milliseconds per matrix (min over repeats) for numpy's eigh (LAPACK
syevd, what the metrics call), scipy's drivers evd / evr / ev, numpy's eigh on 2 BLAS threads, and one call on a
stack of the two metrics' matrices. Then the MobileNetV2 benchmark's 35 sites (D 32…1280, benchmarks/
bench_models.py) as one block-diagonal matrix of every site of d ≤ 384 against one call per site.
Alternatives that are not eigen-solvers (a Newton–Schulz root) are not here: each of their iterations is
two or three d×d products, and they need 10–20 at the conditioning of these matrices.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import scipy.linalg
from threadpoolctl import threadpool_limits

MOBILENETV2_DIMS = [32, 32, 96, 96] + [144] * 4 + [192] * 6 + [384] * 8 + [576] * 6 + [960] * 6 + [1280]


def matrix(d: int, n: int = 512, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    b = np.maximum(rng.standard_normal((n, d)) @ rng.standard_normal((d, d)) / np.sqrt(d), 0.0)
    b -= b.mean(axis=0)
    m = b.T @ b / (n - 1)
    m[np.diag_indices(d)] += 1e-6
    return m


def best_ms(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.process_time()
        fn()
        times.append(time.process_time() - start)
    return 1e3 * min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dims", type=int, nargs="+", default=[32, 96, 144, 192, 384, 576, 960])
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    r = args.repeats
    print("CPU ms per matrix (process time: on 2 threads it counts both cores)\n")
    print("| d | numpy eigh (syevd) | scipy evd | scipy evr | scipy ev | numpy eigh, 2 threads | stack of 2 ÷ 2 |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for d in args.dims:
        m = matrix(d)
        pair = np.stack([m, matrix(d, seed=1)])
        with threadpool_limits(1, user_api="blas"):
            cells = [best_ms(lambda m=m: np.linalg.eigh(m), r)]
            cells += [best_ms(lambda drv=drv, m=m: scipy.linalg.eigh(m, driver=drv, check_finite=False), r)
                      for drv in ("evd", "evr", "ev")]
        with threadpool_limits(2, user_api="blas"):
            start = time.perf_counter()
            for _ in range(r):
                np.linalg.eigh(m)
            cells.append(1e3 * (time.perf_counter() - start) / r)  # wall: what two threads buy
        with threadpool_limits(1, user_api="blas"):
            cells.append(best_ms(lambda pair=pair: np.linalg.eigh(pair), r) / 2)
        print(f"| {d} | " + " | ".join(f"{c:.2f}" for c in cells) + " |")
    small = [d for d in MOBILENETV2_DIMS if d <= 384]
    mats = [matrix(d, seed=i) for i, d in enumerate(small)]
    block = scipy.linalg.block_diag(*mats)
    with threadpool_limits(1, user_api="blas"):
        apart = best_ms(lambda: [np.linalg.eigh(a) for a in mats], r)
        together = best_ms(lambda: np.linalg.eigh(block), max(1, r // 2))
    print(f"\nMobileNetV2's {len(small)} sites of d ≤ 384 (Σd = {sum(small)}): one eigh each {apart:.1f} ms, "
          f"one block-diagonal eigh {together:.1f} ms ({together / apart:.1f}×)")


if __name__ == "__main__":
    main()

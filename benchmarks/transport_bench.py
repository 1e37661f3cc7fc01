"""What the affinity score's transport costs as chunks grow, and the certified sparse path against the dense one.

Sites: elementwise, X = z with z_k ~ N(μ_k, 1), μ_k uniform in [−1, 1] (64 levels cycled over the d features;
μ = 0 for `abs`), Y = σ(z): `relu`, `gelu`, `near_linear` (leaky ReLU of slope 0.9, ρ ≈ 0.99) and `abs`
(strongly non-linear, ρ ≈ 0.2). The affinity score is rotation invariant, so no rotation is drawn.

Each case runs `affinity_score(x, y, transport=...)` in a fresh process: wall seconds of the whole score, and its
peak resident memory above what the process held with x and y built (VmHWM reset through /proc/self/clear_refs).

Usage:
  python benchmarks/transport_bench.py scale [--n 512 1024 2048 4096 8192] [--site relu] [--transport dense]
  python benchmarks/transport_bench.py accuracy [--n 512 1024 2048 4096] [--ratios 0.25] [--dims 64]
  python benchmarks/transport_bench.py one N D SITE TRANSPORT        (one case, one JSON line)
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SITES = ("relu", "gelu", "near_linear", "abs")


def site(kind: str, n: int, d: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    from scipy.special import erf

    rng = np.random.default_rng(seed)
    levels = min(64, d)
    mu = np.zeros(levels) if kind == "abs" else rng.uniform(-1.0, 1.0, levels)
    z = mu[np.arange(d) % levels] + rng.standard_normal((n, d))
    if kind == "relu":
        return z, np.maximum(z, 0.0)
    if kind == "gelu":
        return z, 0.5 * z * (1.0 + erf(z / math.sqrt(2.0)))
    if kind == "near_linear":
        return z, np.where(z > 0, z, 0.9 * z)
    return z, np.abs(z)


def _status(key: str) -> int:
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0


def one(n: int, d: int, kind: str, transport: str, seed: int = 0) -> dict:
    from plugins.affinity import affinity_score

    x, y = site(kind, n, d, seed)
    with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
        f.write("5")  # reset VmHWM to the current RSS
    held = _status("VmRSS")
    start = time.perf_counter()
    rho = affinity_score(x, y, transport=transport)
    seconds = time.perf_counter() - start
    return {"n": n, "d": d, "site": kind, "transport": transport, "rho": rho, "seconds": round(seconds, 2),
            "peak_mb": round((_status("VmHWM") - held) / 1e6, 1), "seed": seed}


def run_one(n, d, kind, transport, seed=0, timeout=None) -> dict:
    cmd = [sys.executable, __file__, "one", str(n), str(d), kind, transport, "--seed", str(seed)]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=True)
    except subprocess.TimeoutExpired:
        return {"n": n, "d": d, "site": kind, "transport": transport, "timeout": timeout}
    except subprocess.CalledProcessError as exc:
        return {"n": n, "d": d, "site": kind, "transport": transport, "error": exc.stderr.strip().splitlines()[-1]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("scale")
    s.add_argument("--n", type=int, nargs="+", default=[512, 1024, 2048, 4096, 8192])
    s.add_argument("--site", nargs="+", default=["relu"])
    s.add_argument("--transport", nargs="+", default=["dense"])
    s.add_argument("--timeout", type=float, default=None)
    a = sub.add_parser("accuracy")
    a.add_argument("--n", type=int, nargs="+", default=[512, 1024, 2048, 4096])
    a.add_argument("--ratios", type=float, nargs="*", default=[0.25], help="d = n × ratio")
    a.add_argument("--dims", type=int, nargs="*", default=[64], help="fixed d values, besides the ratios")
    a.add_argument("--site", nargs="+", default=list(SITES))
    o = sub.add_parser("one")
    o.add_argument("n", type=int)
    o.add_argument("d", type=int)
    o.add_argument("site", choices=SITES)
    o.add_argument("transport")
    o.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    if args.cmd == "one":
        print(json.dumps(one(args.n, args.d, args.site, args.transport, args.seed)))
        return
    if args.cmd == "scale":
        for n in args.n:
            for kind in args.site:
                for t in args.transport:
                    print(json.dumps(run_one(n, n // 4, kind, t, timeout=args.timeout)), flush=True)
        return
    for n in args.n:
        for d in sorted({max(2, int(n * r)) for r in args.ratios} | set(args.dims)):
            for kind in args.site:
                dense, sparse = run_one(n, d, kind, "dense"), run_one(n, d, kind, "sparse")
                row = {"n": n, "d": d, "site": kind, "rho": dense.get("rho"),
                       "delta": None if "rho" not in sparse or "rho" not in dense else sparse["rho"] - dense["rho"],
                       "dense_s": dense.get("seconds"), "sparse_s": sparse.get("seconds"),
                       "dense_mb": dense.get("peak_mb"), "sparse_mb": sparse.get("peak_mb")}
                print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()

"""CPU seconds of one affinity / affinity_lw chunk, phase by phase, on real and synthetic chunks.

    python benchmarks/chunk_phases.py dump --work /tmp/bw [--images 1024]     # MobileNetV2's chunks to .npz
    python benchmarks/chunk_phases.py real --work /tmp/bw                     # phase shares over those chunks
    python benchmarks/chunk_phases.py synthetic --dims 64 256 512 1024 1280 4096 --rows 512 [--rows-per-dim 4]
    ... real|synthetic --method before                                        # the paths before issue 40
    ... synthetic --plugins /tmp/before/plugins     # another checkout's scoring (git worktree add /tmp/before a133dc1)
    python benchmarks/chunk_phases.py floor --work /tmp/bw [--repeats 2]      # CPU s: plain, graph only, full

`dump` runs `onnxaff analyze` on benchmarks/bench_models.py's MobileNetV2 (the analysis_bench model and images)
with a plugin metric that saves every scored chunk (X, Y in float64, as the metrics receive them) under
WORK/chunks; `real` scores each of them with affinity and affinity_lw in this process and `synthetic` scores
`chunk_bench.chunk(n, d)` (n = --rows, or --rows-per-dim × d), timing each phase of onnxaff_plugins.affinity by
wrapping its functions: exclusive CPU seconds (time.process_time, one BLAS thread), so nested phases are not
counted twice. Phases: the shared work of a chunk (centring, ‖Y‖², Y's Gram matrix, the span path's QR; the
second metric of a chunk finds it again, as in a run), Ledoit–Wolf's shrinkage, the Cholesky factor of Σ_Y,
the triangular products with it (x·L, LᵀL, ·Lᵀ: trmm, lauum), the symmetric eigendecomposition of Lᵀ Σ_X L,
the products around it (bᵀb, b·V, ·Vᵀ), the cost matrix, the assignment (scipy's linear_sum_assignment) and
the rest (Σ_Y's assembly, the span path's blocks, checks). `floor` times whole processes (CPU seconds, user +
system, from wait4), alternating: (a) plain inference, (g) `onnxaff analyze` with a metric that scores nothing
(the augmented graph, the feeding and the chunk buffers alone: benchmarks/chunk_dump_plugin.py's noop_chunk)
and (b) `onnxaff analyze` with the default metrics. Prints markdown tables.
"""

from __future__ import annotations

import argparse
import collections
import functools
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).parent
PHASES = ("shared work", "Ledoit–Wolf", "Cholesky", "triangular products", "eigendecomposition", "bᵀb, b·V·Vᵀ",
          "cost matrix", "assignment", "rest")
METRICS = {"affinity": "none", "affinity_lw": "ledoit_wolf"}


class Phases:
    """Exclusive CPU seconds per phase of the wrapped functions (a stack: a callee's time is not its caller's)."""

    def __init__(self, method: str = "auto", transport: str = "auto"):
        self.seconds = collections.Counter()
        self._stack: list[list[float]] = []
        self.method = method
        self.transport = transport

    def wrap(self, phase: str, fn):
        @functools.wraps(fn)
        def timed(*args, **kwargs):
            self._stack.append([0.0])
            t0 = time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                spent = time.process_time() - t0
                inner = self._stack.pop()[0]
                self.seconds[phase] += spent - inner
                if self._stack:
                    self._stack[-1][0] += spent
        return timed

    def install(self) -> None:
        """Wrap the phases' functions; a name another checkout's plugins lack (--plugins) is left out."""
        import scipy.optimize

        import onnxaff_plugins.affinity as aff
        import onnxaff_plugins.linalg as linalg

        def wrap_attr(owner, name: str, phase: str) -> None:
            if hasattr(owner, name):
                setattr(owner, name, self.wrap(phase, getattr(owner, name)))

        wrap_attr(aff, "_chunk_work", "shared work")
        wrap_attr(aff, "_span_r", "shared work")
        for side in ("gram_x", "gram_y"):
            if hasattr(aff._ChunkWork, side):
                setattr(aff._ChunkWork, side, property(self.wrap("shared work", getattr(aff._ChunkWork, side).fget)))
        wrap_attr(aff, "ledoit_wolf_shrinkage", "Ledoit–Wolf")
        aff._Root.__init__ = self.wrap("Cholesky", aff._Root.__init__)
        for name in ("left", "left_t"):  # the map path's products with L (trmm)
            wrap_attr(aff._Root, name, "triangular products")
        for name in ("times_lower", "times_lower_t", "lower_gram"):
            wrap_attr(aff, name, "triangular products")
        wrap_attr(aff, "_inv_sqrt_rows", "bᵀb, b·V·Vᵀ")
        wrap_attr(aff, "_mapped_rows", "bᵀb, b·V·Vᵀ")  # the map path's A and x·A
        wrap_attr(linalg, "_eigh_psd", "eigendecomposition")
        wrap_attr(aff, "squared_distances", "cost matrix")
        wrap_attr(aff, "sparse_w2", "assignment")  # the sparse path: its float32 strips, matchings and certificate
        scipy.optimize.linear_sum_assignment = self.wrap("assignment", scipy.optimize.linear_sum_assignment)

    def score(self, x: np.ndarray, y: np.ndarray, shrinkage: str) -> float:
        """One chunk's score; its CPU time outside the wrapped phases goes to "rest"."""
        from onnxaff_plugins.affinity import affinity_score

        before = sum(self.seconds.values())
        t0 = time.process_time()
        method = self.method
        if method == "before":  # auto as it was: the map path did not exist
            method = "span" if 2 * x.shape[0] < x.shape[1] else "direct"
        value = affinity_score(x, y, shrinkage=shrinkage, method=method, transport=self.transport)
        self.seconds["rest"] += time.process_time() - t0 - (sum(self.seconds.values()) - before)
        return value


def _use_plugins(folder: Path) -> None:
    """Import onnxaff_plugins from `folder` (a checkout's plugins/) instead of the installed one."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("onnxaff_plugins", folder / "__init__.py",
                                                  submodule_search_locations=[str(folder)])
    module = importlib.util.module_from_spec(spec)
    sys.modules["onnxaff_plugins"] = module
    spec.loader.exec_module(module)


def forget_shared_work() -> None:
    import onnxaff_plugins.affinity as aff

    aff._recent.__dict__.pop("work", None)
    aff._recent.__dict__.pop("cache", None)  # the name of the same slot before issue 40


def one_blas_thread():
    from threadpoolctl import threadpool_limits

    return threadpool_limits(1)


def table(rows: list[tuple[str, collections.Counter]]) -> str:
    lines = ["| chunks | " + " | ".join(PHASES) + " | total CPU s |", "|---|" + "---:|" * (len(PHASES) + 1)]
    for label, seconds in rows:
        total = sum(seconds.values())
        cells = [f"{seconds[p]:.3f} ({100 * seconds[p] / total:.0f} %)" if total else "0" for p in PHASES]
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {total:.3f} |")
    return "\n".join(lines)


def prepared(work: Path, images: int) -> tuple[str, str]:
    """analysis_bench's MobileNetV2 and images in `work` (written once, in a child: this process stays lean)."""
    sys.path.insert(0, str(HERE))
    from analysis_bench import paths

    subprocess.run([sys.executable, str(HERE / "analysis_bench.py"), "--child-prepare", "mobilenetv2", str(images),
                    str(work)], check=True)
    models, data = paths(["mobilenetv2"], images, work)
    return str(models["mobilenetv2"]), str(data)


def analyze(model: str, data: str, out: Path, *options: str) -> list[str]:
    return [sys.executable, "-m", "onnxaff.cli", "analyze", model, "--data", data, "--batch-size", "64", "--device",
            "cpu", "--quiet", "--out", str(out), *options]


def dump(work: Path, images: int) -> None:
    model, data = prepared(work, images)
    out = work / "chunks"
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, ONNXAFF_CHUNK_DUMP=str(out))
    subprocess.run(analyze(model, data, work / "dump.signature.json", "--plugin", str(HERE / "chunk_dump_plugin.py"),
                           "--metrics", "dump_chunk", "--intervals", "none"), check=True, env=env)
    print(f"{len(list(out.glob('*.npz')))} chunks in {out}")


def floor(work: Path, images: int, repeats: int) -> None:
    model, data = prepared(work, images)
    from analysis_bench import child_usage  # importable once prepared() put benchmarks/ on the path

    runs = {"(a) plain inference": [sys.executable, str(HERE / "analysis_bench.py"), "--child-plain", model,
                                    data, "64", "cpu"],
            "(g) graph only": analyze(model, data, work / "noop.signature.json", "--plugin",
                                      str(HERE / "chunk_dump_plugin.py"), "--metrics", "noop_chunk"),
            "(b) default metrics": analyze(model, data, work / "default.signature.json")}
    cpu: dict[str, list[float]] = {k: [] for k in runs}
    for _ in range(repeats):
        for label, cmd in runs.items():
            _, usage = child_usage(cmd)
            cpu[label].append(usage.ru_utime + usage.ru_stime)
    plain = min(cpu["(a) plain inference"])
    print(f"# {images} images, load average {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    print(f"| run | CPU s (min of {repeats}) | ÷ (a) |")
    print("|---|---:|---:|")
    for label, seconds in cpu.items():
        print(f"| {label} | {min(seconds):.2f} | {min(seconds) / plain:.2f} |")


def real(work: Path, method: str) -> None:
    files = sorted((work / "chunks").glob("*.npz"))
    phases = Phases(method)
    phases.install()
    per_metric = {name: collections.Counter() for name in METRICS}
    with one_blas_thread():
        for f in files:  # both metrics of a chunk one after the other, as a scoring thread does
            with np.load(f) as z:
                x, y = z["x"], z["y"]
            for name, shrinkage in METRICS.items():
                phases.seconds.clear()
                phases.score(x, y, shrinkage)
                per_metric[name].update(phases.seconds)
    both = collections.Counter()
    for s in per_metric.values():
        both.update(s)
    rows = [(f"{name}: {len(files)} MobileNetV2 chunks", s) for name, s in per_metric.items()]
    print(table(rows + [("both", both)]))


def synthetic(dims: list[int], rows: int | None, rows_per_dim: int | None, repeats: int, method: str,
              transport: str) -> None:
    """One table row per chunk shape, printed as soon as it is timed (the largest take minutes)."""
    sys.path.insert(0, str(HERE))
    from chunk_bench import chunk

    phases = Phases(method, transport)
    phases.install()
    print(table([]), flush=True)
    with one_blas_thread():
        for d in dims:
            n = rows if rows is not None else rows_per_dim * d
            x, y = chunk(n, d)
            if repeats > 1:  # warm-up (imports, first BLAS call); one repeat: the imports are noise beside it
                for shrinkage in METRICS.values():
                    phases.score(x, y, shrinkage)
            phases.seconds.clear()
            for _ in range(repeats):
                forget_shared_work()  # the same rows again: a run scores each chunk's rows once
                scores = [phases.score(x, y, shrinkage) for shrinkage in METRICS.values()]
            seconds = collections.Counter({p: s / repeats for p, s in phases.seconds.items()})
            row = table([(f"n = {n}, d = {d} (both metrics; ρ = {scores[0]:.12f}, {scores[1]:.12f})", seconds)])
            print(row.splitlines()[-1], flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=["dump", "real", "synthetic", "floor"])
    ap.add_argument("--work", type=Path, default=Path("/tmp/bw"))
    ap.add_argument("--images", type=int, default=1024)
    ap.add_argument("--dims", type=int, nargs="+", default=[64, 256, 512, 1024, 1280, 4096])
    ap.add_argument("--rows", type=int, default=None)
    ap.add_argument("--rows-per-dim", type=int, default=None)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--method", default="auto", choices=["auto", "before"],
                    help="before: the paths of the scoring before issue 40 (direct, span when 2n < d)")
    ap.add_argument("--transport", default="auto", choices=["auto", "dense", "sparse"],
                    help="the assignment's solver (auto: as a run's metric takes it on this machine)")
    ap.add_argument("--plugins", type=Path, default=None,
                    help="score with another checkout's plugins/ (e.g. a git worktree of the commit before "
                         "issue 40), its own auto paths; the phases it lacks are not wrapped")
    args = ap.parse_args()
    if args.plugins is not None:
        _use_plugins(args.plugins)
    if args.what == "dump":
        dump(args.work, args.images)
    elif args.what == "real":
        real(args.work, args.method)
    elif args.what == "floor":
        floor(args.work, args.images, args.repeats)
    else:
        if (args.rows is None) == (args.rows_per_dim is None):
            ap.error("give one of --rows and --rows-per-dim")
        synthetic(args.dims, args.rows, args.rows_per_dim, args.repeats, args.method, args.transport)


if __name__ == "__main__":
    main()

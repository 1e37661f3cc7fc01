"""What onnxaff adds on top of inference, measured side by side in one run.

    python benchmarks/analysis_bench.py                        # resnet18 and vit, 1024 images, 3 repeats, CPU
    python benchmarks/analysis_bench.py --device cuda --images 4096 --batch-size 256 --models resnet18,resnet50
    python benchmarks/analysis_bench.py --profile              # also a cProfile of (b), top functions

For each model, on the same preprocessed images (one float32 .npy, memory-mapped by every mode):
  (a) plain   onnxruntime inference of the original model, batch by batch, outputs fetched;
  (b) onnxaff `onnxaff analyze`: the default metrics (affinity, affinity_lw) and intervals, chunks of 512 rows
              (the default), in-graph reduction, chunk scoring; `--metrics a,b` runs those metrics instead;
  (c) naive   the same command with `--reduce-in numpy`: every activation map fetched, reduced in numpy
              (`--modes plain,onnxaff` leaves it out).
Each mode is a separate process started the same way (interpreter start-up and imports included), run
A B C A B C … so drifts in the machine hit all three alike. Wall time is the parent's clock around the
child; peak memory is the child's maximum resident set size from wait4(2). Medians over the repeats,
ratios against (a).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

MODES = ("plain", "onnxaff", "naive")
LABELS = {"plain": "(a) plain inference", "onnxaff": "(b) onnxaff analyze", "naive": "(c) naive: numpy reduction"}


def plain_inference(model: str, data: str, batch_size: int, device: str) -> None:
    """Mode (a), run in its own process: what a user's inference loop costs."""
    import onnxruntime as ort

    providers = ["CUDAExecutionProvider", "CPUExecutionProvider"] if device == "cuda" else ["CPUExecutionProvider"]
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(model, so, providers=providers)
    if device == "cuda" and "CUDAExecutionProvider" not in sess.get_providers():
        raise SystemExit("CUDA requested but the session runs on CPU")
    images = np.load(data, mmap_mode="r")
    name = sess.get_inputs()[0].name
    for i in range(0, len(images), batch_size):
        sess.run(None, {name: np.ascontiguousarray(images[i:i + batch_size])})


def _own_rss_mib() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def child_usage(cmd: list[str]):
    """(wall seconds, rusage) of one child process; a failed child ends the benchmark with its stderr."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    err = proc.stderr.read().decode()
    proc.stderr.close()
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{err[-2000:]}")
    return wall, usage


def run_child(cmd: list[str]) -> tuple[float, float]:
    """(wall seconds, peak RSS in MiB) of one child process."""
    wall, usage = child_usage(cmd)
    return wall, usage.ru_maxrss / 1024.0  # Linux reports KiB


def commands(mode: str, model: Path, data: Path, args, out: Path) -> list[str]:
    if mode == "plain":
        return [sys.executable, __file__, "--child-plain", str(model), str(data), str(args.batch_size), args.device]
    cmd = [sys.executable, "-m", "onnxaff.cli", "analyze", str(model), "--data", str(data),
           "--batch-size", str(args.batch_size), "--device", args.device, "--quiet",
           "--out", str(out / f"{model.stem}.{mode}.json")]
    cmd += ["--metrics", args.metrics] if args.metrics else []  # else the default metrics
    cmd += ["--chunk-size", str(args.chunk_size)] if args.chunk_size else []
    return cmd + (["--reduce-in", "numpy"] if mode == "naive" else [])


def paths(names: list[str], n: int, work: Path) -> tuple[dict[str, Path], Path]:
    return {name: work / f"{name}.onnx" for name in names}, work / f"images_{n}.npy"


def prepare(names: list[str], n: int, work: Path) -> tuple[dict[str, Path], Path]:
    import onnx
    from bench_models import MODELS, images

    models, data = paths(names, n, work)
    for name, path in models.items():
        if not path.exists():
            onnx.save(MODELS[name](), path)
    if not data.exists():
        np.save(data, images(n))
    return models, data


def profile(model: Path, data: Path, args, top: int = 18) -> str:
    import cProfile
    import pstats

    import onnxaff

    prof = cProfile.Profile()
    prof.enable()
    options = {"metrics": args.metrics.split(",")} if args.metrics else {}
    if args.chunk_size:
        options["chunk_size"] = args.chunk_size
    onnxaff.analyze(model, str(data), batch_size=args.batch_size, device=args.device, progress=False, **options)
    prof.disable()
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(top)
    return text.getvalue()


def environment(device: str) -> str:
    import onnxruntime as ort

    import onnxaff

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (f"{platform.system()} {platform.machine()}, {os.cpu_count()} cores ({cpu}), Python "
            f"{platform.python_version()}, onnxruntime {ort.__version__}, numpy {np.__version__}, onnxaff "
            f"{onnxaff.__version__}, device {device}")


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--child-plain":
        model, data, batch, device = sys.argv[2:6]
        plain_inference(model, data, int(batch), device)
        return 0
    if len(sys.argv) > 1 and sys.argv[1] == "--child-prepare":
        prepare(sys.argv[2].split(","), int(sys.argv[3]), Path(sys.argv[4]))
        return 0
    if len(sys.argv) > 1 and sys.argv[1] == "--child-profile":
        model, data, batch, device, metrics, chunk = sys.argv[2:8]
        ns = argparse.Namespace(batch_size=int(batch), device=device, metrics=metrics, chunk_size=int(chunk))
        print(profile(Path(model), Path(data), ns), end="")
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="resnet18,vit")
    ap.add_argument("--images", type=int, default=1024)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--metrics", default="", help="Metrics of (b) and (c), comma-separated [default: onnxaff's "
                    "default metrics].")
    ap.add_argument("--chunk-size", type=int, default=0, help="Rows per chunk [default: onnxaff's].")
    ap.add_argument("--modes", default=",".join(MODES), help="Which of plain,onnxaff,naive to run [default: all].")
    ap.add_argument("--work", default=None, help="Folder for the models and images [default: a temporary one].")
    ap.add_argument("--profile", action="store_true", help="Also profile (b) once per model with cProfile.")
    args = ap.parse_args()

    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="onnxaff-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    names = [m for m in args.models.split(",") if m]
    modes = [m for m in MODES if m in args.modes.split(",")]
    if "plain" not in modes:
        raise SystemExit("--modes must include plain: every ratio is to it")
    # Built in a child: on Linux a child's peak RSS starts at its parent's peak (vfork + exec), so this
    # process must never hold the models or the images, or it would floor every measurement below.
    subprocess.run([sys.executable, __file__, "--child-prepare", ",".join(names), str(args.images), str(work)],
                   check=True)
    models, data = paths(names, args.images, work)
    print(f"# {time.strftime('%Y-%m-%d')}: {environment(args.device)}")
    print(f"# {' '.join(sys.argv)}; {args.images} images of 3×224×224, batch {args.batch_size}, "
          f"{args.repeats} repeats, order {' '.join(modes)} per repeat; data {data}")
    print(f"# load average before: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    print(f"# this process: {_own_rss_mib():.0f} MiB peak resident (a floor under every child's peak below)")
    results = {}
    for name, model in models.items():
        times: dict[str, list[tuple[float, float]]] = {m: [] for m in modes}
        for _ in range(args.repeats):
            for mode in modes:
                times[mode].append(run_child(commands(mode, model, data, args, work)))
        results[name] = times
        a = statistics.median(t for t, _ in times["plain"])
        a_mem = statistics.median(m for _, m in times["plain"])
        print(f"\n### {name}\n")
        print("| mode | wall s (median) | min – max | images/s | ÷ (a) | peak RSS MiB | ÷ (a) |")
        print("|---|---|---|---|---|---|---|")
        for mode in modes:
            ts, ms = [t for t, _ in times[mode]], [m for _, m in times[mode]]
            t, mem = statistics.median(ts), statistics.median(ms)
            print(f"| {LABELS[mode]} | {t:.2f} | {min(ts):.2f} – {max(ts):.2f} | {args.images / t:.1f} | "
                  f"{t / a:.3f} | {mem:.0f} | {mem / a_mem:.3f} |")
        print(f"\nload average after: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
        if "onnxaff" in modes and "naive" in modes:
            b = json.loads((work / f"{model.stem}.onnxaff.json").read_text())
            c = json.loads((work / f"{model.stem}.naive.json").read_text())
            diff = max(abs(s["metrics"][k]["mean"] - t["metrics"][k]["mean"])
                       for s, t in zip(b["sites"], c["sites"], strict=True) for k in s["metrics"]
                       if s["metrics"][k].get("mean") is not None and t["metrics"][k].get("mean") is not None)
            print(f"\n{len(b['sites'])} sites; max |score (b) − (c)| = {diff:.2e} (same numbers either way)")
        if args.profile:
            # In a child too: Linux starts a child's peak RSS at its parent's size, so a parent grown by an
            # in-process analysis would inflate every later measurement.
            text = subprocess.run([sys.executable, __file__, "--child-profile", str(model), str(data),
                                   str(args.batch_size), args.device, args.metrics, str(args.chunk_size)],
                                  check=True, capture_output=True, text=True)
            print(f"\n<details><summary>cProfile of (b), {name}</summary>\n\n```\n{text.stdout}```\n</details>")
    (work / "results.json").write_text(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())

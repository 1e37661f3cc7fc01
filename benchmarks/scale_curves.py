"""Scale curves (issue 28): time against the number of images per model, and against a site's width.

    python benchmarks/scale_curves.py images --models mobilenetv2,pplcnet --images 256,512,1024,2048 --work /tmp/bw
    python benchmarks/scale_curves.py width --widths 64,256,1024,4096 --rows 2048 --work /tmp/bw

`images`: for each model and each N, plain onnxruntime inference of the first N images and
`onnxaff analyze --limit N` (default metrics, default intervals, chunks of 512) on the same memory-mapped
float32 images, each in its own process, alternating plain / onnxaff, `--repeats` times; wall time from this
process, CPU time (user + system) from wait4(2). Plots seconds per image against N (log N) to
benchmarks/scale_images.png: the cost per image should be flat in N.

`width`: a synthetic model with one site, x [N, d] → MatMul (d×d) + Add → Relu → MatMul → y, on N Gaussian rows
(the same .npy for both modes); plots seconds against d to benchmarks/scale_width.png.

Prints a markdown table of every point and writes the numbers next to the plots (scale_*.json).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def plain(model: str, data: str, limit: int, batch: int) -> None:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    x = np.load(data, mmap_mode="r")[:limit]
    name = sess.get_inputs()[0].name
    for i in range(0, len(x), batch):
        sess.run(None, {name: np.ascontiguousarray(x[i:i + batch])})


def child(cmd: list[str]) -> tuple[float, float]:
    """(wall s, CPU s) of one child process."""
    from analysis_bench import child_usage

    wall, usage = child_usage(cmd)
    return wall, usage.ru_utime + usage.ru_stime


def measure(model: Path, data: Path, n: int, args, out: Path) -> dict:
    cmds = {"plain": [sys.executable, __file__, "--child-plain", str(model), str(data), str(n), str(args.batch_size)],
            "onnxaff": [sys.executable, "-m", "onnxaff.cli", "analyze", str(model), "--data", str(data), "--limit",
                        str(n), "--batch-size", str(args.batch_size), "--device", "cpu", "--quiet", "--out",
                        str(out / f"{model.stem}_{n}.json")]}
    runs: dict[str, list[tuple[float, float]]] = {m: [] for m in cmds}
    for _ in range(args.repeats):
        for mode, cmd in cmds.items():
            runs[mode].append(child(cmd))
    point = {"n": n, "load": os.getloadavg()[0]}
    for mode, rs in runs.items():
        point[mode] = {"wall": statistics.median(w for w, _ in rs), "cpu": statistics.median(c for _, c in rs),
                       "walls": [w for w, _ in rs]}
    return point


def width_model(d: int, seed: int = 0):
    import onnx
    from bench_models import _Graph

    g = _Graph(seed)
    h = g.op("Relu", [g.linear("x", d, d)])
    g.linear(h, d, d, gain=0.5, out="y")
    graph = onnx.helper.make_graph(g.nodes, f"one_site_{d}", [onnx.helper.make_tensor_value_info("x", 1, ["N", d])],
                                   [onnx.helper.make_tensor_value_info("y", 1, ["N", d])], g.inits)
    m = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)], producer_name="onnxaff-bench")
    m.ir_version = 9
    return m


def table(points: list[dict], key: str) -> str:
    lines = [f"| {key} | N | plain s | onnxaff s | ÷ plain | plain CPU s | onnxaff CPU s | ÷ plain (CPU) | load |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for p in points:
        a, b = p["plain"], p["onnxaff"]
        lines.append(f"| {p[key]} | {p['n']} | {a['wall']:.2f} | {b['wall']:.2f} | {b['wall'] / a['wall']:.2f} | "
                     f"{a['cpu']:.2f} | {b['cpu']:.2f} | {b['cpu'] / a['cpu']:.2f} | {p['load']:.1f} |")
    return "\n".join(lines)


def plot(points: list[dict], group: str, xkey: str, path: Path, per_image: bool, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for name in dict.fromkeys(p[group] for p in points):
        ps = sorted((p for p in points if p[group] == name), key=lambda p: p[xkey])
        xs = [p[xkey] for p in ps]
        for mode, style in (("plain", "--"), ("onnxaff", "-")):
            ys = [p[mode]["wall"] / (p["n"] if per_image else 1) for p in ps]
            ax.plot(xs, ys, style, marker="o", label=f"{name}: {mode}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel(xkey)
    ax.set_ylabel("wall seconds per image" if per_image else "wall seconds")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--child-plain":
        plain(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("curve", choices=["images", "width"])
    ap.add_argument("--models", default="mobilenetv2,pplcnet")
    ap.add_argument("--images", default="256,512,1024,2048")
    ap.add_argument("--widths", default="64,256,1024,4096")
    ap.add_argument("--rows", type=int, default=2048, help="examples of the width curve")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--work", default="/tmp/onnxaff-scale")
    ap.add_argument("--out", default=str(HERE), help="where the .png and .json go")
    ap.add_argument("--replot", action="store_true", help="only draw the .png again from the .json")
    args = ap.parse_args()
    if args.replot:
        points = json.loads((Path(args.out) / f"scale_{args.curve}.json").read_text())
        if args.curve == "images":
            plot(points, "model", "n", Path(args.out) / "scale_images.png", True,
                 "s/image vs images: plain onnxruntime vs onnxaff analyze\n(default metrics and intervals)")
        else:
            plot(points, "site", "d", Path(args.out) / "scale_width.png", False,
                 "one ReLU site of width d, chunks of 512")
        return 0
    work, out = Path(args.work), Path(args.out)
    work.mkdir(parents=True, exist_ok=True)
    print(f"# {time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}; "
          f"{' '.join(sys.argv)}")
    points = []
    if args.curve == "images":
        sizes = sorted(int(v) for v in args.images.split(","))
        models = args.models.split(",")
        subprocess.run([sys.executable, str(HERE / "analysis_bench.py"), "--child-prepare", ",".join(models),
                        str(sizes[-1]), str(work)], check=True)
        data = work / f"images_{sizes[-1]}.npy"
        for name in models:
            for n in sizes:
                points.append({"model": name, **measure(work / f"{name}.onnx", data, n, args, work)})
                print(table(points[-1:], "model").splitlines()[-1], flush=True)
        print(table(points, "model"))
        plot(points, "model", "n", out / "scale_images.png", True,
             "s/image vs images: plain onnxruntime vs onnxaff analyze\n(default metrics and intervals)")
    else:
        import onnx

        for d in sorted(int(v) for v in args.widths.split(",")):
            model, data = work / f"one_site_{d}.onnx", work / f"rows_{d}_{args.rows}.npy"
            if not model.exists():
                onnx.save(width_model(d), model)
            if not data.exists():
                np.save(data, np.random.default_rng(0).standard_normal((args.rows, d)).astype(np.float32))
            points.append({"d": d, "site": "one ReLU site", **measure(model, data, args.rows, args, work)})
            print(table(points[-1:], "d").splitlines()[-1], flush=True)
        print(table(points, "d"))
        plot(points, "site", "d", out / "scale_width.png", False,
             f"one ReLU site of width d, {args.rows} rows, chunks of 512")
    (out / f"scale_{args.curve}.json").write_text(json.dumps(points, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

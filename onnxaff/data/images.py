"""Image folders: flat or one subfolder per class (ImageNet val either way), decoded ahead in workers.

Files are found recursively (jpg/jpeg/png/bmp/webp, any case) and sorted by relative path. `--limit N`
takes the first N in that order; with `--shuffle --seed S` it takes a seeded subset spread evenly over
classes (a round robin over the classes, each shuffled), then in a seeded order. A file that cannot be
decoded is skipped, counted and named in the signature; the run goes on.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from collections import deque
from pathlib import Path

import numpy as np

from onnxaff.data.preprocess import Preprocess, crop_pixels, normalize
from onnxaff.data.source import DataSource, InputSpec
from onnxaff.errors import OnnxaffError, first_line

EXTENSIONS = {".jpg", ".jpeg", ".png", ".bmp", ".webp"}


def list_images(root: Path) -> list[Path]:
    files = [p for p in root.rglob("*") if p.suffix.lower() in EXTENSIONS and p.is_file()]
    return sorted(files, key=lambda p: p.relative_to(root).as_posix())


def class_of(root: Path, path: Path) -> str:
    rel = path.relative_to(root).parts
    return rel[0] if len(rel) > 1 else ""


def select(files: list[Path], root: Path, limit: int | None, shuffle: bool, seed: int) -> list[Path]:
    if not shuffle:
        return files[:limit] if limit else list(files)
    rng = np.random.default_rng(seed)
    by_class: dict[str, list[Path]] = {}
    for f in files:
        by_class.setdefault(class_of(root, f), []).append(f)
    queues = []
    for name in sorted(by_class):
        group = by_class[name]
        queues.append(deque(group[i] for i in rng.permutation(len(group))))
    order = rng.permutation(len(queues))
    picked: list[Path] = []
    want = limit or len(files)
    while len(picked) < want and any(queues):
        for k in order:
            if queues[k] and len(picked) < want:
                picked.append(queues[k].popleft())
    return [picked[i] for i in rng.permutation(len(picked))]


def decode_batch(paths: list[str], p: Preprocess, draft: bool) -> tuple[np.ndarray | None, list[str], list]:
    """Decode, resize and crop files to uint8 (4× less to send back than floats).

    Returns (uint8 [B, H, W, C] or None, used paths, [(path, reason), ...] skipped)."""
    from PIL import Image

    arrays, used, skipped = [], [], []
    for path in paths:
        try:
            with Image.open(path) as img:
                if draft and img.format == "JPEG":
                    # DCT-domain downscale to no less than twice the resize target: fast, nearly exact.
                    short = p.resize_to() * 2
                    w, h = img.size
                    factor = short / min(w, h)
                    if factor < 1:
                        img.draft("RGB" if p.channels == 3 else "L", (int(w * factor) + 1, int(h * factor) + 1))
                img.load()
                arrays.append(crop_pixels(img, p))
                used.append(path)
        except Exception as exc:  # truncated, not an image, unreadable: count and go on
            skipped.append((path, f"{type(exc).__name__}: {first_line(exc)}"[:200]))
    return (np.stack(arrays) if arrays else None), used, skipped


def _detach_from_signals() -> None:
    """Decoders leave Ctrl-C and SIGTERM to the main process, which stops at a batch boundary: a worker
    killed mid-task would leave its result pending forever. Their own process group keeps out what is
    sent to the whole group (a terminal's Ctrl-C, `timeout`, Slurm, systemd); Pool.terminate still signals
    them one by one, and a dead parent ends them (their task pipe closes)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.setpgrp()


class ImageFolderSource(DataSource):
    def __init__(self, root: str | Path, spec: InputSpec, preprocess: Preprocess, limit: int | None = None,
                 shuffle: bool = False, seed: int = 0, workers: int = 0, draft: bool = False,
                 prefetch: int | None = None):
        self.root = Path(root)
        all_files = list_images(self.root)
        if not all_files:
            raise OnnxaffError(f"no images ({', '.join(sorted(EXTENSIONS))}) found under {self.root}")
        self.files = select(all_files, self.root, limit, shuffle, seed)
        self.available = len(all_files)
        self.spec, self.p, self.workers, self.draft = spec, preprocess, workers, draft
        self.prefetch = prefetch or max(2, 2 * workers)
        self.shuffle, self.seed = shuffle, seed
        self.skipped: list[tuple[str, str]] = []
        self.used = 0

    def __len__(self) -> int:
        return len(self.files)

    def _tasks(self, batch_size: int, start: int, stop: int):
        for i in range(start, stop, batch_size):
            yield [str(f) for f in self.files[i:min(i + batch_size, stop)]]

    def batches(self, batch_size: int, start: int = 0, stop: int | None = None):
        self.skipped, self.used = [], 0
        tasks = self._tasks(batch_size, start, len(self.files) if stop is None else min(stop, len(self.files)))
        if self.workers <= 0:
            for paths in tasks:
                yield self._emit(decode_batch(paths, self.p, self.draft))
            return
        ctx = multiprocessing.get_context("spawn")  # no fork of a process that holds runtime threads
        with ctx.Pool(self.workers, initializer=_detach_from_signals) as pool:
            pending: deque = deque()
            for paths in tasks:
                pending.append(pool.apply_async(decode_batch, (paths, self.p, self.draft)))
                if len(pending) >= self.prefetch:  # bounded: at most `prefetch` batches decoded ahead
                    yield self._emit(pending.popleft().get())
            while pending:
                yield self._emit(pending.popleft().get())

    def _emit(self, result) -> dict[str, np.ndarray]:
        pixels, used, skipped = result
        self.skipped.extend(skipped)
        self.used += len(used)
        if pixels is None:
            return {self.spec.name: np.zeros((0, *self._example_shape()), dtype=self.p.dtype)}
        return {self.spec.name: normalize(pixels, self.p)}

    def _example_shape(self):
        h, w = self.p.crop_hw()
        return (self.p.channels, h, w) if self.p.layout == "NCHW" else (h, w, self.p.channels)

    def describe(self) -> dict:
        return {
            "source": str(self.root), "kind": "image_folder", "samples": len(self.files),
            "available": self.available, "shuffle": self.shuffle, "seed": self.seed if self.shuffle else None,
            "preprocessing": self.p.describe(), "jpeg_draft": self.draft, "workers": self.workers,
            "files": [f.relative_to(self.root).as_posix() for f in self.files],
            "skipped": [{"file": Path(f).relative_to(self.root).as_posix(), "reason": r} for f, r in self.skipped],
        }

"""Image folders: flat or one subfolder per class (ImageNet val either way), decoded ahead in workers.

Files are found recursively (jpg/jpeg/png/bmp/webp/tif/tiff, any case) and sorted by relative path. `--limit N`
takes the first N in that order; with `--shuffle --seed S` it takes a seeded subset spread evenly over
classes (a round robin over the classes, each shuffled), then in a seeded order. A file that cannot be
decoded is skipped, counted and named in the signature; the run goes on.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import threading
from collections import deque
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures import TimeoutError as FuturesTimeout
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

import numpy as np

from onnxaff import defaults
from onnxaff.data.preprocess import Preprocess, check_cost, crop_pixels, normalize, resized_size
from onnxaff.data.source import DataSource, InputSpec, folder_identity
from onnxaff.errors import DataFailed, OnnxaffError, StopWhileWaiting, first_line

EXTENSIONS = {".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff"}


def scan_images(root: Path) -> tuple[list[Path], dict]:
    """Image files under root, sorted by relative path, and what the walk met: symbolic links to folders and
    files are followed (a linked class folder is a class), a link to a folder above it is a loop and skipped,
    a dangling link is counted."""
    files: list[Path] = []
    found = {"links_followed": 0, "link_loops_skipped": 0, "broken_links": 0}

    def walk(folder: Path, above: frozenset) -> None:
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError:  # unreadable folder: nothing to find there
            return
        for entry in entries:
            path = Path(entry.path)
            link = entry.is_symlink()
            try:
                is_dir = entry.is_dir()  # follows links
            except OSError:
                is_dir = False
            if is_dir:
                real = os.path.realpath(path)
                if real in above:
                    found["link_loops_skipped"] += 1
                    continue
                found["links_followed"] += link
                walk(path, above | {real})
            elif path.suffix.lower() in EXTENSIONS:
                if link and not path.exists():
                    found["broken_links"] += 1
                elif entry.is_file():
                    found["links_followed"] += link
                    files.append(path)

    walk(root, frozenset({os.path.realpath(root)}))
    files.sort(key=lambda p: p.relative_to(root).as_posix())
    found = {"files": len(files), "classes": len({class_of(root, f) for f in files} - {""}), **found}
    return files, found


def list_images(root: Path) -> list[Path]:
    return scan_images(root)[0]


def found_message(found: dict) -> str | None:
    """One line on what the folder walk met, when it met links (else nothing to say)."""
    if not (found["links_followed"] or found["link_loops_skipped"] or found["broken_links"]):
        return None
    where = f" in {found['classes']} classes" if found["classes"] else ""
    parts = [f"image folder: {found['files']} files{where}"]
    for key, what in (("links_followed", "followed {} symbolic link"), ("link_loops_skipped", "skipped {} link loop"),
                      ("broken_links", "{} broken link")):
        if found[key]:
            parts.append(what.format(found[key]) + ("s" if found[key] > 1 else ""))
    return "; ".join(parts)


ENLARGED = 4  # an image resized up by more than this on a side is said once: its pixels are mostly interpolated
_EXAMINED = 256  # the files whose headers are read for it (evenly spread over those the run reads)


def small_images_message(files: list[Path], p: Preprocess) -> str | None:
    """One line when images are much smaller than what the model takes (8×8 enlarged to 256 before a 224 crop),
    from the headers of up to _EXAMINED of `files` (no decoding): they would otherwise be upscaled without a word."""
    from PIL import Image

    picked = [files[int(k)] for k in np.unique(np.linspace(0, len(files) - 1, min(len(files), _EXAMINED)))]
    small = []
    for path in picked:
        try:
            with Image.open(path) as img:
                size = img.size
        except Exception:  # unreadable: skipped with its reason when decoded
            continue
        w, h = resized_size(size, p)
        if w > ENLARGED * size[0] or h > ENLARGED * size[1]:
            small.append(size)
    if not small:
        return None
    least = min(small, key=lambda s: s[0] * s[1])
    h, w = p.crop_hw()
    of = f"{len(small)} of the {len(picked)} examined" + (f" (of {len(files)})" if len(picked) < len(files) else "")
    return (f"image folder: {of} images are enlarged more than {ENLARGED}× to reach the model's {h}x{w} input "
            f"(the smallest {least[0]}x{least[1]}): their pixels are mostly interpolated")


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
                check_cost(img.size, p)  # from the header, before any decoding
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


class DecoderDied(DataFailed):
    """A decoding worker process ended abruptly (the out-of-memory killer's SIGKILL, a crash in a codec)."""


def _watch_parent() -> None:
    """End this decoder when the main process is gone (a kill -9 of the run must not leave it behind)."""
    parent = multiprocessing.parent_process()
    if parent is not None:
        parent.join()
    os._exit(1)


_HELD = {signal.SIGINT, signal.SIGTERM}


@contextlib.contextmanager
def _signals_held():
    """Start decoders with Ctrl-C and SIGTERM blocked: a signal sent to the whole process group while one
    starts up (before it can leave the group) would otherwise kill it and break the pool. The main thread's
    own handlers run as soon as the block is lifted."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, _HELD)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _detach_from_signals() -> None:
    """Decoders leave Ctrl-C and SIGTERM to the main process, which stops at a batch boundary: a worker
    killed mid-task would break the pool. Their own process group keeps out what is sent to the whole group
    (a terminal's Ctrl-C, `timeout`, Slurm, systemd); the main process ends them one by one when it stops,
    and a thread ends each one when the main process dies. They start with both signals blocked
    (`_signals_held`): ignoring them first drops any that arrived meanwhile."""
    for sig in _HELD:
        signal.signal(sig, signal.SIG_IGN)
    os.setpgrp()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _HELD)
    threading.Thread(target=_watch_parent, daemon=True).start()


def _stop_pool(pool: ProcessPoolExecutor) -> None:
    """Drop queued batches and end the decoders now: waiting for batches nobody will read can take minutes.
    SIGKILL, not SIGTERM: a decoder still starting up holds SIGTERM blocked and then drops it, and the
    executor's exit handler would wait for it forever."""
    processes = list((getattr(pool, "_processes", None) or {}).values())  # no public handle on the workers
    pool.shutdown(wait=False, cancel_futures=True)
    for proc in processes:
        if proc.is_alive():
            proc.kill()
    for proc in processes:
        proc.join(timeout=5)


class ImageFolderSource(DataSource):
    spec_form = "an image folder"
    reads_folder = True

    @classmethod
    def parse(cls, spec: str) -> str | None:
        return spec if Path(spec).is_dir() else None

    @classmethod
    def identity(cls, spec: str, path: str) -> list:
        return folder_identity(Path(path), list_images(Path(path)))

    @classmethod
    def from_spec(cls, spec: str, path: str, inputs: list[InputSpec], **options) -> DataSource:
        from onnxaff.data.preprocess import build_preprocess

        opts = dict(options.get("images") or {})
        if len(inputs) != 1:
            raise OnnxaffError(f"an image folder feeds a single-input model; this one has {len(inputs)} inputs")
        pre = build_preprocess(opts.pop("preprocess", "torchvision"), inputs[0], shape=(options.get("shapes") or {})
                               .get(inputs[0].name), **{k: opts.pop(k) for k in (
                                   "mean", "std", "resize", "crop", "interpolation", "fit", "pad_value", "scale",
                                   "offset", "channel_order") if k in opts})
        return cls(Path(path), inputs[0], pre, limit=options.get("limit"),
                   seed=options.get("seed", defaults.SEED), **opts)

    def __init__(self, root: str | Path, spec: InputSpec, preprocess: Preprocess, limit: int | None = None,
                 shuffle: bool = False, seed: int = defaults.SEED, workers: int = 0, draft: bool = False,
                 prefetch: int | None = None):
        self.root = Path(root)
        all_files, self.found = scan_images(self.root)
        self.warnings = [m] if (m := found_message(self.found)) else []
        if not all_files:
            raise OnnxaffError(f"no images ({', '.join(sorted(EXTENSIONS))}) found under {self.root}")
        self.files = select(all_files, self.root, limit, shuffle, seed)
        if (m := small_images_message(self.files, preprocess)):
            self.warnings.append(m)
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

    def batches(self, batch_size: int, start: int = 0, stop: int | None = None, should_stop=None):
        self.skipped, self.used = [], 0
        if should_stop is None:
            should_stop = lambda: False  # noqa: E731 - nobody asks this source to stop
        tasks = self._tasks(batch_size, start, len(self.files) if stop is None else min(stop, len(self.files)))
        if self.workers <= 0:
            for paths in tasks:
                yield self._emit(decode_batch(paths, self.p, self.draft))
            return
        ctx = multiprocessing.get_context("spawn")  # no fork of a process that holds runtime threads
        # concurrent.futures notices a worker that dies (multiprocessing.Pool waits for its result forever).
        with _signals_held():
            pool = ProcessPoolExecutor(self.workers, mp_context=ctx, initializer=_detach_from_signals)
        try:
            pending: deque = deque()
            for index, paths in enumerate(tasks):
                try:
                    with _signals_held():  # submit starts the decoders, one by one as they are needed
                        future = pool.submit(decode_batch, paths, self.p, self.draft)
                except BrokenProcessPool:  # a worker died: the oldest pending batch (or this one) says so
                    future = Future()
                    future.set_exception(BrokenProcessPool())
                pending.append((index, paths, future))
                if len(pending) >= self.prefetch:  # bounded: at most `prefetch` batches decoded ahead
                    yield self._emit(self._result(*pending.popleft(), start, batch_size, should_stop))
            while pending:
                yield self._emit(self._result(*pending.popleft(), start, batch_size, should_stop))
        finally:
            _stop_pool(pool)

    def _result(self, index: int, paths: list[str], future, start: int, batch_size: int, should_stop):
        try:
            while True:  # polled, so a stop asked for meanwhile (Ctrl-C) needs no batch to arrive first
                try:
                    return future.result(timeout=0.25)
                except FuturesTimeout:
                    if should_stop():
                        raise StopWhileWaiting(f"stopped while waiting for batch {index + 1}") from None
        except BrokenProcessPool:
            first = Path(paths[0]).relative_to(self.root).as_posix() if paths else "?"
            raise DecoderDied(
                f"an image decoder process died (killed, e.g. out of memory) while decoding batch {index + 1} "
                f"of this run (examples {start + index * batch_size}-{start + index * batch_size + len(paths) - 1}"
                f", from {first})") from None

    def _emit(self, result) -> dict[str, np.ndarray]:
        pixels, used, skipped = result
        self.skipped.extend(skipped)
        self.used += len(used)
        if pixels is None:
            return {self.spec.name: np.zeros((0, *self._example_shape()), dtype=self.p.dtype)}
        return {self.spec.name: normalize(pixels, self.p)}

    def _example_shape(self):
        h, w = self.p.crop_hw()
        return (self.p.channels, h, w) if self.p.pixel_layout == "NCHW" else (h, w, self.p.channels)

    def describe(self) -> dict:
        return {
            "source": str(self.root), "kind": "image_folder", "samples": len(self.files),
            "available": self.available, "found": self.found, "shuffle": self.shuffle,
            "seed": self.seed if self.shuffle else None,
            "preprocessing": self.p.describe(), "jpeg_draft": self.draft, "workers": self.workers,
            "files": [f.relative_to(self.root).as_posix() for f in self.files],
            "skipped": [{"file": Path(f).relative_to(self.root).as_posix(), "reason": r} for f, r in self.skipped],
        }

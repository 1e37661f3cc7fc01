"""Preprocessing presets: what each framework's ImageNet models were trained to receive.

| preset | resize (shorter side) | crop | scale | normalise | channels |
|---|---|---|---|---|---|
| torchvision | 256 (crop/0.875), bilinear | centre 224 | /255 | ImageNet mean/std (0.485, …)/(0.229, …) | RGB |
| inception | crop/0.875, bilinear | centre 299 (or the model's) | /127.5 − 1 → [−1, 1] | none | RGB |
| caffe | 256 (crop/0.875), bilinear | centre 224 | 0–255 | minus BGR mean (103.939, 116.779, 123.68) | BGR |
| raw | the crop size, bilinear | centre | /255 → [0, 1] | none | RGB (or L for 1 channel) |

The crop size, the layout (NCHW / NHWC) and the dtype come from the model input when it declares
them; --mean/--std/--resize/--crop/--interpolation override any preset ("custom").
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from onnxaff.data.source import InputSpec
from onnxaff.errors import OnnxaffError

INTERPOLATIONS = ("nearest", "bilinear", "bicubic", "lanczos", "box", "hamming")


@dataclass(frozen=True)
class Preprocess:
    name: str
    crop: int | tuple[int, int] = 224
    resize: int | None = None  # shorter side before the crop; None: round(crop / 0.875)
    scale: float = 1 / 255
    offset: float = 0.0  # after scaling
    mean: tuple[float, ...] | None = None  # after scaling and offset
    std: tuple[float, ...] | None = None
    bgr: bool = False
    interpolation: str = "bilinear"
    layout: str = "NCHW"
    channels: int = 3
    dtype: str = "float32"

    def crop_hw(self) -> tuple[int, int]:
        return (self.crop, self.crop) if isinstance(self.crop, int) else tuple(self.crop)

    def resize_to(self) -> int:
        return self.resize if self.resize is not None else int(round(min(self.crop_hw()) / 0.875))

    def describe(self) -> dict:
        h, w = self.crop_hw()
        return {"preset": self.name, "resize_shorter_side": self.resize_to(), "center_crop": [h, w],
                "scale": self.scale, "offset": self.offset, "mean": self.mean, "std": self.std,
                "channel_order": "BGR" if self.bgr else ("L" if self.channels == 1 else "RGB"),
                "interpolation": self.interpolation, "layout": self.layout, "dtype": self.dtype}


PRESETS = {
    "torchvision": Preprocess("torchvision", mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225)),
    "inception": Preprocess("inception", crop=299, scale=1 / 127.5, offset=-1.0),
    "caffe": Preprocess("caffe", scale=1.0, mean=(103.939, 116.779, 123.68), bgr=True),
    "raw": Preprocess("raw", resize=0),
}


def image_input_layout(spec: InputSpec) -> tuple[str, int, tuple[int | None, int | None]]:
    """(layout, channels, (H, W)) read off a rank-4 image input; channels 1 or 3 decide the layout."""
    shape = spec.shape
    if len(shape) != 4:
        raise OnnxaffError(f"image data needs a rank-4 image input; model input is {spec.describe()}")

    def known(d):
        return d if isinstance(d, int) and d > 0 else None

    c1, c3 = known(shape[1]), known(shape[3])
    if c1 in (1, 3):
        return "NCHW", c1, (known(shape[2]), known(shape[3]))
    if c3 in (1, 3):
        return "NHWC", c3, (known(shape[1]), known(shape[2]))
    raise OnnxaffError(f"cannot tell the channel axis of model input {spec.describe()} (expected 1 or 3 channels)")


def build_preprocess(name: str, spec: InputSpec, mean=None, std=None, resize=None, crop=None,
                     interpolation=None) -> Preprocess:
    if name not in PRESETS:
        raise OnnxaffError(f"unknown preprocessing {name!r}; choose one of {', '.join(PRESETS)}")
    if not np.issubdtype(spec.dtype, np.floating):
        raise OnnxaffError(f"image presets produce floats but model input {spec.describe()} wants {spec.dtype}")
    layout, channels, (h, w) = image_input_layout(spec)
    p = PRESETS[name]
    custom = any(v is not None for v in (mean, std, resize, crop, interpolation))
    changes = {"layout": layout, "channels": channels, "dtype": spec.dtype.name}
    if h and w:
        changes["crop"] = (h, w)
    if crop is not None:
        if h and w and (crop, crop) != (h, w):
            raise OnnxaffError(f"--crop {crop} but model input {spec.describe()} takes {h}x{w} images")
        changes["crop"] = crop
    if resize is not None:
        changes["resize"] = resize
    if interpolation is not None:
        if interpolation not in INTERPOLATIONS:
            raise OnnxaffError(f"unknown interpolation {interpolation!r}; choose one of {', '.join(INTERPOLATIONS)}")
        changes["interpolation"] = interpolation
    if mean is not None:
        changes["mean"] = tuple(mean)
    if std is not None:
        changes["std"] = tuple(std)
    p = replace(p, **changes, name=f"{name}+custom" if custom else name)
    if p.resize == 0:
        p = replace(p, resize=min(p.crop_hw()))
    for what in ("mean", "std"):
        v = getattr(p, what)
        if v is not None and len(v) not in (1, channels):
            raise OnnxaffError(f"preset {p.name} has a {len(v)}-channel {what} but model input {spec.describe()} "
                               f"takes {channels}-channel images; give --{what} with {channels} value(s)")
    return p


def _resample(name: str):
    from PIL import Image

    return getattr(Image.Resampling, name.upper())


# The most pixels an image may have once resized (before the crop): 2^24, 48 MiB as RGB. A normal photo
# resized to a shorter side of 256 has under 0.2 M; this allows an aspect ratio of 256:1 at that size.
MAX_RESIZED_PIXELS = 1 << 24


class ImageTooLarge(ValueError):
    """Resizing this image would cost more than MAX_RESIZED_PIXELS (an extreme aspect ratio, a tiny crop)."""


def resized_size(size: tuple[int, int], p: Preprocess) -> tuple[int, int]:
    """(width, height) after resizing the shorter side to p.resize_to(), the longer one truncated (as
    torchvision's Resize(int) does)."""
    short = p.resize_to()
    iw, ih = size
    if iw <= ih:
        return short, max(int(short * ih / iw), 1)
    return max(int(short * iw / ih), 1), short


def check_cost(size: tuple[int, int], p: Preprocess) -> None:
    """Refuse, before decoding, an image whose resize alone would take gigabytes (a 1 × 4,000,000 PNG is 8 KB;
    Pillow's decompression-bomb check counts only the decoded pixels)."""
    w, h = resized_size(size, p)
    if w * h > MAX_RESIZED_PIXELS:
        raise ImageTooLarge(f"{size[0]}x{size[1]} pixels resized to {w}x{h} would exceed the limit of "
                            f"{MAX_RESIZED_PIXELS} pixels (aspect ratio {max(size) / max(min(size), 1):.0f}:1)")


def bit_depth(img) -> int:
    """Bits per sample of an integer image Pillow keeps deeper than 8 bits (I;16*, I)."""
    if img.mode.startswith("I;16"):
        return 16
    tag = getattr(img, "tag_v2", None)  # TIFF: BitsPerSample
    if tag is not None and 258 in tag:
        bits = tag[258]
        return int(bits[0] if isinstance(bits, tuple) else bits)
    if img.format == "PNG":  # older Pillow opens 16-bit grayscale PNGs as I
        return 16
    return 16 if np.asarray(img).max(initial=0) < 1 << 16 else 32


def to_8bit(img):
    """16-bit (and 32-bit integer) images scaled to 0–255 by their bit depth: Pillow's convert clips them at
    255, which turns nearly every pixel white. Rounded, so a 16-bit image gives exactly its 8-bit rendering."""
    from PIL import Image

    if not (img.mode.startswith("I;16") or img.mode == "I"):
        return img
    a = np.asarray(img).astype(np.float64)
    top = float((1 << bit_depth(img)) - 1)
    return Image.fromarray(np.clip(np.round(a * (255.0 / top)), 0, 255).astype(np.uint8), "L")


def crop_pixels(img, p: Preprocess) -> np.ndarray:
    """Decode-side half: resize and centre-crop to uint8 HWC (what worker processes send back)."""
    img = to_8bit(img).convert("L" if p.channels == 1 else "RGB")
    h, w = p.crop_hw()
    size = resized_size(img.size, p)
    if size != img.size:
        img = img.resize(size, _resample(p.interpolation))
    left, top = int(round((size[0] - w) / 2.0)), int(round((size[1] - h) / 2.0))
    if left < 0 or top < 0:
        raise ValueError(f"resized image {size} is smaller than the {w}x{h} crop")
    a = np.asarray(img.crop((left, top, left + w, top + h)), dtype=np.uint8)
    return a[:, :, None] if a.ndim == 2 else a


def normalize(pixels: np.ndarray, p: Preprocess) -> np.ndarray:
    """Runtime-side half: uint8 [B, H, W, C] → scaled, normalised batch in the model's layout and dtype."""
    a = pixels.astype(np.float32)
    if p.bgr:
        a = a[..., ::-1]
    a = a * np.float32(p.scale) + np.float32(p.offset)
    if p.mean is not None:
        a = a - np.asarray(p.mean, dtype=np.float32)
    if p.std is not None:
        a = a / np.asarray(p.std, dtype=np.float32)
    if p.layout == "NCHW":
        a = a.transpose(0, 3, 1, 2)
    return np.ascontiguousarray(a, dtype=p.dtype)

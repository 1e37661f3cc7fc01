"""Preprocessing presets: what each framework's ImageNet models were trained to receive.

| preset | resize (shorter side) | crop | scale | normalise | channels |
|---|---|---|---|---|---|
| torchvision | 256 (crop/0.875), bilinear | centre 224 | /255 | ImageNet mean/std (0.485, …)/(0.229, …) | RGB |
| inception | crop/0.875, bilinear | centre 299 (or the model's) | /127.5 − 1 → [−1, 1] | none | RGB |
| caffe | 256 (crop/0.875), bilinear | centre 224 | 0–255 | minus BGR mean (103.939, 116.779, 123.68) | BGR |
| raw | the crop size, bilinear | centre | /255 → [0, 1] | none | RGB (or L for 1 channel) |

The crop size, the layout (NCHW / NHWC) and the dtype come from the model input when it declares
them (`--input-shape NAME=CxHxW` fixes symbolic ones); --mean/--std/--resize/--crop/--interpolation
override any preset ("custom"). Sizes are one number or HxW: `--resize HxW` resizes to exactly that
(distorting, as OCR and detector pipelines do), `--resize N` sets the shorter side (enlarged where a
non-square crop would not fit). `--fit letterbox` (centred) and `--fit pad` (top-left, padded on the
right and bottom, as text recognisers) scale the whole image to fit inside HxW without distorting it and
fill the rest with `--pad-value` (pixels, 0-255, before scaling).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from onnxaff.data.source import InputSpec, unknown_dims_text
from onnxaff.errors import ConfigError, OnnxaffError, option

INTERPOLATIONS = ("nearest", "bilinear", "bicubic", "lanczos", "box", "hamming")
FITS = ("crop", "letterbox", "pad")


def parse_size(text, option: str) -> int | tuple[int, int] | None:
    """`N` or `HxW` (positive ints) -> N or (H, W); what --crop and --resize take."""
    if text is None or isinstance(text, int | tuple):
        return text
    parts = str(text).lower().replace("×", "x").split("x")
    try:
        dims = tuple(int(d) for d in parts)
    except ValueError:
        dims = ()
    if len(dims) not in (1, 2) or min(dims) <= 0:
        raise ConfigError(option, f"{{option}} {text!r} is not a size: give N or HxW (positive integers, e.g. 48x320)")
    return dims[0] if len(dims) == 1 else dims


def _fmt_size(size) -> str:
    return str(size) if isinstance(size, int) else "x".join(str(d) for d in size)


@dataclass(frozen=True)
class Preprocess:
    name: str
    crop: int | tuple[int, int] = 224
    resize: int | tuple[int, int] | None = None  # shorter side (or exact HxW) before the crop; None: crop/0.875
    scale: float = 1 / 255
    offset: float = 0.0  # after scaling
    mean: tuple[float, ...] | None = None  # after scaling and offset
    std: tuple[float, ...] | None = None
    bgr: bool = False
    interpolation: str = "bilinear"
    pixel_layout: str = "NCHW"  # NCHW or NHWC: where the model wants the channels (its signature key: layout)
    channels: int = 3
    dtype: str = "float32"
    fit: str = "crop"  # crop: resize then centre crop; letterbox / pad: scale to fit inside, then pad
    pad_value: tuple[int, ...] = (0,)

    def crop_hw(self) -> tuple[int, int]:
        return (self.crop, self.crop) if isinstance(self.crop, int) else tuple(self.crop)

    def shorter_side(self) -> int:
        """The shorter side of `--fit crop` resizes (before any enlargement a non-square crop needs)."""
        return self.resize if isinstance(self.resize, int) else int(round(min(self.crop_hw()) / 0.875))

    def resize_to(self) -> int:
        """No resized image has a shorter side above this (JPEG draft mode decodes to twice it)."""
        h, w = self.crop_hw()
        if isinstance(self.resize, tuple):
            return max(self.resize)
        if self.fit != "crop":
            return max(h, w)
        if self.resize is None:
            return int(round(max(h, w) / 0.875))
        return max(self.resize, h, w)

    def describe(self) -> dict:
        h, w = self.crop_hw()
        d = {"preset": self.name}
        if self.fit != "crop":
            d.update(fit=self.fit, size=[h, w], pad_value=list(self.pad_value),
                     anchor="centre" if self.fit == "letterbox" else "top-left")
        elif isinstance(self.resize, tuple):
            d.update(resize=list(self.resize), center_crop=[h, w])
        else:
            d.update(resize_shorter_side=self.shorter_side(), center_crop=[h, w])
        return d | {"scale": self.scale, "offset": self.offset, "mean": self.mean, "std": self.std,
                    "channel_order": "BGR" if self.bgr else ("L" if self.channels == 1 else "RGB"),
                    "interpolation": self.interpolation, "layout": self.pixel_layout, "dtype": self.dtype}


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


def _fix_shape(spec: InputSpec, shape) -> InputSpec:
    """The input with its dims after the batch axis set by --input-shape (static dims must agree)."""
    from onnxaff.data.source import check_example_shape

    shape = tuple(shape)
    if len(shape) != 3:
        raise ConfigError("input_shapes", f"{{option}} {spec.name}={_fmt_size(shape)} gives {len(shape)} dims, but "
                          f"an image input takes 3 after the batch axis (CxHxW, or HxWxC for channels-last)")
    check_example_shape(spec, shape, option("input_shapes", f"{spec.name}={_fmt_size(shape)}"))
    return replace(spec, shape=(spec.shape[0] if spec.shape else "N", *shape))


def build_preprocess(name: str, spec: InputSpec, mean=None, std=None, resize=None, crop=None,
                     interpolation=None, fit=None, pad_value=None, shape=None, scale=None, offset=None,
                     channel_order=None) -> Preprocess:
    """The preset fitted to the model input; `shape`: its dims after the batch axis from --input-shape;
    `channel_order` "RGB" or "BGR" (onnxaff.data.image_preprocess checks the values)."""
    if name not in PRESETS:
        raise OnnxaffError(f"unknown preprocessing {name!r}; choose one of {', '.join(PRESETS)}")
    if not np.issubdtype(spec.dtype, np.floating):
        raise OnnxaffError(f"image presets produce floats but model input {spec.describe()} wants {spec.dtype}")
    if shape is not None:
        spec = _fix_shape(spec, shape)
    layout, channels, hw = image_input_layout(spec)
    crop, resize = parse_size(crop, "images.crop"), parse_size(resize, "images.resize")
    custom = any(v is not None for v in (mean, std, resize, crop, interpolation, fit, pad_value, scale, offset,
                                         channel_order))
    h, w = _crop_size(spec, layout, hw, crop, resize, fit)
    changes = {"pixel_layout": layout, "channels": channels, "dtype": spec.dtype.name, "crop": (h, w)}
    changes |= _fit_changes(fit, resize, h, w, pad_value, channels)
    if isinstance(resize, tuple) and (resize[0] < h or resize[1] < w):
        raise ConfigError("images.resize", f"{{option}} {_fmt_size(resize)} is smaller than the {h}x{w} crop")
    if interpolation is not None and interpolation not in INTERPOLATIONS:
        raise OnnxaffError(f"unknown interpolation {interpolation!r}; choose one of {', '.join(INTERPOLATIONS)}")
    for key, value in (("resize", resize), ("interpolation", interpolation), ("mean", mean), ("std", std),
                       ("scale", scale), ("offset", offset), ("bgr", None if channel_order is None else
                                                               channel_order == "BGR")):
        if value is not None:
            changes[key] = tuple(value) if key in ("mean", "std") else value
    p = replace(PRESETS[name], **changes, name=f"{name}+custom" if custom else name)
    if p.resize == 0:
        p = replace(p, resize=min(p.crop_hw()))
    _check_channels(p, spec, channels)
    return p


def _crop_size(spec: InputSpec, layout: str, hw: tuple, crop, resize, fit) -> tuple[int, int]:
    """The image size the model takes: its own, else --crop's, else an exact --resize HxW (crop fit only)."""
    h, w = hw
    if crop is not None:
        ch, cw = (crop, crop) if isinstance(crop, int) else crop
        if (h and ch != h) or (w and cw != w):
            raise ConfigError("images.crop", f"{{option}} {_fmt_size(crop)} but model input {spec.describe()} takes "
                               f"{h or 'H'}x{w or 'W'} images")
        h, w = ch, cw
    elif not (h and w) and isinstance(resize, tuple) and fit in (None, "crop"):
        h, w = h or resize[0], w or resize[1]
    if not (h and w):
        names = ("C", "H", "W") if layout == "NCHW" else ("H", "W", "C")
        dims = "x".join(str(d) if isinstance(d, int) and d > 0 else n
                        for d, n in zip(spec.shape[1:], names, strict=True))
        what = "has a symbolic image height/width" if not any(isinstance(d, int) and d <= 0 for d in spec.shape[1:]) \
            else unknown_dims_text(spec.shape[1:])
        raise OnnxaffError(f"model input {spec.describe()} {what}: give the size with "
                           f"{option('input_shapes', f'{spec.name}={dims}')} or {option('images.crop', 'HxW')}")
    return h, w


def _fit_changes(fit, resize, h: int, w: int, pad_value, channels: int) -> dict:
    """--fit and its border --pad-value, checked against the other sizes."""
    changes = {}
    if fit is not None:
        if fit not in FITS:
            raise ConfigError("images.fit", f"unknown {{option}} {fit!r}; choose one of {', '.join(FITS)}")
        if fit != "crop" and resize is not None:
            raise ConfigError("images.fit", f"{{option}} {fit} scales each image to fit {h}x{w} itself: "
                                            "drop the resize")
        changes["fit"] = fit
    if pad_value is not None:
        values = tuple(pad_value) if isinstance(pad_value, tuple | list) else (pad_value,)
        if len(values) not in (1, channels) or any(v != int(v) or not 0 <= v <= 255 for v in values):
            raise ConfigError("images.pad_value", f"{{option}} {','.join(f'{v:g}' for v in values)} must be 1 or "
                                                  f"{channels} pixel value(s), integers in 0-255 (before scaling)")
        changes["pad_value"] = tuple(int(v) for v in values)
    return changes


def _check_channels(p: Preprocess, spec: InputSpec, channels: int) -> None:
    for what in ("mean", "std"):
        v = getattr(p, what)
        if v is not None and len(v) not in (1, channels):
            raise OnnxaffError(f"preset {p.name} has a {len(v)}-channel {what} but model input {spec.describe()} "
                               f"takes {channels}-channel images; give --{what} with {channels} value(s)")


def _resample(name: str):
    from PIL import Image

    return getattr(Image.Resampling, name.upper())


# The most pixels an image may have once resized (before the crop): 2^24, 48 MiB as RGB. A normal photo
# resized to a shorter side of 256 has under 0.2 M; this allows an aspect ratio of 256:1 at that size.
MAX_RESIZED_PIXELS = 1 << 24


class ImageTooLarge(ValueError):
    """Resizing this image would cost more than MAX_RESIZED_PIXELS (an extreme aspect ratio, a tiny crop)."""


def _cover(iw: int, ih: int, short: int, need_w: int, need_h: int) -> tuple[int, int]:
    """(W, H) with the shorter side `short`, the longer one truncated as torchvision's Resize(int) does,
    and the shorter side enlarged, where needed, until the image covers need_w x need_h."""
    def scaled(s):
        return (s, max(int(s * ih / iw), 1)) if iw <= ih else (max(int(s * iw / ih), 1), s)

    size = scaled(short)
    if size[0] < need_w or size[1] < need_h:  # only non-square crops (or --resize below the crop)
        long_need, short_need = (need_h, need_w) if iw <= ih else (need_w, need_h)
        s = max(short, short_need, math.ceil(long_need * min(iw, ih) / max(iw, ih)))
        while scaled(s)[0] < need_w or scaled(s)[1] < need_h:
            s += 1
        size = scaled(s)
    return size


def _fit_inside(img, p: Preprocess):
    """Letterbox: the whole image scaled to fit inside the crop, on a canvas of the pad value."""
    from PIL import Image

    h, w = p.crop_hw()
    size = resized_size(img.size, p)
    if size != img.size:
        img = img.resize(size, _resample(p.interpolation))
    fill = p.pad_value * (p.channels if len(p.pad_value) == 1 else 1)
    canvas = Image.new(img.mode, (w, h), fill[0] if p.channels == 1 else tuple(fill))
    at = ((w - size[0]) // 2, (h - size[1]) // 2) if p.fit == "letterbox" else (0, 0)
    canvas.paste(img, at)
    return canvas


def resized_size(size: tuple[int, int], p: Preprocess) -> tuple[int, int]:
    """(W, H) an image of `size` is resized to before the crop (with letterbox/pad: its size inside the crop)."""
    iw, ih = size
    h, w = p.crop_hw()
    if p.fit != "crop":
        scale = min(w / iw, h / ih)
        return min(w, max(1, int(round(iw * scale)))), min(h, max(1, int(round(ih * scale))))
    if isinstance(p.resize, tuple):
        return p.resize[1], p.resize[0]
    if p.resize is None:  # crop / 0.875 on each side of the crop: the shorter side for a square one
        return _cover(iw, ih, p.shorter_side(), int(round(w / 0.875)), int(round(h / 0.875)))
    return _cover(iw, ih, p.resize, w, h)


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
    255, which turns nearly every pixel white. Rounded, so a 16-bit image gives exactly its 8-bit rendering.
    Float images (mode F) are intensities in [0, 1], scaled by 255 (convert clipped them: all black)."""
    from PIL import Image

    if img.mode == "F":
        return Image.fromarray(_float_to_8bit(np.asarray(img, dtype=np.float64)), "L")
    if not (img.mode.startswith("I;16") or img.mode == "I"):
        return img
    a = np.asarray(img).astype(np.float64)
    top = float((1 << bit_depth(img)) - 1)
    return Image.fromarray(np.clip(np.round(a * (255.0 / top)), 0, 255).astype(np.uint8), "L")


def _float_to_8bit(a: np.ndarray) -> np.ndarray:
    """[0, 1] → 0–255; any other value is refused (the file skipped with the reason): 0–100, 0–255 or a signed
    range cannot be told apart from the values alone, and clipping would change the image without a word."""
    finite = np.isfinite(a)
    if not finite.all() or a.min(initial=0.0) < 0.0 or a.max(initial=0.0) > 1.0:
        low, high = (float(a[finite].min()), float(a[finite].max())) if finite.any() else (math.nan, math.nan)
        nonfinite = f", {int((~finite).sum())} NaN/Inf" if not finite.all() else ""
        raise ValueError(f"float image with values outside [0, 1] (min {low:g}, max {high:g}{nonfinite}): "
                         "onnxaff reads float images as intensities in [0, 1]")
    return np.round(a * 255.0).astype(np.uint8)


def crop_pixels(img, p: Preprocess) -> np.ndarray:
    """Decode-side half: resize and centre-crop (or letterbox) to uint8 HWC (what worker processes send back)."""
    img = to_8bit(img).convert("L" if p.channels == 1 else "RGB")
    h, w = p.crop_hw()
    if p.fit != "crop":
        a = np.asarray(_fit_inside(img, p), dtype=np.uint8)
        return a[:, :, None] if a.ndim == 2 else a
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
    if p.pixel_layout == "NCHW":
        a = a.transpose(0, 3, 1, 2)
    return np.ascontiguousarray(a, dtype=p.dtype)

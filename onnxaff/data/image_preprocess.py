"""`ImagePreprocess`: how an image folder becomes model input, as one documented, checked value.

It is the Python form of the image options (`AnalysisConfig.images`, the `--preprocess`, `--mean`, ... flags):
`options()` gives the dict the analysis keeps, `from_options` reads one back. What depends on the model (its
input size, layout, dtype and channel count) is checked when the model is known (onnxaff.data.preprocess);
everything else is checked here, when the value is made.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass

from onnxaff.data.preprocess import FITS, INTERPOLATIONS, PRESETS, parse_size
from onnxaff.errors import ConfigError

CHANNEL_ORDERS = ("RGB", "BGR")
KEY_OF_FIELD = {"preset": "preprocess", "fast_decode": "draft"}  # the image options' own names, where they differ


@dataclass(frozen=True)
class ImagePreprocess:
    """How the images of a folder are resized, cropped, scaled and normalised for the model.

    Each field left at None takes the preset's value (or, for `crop`, the model input's image size); the
    result is recorded in the signature's ``data.preprocessing``. The presets are also constructors:
    ``ImagePreprocess.imagenet()`` (= ``torchvision()``), ``inception()``, ``caffe()`` and ``raw()``.

    Parameters
    ----------
    preset : {"torchvision", "inception", "caffe", "raw"}
        The starting point. ``torchvision``: shorter side to crop/0.875 (256 for 224), centre crop, /255, ImageNet
        mean (0.485, 0.456, 0.406) and std (0.229, 0.224, 0.225), RGB. ``inception``: crop/0.875, centre crop
        (299 where the model does not say), /127.5 - 1. ``caffe``: 256, centre crop, 0-255 minus the BGR mean
        (103.939, 116.779, 123.68), BGR. ``raw``: resized to the crop, /255, no normalisation.
    crop : int or (int, int), optional
        The image size the model takes, N or (H, W) (also ``"48x320"``). Default: the model input's; a model with
        symbolic H and W needs it (or ``input_shapes``).
    resize : int or (int, int), optional
        Before the centre crop: N sets the shorter side (enlarged where a non-square crop would not fit), (H, W)
        resizes to exactly that size, distorting. Default: crop/0.875 (``raw``: the crop).
    fit : {"crop", "letterbox", "pad"}, optional
        ``crop`` (default): resize then centre crop. ``letterbox``: the whole image scaled to fit inside the crop
        size, centred, the border filled with `pad_value` (detectors). ``pad``: the same, placed top-left (text
        recognisers). Letterbox and pad take no `resize`.
    pad_value : int or tuple of int, optional
        The border's pixel value(s), 0-255 before scaling: one, or one per channel. Default 0.
    interpolation : {"nearest", "bilinear", "bicubic", "lanczos", "box", "hamming"}, optional
        Pillow's resampling filter. Default ``bilinear``.
    scale, offset : float, optional
        Pixel values (0-255) become ``pixel * scale + offset`` before the mean and std.
    mean, std : float or tuple of float, optional
        Per channel, after scaling: ``(value - mean) / std``. One value serves every channel.
    channel_order : {"RGB", "BGR"}, optional
        The order of a 3-channel input's channels (``caffe``: BGR). A 1-channel input takes grayscale.
    shuffle : bool
        With a `limit`, take a seeded subset spread evenly over the class subfolders (the analysis' `seed`)
        instead of the first files by path, and feed it in a seeded order.
    workers : int
        Processes decoding images ahead of the model; 0 (default) decodes in this process.
    fast_decode : bool
        JPEG draft mode: DCT-domain downscaling, faster on large photos but not bit-exact (off by default).

    Examples
    --------
    >>> import onnxaff
    >>> onnxaff.ImagePreprocess.inception(crop=224).options()
    {'preprocess': 'inception', 'crop': 224}
    >>> onnxaff.ImagePreprocess(preset="raw", crop="48x320", fit="pad", mean=0.5, std=0.5).mean
    (0.5,)
    >>> onnxaff.ImagePreprocess(interpolation="cubic")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    onnxaff.errors.ConfigError: unknown images.interpolation 'cubic'; choose one of nearest, bilinear, bicubic, ...
    """

    preset: str = "torchvision"
    crop: int | tuple[int, int] | None = None
    resize: int | tuple[int, int] | None = None
    fit: str | None = None
    pad_value: int | tuple[int, ...] | None = None
    interpolation: str | None = None
    scale: float | None = None
    offset: float | None = None
    mean: float | tuple[float, ...] | None = None
    std: float | tuple[float, ...] | None = None
    channel_order: str | None = None
    shuffle: bool = False
    workers: int = 0
    fast_decode: bool = False

    def __post_init__(self):
        def put(name, value):
            object.__setattr__(self, name, value)

        _choose("preset", self.preset, tuple(PRESETS))
        put("crop", parse_size(self.crop, "images.crop"))
        put("resize", parse_size(self.resize, "images.resize"))
        for name, choices in (("fit", FITS), ("interpolation", INTERPOLATIONS), ("channel_order", CHANNEL_ORDERS)):
            if getattr(self, name) is not None:
                _choose(name, getattr(self, name), choices)
        if self.fit not in (None, "crop") and self.resize is not None:
            raise ConfigError("images.fit", f"{{option}} {self.fit} scales each image to fit the crop size itself: "
                                            "drop the resize")
        put("pad_value", _pixels(self.pad_value))
        for name in ("scale", "offset"):
            value = getattr(self, name)
            if value is not None and not _real(value):
                raise ConfigError(f"images.{name}", f"{{option}} must be a finite number, got {value!r}")
        if self.scale == 0:
            raise ConfigError("images.scale", "{option} 0 would make every image the same")
        put("mean", _numbers("mean", self.mean))
        put("std", _numbers("std", self.std))
        if self.std is not None and min(self.std) <= 0:
            raise ConfigError("images.std", f"{{option}} must be positive, got {self.std}")
        for name in ("shuffle", "fast_decode"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"images.{_key(name)}", f"{{option}} must be True or False, "
                                                          f"got {getattr(self, name)!r}")
        if isinstance(self.workers, bool) or not isinstance(self.workers, numbers.Integral) or self.workers < 0:
            raise ConfigError("images.workers", f"{{option}} must be 0 or a positive whole number, "
                                                f"got {self.workers!r}")
        put("workers", int(self.workers))

    @classmethod
    def torchvision(cls, **changes) -> ImagePreprocess:
        """torchvision's ImageNet models: resize to crop/0.875, centre crop, /255, ImageNet mean and std, RGB."""
        return cls(preset="torchvision", **changes)

    @classmethod
    def imagenet(cls, **changes) -> ImagePreprocess:
        """The same as `torchvision` (the usual ImageNet evaluation transform)."""
        return cls.torchvision(**changes)

    @classmethod
    def inception(cls, **changes) -> ImagePreprocess:
        """Inception, Keras and TF-Hub style: resize to crop/0.875, centre crop, values to [-1, 1]."""
        return cls(preset="inception", **changes)

    @classmethod
    def caffe(cls, **changes) -> ImagePreprocess:
        """Caffe style: 0-255 minus the BGR ImageNet mean, BGR channel order."""
        return cls(preset="caffe", **changes)

    @classmethod
    def raw(cls, **changes) -> ImagePreprocess:
        """No normalisation: resized straight to the crop size, values /255 in [0, 1]."""
        return cls(preset="raw", **changes)

    def options(self) -> dict:
        """The image options as the analysis keeps them (`AnalysisConfig.images`): the preset and every field
        given (not at its default)."""
        out = {"preprocess": self.preset}
        for f in dataclasses.fields(self)[1:]:
            value = getattr(self, f.name)
            if value != f.default:
                out[_key(f.name)] = value
        return out

    @classmethod
    def from_options(cls, options: Mapping) -> ImagePreprocess:
        """The value of an image options dict (`options()`, or the one the command line builds); an unknown key
        is a ConfigError naming it."""
        fields = {_key(f.name): f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(options) - set(fields))
        if unknown:
            raise ConfigError("images", f"{{option}} has no option {unknown[0]!r}; it takes {', '.join(fields)}")
        return cls(**{fields[k]: v for k, v in options.items() if v is not None})


def _key(name: str) -> str:
    return KEY_OF_FIELD.get(name, name)


def _choose(name: str, value, choices) -> None:
    if value not in choices:
        raise ConfigError(f"images.{_key(name)}", f"unknown {{option}} {value!r}; choose one of {', '.join(choices)}")


def _real(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def _numbers(name: str, value) -> tuple[float, ...] | None:
    """One number or one per channel, as a tuple of floats."""
    if value is None:
        return None
    values = tuple(value) if isinstance(value, tuple | list) else (value,)
    if not values or not all(_real(v) for v in values):
        raise ConfigError(f"images.{name}", f"{{option}} must be a number or one per channel, got {value!r}")
    return tuple(float(v) for v in values)


def _pixels(value) -> tuple[int, ...] | None:
    if value is None:
        return None
    values = tuple(value) if isinstance(value, tuple | list) else (value,)
    if not values or not all(_real(v) and v == int(v) and 0 <= v <= 255 for v in values):
        raise ConfigError("images.pad_value", f"{{option}} must be pixel values, whole numbers in 0-255, got {value!r}")
    return tuple(int(v) for v in values)


DECODING_FIELDS = ("shuffle", "workers", "fast_decode")  # how images are read, not what the model sees
PIXEL_FIELDS = tuple(f.name for f in dataclasses.fields(ImagePreprocess) if f.name not in DECODING_FIELDS)

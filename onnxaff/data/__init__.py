"""Data sources: image folders, audio folders, arrays, text and synthetic inputs."""

from __future__ import annotations

from onnxaff import defaults
from onnxaff.data.feeding import FedSource, examples_in, split_inputs
from onnxaff.data.guarded import opened
from onnxaff.data.image_preprocess import ImagePreprocess
from onnxaff.data.iterable import IterableSource, is_given
from onnxaff.data.registry import find_kind, kind_of, plugin_name
from onnxaff.data.source import DataSource, InputSpec, fixed_batch_of, model_inputs, no_usable
from onnxaff.data.text import TextSource, is_text, no_text_options
from onnxaff.errors import ConfigError, OnnxaffError

__all__ = ["DataSource", "ImagePreprocess", "InputSpec", "examples_in", "fixed_batch_of", "model_inputs", "no_usable",
           "open_source", "parse_input_shapes", "refuse_image_options"]


def parse_input_shapes(items: tuple[str, ...] | list[str]) -> dict[str, tuple[int, ...]]:
    """--input-shape NAME=3x48x192 (dims after the batch axis)."""
    shapes = {}
    for item in items:
        name, eq, dims = item.partition("=")
        try:
            parsed = tuple(int(d) for d in dims.lower().replace(",", "x").split("x") if d)
        except ValueError:
            parsed = ()
        if not eq or not name or not parsed or min(parsed) <= 0:
            raise ConfigError("input_shapes", f"{{option}} {item!r} is not NAME=D1xD2x... (dims after the batch axis)")
        shapes[name] = parsed
    return shapes


def open_source(spec: str | list[str], inputs: list[InputSpec], limit: int | None = None, seed: int = defaults.SEED,
                shapes: dict | None = None, images: dict | None = None, sample_rate: int = defaults.SAMPLE_RATE, *,
                tokenizer=None, max_length: int | None = None, pack: bool = defaults.PACK,
                constants: dict | None = None, input_ranges: dict | None = None, pad: float = defaults.PAD,
                hints: dict | None = None) -> FedSource:
    """The source of `spec` for the inputs that are not `constants`, wrapped so that its batches are the model's
    (onnxaff.data.feeding). `spec` may also be data given in Python (an array, a dict of arrays, an iterable of
    batches: onnxaff.data.iterable). images: options for image folders (ImagePreprocess.options(): preprocess,
    mean, std, resize, crop, interpolation, fit, pad_value, scale, offset, channel_order, shuffle, workers,
    draft); `shapes` (--input-shape) also fix an image input's symbolic dims; `sample_rate`: what an audio folder
    (audio:FOLDER) is resampled to. Text data (`text:FILE`, or a list of str) are tokenized by `tokenizer` (a
    tokenizer.json path or a tokenizers.Tokenizer) to `max_length` tokens, or packed end to end into windows
    without padding (`pack`; onnxaff.data.text). `input_ranges`, `pad` and `hints` (onnxaff.graph.inputs:
    embedding sizes, masks) shape synthetic data."""
    if limit is not None and limit <= 0:
        raise ConfigError("limit", f"{{option}} must be positive, got {limit}")
    for name in list(shapes or {}) + list(input_ranges or {}):
        if name not in {i.name for i in inputs}:
            field = "input_shapes" if name in (shapes or {}) else "input_ranges"
            raise ConfigError(field, f"{{option}} names {name!r}, which is not a model input")
    if isinstance(spec, list | tuple) and not spec and tokenizer is None:  # with a tokenizer: "no text given"
        raise OnnxaffError("no examples in the data given (an empty list)")
    refuse_image_options(spec, images)
    drawn, held = split_inputs(inputs, constants or {}, shapes)
    kind = find_kind(spec) if isinstance(spec, str) else None
    for field, given in (("input_ranges", input_ranges), ("pad", pad)):
        if given and not (kind is not None and kind[0].shaped_by_options):
            raise ConfigError(field, "{option} shapes synthetic data (synthetic:KIND); data read from a file or "
                              "folder are fed as they are")
    if is_text(spec) and not isinstance(spec, str):  # a list of str
        source = TextSource(spec, drawn, tokenizer, max_length=max_length, limit=limit, pack=pack)
        return FedSource(source, inputs, constants or {}, held, shapes)
    if not isinstance(spec, str) and is_given(spec):  # arrays, a DataLoader: read once, here
        no_text_options(spec, tokenizer, max_length, pack)
        return FedSource(IterableSource(spec, drawn, limit=limit), inputs, constants or {}, held, shapes)
    if not isinstance(spec, str):
        raise OnnxaffError(f"data must be a path, a synthetic: or text: spec, a list of str (texts), an array or an "
                           f"iterable of batches; got {type(spec).__name__}")
    cls, path = kind or kind_of(spec)
    if cls is not TextSource:
        no_text_options(spec, tokenizer, max_length, pack)
    def make() -> DataSource:
        return cls.from_spec(spec, path, drawn, limit=limit, seed=seed, shapes=shapes, images=images,
                             sample_rate=sample_rate, tokenizer=tokenizer, max_length=max_length, pack=pack,
                             ranges=dict(input_ranges or {}), pad=pad, hints=dict(hints or {}))

    plugin = plugin_name(cls)  # an installed kind: held to the contract, its faults one line naming it
    source = make() if plugin is None else opened(plugin, make, drawn)
    return FedSource(source, inputs, constants or {}, held, shapes)


def refuse_image_options(spec, images: dict | None, explicit: bool = False) -> None:
    """A ConfigError naming the first image option `images` says where `spec` is data those options do not apply
    to (arrays, synthetic, audio or text data: fed as they are). Said: a value other than the default (the command
    line always sends its defaults; `workers`, how many processes decode, changes nothing), or with `explicit`
    (the caller gave the options themselves), any."""
    what = _fed_as_they_are(spec)
    if images is None or what is None:
        return
    said = [k for k in (images if explicit else ImagePreprocess.from_options(images).options()) if k != "workers"]
    if not explicit and images.get("preprocess", ImagePreprocess().preset) == ImagePreprocess().preset:
        said = [k for k in said if k != "preprocess"]
    if said:
        raise ConfigError(f"images.{said[0]}", f"{{option}} is how an image folder is read; {what} are fed "
                                                        "as they are: leave the image options out")


def _fed_as_they_are(spec) -> str | None:
    """What `spec` is where it is data no image option applies to; None for an image folder (or a path that is not
    there: the source says so)."""
    if is_text(spec):
        return "text data"
    if not isinstance(spec, str):
        return "data given in Python" if is_given(spec) else None
    found = find_kind(spec)
    return None if found is None else found[0].fed_as_they_are

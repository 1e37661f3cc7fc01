"""The analysis options in the forms a person types them: the command line's flags, handed on as given, and keywords
such as `onnxaff.analyze(input_shapes="x=3x48x192")`.

Each text is parsed here, once, by the parser of the layer that owns its form (the data layer's input shapes, image
sizes and per-input feeding, the graph layer's pairs and blocks); a bad one is a one-line ConfigError naming its field.
AnalysisConfig parses its fields with `TEXTUAL`; a study's options (which it reads before any config is built) go
through `parse_texts`. A value already in its field's form passes unchanged, so parsing twice changes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping

from onnxaff.data import parse_input_shapes
from onnxaff.data.feeding import parse_batch_axes, parse_constants, parse_input_ranges
from onnxaff.data.preprocess import parse_size
from onnxaff.errors import ConfigError
from onnxaff.graph.pairs import parse_block_kinds, parse_pairs

IMAGE_NUMBERS = ("mean", "std", "pad_value")  # image options typed as comma-separated numbers
IMAGE_SIZES = ("resize", "crop")  # image options typed as N or HxW


def _is_text(value) -> bool:
    """One text, or a list of texts (a repeatable flag's tuple: empty when it was not given)."""
    return isinstance(value, str) or (isinstance(value, tuple | list) and all(isinstance(v, str) for v in value))


def _items(value) -> tuple[str, ...]:
    return (value,) if isinstance(value, str) else tuple(value)


def metrics(value):
    """`a,b:key=v` (specs separated by commas; a spec's parameters by colons) -> [a, b:key=v]."""
    if not isinstance(value, str):
        return value
    names = [m.strip() for m in value.split(",") if m.strip()]
    if not names:
        raise ConfigError("metrics", f"{{option}} {value!r} names no metric")
    return names


def input_shapes(value):
    """`NAME=D1xD2...` texts (or one), or a mapping with dims as text ({"x": "3x48x192"}) -> {name: dims}."""
    if _is_text(value):
        return parse_input_shapes(_items(value))
    if isinstance(value, Mapping) and any(isinstance(d, str) for d in value.values()):
        return {name: parse_input_shapes([f"{name}={dims}"])[name] if isinstance(dims, str) and isinstance(name, str)
                else dims for name, dims in value.items()}
    return value


def pairs(value):
    """`IN:OUT[,IN:OUT...]` (or a list of such texts; None: none) -> [(IN, OUT), ...]."""
    if value is None:
        return []
    if _is_text(value):
        return [pair for item in _items(value) for pair in parse_pairs(item)]
    return value


def blocks(value) -> list[str]:
    """`KINDS` (residual, attention, mlp, all; comma-separated), or a list of kinds -> the kinds, each once."""
    texts = (str(value),) if isinstance(value, str) else tuple(str(v) for v in value or ())
    return parse_block_kinds(",".join(texts))


def images(value):
    """An image options mapping with mean, std or pad_value as comma-separated numbers ("0.5,0.5,0.5"), or resize or
    crop as a size ("48x320") -> the same mapping with numbers; anything else as it is (AnalysisConfig says)."""
    if not isinstance(value, Mapping):
        return value
    out = dict(value)
    for key in IMAGE_NUMBERS:
        if isinstance(out.get(key), str):
            out[key] = _floats(out[key], f"images.{key}")
    for key in IMAGE_SIZES:
        if isinstance(out.get(key), str):
            out[key] = parse_size(out[key], f"images.{key}")
    return out


def _floats(text: str, field_name: str) -> tuple[float, ...]:
    try:
        return tuple(float(v) for v in text.split(","))
    except ValueError:
        raise ConfigError(field_name, f"{{option}} {text!r} is not a comma-separated list of numbers") from None


def _feeding(parse):
    """A per-input option typed NAME=VALUE (repeatable) -> {name: value} by `parse`; a mapping as it is."""
    return lambda value: parse(_items(value)) if _is_text(value) else value


# AnalysisConfig's fields that take a textual form, and the parser of each.
TEXTUAL = {"metrics": metrics, "input_shapes": input_shapes, "pairs": pairs, "blocks": blocks, "images": images,
           "batch_axes": _feeding(parse_batch_axes), "constants": _feeding(parse_constants),
           "input_ranges": _feeding(parse_input_ranges)}


def parse_texts(options: Mapping) -> dict:
    """AnalysisConfig keywords with every textual form parsed into its field's value (checked no further: the config
    checks them all)."""
    return {name: TEXTUAL[name](value) if name in TEXTUAL else value for name, value in options.items()}

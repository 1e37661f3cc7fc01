"""What the Python API's functions share: keywords left at their defaults, image options, data and models as given."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from types import SimpleNamespace

from onnxaff.analysis.config import AnalysisConfig, default, refuse_given_against
from onnxaff.data.image_preprocess import ImagePreprocess
from onnxaff.errors import ConfigError, OnnxaffError


class Default:
    """A keyword left at AnalysisConfig's default: shown as that value (help() and inspect read it), never passed
    on, so that a `config` given keeps its own value. The default is declared once, by AnalysisConfig."""

    __slots__ = ("name", "value")

    def __init__(self, name: str):
        self.name, self.value = name, default(name)

    def __repr__(self) -> str:
        return repr(self.value)


DEFAULT = SimpleNamespace(**{f.name: Default(f.name) for f in dataclasses.fields(AnalysisConfig)})  # by field


def given(preprocess=None, **values) -> dict:
    """The keywords given (not left at their Default), with `preprocess` as the `images` field."""
    out = {k: v for k, v in values.items() if not isinstance(v, Default)}
    if preprocess is not None:
        if "images" in out:
            raise ConfigError("images", "{option} and preprocess say the same thing: give one of them")
        out["images"] = image_options(preprocess)
    return out


def refuse_against_protocol(chosen: dict, config: AnalysisConfig | None) -> None:
    """A keyword given against the protocol named (by a keyword or by `config`) is refused, even at its default
    value: `analyze(protocol="paper", chunk_size="4d")` would otherwise run the paper's 512 rows unsaid."""
    protocol = chosen.get("protocol", config.protocol if config is not None else default("protocol"))
    refuse_given_against(protocol, chosen)


def image_options(preprocess) -> ImagePreprocess | dict:
    """An ImagePreprocess, a preset's name, or a dict of image options (as AnalysisConfig.images takes them)."""
    if isinstance(preprocess, str):
        return ImagePreprocess(preset=preprocess)
    if isinstance(preprocess, ImagePreprocess | Mapping):
        return preprocess
    raise ConfigError("images", f"preprocess must be an ImagePreprocess, a preset's name or a dict of image options, "
                      f"got {type(preprocess).__name__}")


def data_arg(data):
    """A path object as the text the data sources read; anything else as it is."""
    return os.fspath(data) if isinstance(data, os.PathLike) else data


def is_torch_module(model) -> bool:
    """Whether `model` is a torch.nn.Module (torch is never imported here: a module exists only if it was)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(model, torch.nn.Module)


@contextlib.contextmanager
def model_file(model, example_input=None, onnx_path=None):
    """What the analysis reads: (a path or a ModelProto, the export's record or None). A torch.nn.Module is exported
    first (onnxaff.from_torch, with its check of the activations) to `onnx_path`, kept, or else to a
    temporary file removed on the way out."""
    if not is_torch_module(model):
        import onnx

        if not isinstance(model, str | os.PathLike | onnx.ModelProto):
            raise OnnxaffError(f"the model must be an ONNX file, an onnx.ModelProto or a torch.nn.Module, not a "
                               f"{type(model).__name__} (onnxaff.from_keras and onnxaff.from_sklearn convert them)")
        if example_input is not None or onnx_path is not None:
            raise ConfigError("example_input", f"{{option}} and onnx_path are for a torch.nn.Module, which is exported "
                              f"to ONNX first; the model given is a {type(model).__name__}")
        yield (data_arg(model), None)
        return
    if example_input is None:
        raise ConfigError("example_input", "a torch.nn.Module is exported to ONNX first, which runs it once: give "
                          "{option}, one batch of input (e.g. torch.randn(1, 3, 224, 224); a tuple for several "
                          "inputs)")
    from onnxaff.graph.export import OPSET, from_torch

    kind = type(model)
    record = {"framework": "PyTorch", "module": f"{kind.__module__}.{kind.__qualname__}",
              "exporter": "onnxaff.from_torch", "opset": OPSET}
    if onnx_path is not None:
        export = from_torch(model, example_input, onnx_path)
        yield (os.fspath(onnx_path), record | {"extra": export.extra})
        return
    with tempfile.TemporaryDirectory(prefix="onnxaff-") as folder:
        path = Path(folder) / f"{kind.__name__}.onnx"  # the model's name in its signature: the class's
        export = from_torch(model, example_input, path)
        yield (str(path), record | {"extra": export.extra, "temporary": True})

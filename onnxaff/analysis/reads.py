"""The files a run reads, which none of its outputs may replace: `onnxaff analyze` refuses an --out, --checkpoint or
shard state naming one of them before the run (onnxaff.foundations.files.refuse_overwrite), and a study keeps its
outputs off its models' data (`data_path`). Each data kind's files are the data layer's to say; this names them for a
whole run."""

from __future__ import annotations

import os
from pathlib import Path


def data_path(spec: str) -> str | None:
    """The file or folder a data spec reads (a `text:` spec's file, an `audio:` spec's folder), None for data read
    from no file (synthetic); the spec itself where no kind reads it (its analysis says why)."""
    from onnxaff.data.registry import find_kind

    found = find_kind(spec)
    if found is None:
        return spec
    return found[1] or None


def run_inputs(model: str, data: str, config, outputs) -> list[tuple[str, str | None]]:
    """Every file a run of `model` on `data` with `config` (an AnalysisConfig) reads, as refuse_overwrite takes them:
    the model, the data file, plugins, the tokenizer and text file, --constant files, and a file of the data folder
    that one of `outputs` ((what, path) pairs) would replace. External weights: `weight_files`, once loaded."""
    return (_model_and_data(model, data, config.plugins, outputs) + _text_inputs(data, config.tokenizer)
            + _constant_files(config.constants))


def weight_files(loaded) -> list[tuple[str, Path]]:
    """The external weight files of a loaded model (onnxaff.graph.load.LoadedModel)."""
    return [("an external weight file of the model", loaded.path.parent / loc) for loc in loaded.external_locations]


def model_weight_files(model: str) -> list[tuple[str, Path]]:
    """`weight_files` of the model file, loaded for them alone (no shape inference)."""
    from onnxaff.graph.load import load_model

    return weight_files(load_model(model, infer_shapes=False))


def _text_inputs(data: str, tokenizer) -> list[tuple[str, str | None]]:
    """Text data's file and tokenizer."""
    from onnxaff.data.text import PREFIX, parse_spec

    files = [("the tokenizer", tokenizer if isinstance(tokenizer, str) else None)]
    return files + ([("the text file", str(parse_spec(data)[0]))] if data.startswith(PREFIX) and data != PREFIX else [])


def _constant_files(constants) -> list[tuple[str, str]]:
    """The .npy files of --constant."""
    return [(f"the constant of {name}", value) for name, value in dict(constants or {}).items()
            if isinstance(value, str)]


def _model_and_data(model, data, plugins, outputs) -> list[tuple[str, str | None]]:
    """The model, the data file, the plugins, and a file of the data folder an output would replace."""
    from onnxaff.data.audio import EXTENSIONS as AUDIO
    from onnxaff.data.images import EXTENSIONS as IMAGES

    folder = data_path(data) or data  # an audio: spec's folder (a text: spec's file: _text_inputs)
    inputs = [("the model", model), ("the data file", data if os.path.isfile(data) else None)]
    here = os.getcwd()  # the config holds plugins as absolute paths: name them as typed where they are here
    inputs += [("the plugin", os.path.relpath(p) if os.path.dirname(p) == here else p) for p in plugins]
    if os.path.isdir(folder):  # an output named like an image or a sound inside the data folder would replace it
        root = os.path.realpath(folder)
        inputs += [("a file of the data folder", p) for _, p in outputs
                   if os.path.isfile(p) and Path(p).suffix.lower() in IMAGES | AUDIO
                   and os.path.commonpath([root, os.path.realpath(p)]) == root]
    return inputs

"""What a signature was made from (model and weights, data, options, code): a rerun skips a model whose signature
records this very identity. The model and metric-code parts are the ones a checkpoint's key compares."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from onnxaff.errors import OnnxaffError, option
from onnxaff.format.signature import read_signature

# Options that change how fast a run goes, never its numbers: a signature made with others is still current.
# (`shard` too: a study analyses whole models.)
_SPEED_ONLY = ("progress", "device", "chunk_workers", "threads", "graph_optimization", "shard")


def file_digest(path: Path) -> str | None:
    """sha256 of a regular file; None for anything else (a FIFO or /dev/zero would never end) or unreadable."""
    from onnxaff.graph.load import sha256_of

    try:
        return sha256_of(path) if Path(path).is_file() else None
    except OSError:
        return None


def model_identity(path: Path) -> str | None:
    """The model's key as a checkpoint computes it: the .onnx file's sha256, with its external weight files'."""
    import onnx

    from onnxaff.analysis.checkpoint import model_key
    from onnxaff.graph.load import external_locations_of, weight_files

    digest = file_digest(path)
    if digest is None:
        return None
    try:
        locations = external_locations_of(onnx.load(str(path), load_external_data=False))
    except Exception:  # not a model: its analysis says why
        return digest
    return model_key(digest, weight_files(path.parent, locations))  # a missing file: its analysis says why


def data_identity(spec: str) -> str:
    """A digest of the data a spec names, as its kind identifies them (onnxaff.data.registry): a file by path, size
    and the sha256 of its bytes (a `text:` spec's file too, with the spec); a folder by every file its source would
    read (an image folder's walk, an audio folder's clips); else the spec."""
    from onnxaff.data.registry import find_kind

    found = find_kind(spec)
    parts = [spec] if found is None else found[0].identity(spec, found[1])
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()


def code_identity(fingerprints: dict) -> str:
    """A digest of the code behind the numbers: each metric's fingerprint (as a checkpoint records it) and the
    onnxaff version (everything around the metrics)."""
    import onnxaff

    return hashlib.sha256(json.dumps({"metrics": fingerprints, "onnxaff": onnxaff.__version__},
                                     sort_keys=True).encode()).hexdigest()


def options_identity(options: dict) -> str:
    """A digest of the options that change numbers (`effective_options`)."""
    return hashlib.sha256(json.dumps(effective_options(options), sort_keys=True).encode()).hexdigest()


def effective_options(options: dict) -> dict:
    """The options that change the numbers as the analysis takes them, as JSON values: every AnalysisConfig field
    at its value, given or left at its default alike (the CLI sends every default, the Python API what the caller
    gave: the same study either way), the speed-only ones and the decode workers left out, files by content."""
    import dataclasses

    from onnxaff.analysis import AnalysisConfig
    from onnxaff.data.image_preprocess import ImagePreprocess

    config = AnalysisConfig(**options)
    numeric = {f.name: getattr(config, f.name) for f in dataclasses.fields(config) if f.name not in _SPEED_ONLY}
    images = ImagePreprocess.from_options(config.images or {}).options()
    numeric["images"] = {k: v for k, v in images.items() if k != "workers"}
    numeric["plugins"] = [[p, file_digest(Path(p))] for p in config.plugins]
    if isinstance(config.tokenizer, str):  # text data: the tokenizer by content too
        numeric["tokenizer"] = [config.tokenizer, file_digest(Path(config.tokenizer))]
    elif hasattr(config.tokenizer, "to_str"):  # a tokenizers.Tokenizer: by its serialised form
        numeric["tokenizer"] = hashlib.sha256(config.tokenizer.to_str().encode()).hexdigest()
    numeric["constants"] = {k: _constant_identity(v) for k, v in config.constants.items()}
    return json.loads(json.dumps(numeric, sort_keys=True, default=str))


def options_changed(made: dict | None, mine: dict | None) -> str:
    """"the options changed", naming each option that did and both values where the signature recorded them."""
    if not isinstance(made, dict) or not isinstance(mine, dict):
        return "the options changed"
    made, mine = _flat(made), _flat(mine)
    changed = [f"{option(k)} {_shown(made.get(k, 'default'))} → {_shown(mine.get(k, 'default'))}"
               for k in sorted({*made, *mine}) if made.get(k, "default") != mine.get(k, "default")]
    return f"the options changed: {', '.join(changed)}" if changed else "the options changed"


def _flat(options: dict) -> dict:
    """The image options as `images.KEY` (each its own option), the others as they are."""
    images = options.get("images")
    out = {k: v for k, v in options.items() if k != "images"}
    return out | {f"images.{k}": v for k, v in (images.items() if isinstance(images, dict) else ())}


def _shown(value) -> str:
    text = "none" if value is None else value if isinstance(value, str) else json.dumps(value)
    return text if len(text) <= 40 else text[:39] + "…"


def _constant_identity(value):
    """A constant as the study's key sees it: a .npy file by content, an array by its bytes, a number as it is."""
    if isinstance(value, str | Path):
        return [str(value), file_digest(Path(value))]
    if hasattr(value, "tobytes"):
        return hashlib.sha256(value.tobytes()).hexdigest()
    return value


def stale_reason(path: Path, key: dict) -> str | None:
    """None when the signature at `path` was made from this very model, data, options and code; else why not."""
    if not path.exists():
        return "no signature yet"
    try:
        sig = read_signature(path)
    except OnnxaffError as exc:
        return f"its signature is unreadable ({exc})"
    made = sig.runtime.get("study") or {}
    for field_, what in (("model_sha256", "the model or its weights changed"), ("data", "the data changed"),
                         ("options", "the options changed"),
                         ("code", "the metric code or the onnxaff version changed")):
        if made.get(field_) != key[field_]:
            return options_changed(made.get("option_values"), key.get("option_values")) if field_ == "options" \
                else what
    return None

"""Load a model by path with its external data left on disk, and infer shapes by path.

Weights are never needed to find sites or to add reduction nodes, so the graph is loaded without
external data; this keeps models over 2 GB (whose protobuf cannot be serialised in one piece)
workable. The runtime later opens the augmented graph next to the original data files.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import onnx
from onnx import external_data_helper

from onnxaff.errors import OnnxaffError, first_line
from onnxaff.graph.view import iter_tensors

# Above this size shape inference runs on a file rather than on the in-memory proto.
_INFER_BY_PATH_BYTES = 1 << 30


@dataclass
class LoadedModel:
    """A model proto (external data not loaded) with what is needed to run or describe it."""

    model: onnx.ModelProto
    path: Path | None
    external_locations: list[str] = field(default_factory=list)
    inferred: bool = False

    @property
    def opset(self) -> int:
        return default_opset(self.model)

    @property
    def has_external_data(self) -> bool:
        return bool(self.external_locations)

    @property
    def base_dir(self) -> Path | None:
        return self.path.parent if self.path is not None else None


def default_opset(model: onnx.ModelProto) -> int:
    for imp in model.opset_import:
        if imp.domain in ("", "ai.onnx"):
            return int(imp.version)
    return 1


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _external_locations(model: onnx.ModelProto) -> list[str]:
    locations = []
    for tensor in iter_tensors(model.graph):
        if external_data_helper.uses_external_data(tensor):
            info = external_data_helper.ExternalDataInfo(tensor)
            if info.location not in locations:
                locations.append(info.location)
    return locations


def load_model(path: str | os.PathLike, infer_shapes: bool = True) -> LoadedModel:
    """Parse and check a model file; raise OnnxaffError with a one-line reason when it is unusable."""
    path = Path(path)
    if not path.exists():
        raise OnnxaffError(f"model file not found: {path}")
    if path.is_dir():
        raise OnnxaffError(f"model path is a folder, not an .onnx file: {path}")
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # protobuf raises DecodeError, RuntimeWarning, ...
        raise OnnxaffError(f"not a readable ONNX model: {path} ({type(exc).__name__})") from None
    if not model.graph.node and not model.graph.output:
        raise OnnxaffError(f"not an ONNX model (empty graph): {path}")
    locations = _external_locations(model)
    for loc in locations:
        if not (path.parent / loc).exists():
            raise OnnxaffError(f"external data file missing for {path.name}: {path.parent / loc}")
    try:
        # By path: the checker then also validates external data references and large models.
        onnx.checker.check_model(str(path))
    except Exception as exc:
        raise OnnxaffError(f"invalid ONNX model {path.name}: {first_line(exc)}") from None
    loaded = LoadedModel(model=model, path=path, external_locations=locations)
    if infer_shapes:
        loaded.model, loaded.inferred = _infer(model, path)
    return loaded


def from_proto(model: onnx.ModelProto, infer_shapes: bool = True) -> LoadedModel:
    """Wrap an in-memory model (tests, API users); it must carry its weights inline."""
    loaded = LoadedModel(model=model, path=None, external_locations=_external_locations(model))
    if loaded.external_locations:
        raise OnnxaffError("an in-memory model cannot reference external data; load it by path")
    if infer_shapes:
        loaded.model, loaded.inferred = _infer(model, None)
    return loaded


def _infer(model: onnx.ModelProto, path: Path | None) -> tuple[onnx.ModelProto, bool]:
    """Shape inference that never fails the load: sites without shapes are skipped later, with a reason."""
    try:
        if path is not None and (path.stat().st_size > _INFER_BY_PATH_BYTES or _external_locations(model)):
            with tempfile.TemporaryDirectory() as tmp:
                out = Path(tmp) / "inferred.onnx"
                onnx.shape_inference.infer_shapes_path(str(path), str(out))
                return onnx.load(str(out), load_external_data=False), True
        return onnx.shape_inference.infer_shapes(model), True
    except Exception:
        return model, False

"""Load a model by path with its external data left on disk, and infer shapes by path.

Weights are never needed to find sites or to add reduction nodes, so the graph is loaded without
external data; this keeps models over 2 GB (whose protobuf cannot be serialised in one piece)
workable. The runtime later opens the augmented graph next to the original data files.
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
import stat
import threading
from dataclasses import dataclass, field
from pathlib import Path

import onnx
from onnx import TensorProto, external_data_helper, helper

from onnxaff.errors import OnnxaffError, first_line
from onnxaff.foundations.files import sha256_of
from onnxaff.foundations.text import printable
from onnxaff.graph import runtime_ops
from onnxaff.graph.expand import EXPANSIONS, expand
from onnxaff.graph.foreign import not_onnx
from onnxaff.graph.infer import INFER_BY_PATH_BYTES, infer
from onnxaff.graph.toposort import sort_graph
from onnxaff.graph.view import GraphView, iter_tensors


@dataclass
class LoadedModel:
    """A model proto (external data not loaded) with what is needed to run or describe it."""

    model: onnx.ModelProto
    path: Path | None
    external_locations: list[str] = field(default_factory=list)
    inferred: bool = False
    notes: list[str] = field(default_factory=list)  # what onnxaff.graph.expand rewrote for analysis
    _view: GraphView | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def opset(self) -> int:
        return default_opset(self.model)

    @property
    def view(self) -> GraphView:
        """The one index of this graph that sites, blocks, pairs, stages, statistics and rewriting share.

        Built on first use; rebuilt only when `model` is replaced (shape inference hands back a new proto).
        The model must not be edited in place once the view exists.
        """
        if self._view is None or self._view.graph is not self.model.graph:
            self._view = GraphView(self.model.graph, opset=self.opset)
        return self._view

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


def weight_files(folder: Path, locations) -> list[dict]:
    """Each external weight file's location, size and sha256 (None where it is no readable regular file): what
    identifies an external-data model's weights, for its signature, a checkpoint's key and a study's reuse."""
    out = []
    for loc in locations:
        f = Path(folder) / loc
        try:
            out.append({"location": loc, "bytes": f.stat().st_size, "sha256": sha256_of(f) if f.is_file() else None})
        except OSError:
            out.append({"location": loc, "bytes": None, "sha256": None})
    return out


def external_locations_of(model: onnx.ModelProto) -> list[str]:
    locations = []
    for tensor in iter_tensors(model.graph):
        if external_data_helper.uses_external_data(tensor):
            location = next((e.value for e in tensor.external_data if e.key == "location"), "")
            if location not in locations:
                locations.append(location)
    return locations


_LOOP = "external data location {!r} cannot be resolved (a loop of symbolic links?)"
_EXTERNAL_KEYS = {"location", "offset", "length", "checksum", "basepath"}
_FILE_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
               (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device"))


def external_problem(tensor: onnx.TensorProto, folder: Path) -> str | None:
    """Why an external data reference may not be read, or None; nothing is opened, only stat'ed.

    onnx's checker and onnxruntime refuse references outside the model's folder only in recent versions, and a
    FIFO or a device named as weights would block or stream forever: so onnxaff checks them itself, first.
    Returns "missing" for a reference that is fine but whose file does not exist.
    """
    entries = {e.key: e.value for e in tensor.external_data}
    if unknown := sorted(set(entries) - _EXTERNAL_KEYS):
        return f"unknown external data key {unknown[0]!r}"
    sizes = {}
    for key in ("offset", "length"):
        if key in entries:
            if not (entries[key].isascii() and entries[key].isdigit()):
                return f"external data {key} {entries[key]!r} is not a whole number of bytes"
            sizes[key] = int(entries[key])
    location = entries.get("location", "")
    if not location:
        return "external data location is empty"
    if "\0" in location:
        return f"external data location {location!r} holds a NUL character"
    if os.path.isabs(location):
        return f"external data location {location!r} is an absolute path; it must be inside the model's folder"
    target = folder / location
    try:
        resolved = target.resolve()
    except RuntimeError:  # Python 3.11's symlink loop
        return _LOOP.format(location)
    except OSError as exc:
        return f"external data location {location!r} cannot be read: {exc.strerror}"
    if not resolved.is_relative_to(folder.resolve()):  # `..` or a symbolic link leading out
        return f"external data location {location!r} is outside the model's folder"
    try:
        info = target.stat()
    except FileNotFoundError:
        return "missing"
    except OSError as exc:  # 3.13's resolve() leaves a loop to stat, which fails with ELOOP
        return _LOOP.format(location) if exc.errno == errno.ELOOP else \
            f"external data location {location!r} cannot be read: {exc.strerror}"
    for is_kind, kind in _FILE_KINDS:
        if is_kind(info.st_mode):
            return f"external data location {location!r} is {kind}, not a regular file"
    offset = sizes.get("offset", 0)
    length = sizes.get("length", info.st_size - offset)
    if offset + length > info.st_size or offset > info.st_size:
        return (f"external data ({length} bytes from offset {offset}) runs past the end of {location} "
                f"({info.st_size} bytes)")
    if "length" in sizes and tensor.data_type in _BYTE_ALIGNED and tensor.data_type != TensorProto.STRING \
            and all(d >= 0 for d in tensor.dims):
        want = math.prod(tensor.dims) * helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize
        if length != want:
            return f"external data length is {length} bytes, but {_kind(tensor)} takes {want}"
    return None


def _kind(tensor: onnx.TensorProto) -> str:
    name = helper.tensor_dtype_to_string(tensor.data_type).removeprefix("TensorProto.").lower()
    return f"{name}{list(tensor.dims)}"


def _check_external(model: onnx.ModelProto, path: Path) -> None:
    for tensor in iter_tensors(model.graph):
        if not external_data_helper.uses_external_data(tensor):
            continue
        problem = external_problem(tensor, path.parent)
        if problem == "missing":
            location = next(e.value for e in tensor.external_data if e.key == "location")
            raise OnnxaffError(f"external data file missing for {path.name}: {path.parent / location}")
        if problem is not None:
            raise OnnxaffError(f"invalid ONNX model {path.name}: tensor {tensor.name!r}: {problem}")


def _check_inputs(model: onnx.ModelProto, name: str) -> None:
    """An input's element type must be one onnx defines: type 0 or an unknown number fails later, deep inside."""
    known = set(TensorProto.DataType.values()) - {TensorProto.UNDEFINED}
    for vi in model.graph.input:
        if vi.type.HasField("tensor_type") and (elem := vi.type.tensor_type.elem_type) not in known:
            what = "element type 0 (undefined)" if elem == TensorProto.UNDEFINED else f"unknown element type {elem}"
            raise OnnxaffError(f"invalid ONNX model {name}: input {vi.name!r} has {what}")


# Types whose elements take whole bytes, so inline data must be numel · itemsize bytes (packed 2/4/6-bit
# types are left unchecked).
_BYTE_ALIGNED = {getattr(TensorProto, n) for n in (
    "FLOAT", "DOUBLE", "FLOAT16", "BFLOAT16", "INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16", "UINT32",
    "UINT64", "BOOL", "STRING", "COMPLEX64", "COMPLEX128", "FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2",
    "FLOAT8E5M2FNUZ", "FLOAT8E8M0") if hasattr(TensorProto, n)}


def tensor_problem(tensor: onnx.TensorProto) -> str | None:
    """Why an inline tensor's data cannot be its declared type and dims, or None.

    The checker only catches raw data too short for them: a tensor relabelled as a narrower type passes it
    and then fails deep inside numpy (reading constants) or onnxruntime.
    """
    label = f"tensor {tensor.name!r}" if tensor.name else "a Constant tensor"
    if tensor.data_type not in TensorProto.DataType.values():
        return f"{label} has unknown data type {tensor.data_type}"
    external = tensor.data_location == TensorProto.EXTERNAL
    if external or tensor.data_type not in _BYTE_ALIGNED or tensor.HasField("segment"):
        return None
    dtype = helper.tensor_dtype_to_np_dtype(tensor.data_type)
    if any(d < 0 for d in tensor.dims):
        return f"{label} has negative dims {list(tensor.dims)}"
    numel = math.prod(tensor.dims)
    kind = _kind(tensor)
    if tensor.data_type == TensorProto.STRING:
        have, want, unit = len(tensor.string_data), numel, "strings"
    elif tensor.HasField("raw_data"):
        have, want, unit = len(tensor.raw_data), numel * dtype.itemsize, "bytes"
    else:
        field_ = helper.tensor_dtype_to_field(tensor.data_type)
        have, want, unit = len(getattr(tensor, field_)), numel * (2 if dtype.kind == "c" else 1), "values"
    if have != want:
        return f"{label} declared {kind} holds {have} {unit} of data, not {want}"
    return None


def load_model(path: str | os.PathLike, infer_shapes: bool = True) -> LoadedModel:
    """Parse and check a model file; raise OnnxaffError with a one-line reason when it is unusable."""
    path = Path(path)
    try:
        str(path).encode("utf-8")
    except UnicodeEncodeError:  # os.fsdecode's surrogate escapes: the checker's and runtime's bindings refuse them
        raise OnnxaffError(f"the model's path is not UTF-8 ({printable(path)}): onnx and onnxruntime open UTF-8 "
                           "paths only; rename it") from None
    if not path.exists():
        raise OnnxaffError(f"model file not found: {path}")
    if path.is_dir():
        raise OnnxaffError(f"model path is a folder, not an .onnx file: {path}")
    if not path.is_file():  # a FIFO or a device: reading would block or never end
        raise OnnxaffError(f"model path is not a regular file: {path}")
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # protobuf raises DecodeError, RuntimeWarning, ...
        raise not_onnx(path, f"not a readable ONNX model: {path} ({type(exc).__name__})") from None
    if not model.graph.node and not model.graph.output:
        raise not_onnx(path, f"not an ONNX model (empty graph): {path}")
    _check_text(model, path.name)
    _check_external(model, path)  # before the checker, which opens the files
    _check_inputs(model, path.name)
    locations = external_locations_of(model)
    # onnxruntime runs a graph out of order and the checker refuses it: sorted first, it is checked as held.
    moved = sort_graph(model.graph)
    try:
        if moved:  # the sorted graph, in memory: its external data resolved from the model's folder
            with _in_folder(path.parent):
                onnx.checker.check_model(model)
        else:  # by path: the checker then also validates external data references and large models
            onnx.checker.check_model(str(path))
    except Exception as exc:
        refused = first_line(exc)
        if not _checks_with_runtime_ops(model, path):
            raise OnnxaffError(f"invalid ONNX model {path.name}: {refused}") from None
        checker_note = (f"onnx's checker refused the model ({refused}): it holds ops onnxruntime registers in the "
                        f"standard domain ({', '.join(sorted(runtime_ops.found(model)))}), so it is analysed as "
                        "onnxruntime runs it (shapes past them come from a probe run)")
    else:
        checker_note = None
    _check_tensors(model, path.name)
    loaded = LoadedModel(model=model, path=path, external_locations=locations, notes=expand(model))
    if infer_shapes:  # the file's shapes only while the model is the file's; an expanded or sorted one in memory
        _infer(loaded, None if moved or loaded.notes else path)
    if checker_note:
        loaded.notes.insert(0, checker_note)
    return loaded


def _checks_with_runtime_ops(model: onnx.ModelProto, path: Path) -> bool:
    """Whether the model passes the checker with onnxruntime's standard-domain ops set aside (runtime_ops)."""
    aside = runtime_ops.set_aside(model)
    if aside is None:
        return False
    try:
        with _in_folder(path.parent):
            onnx.checker.check_model(aside)
    except Exception:
        return False
    return True


_CWD_LOCK = threading.Lock()


@contextlib.contextmanager
def _in_folder(folder: Path):
    """The checker resolves an in-memory model's external data from the working directory: the model's, while
    it checks (one thread at a time: the directory is the process's)."""
    with _CWD_LOCK:
        here = os.getcwd()
        os.chdir(folder)
        try:
            yield
        finally:
            os.chdir(here)


def from_proto(model: onnx.ModelProto, infer_shapes: bool = True) -> LoadedModel:
    """Wrap an in-memory model (tests, API users); it must carry its weights inline."""
    _check_text(model, model.graph.name or "model")
    _check_inputs(model, model.graph.name or "model")
    loaded = LoadedModel(model=model, path=None, external_locations=external_locations_of(model))
    if loaded.external_locations:
        raise OnnxaffError("an in-memory model cannot reference external data; load it by path")
    _check_tensors(model, model.graph.name or "model")
    if EXPANSIONS or sort_graph(model.graph, apply=False):  # never rewrite the caller's own proto
        loaded.model = model = onnx.ModelProto.FromString(model.SerializeToString())
        sort_graph(model.graph)
        loaded.notes = expand(model)
    if infer_shapes:
        _infer(loaded, None)
    return loaded


def _infer(loaded: LoadedModel, path: Path | None) -> None:
    """Shapes inferred (graph/infer.py: by path when the file is large or holds external data), never failing the
    load: sites without shapes are skipped later, with a reason; a value_info the graph contradicts is a note."""
    by_path = path is not None and (path.stat().st_size > INFER_BY_PATH_BYTES
                                    or bool(external_locations_of(loaded.model)))
    loaded.model, loaded.inferred, notes = infer(loaded.model, path, by_path)
    loaded.notes += notes


def _texts(graph: onnx.GraphProto):
    """The string fields onnxaff reads (names, op types, dims, external data references), subgraphs included."""
    yield graph.name
    for vi in (*graph.input, *graph.output, *graph.value_info):
        yield vi.name
        yield from (d.dim_param for d in vi.type.tensor_type.shape.dim)
    tensors = list(graph.initializer)
    for node in graph.node:
        yield from (node.name, node.op_type, node.domain, *node.input, *node.output)
        for attr in node.attribute:
            yield attr.name
            tensors.append(attr.t)
            for sub in (attr.g, *attr.graphs):
                yield from _texts(sub)
    for tensor in tensors:
        yield tensor.name
        for entry in tensor.external_data:
            yield from (entry.key, entry.value)


def _check_text(model: onnx.ModelProto, name: str) -> None:
    """Protobuf hands out a string field that is not UTF-8 as bytes, which breaks paths and the JSON output."""
    meta = (model.producer_name, model.producer_version, *(imp.domain for imp in model.opset_import))
    for text in (*meta, *_texts(model.graph)):
        if not isinstance(text, str):
            raise OnnxaffError(f"invalid ONNX model {name}: a name or string that is not UTF-8 text ({text!r})")


def _check_tensors(model: onnx.ModelProto, name: str) -> None:
    for tensor in iter_tensors(model.graph):
        if (problem := tensor_problem(tensor)) is not None:
            raise OnnxaffError(f"invalid ONNX model {name}: {problem}")

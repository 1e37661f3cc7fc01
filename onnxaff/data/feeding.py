"""Per-input feeding: which inputs the data source draws, which are held constant, and where each batch axis is.

A data source gives batch-first arrays for the inputs it is asked for. `FedSource` wraps it and makes the
batches the model takes: constants (one example repeated along the batch axis; a rank-0 input's value as it
is), zeros for an input the source does not fill (with a warning), and axis 0 moved to each input's batch axis.
The feeder, the plan's probe batch and the network NLC all see these model-shaped batches.
"""

from __future__ import annotations

import hashlib
import math
import numbers
import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from onnxaff import defaults
from onnxaff.data.source import DataSource, InputSpec, cast_for
from onnxaff.errors import ConfigError, Message, OnnxaffError, option


def _items(items, field: str, what: str) -> list[tuple[str, str]]:
    out = []
    for item in items:
        name, eq, value = str(item).partition("=")
        if not eq or not name.strip() or not value.strip():
            raise ConfigError(field, f"{{option}} {item!r} is not {what}")
        out.append((name.strip(), value.strip()))
    return out


def parse_batch_axes(items) -> dict[str, int]:
    """NAME=AXIS texts (repeatable option) -> {name: axis}."""
    out = {}
    for name, value in _items(items, "batch_axes", "NAME=AXIS"):
        try:
            out[name] = int(value)
        except ValueError:
            raise ConfigError("batch_axes", f"{{option}} {name}={value!r}: the axis is not a whole number") from None
    return out


def parse_constants(items) -> dict[str, int | float | str]:
    """NAME=VALUE|FILE.npy texts -> {name: number or path}."""
    out: dict = {}
    for name, value in _items(items, "constants", "NAME=VALUE or NAME=FILE.npy"):
        out[name] = _number(value)
        if out[name] is None:
            out[name] = value
    return out


def parse_input_ranges(items) -> dict[str, tuple[float, float]]:
    """NAME=LOW:HIGH texts -> {name: (low, high)}."""
    out = {}
    for name, value in _items(items, "input_ranges", "NAME=LOW:HIGH"):
        low, colon, high = value.partition(":")
        out[name] = (_number(low), _number(high)) if colon else (None, None)
        if None in out[name]:
            raise ConfigError("input_ranges", f"{{option}} {name}={value!r} is not NAME=LOW:HIGH (two numbers)")
    return out


def _number(text: str) -> int | float | None:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return None


def check_feeding(batch_axes=None, constants=None, input_ranges=None, pad=defaults.PAD) -> dict:
    """The feeding options checked and made plain (what AnalysisConfig keeps): one-line ConfigErrors."""
    axes = {}
    for name, axis in dict(batch_axes or {}).items():
        if not isinstance(name, str) or isinstance(axis, bool) or not isinstance(axis, numbers.Integral):
            raise ConfigError("batch_axes", f"{{option}} {name!r}: expected an input name and a whole number")
        axes[name] = int(axis)
    held = {name: _constant(name, value) for name, value in dict(constants or {}).items()}
    ranges = {}
    for name, pair in dict(input_ranges or {}).items():
        pair = tuple(pair) if isinstance(pair, tuple | list) else ()
        ok = len(pair) == 2 and all(isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v)
                                    for v in pair)
        if not isinstance(name, str) or not ok or not pair[0] < pair[1]:
            raise ConfigError("input_ranges", f"{{option}} {name}={pair!r}: expected LOW:HIGH, finite, LOW < HIGH")
        ranges[name] = tuple(int(v) if float(v).is_integer() else float(v) for v in pair)
    if isinstance(pad, bool) or not isinstance(pad, numbers.Real) or not 0 <= pad <= 1:
        raise ConfigError("pad", f"{{option}} must be a fraction in [0, 1], got {pad!r}")
    return {"batch_axes": axes, "constants": held, "input_ranges": ranges, "pad": float(pad)}


def _constant(name, value):
    """A number, an absolute .npy path (a resumed run in another folder reads the same file) or an array."""
    if not isinstance(name, str) or not name:
        raise ConfigError("constants", f"{{option}} {name!r}: expected an input name")
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, numbers.Number) and not isinstance(value, complex):
        return value
    if isinstance(value, str | os.PathLike):
        path = Path(value)
        if path.suffix.lower() != ".npy":
            raise ConfigError("constants", f"{{option}} {name}={value}: give a number or a .npy file")
        if not path.is_file():
            raise ConfigError("constants", f"{{option}} {name}={value}: file not found")
        return str(path.resolve())
    try:
        array = np.asarray(value) if isinstance(value, list | tuple | np.ndarray) else None
    except ValueError:  # ragged nested lists
        array = None
    if array is None or array.dtype.kind not in "biuf":
        raise ConfigError("constants", f"{{option}} {name}: expected a number, a .npy file or a numeric array")
    return array


def _load(name: str, value, spec: InputSpec, shape: tuple) -> np.ndarray:
    """One example of the constant input, in its dtype: a number fills a static example shape."""
    what = f"{option('constants', name + '=...')}"
    if isinstance(value, str):
        try:
            with open(value, "rb") as f:
                if f.read(6) != b"\x93NUMPY":
                    raise ConfigError("constants", f"{{option}} {name}={value}: not a .npy file (no NumPy header)")
                _sized(f, f"{option('constants')} {name}={value}")
            array = np.load(value, allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise ConfigError("constants", f"{{option}} {name}={value}: cannot read it ({exc})") from None
    else:
        array = np.asarray(value)
    if array.ndim == 0 and spec.batch_axis is not None and all(isinstance(d, int) and d > 0 for d in shape):
        array = np.full(shape, array)
    fits = array.ndim == len(shape) and all(not isinstance(d, int) or d <= 0 or d == g
                                            for d, g in zip(shape, array.shape, strict=True))
    if not fits:
        want = "a scalar" if spec.batch_axis is None else f"one example of shape {list(shape)}"
        raise ConfigError("constants", f"{{option}} {name} has shape {list(array.shape)}, but model input "
                          f"{spec.describe()} takes {want}")
    return _contiguous(cast_for(spec, array, what))


def _sized(f, what: str) -> None:
    """A .npy file whose header declares more (or fewer) bytes than the file holds is malformed or truncated: said
    before numpy tries to allocate what the header claims (hundreds of GB read as out of memory)."""
    f.seek(0)
    try:
        version = np.lib.format.read_magic(f)
        read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, _, dtype = read(f)
    except (ValueError, SyntaxError, TypeError) as exc:
        raise OnnxaffError(f"{what}: a malformed .npy header ({exc})") from None
    if dtype.hasobject:
        return  # refused by np.load (no pickles)
    declared = math.prod(shape) * dtype.itemsize
    held = os.fstat(f.fileno()).st_size - f.tell()
    if declared != held:
        raise OnnxaffError(f"{what} is malformed or truncated: its header declares {dtype.name}{list(shape)} "
                           f"({declared:,} bytes) but the file holds {held:,} bytes of data")


def split_inputs(inputs: list[InputSpec], constants: Mapping, shapes: Mapping | None = None
                 ) -> tuple[list[InputSpec], dict[str, np.ndarray]]:
    """The inputs a data source draws, and the constant ones' examples. A rank-0 input must be a constant."""
    names = {s.name for s in inputs}
    unknown = sorted(set(constants) - names)
    if unknown:
        raise ConfigError("constants", f"{{option}} names {unknown[0]!r}, which is not a model input")
    held = {s.name: _load(s.name, constants[s.name], s, tuple((shapes or {}).get(s.name, s.example_shape())))
            for s in inputs if s.name in constants}
    for s in inputs:
        if s.batch_axis is None and s.name not in held:
            raise OnnxaffError(f"model input {s.describe()} is a scalar (rank 0: no batch axis to draw examples "
                               f"along); give its value with {option('constants', s.name + '=VALUE')}")
    drawn = [s for s in inputs if s.name not in held]
    if not drawn:
        raise OnnxaffError("every model input is a constant: nothing varies from one example to the next")
    return drawn, held


def examples_in(batch: Mapping[str, np.ndarray], inputs: list[InputSpec]) -> int:
    """How many examples a model-shaped batch holds (read on the first input's batch axis)."""
    for spec in inputs:
        if spec.batch_axis is not None and spec.name in batch:
            return batch[spec.name].shape[spec.batch_axis]
    return next(iter(batch.values())).shape[0]


def _contiguous(a: np.ndarray) -> np.ndarray:
    """C-contiguous, a rank-0 array kept rank 0 (np.ascontiguousarray makes it [1])."""
    return a if a.flags.c_contiguous else np.array(a, order="C")


def _digest(array: np.ndarray) -> str:
    return hashlib.sha256(_contiguous(array).tobytes()).hexdigest()


class FedSource(DataSource):
    """A data source's batches as the model takes them (see the module's docstring). `varying`: the inputs
    the source fills (what the network NLC may differentiate along)."""

    def __init__(self, source: DataSource, inputs: list[InputSpec], constants: Mapping, held: dict,
                 shapes: Mapping | None = None):
        self.source, self.inputs, self.held, self.given = source, inputs, held, dict(constants)
        self.zeros = {}
        for s in inputs:
            if s.name in source.unfilled:
                shape = tuple((shapes or {}).get(s.name, s.example_shape()))
                if not all(isinstance(d, int) and d > 0 for d in shape):
                    raise OnnxaffError(f"model input {s.describe()} is not in the data and has symbolic dims: give "
                                       f"it with {option('constants', s.name + '=FILE.npy')}")
                self.zeros[s.name] = shape
        self.varying = [s for s in inputs if s.name not in held and s.name not in self.zeros]
        # batch-first inputs first: code reading a batch's size off its first array reads the right axis
        self.inputs = sorted(inputs, key=lambda s: s.batch_axis != 0)
        self.warnings = list(source.warnings)
        if self.zeros:
            self.warnings.append(Message(
                f"model inputs {', '.join(self.zeros)} are not in the data and have no constant: every example "
                f"gets zeros (give them with {option('constants', 'NAME=VALUE|FILE.npy')})"))

    @property
    def skipped(self):
        return self.source.skipped

    def __len__(self) -> int:
        return len(self.source)

    def batches(self, batch_size: int, start: int = 0, stop: int | None = None, should_stop=None):
        for batch in self.source.batches(batch_size, start, stop, should_stop):
            yield self.model_batch(batch)

    def model_batch(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        n = next(iter(batch.values())).shape[0]
        out = {}
        for s in self.inputs:
            if s.name in self.held:
                a = self.held[s.name]
                a = a if s.batch_axis is None else np.broadcast_to(a, (n, *a.shape))
            elif s.name in self.zeros:
                a = np.zeros((n, *self.zeros[s.name]), dtype=s.dtype)
            else:
                a = batch[s.name]
            if s.batch_axis not in (None, 0):
                a = np.moveaxis(a, 0, s.batch_axis)
            out[s.name] = _contiguous(a)
        return out

    def example_shapes(self) -> dict[str, tuple]:
        return {**self.source.example_shapes(), **self.zeros, **{k: v.shape for k, v in self.held.items()}}

    def describe(self) -> dict:
        """The source's description, with the constants (numbers as given, arrays by shape, dtype and sha256)
        and the zero-filled inputs where there are any: a changed constant is other data to a checkpoint."""
        d = dict(self.source.describe())
        if self.held:
            d["constants"] = {name: self.given[name] if isinstance(self.given[name], numbers.Number) else
                              {**({"file": self.given[name]} if isinstance(self.given[name], str) else {}),
                               "shape": list(a.shape), "dtype": a.dtype.name, "sha256": _digest(a)}
                              for name, a in self.held.items()}
        if self.zeros:
            d["zeros"] = sorted(self.zeros)
        return d

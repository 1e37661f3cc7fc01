"""What every data source offers the batch loop, and the model inputs it must fill."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
import onnx
from onnx import helper

from onnxaff.errors import ConfigError, OnnxaffError, option
from onnxaff.foundations.dtypes import BFLOAT16
from onnxaff.foundations.files import sha256_of


@dataclass(frozen=True)
class InputSpec:
    """One model input: name, numpy dtype, dims (ints, or str for symbolic / unknown) and the axis examples are
    stacked on (None for a rank-0 input, which has none: it is fed as it is). Sources make batch-first arrays;
    `onnxaff.data.feeding` moves axis 0 to `batch_axis` before the runtime."""

    name: str
    dtype: np.dtype
    shape: tuple
    batch_axis: int | None = 0

    def __post_init__(self):
        if not self.shape:
            object.__setattr__(self, "batch_axis", None)

    @property
    def fixed_batch(self) -> int | None:
        if self.batch_axis is None:
            return None
        d = self.shape[self.batch_axis]
        return d if isinstance(d, int) and d > 0 else None

    def example_shape(self) -> tuple:
        """The dims of one example: the shape without its batch axis."""
        if self.batch_axis is None:
            return tuple(self.shape)
        return tuple(self.shape[:self.batch_axis]) + tuple(self.shape[self.batch_axis + 1:])

    def describe(self) -> str:
        return f"{self.name}: {self.dtype.name}[{', '.join(str(d) for d in self.shape)}]"


def model_inputs(model: onnx.ModelProto, batch_axes: dict[str, int] | None = None) -> list[InputSpec]:
    """The inputs a caller must feed (graph inputs that are not initializers), each with its batch axis
    (`batch_axes`: name -> axis, negative counting from the last; 0 for the others)."""
    inits = {t.name for t in model.graph.initializer}
    specs = []
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        if not vi.type.HasField("tensor_type"):
            raise OnnxaffError(f"input {vi.name!r} is not a tensor (sequence/map inputs are not supported)")
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tt.elem_type))
        dims = []
        for d in tt.shape.dim:
            dims.append(int(d.dim_value) if d.HasField("dim_value") else (d.dim_param or "?"))
        specs.append(InputSpec(vi.name, dtype, tuple(dims), _axis(vi.name, len(dims), (batch_axes or {}).get(vi.name))))
    unknown = sorted(set(batch_axes or {}) - {s.name for s in specs})
    if unknown:
        raise ConfigError("batch_axes", f"{{option}} names {unknown[0]!r}, which is not a model input")
    return specs


def _axis(name: str, rank: int, axis: int | None) -> int | None:
    if axis is None:
        return 0 if rank else None
    if not -rank <= axis < rank:
        raise ConfigError("batch_axes", f"{{option}} {name}={axis} is out of range: model input {name!r} has "
                          + (f"rank {rank} (axes 0 to {rank - 1})" if rank else "rank 0 (no batch axis)"))
    return axis % rank


def fixed_batch_of(inputs: list[InputSpec]) -> int | None:
    """The batch size the inputs fix on their batch axes (None when none does): the run and the probe use it
    alike. Two that fix different sizes, or one fixing its batch axis where the others' batch symbol sits on
    another of its axes, are refused in one line: the runtime would fail, or run on the wrong axis."""
    fixed = {}
    for spec in inputs:
        if spec.fixed_batch is not None:
            fixed.setdefault(spec.fixed_batch, spec)
    if len(fixed) > 1:
        (a, b) = list(fixed.values())[:2]
        raise OnnxaffError(f"model inputs {a.describe()} and {b.describe()} fix different batch sizes "
                           f"({a.fixed_batch} and {b.fixed_batch}); give each one's batch axis with "
                           + option("batch_axes", "NAME=AXIS"))
    symbols = {s.shape[s.batch_axis] for s in inputs if s.batch_axis is not None and s.fixed_batch is None}
    for spec in inputs:
        other = [k for k, d in enumerate(spec.shape) if isinstance(d, str) and d in symbols and d != "?"]
        if spec.fixed_batch is not None and other:
            raise OnnxaffError(f"model input {spec.describe()} has the batch dim {spec.shape[other[0]]!r} of the "
                               f"other inputs on axis {other[0]}, not on axis {spec.batch_axis}; give it with "
                               + option("batch_axes", f"{spec.name}={other[0]}"))
    return next(iter(fixed), None)


def unknown_dims_text(dims) -> str:
    """Why dims cannot be used as sizes: a declared 0 or negative dim is impossible, not symbolic."""
    bad = [d for d in dims if isinstance(d, int) and d <= 0]
    if bad:
        return f"declares a dim of {', '.join(map(str, bad))} after the batch axis (a size must be positive)"
    return "has symbolic dims after the batch axis"


def check_example_shape(spec: InputSpec, shape: tuple, what: str) -> None:
    """A clear error when data does not fit an input's static dims (symbolic dims accept anything)."""
    want = spec.example_shape()
    if spec.shape and len(shape) != len(want):
        raise OnnxaffError(
            f"{what} gives examples of shape {list(shape)} but model input {spec.describe()} "
            f"expects rank {len(spec.shape)} (batch first)"
        )
    for got, exp in zip(shape, want, strict=False):
        if isinstance(exp, int) and exp > 0 and got != exp:
            raise OnnxaffError(
                f"{what} gives examples of shape {list(shape)} but model input {spec.describe()} "
                f"expects {[d for d in want]} after the batch axis"
            )


def cast_for(spec: InputSpec, array: np.ndarray, what: str) -> np.ndarray:
    """Cast data to the input's dtype when that loses nothing essential; refuse float → int and complex → real."""
    if array.dtype == spec.dtype:
        return array
    bf16 = BFLOAT16 is not None and spec.dtype == BFLOAT16
    if bf16 and array.dtype.kind == "V" and array.dtype.itemsize == 2 and array.dtype.names is None:
        return array.view(BFLOAT16)  # numpy saves ml_dtypes' bfloat16 as 2-byte voids: .npy/.npz read back so
    to_float = np.issubdtype(spec.dtype, np.floating) or bf16
    if to_float and np.issubdtype(array.dtype, np.number) and array.dtype.kind != "c":
        with np.errstate(over="ignore"):  # values beyond the input's range become ±inf: the sites say NaN/Inf
            return array.astype(spec.dtype)
    if np.issubdtype(spec.dtype, np.integer) and np.issubdtype(array.dtype, np.integer):
        info = np.iinfo(spec.dtype)
        if not np.can_cast(array.dtype, spec.dtype) and array.size and (array.min() < info.min or
                                                                        array.max() > info.max):
            raise OnnxaffError(f"{what} holds values in [{array.min()}, {array.max()}] that model input "
                               f"{spec.describe()} cannot hold (its range is [{info.min}, {info.max}])")
        return array.astype(spec.dtype)
    raise OnnxaffError(f"{what} has dtype {array.dtype} but model input {spec.describe()} needs {spec.dtype}: "
                       f"only ints and floats to floats, and ints to ints, are cast")


class DataSource:
    """Examples for a model's inputs, in a fixed order, yielded as batches.

    `skipped`: (file, reason) of the examples the last `batches` call could not read (counted, never silently
    dropped); `warnings`: what opening the source noticed (a person should read them); `unfilled`: the inputs
    it was given but has no data for (an array file without a recurrent state): they are fed zeros, with a warning
    (onnxaff.data.feeding).
    """

    skipped: Sequence[tuple[str, str]] = ()
    warnings: Sequence[str] = ()
    unfilled: Sequence[str] = ()

    def __len__(self) -> int:  # number of examples
        raise NotImplementedError

    def batches(self, batch_size: int, start: int = 0, stop: int | None = None,
                should_stop: Callable[[], bool] | None = None) -> Iterator[dict[str, np.ndarray]]:
        """Examples [start, stop) in batches of `batch_size` (the last one may be short). A source that waits
        (decoder processes) polls `should_stop` meanwhile and raises StopWhileWaiting when it says so."""
        raise NotImplementedError

    def describe(self) -> dict:
        raise NotImplementedError

    def example_shapes(self) -> dict[str, tuple]:
        """Each input's shape after the batch axis as this source gives it, where it knows before reading any
        example (an image folder's come from decoding: empty)."""
        return {}

    # --- the data spec a kind of source reads: onnxaff.data.registry asks each kind in turn ---
    spec_form: ClassVar[str] = ""  # how its spec is written, for messages: "audio:FOLDER"
    fed_as_they_are: ClassVar[str | None] = None  # what its data are where image options do not apply
    shaped_by_options: ClassVar[bool] = False  # --input-range and --pad shape its examples (synthetic data)
    reads_folder: ClassVar[bool] = False  # the path it names is a folder (a manifest checks it as one)

    @classmethod
    def parse(cls, spec: str) -> str | None:
        """The file or folder `spec` names when this kind reads it ("" when it reads none), else None."""
        return None

    @classmethod
    def identity(cls, spec: str, path: str) -> list:
        """What a study and a checkpoint key on to tell changed data from the same: a file by path, size and the
        sha256 of its bytes (with the spec where it says more than the path), a folder by every file under it
        (`folder_identity`; image and audio folders by the files they read). Content, never the modification
        time alone: `cp -p`, `rsync -t` and `tar` put a rewritten file's time back."""
        target = Path(path) if path else None
        if target is not None and target.is_file():
            return [str(target.resolve()), target.stat().st_size, sha256_of(target)] + \
                ([spec] if path != spec else [])
        if target is not None and target.is_dir():  # every file under it: a kind that reads fewer may say so
            return folder_identity(target, sorted(f for f in target.rglob("*") if f.is_file())) + [spec]
        return [spec]

    @classmethod
    def relocate(cls, spec: str, path: str, new: str) -> str:
        """The spec naming `new` instead of `path` (a manifest's paths are read from its own folder)."""
        return spec[:len(spec) - len(path)] + new

    @classmethod
    def from_spec(cls, spec: str, path: str, inputs: list[InputSpec], **options) -> DataSource:
        """The source of `spec` for `inputs`; `options`: limit, seed, shapes, images, sample_rate and the synthetic
        shaping (ranges, pad, hints), each kind taking what it reads."""
        raise NotImplementedError


def folder_identity(root: Path, files: list[Path], prefix: str = "") -> list:
    """A folder by every file its source would read: relative path, size and the sha256 of its bytes."""
    parts: list = [prefix + str(root.resolve())]
    for f in files:
        try:
            parts.append([f.relative_to(root).as_posix(), f.stat().st_size, sha256_of(f)])
        except OSError:
            parts.append([f.relative_to(root).as_posix(), None])
    return parts


def no_usable(data: str, source) -> OnnxaffError:
    """All data skipped: say how many and why the first one was, which is the usual cause for all.
    Here, by the source, so that the plan (a probe batch) and the batch loop say it alike."""
    skipped = list(source.skipped)
    if not skipped:
        return OnnxaffError(f"no usable example in {data}")
    path, reason = skipped[0]
    return OnnxaffError(f"no usable example in {data}: {len(skipped)} skipped, the first ({Path(path).name}) "
                        f"because {reason}")

"""`.npy` / `.npz` arrays: one array per model input, keyed by input name, examples on axis 0.

Only the arrays the model's inputs need are read: a member stored without compression is memory-mapped, a
compressed one is decompressed as a stream, only as far as the rows asked for (a 4 MB archive may hold 4 GiB).
"""

from __future__ import annotations

import functools
import math
import mmap
import struct
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path

import numpy as np

from onnxaff.data.source import DataSource, InputSpec, cast_for, check_example_shape
from onnxaff.errors import OnnxaffError, first_line
from onnxaff.foundations.memory import check_fits

# A file without its format's magic is not an array file: numpy would call it pickled data and refuse that.
_MAGIC = {".npy": (b"\x93NUMPY", "NumPy"), ".npz": (b"PK", "zip")}
_READ_ERRORS = (ValueError, OSError, zipfile.BadZipFile, zlib.error, EOFError, RuntimeError, NotImplementedError)

# What arrays get before the model, from a file or from Python alike (so comparisons of the two see no difference)
ARRAYS_PREPROCESSING = "none (arrays fed as stored, cast to the input dtype)"


def _read(path: Path) -> dict[str, Callable[[], np.ndarray]]:
    """Every array of the file by key, each read only when asked for: an archive's unused members cost nothing."""
    suffix = path.suffix.lower()
    magic, kind = _MAGIC[suffix]
    if not path.is_file():
        raise OnnxaffError(f"data path is not a file: {path}")
    try:
        with open(path, "rb") as f:
            if f.read(len(magic)) != magic:
                raise OnnxaffError(f"not a {suffix} file (no {kind} header): {path}")
        if suffix == ".npy":
            return {"": lambda: _guarded(path, lambda: np.load(path, mmap_mode="r", allow_pickle=False))}
        with zipfile.ZipFile(path) as z:
            infos = z.infolist()
    except _READ_ERRORS as exc:
        raise OnnxaffError(f"cannot read array file {path}: {first_line(exc)}") from None
    # np.savez names members KEY.npy; np.load drops the suffix, and so does this.
    return {(i.filename[:-4] if i.filename.endswith(".npy") else i.filename):
            functools.partial(_guarded, path, functools.partial(_member, path, i)) for i in infos}


def _guarded(path: Path, read: Callable[[], np.ndarray]) -> np.ndarray:
    try:
        return read()
    except _READ_ERRORS as exc:
        raise OnnxaffError(f"cannot read array file {path}: {first_line(exc)}") from None


def _member(path: Path, info: zipfile.ZipInfo) -> np.ndarray:
    """One .npy member: its header checked against the member's real size before anything is allocated; a
    stored (uncompressed) member is memory-mapped at its offset in the file, a compressed one read."""
    fmt = np.lib.format
    with zipfile.ZipFile(path) as z, z.open(info) as f:
        if f.read(6) != b"\x93NUMPY":
            raise OnnxaffError(f"{path.name}: member {info.filename} is not a .npy array (no NumPy header)")
        version = tuple(f.read(2))
        read_header = fmt.read_array_header_1_0 if version == (1, 0) else fmt.read_array_header_2_0
        shape, fortran, dtype = read_header(f)
        if dtype.hasobject:
            raise ValueError(f"member {info.filename} holds Python objects, which would need unpickling")
        offset = f.tell()
        declared = math.prod(shape) * dtype.itemsize
        if declared != info.file_size - offset:
            raise OnnxaffError(f"{path.name}: member {info.filename} declares shape {tuple(shape)} of {dtype.name} "
                               f"({declared} bytes) but holds {info.file_size - offset}")
        order = "F" if fortran else "C"
        if declared == 0:
            return np.empty(shape, dtype=dtype, order=order)
        if info.compress_type != zipfile.ZIP_STORED or info.flag_bits & 1:
            if fortran and len(shape) > 1:  # rows are not contiguous: the whole member, if it fits
                check_fits([(declared, f"member {info.filename} of {path.name} (Fortran order, read whole)",
                             "save it in C order (np.ascontiguousarray) or uncompressed (np.savez)")])
                return _read_exactly(f, declared, info).view(dtype).reshape(shape, order=order)
            return Streamed(path, info, offset, tuple(shape), dtype)
    with open(path, "rb") as raw:  # the local header's name and extra fields sit before the member's bytes
        raw.seek(info.header_offset)
        local = raw.read(30)
        if len(local) != 30 or local[:4] != b"PK\x03\x04":
            raise zipfile.BadZipFile(f"no local header for member {info.filename}")
        name_len, extra_len = struct.unpack("<HH", local[26:30])
    start = info.header_offset + 30 + name_len + extra_len + offset
    return np.memmap(path, dtype=dtype, mode="r", offset=start, shape=tuple(shape), order=order)


def _read_exactly(f, count: int, info: zipfile.ZipInfo) -> np.ndarray:
    data = f.read(count)
    if len(data) != count:
        raise EOFError(f"member {info.filename} ends after {len(data)} of {count} bytes")
    return np.frombuffer(data, dtype=np.uint8)


def release_pages(rows) -> None:
    """Give back the memory-mapped file pages of rows already used: they stay in the page cache (shared, read
    again from there if asked for), but leave this process's resident set, which otherwise grows by the whole file
    as a run reads it (MobileNetV2's 1,024 images: 616 MB). Only a read-only map: a copy-on-write one ("c") would
    lose what was written to it. Anything else is left as it is."""
    if (not isinstance(rows, np.memmap) or getattr(rows, "mode", None) != "r" or not rows.flags.c_contiguous
            or rows.size == 0):
        return
    whole = getattr(rows, "_mmap", None)
    if whole is None or not hasattr(mmap, "MADV_DONTNEED"):
        return
    try:
        base = np.frombuffer(whole, np.uint8).ctypes.data
        begin = rows.ctypes.data - base
        first = begin - begin % mmap.PAGESIZE  # a page shared with the next rows is only read again
        whole.madvise(mmap.MADV_DONTNEED, first, begin + rows.nbytes - first)
    except (ValueError, OSError, TypeError):  # pragma: no cover - a platform without it: memory as before
        pass


class Streamed:
    """A compressed C-order member read row by row as slices ask for them: forward reads continue the open
    stream, a read before its position starts it again. Only `[i:j]` slices along the first axis are served."""

    def __init__(self, path: Path, info: zipfile.ZipInfo, offset: int, shape: tuple, dtype: np.dtype):
        self.path, self.info, self.offset, self.shape, self.dtype = path, info, offset, shape, dtype
        self.ndim = len(shape)
        self.row_bytes = math.prod(shape[1:]) * dtype.itemsize
        self._zip = self._stream = None
        self._row = 0

    def _seek(self, row: int) -> None:
        if self._stream is None or row < self._row:
            self.close()
            self._zip = zipfile.ZipFile(self.path)
            self._stream = self._zip.open(self.info)
            self._stream.read(self.offset)
            self._row = 0
        while self._row < row:  # skip forward a bounded block at a time
            step = max(1, min(row - self._row, (16 << 20) // max(1, self.row_bytes)))
            _read_exactly(self._stream, step * self.row_bytes, self.info)
            self._row += step

    def __getitem__(self, key) -> np.ndarray:
        if not isinstance(key, slice) or key.step not in (None, 1):
            raise TypeError("a streamed member is read by row ranges only")
        start, stop, _ = key.indices(self.shape[0])
        count = max(0, stop - start)
        if count == 0 or self.row_bytes == 0:
            return np.empty((count, *self.shape[1:]), self.dtype)
        return _guarded(self.path, lambda: self._rows(start, count))

    def _rows(self, start: int, count: int) -> np.ndarray:
        self._seek(start)
        data = _read_exactly(self._stream, count * self.row_bytes, self.info)
        self._row += count
        return data.view(self.dtype).reshape(count, *self.shape[1:])

    def close(self) -> None:
        for f in (self._stream, self._zip):
            if f is not None:
                f.close()
        self._zip = self._stream = None


class Arrays(DataSource):
    """Arrays by input name (`arrays`, examples on axis 0, for `inputs`), the first `n` examples served in batches
    cast to the inputs' dtypes: an array file's (ArraySource) or data given in Python (onnxaff.data.iterable)."""

    arrays: dict[str, np.ndarray]
    inputs: list[InputSpec]
    n: int

    def __len__(self) -> int:
        return self.n

    def batches(self, batch_size: int, start: int = 0, stop: int | None = None, should_stop=None):
        end = self.n if stop is None else min(stop, self.n)
        for i in range(start, end, batch_size):
            j = min(i + batch_size, end)
            rows = {spec.name: self.arrays[spec.name][i:j] for spec in self.inputs}
            try:
                yield {spec.name: np.ascontiguousarray(cast_for(spec, np.asarray(rows[spec.name]), spec.name))
                       for spec in self.inputs}
            finally:  # the batch (often a view of the map, read by the runtime) is through, or the reading stopped
                for part in rows.values():
                    release_pages(part)

    def example_shapes(self) -> dict[str, tuple]:
        return {name: tuple(a.shape[1:]) for name, a in self.arrays.items()}


class ArraySource(Arrays):
    spec_form = "FILE.npy / FILE.npz"
    fed_as_they_are = "a .npy/.npz file's arrays"

    @classmethod
    def parse(cls, spec: str) -> str | None:
        return spec if Path(spec).suffix.lower() in (".npy", ".npz") else None

    @classmethod
    def from_spec(cls, spec: str, path: str, inputs: list[InputSpec], **options) -> DataSource:
        return cls(Path(path), inputs, limit=options.get("limit"))

    def __init__(self, path: str | Path, inputs: list[InputSpec], limit: int | None = None):
        self.path = Path(path)
        if not self.path.exists():
            raise OnnxaffError(f"data file not found: {self.path}")
        arrays = _read(self.path)
        self.arrays: dict[str, np.ndarray] = {}
        if len(arrays) == 1 and len(inputs) == 1:
            (only,) = arrays.values()  # a single array feeds the single input, whatever its key
            self.arrays[inputs[0].name] = only()
        else:  # by name; inputs the file lacks are fed zeros (a recurrent state), as long as it has one of them
            missing = [spec.name for spec in inputs if spec.name not in arrays]
            if len(missing) == len(inputs):
                keys = ", ".join(sorted(k for k in arrays if k)) or "(one unnamed array)"
                raise OnnxaffError(f"{self.path.name} has no array for model input {missing[0]!r} (has: {keys})")
            self.unfilled = tuple(missing)
            self.arrays = {spec.name: arrays[spec.name]() for spec in inputs if spec.name not in missing}
        inputs = [spec for spec in inputs if spec.name in self.arrays]
        self.inputs = inputs
        counts = {name: a.shape[0] if a.ndim else 0 for name, a in self.arrays.items()}
        if len(set(counts.values())) != 1:
            raise OnnxaffError(f"arrays in {self.path.name} disagree on the number of examples: {counts}")
        self.total = next(iter(counts.values()))
        if self.total == 0:
            raise OnnxaffError(f"{self.path.name} holds no examples")
        for spec in inputs:
            a = self.arrays[spec.name]
            check_example_shape(spec, a.shape[1:], f"{self.path.name}[{spec.name}]")
            cast_for(spec, a[:1], f"{self.path.name}[{spec.name}]")  # dtype check up front
        self.n = self.total if limit is None else min(limit, self.total)

    def describe(self) -> dict:
        return {
            "source": str(self.path), "path": str(self.path.resolve()), "kind": "arrays", "samples": self.n,
            "available": self.total,
            "arrays": {k: {"shape": list(v.shape), "dtype": str(v.dtype)} for k, v in self.arrays.items()},
            "preprocessing": ARRAYS_PREPROCESSING,
        }

"""`.npy` / `.npz` arrays: one array per model input, keyed by input name, examples on axis 0."""

from __future__ import annotations

import zipfile
import zlib
from pathlib import Path

import numpy as np

from onnxaff.data.source import DataSource, InputSpec, cast_for, check_example_shape
from onnxaff.errors import OnnxaffError, first_line

# A file without its format's magic is not an array file: numpy would call it pickled data and refuse that.
_MAGIC = {".npy": (b"\x93NUMPY", "NumPy"), ".npz": (b"PK", "zip")}


def _read(path: Path) -> dict[str, np.ndarray]:
    suffix = path.suffix.lower()
    magic, kind = _MAGIC[suffix]
    if not path.is_file():
        raise OnnxaffError(f"data path is not a file: {path}")
    try:
        with open(path, "rb") as f:
            if f.read(len(magic)) != magic:
                raise OnnxaffError(f"not a {suffix} file (no {kind} header): {path}")
        if suffix == ".npy":
            return {"": np.load(path, mmap_mode="r", allow_pickle=False)}
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except (ValueError, OSError, zipfile.BadZipFile, zlib.error, EOFError) as exc:
        raise OnnxaffError(f"cannot read array file {path}: {first_line(exc)}") from None


class ArraySource(DataSource):
    def __init__(self, path: str | Path, inputs: list[InputSpec], limit: int | None = None):
        self.path = Path(path)
        if not self.path.exists():
            raise OnnxaffError(f"data file not found: {self.path}")
        arrays = _read(self.path)
        self.arrays: dict[str, np.ndarray] = {}
        if len(arrays) == 1 and len(inputs) == 1:
            (only,) = arrays.values()  # a single array feeds the single input, whatever its key
            self.arrays[inputs[0].name] = only
        else:
            for spec in inputs:
                if spec.name not in arrays:
                    keys = ", ".join(sorted(k for k in arrays if k)) or "(one unnamed array)"
                    raise OnnxaffError(f"{self.path.name} has no array for model input {spec.name!r} (has: {keys})")
                self.arrays[spec.name] = arrays[spec.name]
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

    def __len__(self) -> int:
        return self.n

    def batches(self, batch_size: int, start: int = 0, stop: int | None = None):
        end = self.n if stop is None else min(stop, self.n)
        for i in range(start, end, batch_size):
            j = min(i + batch_size, end)
            yield {
                spec.name: np.ascontiguousarray(cast_for(spec, np.asarray(self.arrays[spec.name][i:j]), spec.name))
                for spec in self.inputs
            }

    def describe(self) -> dict:
        return {
            "source": str(self.path), "kind": "arrays", "samples": self.n, "available": self.total,
            "arrays": {k: {"shape": list(v.shape), "dtype": str(v.dtype)} for k, v in self.arrays.items()},
            "preprocessing": "none (arrays fed as stored, cast to the input dtype)",
        }

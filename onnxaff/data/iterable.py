"""Data given in Python: an array, a dict of arrays by input name, or any iterable of batches (a PyTorch DataLoader).

The iterable is read once, when the analysis opens, and only as far as `limit` examples: a generator cannot be
rewound, and the run reads its batches more than once (a probe batch, then the pass; a resumed run from its
cursor). What was read is held in memory, cast to the inputs' dtypes, and served like an `.npz` file's arrays;
`describe()` records its sha256, so a signature says what fed it and a checkpoint refuses other data.

An item of the iterable is a batch (its rank is the input's) or one example (one less); a tuple or list is
`(x, y, ...)`, of which x feeds a single-input model (labels are not the model's); a dict feeds the inputs it
names, and every item names the same ones. The whole data given as a tuple `(x, y)` of two arrays of as many
examples is x (with its labels), not two items. torch tensors are read with `.detach().cpu().numpy()` (bfloat16
as float32; torch itself is never imported).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping

import numpy as np

from onnxaff.data.arrays import ARRAYS_PREPROCESSING, Arrays
from onnxaff.data.source import InputSpec, cast_for, check_example_shape
from onnxaff.errors import OnnxaffError


def is_array(value) -> bool:
    """A numpy array or a tensor that converts to one (torch, JAX, ...): examples on axis 0."""
    return isinstance(value, np.ndarray) or (hasattr(value, "shape") and hasattr(value, "dtype") and
                                             (hasattr(value, "__array__") or hasattr(value, "detach")))


def is_given(data) -> bool:
    """Data given as Python objects (not a path or spec, not a list of texts)."""
    return not isinstance(data, str | bytes) and (is_array(data) or isinstance(data, Mapping | Iterable))


def _numpy(value, what: str) -> np.ndarray:
    if hasattr(value, "detach"):  # torch: off the autograd graph and the device first
        value = value.detach().cpu()
        if str(value.dtype) == "torch.bfloat16":  # numpy has no bfloat16 of torch's: float32 holds it exactly
            value = value.float()
        try:
            value = value.numpy()
        except TypeError as exc:
            raise OnnxaffError(f"{what} is a tensor of dtype {value.dtype}, which numpy cannot hold ({exc}): "
                               "convert it with .float() first") from None
    return np.asarray(value)


def labelled(data) -> bool:
    """`(x, y)`: a tuple of two arrays of as many examples, the inputs and their labels (as a DataLoader's item, or
    scikit-learn's `return_X_y`); batches are given as a list or a generator."""
    return (isinstance(data, tuple) and len(data) == 2 and all(is_array(a) and len(a.shape) >= 1 for a in data)
            and data[0].shape[0] == data[1].shape[0])


def _kind(data) -> str:
    t = type(data)
    return t.__name__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"


class IterableSource(Arrays):
    """The examples of `data` (see the module's docstring), at most `limit` of them, read once here and served as
    an array file's are."""

    def __init__(self, data, inputs: list[InputSpec], limit: int | None = None):
        self.kind = _kind(data)
        self.inputs = inputs
        if labelled(data):
            self.kind, data = "tuple (x, y)", data[0]  # the labels are not the model's
        whole = is_array(data) or isinstance(data, Mapping)
        items = [data] if whole else data
        parts: dict[str, list[np.ndarray]] = {s.name: [] for s in inputs}
        self.items, n = 0, 0
        self.available = None  # how many examples there are: all read, or the whole array's
        for item in items:
            arrays = self._arrays(item, self.items, whole, limit)
            self._same_inputs(arrays, parts, self.items)
            counts = {len(a) for a in arrays.values()}
            if len(counts) != 1:
                raise OnnxaffError(f"{self._where(self.items, whole)} gives the inputs different numbers of "
                                   f"examples: {({k: len(a) for k, a in arrays.items()})}")
            for name, a in arrays.items():
                parts[name].append(a)
            self.items, n = self.items + 1, n + counts.pop()
            if limit is not None and n >= limit and not whole:
                break  # the rest is left to the caller: how many there are is not known
        else:
            self.available = self.available or n
        self.unfilled = tuple(name for name, p in parts.items() if not p)
        self.n = n if limit is None else min(n, limit)
        if self.n == 0 or len(self.unfilled) == len(inputs):
            raise OnnxaffError(f"the {self.kind} given holds no examples")
        self.arrays = {name: self._join(name, p, whole)[:self.n] for name, p in parts.items() if p}
        self.inputs = [s for s in inputs if s.name in self.arrays]
        self._sha256 = None

    def _same_inputs(self, arrays: dict, parts: dict, k: int) -> None:
        """Every item gives the inputs the first gave: an input missing from some items would pair the examples
        of one item with another's."""
        if k == 0:
            return
        first = [name for name, p in parts.items() if p]
        differ = [name for name in first if name not in arrays] or [name for name in arrays if name not in first]
        if differ:
            name = differ[0]
            how = "has no" if name in first else "gives"
            raise OnnxaffError(f"item {k} of the {self.kind} given {how} input {name} (item 0 gives "
                               f"{', '.join(first)}): every item must give the same inputs")

    def _where(self, k: int, whole: bool) -> str:
        return f"the {self.kind} given" if whole else f"item {k} of the {self.kind} given"

    def _arrays(self, item, k: int, whole: bool, limit: int | None) -> dict[str, np.ndarray]:
        """The item's arrays by input name, each batch-first (the whole data's only as far as `limit`)."""
        where = self._where(k, whole)
        if isinstance(item, Mapping):
            named = {name: item[name] for name in (s.name for s in self.inputs) if name in item}
            if not named:
                raise OnnxaffError(f"{where} is a dict without any model input ({', '.join(map(str, item))}); "
                                   f"the model takes {', '.join(s.describe() for s in self.inputs)}")
        elif len(self.inputs) > 1:
            raise OnnxaffError(f"{where} is a {type(item).__name__}; a model with several inputs takes dicts keyed by "
                               f"input name ({', '.join(s.name for s in self.inputs)})")
        elif isinstance(item, tuple | list) and item and not whole:
            named = {self.inputs[0].name: item[0]}  # (x, y): the labels are not the model's
        else:
            named = {self.inputs[0].name: item}
        out = {}
        for name, value in named.items():
            spec = next(s for s in self.inputs if s.name == name)
            if not is_array(value) and not isinstance(value, list | tuple | int | float):
                raise OnnxaffError(f"{where} gives {name} a {type(value).__name__}, not an array")
            a = _numpy(value, f"{where} for input {name}")
            rank = len(spec.shape)
            if a.ndim == rank - 1 and not whole:  # one example
                a = a[None]
            elif a.ndim != rank:
                one = "" if whole else f" (or one example of rank {rank - 1})"
                raise OnnxaffError(f"{where} has shape {list(a.shape)} but model input {spec.describe()} takes "
                                   f"batches of rank {rank}{one}, batch first")
            if whole:  # the examples there are; cut before the cast: a limit of 100 copies 100 examples, not all
                self.available, a = len(a), a[:limit]
            check_example_shape(spec, a.shape[1:], f"{where} for input {name}")
            out[name] = cast_for(spec, a, f"{where} for input {name}")
        return out

    def _join(self, name: str, parts: list[np.ndarray], whole: bool) -> np.ndarray:
        shapes = {p.shape[1:] for p in parts}
        if len(shapes) > 1:
            a, b = sorted(shapes)[:2]
            raise OnnxaffError(f"the {self.kind} given gives {name} examples of different shapes "
                               f"({list(a)} and {list(b)}): every example must have the same")
        return parts[0] if whole else np.concatenate(parts)

    def sha256(self) -> str:
        """Of the examples held (names, dtypes, shapes and bytes), computed once."""
        if self._sha256 is None:
            digest = hashlib.sha256()
            for name in sorted(self.arrays):
                a = np.ascontiguousarray(self.arrays[name])
                digest.update(f"{name}:{a.dtype.str}:{a.shape}".encode())
                digest.update(a.tobytes())
            self._sha256 = digest.hexdigest()
        return self._sha256

    def describe(self) -> dict:
        return {
            "source": f"({self.kind}, {self.n} examples given in Python)", "kind": "python", "type": self.kind,
            "samples": self.n, "available": self.available, "items_read": self.items,
            "arrays": {k: {"shape": list(v.shape), "dtype": str(v.dtype)} for k, v in self.arrays.items()},
            "sha256": self.sha256(), "preprocessing": ARRAYS_PREPROCESSING,
        }

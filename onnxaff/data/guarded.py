"""A third-party data source held to the DataSource contract: whatever it raises or returns wrong is one line
naming it (its entry point), never an internal error. A failure while batches are drawn is DataFailed, raised
before the bad batch is fed, so a checkpointed run saves the state up to the last whole batch and resumes."""

from __future__ import annotations

import json
import numbers
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from onnxaff.data.source import DataSource, InputSpec, cast_for, check_example_shape
from onnxaff.errors import DataFailed, OnnxaffError, first_line

FAULTS = (Exception, SystemExit)  # what a plugin may raise or exit with; Ctrl-C stays Ctrl-C


def _shown(value) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:60]}{'...' if len(text) > 60 else ''}"


def _count(value) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool) and value >= 0


def opened(name: str, make: Callable[[], DataSource], inputs: list[InputSpec]) -> GuardedSource:
    """The source `make` (the kind's from_spec) opens, guarded; its failure is one line naming it."""
    try:
        source = make()
    except OnnxaffError as exc:  # the plugin's own words to the user
        raise OnnxaffError(f"{name}: {exc.template}") from None
    except FAULTS as exc:
        raise OnnxaffError(f"{name}: from_spec raised {type(exc).__name__}: {first_line(exc)}") from None
    if not isinstance(source, DataSource):
        raise OnnxaffError(f"{name}: from_spec returned {_shown(source)}, not a DataSource")
    return GuardedSource(source, name, inputs)


class GuardedSource(DataSource):
    """`source`, each answer checked: its length, warnings, unfilled inputs, shapes and description when opened,
    each batch (a dict of arrays for the inputs asked, the declared shapes and dtypes, no more rows than asked)
    and what it skipped as it is drawn."""

    def __init__(self, source: DataSource, name: str, inputs: list[InputSpec]):
        self.source, self.name, self.specs = source, name, {s.name: s for s in inputs}
        self._n = self._answer("__len__()", source.__len__, _count, "a count (an int ≥ 0)")
        self.unfilled = self._names(self._answer("unfilled", lambda: source.unfilled), "unfilled")
        self.warnings = self._texts(self._answer("warnings", lambda: source.warnings), "warnings")
        self._shapes = self._example_shapes()
        self._skipped: list[tuple[str, str]] = []
        self.describe()

    def _answer(self, what: str, call: Callable, ok: Callable = lambda v: True, want: str = ""):
        try:
            value = call()
        except FAULTS as exc:
            raise OnnxaffError(f"{self.name}: {what} raised {type(exc).__name__}: {first_line(exc)}") from None
        if not ok(value):
            raise OnnxaffError(f"{self.name}: {what} is {_shown(value)}, not {want}")
        return value

    def _texts(self, value, what: str) -> list[str]:
        if isinstance(value, str | bytes) or not isinstance(value, Sequence) or \
                not all(isinstance(v, str) for v in value):
            raise OnnxaffError(f"{self.name}: {what} is {_shown(value)}, not a list of str")
        return list(value)

    def _names(self, value, what: str) -> list[str]:
        names = self._texts(value, what)
        unknown = [n for n in names if n not in self.specs]
        if unknown:
            raise OnnxaffError(f"{self.name}: {what} names {unknown[0]!r}, which is not an input it was given "
                               f"({', '.join(self.specs)})")
        return names

    def _example_shapes(self) -> dict[str, tuple]:
        shapes = self._answer("example_shapes()", self.source.example_shapes, lambda v: isinstance(v, Mapping),
                              "a dict of shapes by input name")
        self._names(list(shapes), "example_shapes()")
        out = {}
        for key, dims in shapes.items():
            if not isinstance(dims, Sequence) or not all(_count(d) and d > 0 for d in dims):
                raise OnnxaffError(f"{self.name}: example_shapes() gives {key!r} {_shown(dims)}, not a tuple of "
                                   "positive ints")
            out[key] = tuple(int(d) for d in dims)
        return out

    def __len__(self) -> int:
        return self._n

    def describe(self) -> dict:
        d = self._answer("describe()", self.source.describe, lambda v: isinstance(v, dict), "a dict")
        try:
            json.dumps(d, allow_nan=False)
        except (TypeError, ValueError, RecursionError) as exc:
            raise OnnxaffError(f"{self.name}: describe() is no JSON ({type(exc).__name__}: "
                               f"{first_line(exc)})") from None
        return d

    def example_shapes(self) -> dict[str, tuple]:
        return dict(self._shapes)

    @property
    def skipped(self) -> list[tuple[str, str]]:
        return list(self._skipped)

    def batches(self, batch_size: int, start: int = 0, stop: int | None = None, should_stop=None):
        """The source's batches, each checked before it is fed; its faults are DataFailed naming it."""
        want, got = max(0, min(self._n, self._n if stop is None else stop) - start), 0
        it = None
        try:
            it = iter(self.source.batches(batch_size, start, stop, should_stop))
            for batch in it:
                checked = self._batch(batch, batch_size)
                got += examples(checked)
                if got > want:
                    raise DataFailed(f"{self.name}: batches() gave more than the {want} examples asked for "
                                     f"({start} to {start + want})")
                self._skipped = self._read_skipped()
                yield checked
            self._skipped = self._read_skipped()
            if got + len(self._skipped) < want:
                raise DataFailed(f"{self.name}: batches() stopped after {got} of the {want} examples asked for "
                                 f"(its length is {self._n}), {len(self._skipped)} skipped")
        except DataFailed:
            raise
        except OnnxaffError as exc:
            raise DataFailed(f"{self.name}: {exc.template}") from None
        except FAULTS as exc:
            raise DataFailed(f"{self.name}: batches() raised {type(exc).__name__}: {first_line(exc)}") from None
        finally:
            try:
                getattr(it, "close", lambda: None)()
            except FAULTS:
                pass

    def _read_skipped(self) -> list[tuple[str, str]]:
        value = self._answer("skipped", lambda: self.source.skipped)
        pairs = isinstance(value, Sequence) and not isinstance(value, str | bytes) and all(
            isinstance(p, Sequence) and not isinstance(p, str | bytes) and len(p) == 2 and
            all(isinstance(t, str) for t in p) for p in value)
        if not pairs:
            raise OnnxaffError(f"{self.name}: skipped is {_shown(value)}, not a list of (file, reason) pairs")
        return [(str(a), str(b)) for a, b in value]

    def _batch(self, batch, batch_size: int) -> dict[str, np.ndarray]:
        """A batch as the inputs take it: the arrays cast where that loses nothing, or OnnxaffError."""
        if not isinstance(batch, Mapping):
            raise OnnxaffError(f"batches() yielded {_shown(batch)}, not a dict of arrays by input name")
        asked = [n for n in self.specs if n not in self.unfilled]
        missing, extra = [n for n in asked if n not in batch], [n for n in batch if n not in asked]
        if missing or extra:
            raise OnnxaffError(f"batches() yielded a batch {'without input ' + repr(missing[0]) if missing else ''}"
                               f"{' with ' + repr(extra[0]) + ', no input it was asked for' if extra else ''}")
        out, rows = {}, set()
        for name in asked:
            spec, a = self.specs[name], batch[name]
            if not isinstance(a, np.ndarray):
                raise OnnxaffError(f"batches() yielded {_shown(a)} for input {name!r}, not a numpy array")
            if a.ndim != len(spec.shape):
                raise OnnxaffError(f"batches() yielded {name!r} of shape {list(a.shape)}, but model input "
                                   f"{spec.describe()} has rank {len(spec.shape)} (batch first)")
            check_example_shape(spec, a.shape[1:], "batches()")
            declared = self._shapes.get(name)
            if declared is not None and tuple(a.shape[1:]) != declared:
                raise OnnxaffError(f"batches() yielded {name!r} examples of shape {list(a.shape[1:])}, but "
                                   f"example_shapes() declares {list(declared)}")
            out[name] = cast_for(spec, a, f"batches()' {name!r}")
            rows.add(a.shape[0])
        if len(rows) > 1 or max(rows, default=0) > batch_size:
            raise OnnxaffError(f"batches() yielded a batch of {sorted(rows)} examples by input; batches of at most "
                               f"{batch_size}, the same for every input, were asked for")
        return out


def examples(batch: dict[str, np.ndarray]) -> int:
    return next(iter(batch.values())).shape[0] if batch else 0

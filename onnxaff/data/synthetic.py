"""`synthetic:KIND[:key=value,...]`: seeded inputs shaped like the model's, for smoke runs and studies.

KIND: gaussian (mean, std), uniform (low, high), grid (a side×side grid over [low, high]² for
[N, 2] inputs: the 2-D coordinate studies of small MLPs). Keys: n (examples), seed.

Per input (`ranges`, then the graph's `hints`, onnxaff.graph.inputs): an integer input is drawn from its own
[low, high) (token ids from their embedding table's rows), a float input with a range uniformly from it; a
mask-like input is all ones, or with `pad` a seeded random tail of up to that fraction of its positions zero.
"""

from __future__ import annotations

import numpy as np

from onnxaff import defaults
from onnxaff.data.source import DataSource, InputSpec, unknown_dims_text
from onnxaff.errors import ConfigError, OnnxaffError, option

KINDS = ("gaussian", "uniform", "grid")
DEFAULT_N = 1024


def parse_spec(spec: str) -> tuple[str, dict]:
    body = spec[len("synthetic:"):]
    kind, _, rest = body.partition(":")
    if kind not in KINDS:
        raise OnnxaffError(f"unknown synthetic data {kind!r}; choose one of {', '.join(KINDS)}")
    params: dict = {}
    for item in filter(None, rest.split(",")):
        key, eq, value = item.partition("=")
        if not eq:
            raise OnnxaffError(f"synthetic option {item!r} is not key=value")
        if key.strip() in params:  # which one would count is a guess: refuse both
            raise OnnxaffError(f"synthetic option {key.strip()!r} is given twice")
        try:
            params[key.strip()] = float(value)
        except ValueError:
            raise OnnxaffError(f"synthetic option {key}={value!r} is not a number") from None
    allowed = {"n", "seed", "mean", "std", "low", "high"}
    extra = set(params) - allowed
    if extra:
        raise OnnxaffError(f"unknown synthetic option {sorted(extra)[0]!r}; allowed: {', '.join(sorted(allowed))}")
    _check_params(params)
    return kind, params


def _check_params(params: dict) -> None:
    """Refuse values numpy would reject mid-run (or silently round): one line naming the option."""
    for key, value in params.items():
        if not np.isfinite(value):
            raise OnnxaffError(f"synthetic option {key}={value} is not a finite number")
    for key, least in (("n", 1), ("seed", 0)):
        if key in params and (params[key] != int(params[key]) or params[key] < least):
            raise OnnxaffError(f"synthetic option {key}={params[key]:g} must be an integer ≥ {least}")
    if params.get("std", 1.0) < 0:
        raise OnnxaffError(f"synthetic option std={params['std']:g} must not be negative")


class SyntheticSource(DataSource):
    spec_form = "synthetic:gaussian|uniform|grid[:key=value,...]"
    fed_as_they_are = "synthetic data"
    shaped_by_options = True

    @classmethod
    def parse(cls, spec: str) -> str | None:
        return "" if spec.startswith("synthetic:") else None

    @classmethod
    def from_spec(cls, spec: str, path: str, inputs: list[InputSpec], **options) -> DataSource:
        return cls(spec, inputs, limit=options.get("limit"), seed=options.get("seed", defaults.SEED),
                   shapes=options.get("shapes"), ranges=options.get("ranges"), pad=options.get("pad", defaults.PAD),
                   hints=options.get("hints"))

    def __init__(self, spec: str, inputs: list[InputSpec], limit: int | None = None, seed: int = defaults.SEED,
                 shapes: dict[str, tuple] | None = None, ranges: dict | None = None, pad: float = defaults.PAD,
                 hints: dict | None = None):
        self.spec, self.ranges, self.pad, self.hints = spec, dict(ranges or {}), pad, dict(hints or {})
        self.kind, self.params = parse_spec(spec)
        masks = [i.name for i in inputs if self.hints.get(i.name, {}).get("mask") and i.name not in self.ranges]
        if pad and not masks:
            raise ConfigError("pad", "{option} pads mask inputs (named *mask*, shaped as the token ids); this model "
                              f"has none among {', '.join(i.name for i in inputs)}")
        self.seed = int(self.params.get("seed", seed))
        if self.seed < 0:
            raise ConfigError("seed", f"{{option}} {self.seed}: synthetic data need a seed ≥ 0")
        n = int(self.params.get("n", limit or DEFAULT_N))
        self.n = min(n, limit) if limit else n
        self.inputs = inputs
        self.shapes = {}
        for spec_ in inputs:
            shape = tuple((shapes or {}).get(spec_.name, spec_.example_shape()))
            unknown = [d for d in shape if not isinstance(d, int) or d <= 0]
            if unknown:
                raise OnnxaffError(
                    f"model input {spec_.describe()} {unknown_dims_text(shape)}; "
                    "give them with " + option("input_shapes", f"{spec_.name}=" + "x".join(
                        str(d) if isinstance(d, int) and d > 0 else "D" for d in shape))
                )
            self.shapes[spec_.name] = shape
            lo, hi = self._range(spec_)
            if lo >= hi and (self.kind != "gaussian" or np.issubdtype(spec_.dtype, np.integer)):
                raise OnnxaffError(f"synthetic data for input {spec_.name!r} needs low < high "
                                   f"(low={lo:g}, high={hi:g})")
        if self.kind == "grid":
            if len(inputs) != 1 or self.shapes[inputs[0].name] != (2,):
                raise OnnxaffError("synthetic:grid needs a model with one input of shape [N, 2]")
            side = int(np.floor(np.sqrt(self.n)))
            self.n = side * side
            lo, hi = self.params.get("low", -1.0), self.params.get("high", 1.0)
            g = np.linspace(lo, hi, side)
            xx, yy = np.meshgrid(g, g, indexing="ij")
            self._grid = np.stack([xx.ravel(), yy.ravel()], axis=1)

    def __len__(self) -> int:
        return self.n

    def _range(self, spec: InputSpec) -> tuple:
        """[low, high) of uniform and grid data, and of integer inputs' values (high excluded there): the input's
        own range, else (integers) its hint's, else the spec's."""
        integer = np.issubdtype(spec.dtype, np.integer)
        own = self.ranges.get(spec.name) or (self.hints.get(spec.name, {}).get("range") if integer else None)
        if own is not None:
            return (int(own[0]), int(own[1])) if integer else (float(own[0]), float(own[1]))
        if integer:
            return int(self.params.get("low", 0)), int(self.params.get("high", 10))
        return self.params.get("low", -1.0), self.params.get("high", 1.0)

    def _mask(self, spec: InputSpec, rng: np.random.Generator, shape: tuple) -> np.ndarray:
        """Ones; with `pad`, each example's last positions (up to that fraction, one kept) zero."""
        mask = np.ones(shape, dtype=spec.dtype)
        length = shape[-1] if len(shape) > 1 else 0
        most = min(length - 1, int(np.floor(self.pad * length)))
        for example in mask:
            tail = int(rng.integers(0, most + 1)) if most > 0 else 0
            if tail:
                example[..., length - tail:] = 0
        return mask

    def _draw(self, spec: InputSpec, rng: np.random.Generator, count: int) -> np.ndarray:
        shape = (count, *self.shapes[spec.name])
        if self.hints.get(spec.name, {}).get("mask") and spec.name not in self.ranges:
            return self._mask(spec, rng, shape)
        if np.issubdtype(spec.dtype, np.integer):
            return rng.integers(*self._range(spec), size=shape).astype(spec.dtype)
        if spec.dtype == np.bool_:
            return rng.integers(0, 2, size=shape).astype(bool)
        if self.kind == "uniform" or spec.name in self.ranges:
            a = rng.uniform(*self._range(spec), size=shape)
        else:
            a = rng.normal(self.params.get("mean", 0.0), self.params.get("std", 1.0), size=shape)
        with np.errstate(over="ignore"):  # past the dtype's range: ±inf, which flags the sites, not a numpy warning
            return a.astype(spec.dtype)

    def batches(self, batch_size: int, start: int = 0, stop: int | None = None, should_stop=None):
        end = self.n if stop is None else min(stop, self.n)
        for i in range(start, end, batch_size):
            j = min(i + batch_size, end)
            if self.kind == "grid":
                spec = self.inputs[0]
                yield {spec.name: self._grid[i:j].astype(spec.dtype)}
                continue
            # One generator per example block of the whole run: the same examples whatever the batch size.
            batch = {}
            for k, spec in enumerate(self.inputs):
                rows = [self._draw(spec, np.random.default_rng([self.seed, k, e]), 1) for e in range(i, j)]
                batch[spec.name] = np.concatenate(rows)
            yield batch

    def example_shapes(self) -> dict[str, tuple]:
        return dict(self.shapes)

    def describe(self) -> dict:
        d = {
            "source": self.spec, "kind": f"synthetic:{self.kind}", "samples": self.n, "seed": self.seed,
            "params": self.params, "shapes": {k: list(v) for k, v in self.shapes.items()},
            "preprocessing": "none",
        }
        own = {}  # inputs drawn otherwise than the spec says: recorded only where there are any
        for spec in self.inputs:
            if self.hints.get(spec.name, {}).get("mask") and spec.name not in self.ranges:
                own[spec.name] = {"mask": "ones" + (f", tails of up to {self.pad:g} zero" if self.pad else "")}
            elif spec.name in self.ranges or "range" in self.hints.get(spec.name, {}):
                own[spec.name] = {"range": list(self._range(spec))}
        if own:
            d["inputs"] = own
        return d

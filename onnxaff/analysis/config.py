"""AnalysisConfig: every option of an analysis, validated once, whoever builds it (CLI, API, study, shards, Ray).

Errors are `ConfigError`s naming the field (`chunk_size`, `images.resize`); the CLI renders them with its flag.
"""

from __future__ import annotations

import dataclasses
import numbers
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from onnxaff import defaults
from onnxaff.analysis.textual import TEXTUAL
from onnxaff.collection.chunks import width_multiple
from onnxaff.collection.scoring import MAX_WORKERS
from onnxaff.data.feeding import check_feeding
from onnxaff.data.image_preprocess import ImagePreprocess
from onnxaff.errors import ConfigError, option
from onnxaff.graph.reduction import REDUCTIONS, SAMPLE, sampled
from onnxaff.runtime.network import DIRECTIONS as NLC_DIRECTIONS  # the default, recorded in options only when changed
from onnxaff.runtime.network import parse_directions
from onnxaff.runtime.sessions import GRAPH_OPTIMIZATIONS

DEFAULT_METRICS = None  # the metrics declaring `default` (onnxaff.metrics.default_metrics)
PARTIAL_CHUNK_RULE = "full chunks only; a site with no full chunk scores its one partial chunk (partial: true)"
STD_RULE = "population std (ddof=0) over chunk scores"
# ci95 of a chunk metric: "auto" over chunks, from half-samples of a site's only chunk (onnxaff.collection.stats.HALVES
# rescorings of it, overlapped with inference where the site's row count is known); "chunks" over chunks only (no
# interval for one chunk); "half" from the half-samples of the first chunk for every site (mean ± t·sd_halves/√k);
# "none" no interval. docs/statistics.md, "Confidence intervals".
INTERVALS = ("auto", "chunks", "half", "none")


def parse_shard(text) -> tuple[int, int] | None:
    """`i/n` (0-based i) or (i, n) -> (i, n)."""
    if text is None:
        return None
    if isinstance(text, tuple | list):
        text = "/".join(str(v) for v in text)
    a, slash, b = str(text).partition("/")
    try:
        i, n = int(a), int(b)
    except ValueError:
        i = n = -1
    if not slash or n < 1 or not 0 <= i < n:
        raise ConfigError("shard", f"{{option}} {text!r} is not i/n with 0 <= i < n (e.g. 0/3)")
    return i, n


def check_checkpoint_every(every) -> int:
    """--checkpoint-every: batches between saves, 0 for saves on signals only."""
    return _whole("checkpoint_every", every, 0, "0 or positive")


def _whole(name: str, value, least: int, what: str, optional: bool = False) -> int | None:
    """A whole number (numpy's too, made a Python int: options are recorded in JSON)."""
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < least:
        raise ConfigError(name, f"{{option}} must be {what}, got {value!r}")
    if abs(value) > LARGEST.get(name, 2**63):  # past what an int64 (numpy, onnxruntime's thread count: int32) holds
        raise ConfigError(name, f"{{option}} {value} is out of range (at most {LARGEST.get(name, 2**63)})")
    return int(value)


LARGEST = {"threads": 1024, "chunk_workers": 2**31 - 1, "batch_size": 2**31 - 1, "chunk_size": 2**31 - 1,
           "max_length": 2**31 - 1, "sample_rate": 2**31 - 1, "limit": 2**62, "seed": 2**63}


def _choice(name: str, value, choices, what: str) -> str:
    if value not in choices:
        raise ConfigError(name, f"unknown {what} {value!r} for {{option}}; choose one of {', '.join(choices)}")
    return value


def _sized(name: str, value, least: int, what: str) -> int | str:
    """A whole number, or for chunk_size "Kd" (K ≥ 1: K·D rows per chunk, onnxaff.collection.chunks.site_chunk_rows)."""
    if name == "chunk_size" and isinstance(value, str):
        if (width_multiple(value.strip()) or 0) >= 1:
            return value.strip()
        if not value.strip().isdigit():
            raise ConfigError(name, f"{{option}} must be {what} or Kd (K·D rows per chunk at a site of D "
                              f"features, K ≥ 1), got {value!r}")
        value = int(value.strip())
    return _whole(name, value, least, what)


def _reduction(value) -> str:
    """One of REDUCTIONS, or sample:K (K ≥ 1 positions per example, onnxaff.graph.reduction.sample_rows), K written
    plainly: sample:016 is sample:16, the protocol it names and the signature it is recorded in alike."""
    if value not in REDUCTIONS and not (sampled(value) or 0) >= 1:
        raise ConfigError("reduce", f"unknown reduction {value!r} for {{option}}; choose one of "
                          f"{', '.join(REDUCTIONS)} or {SAMPLE}K (K positions per example, K ≥ 1)")
    return value if value in REDUCTIONS else f"{SAMPLE}{sampled(value)}"


@dataclass(frozen=True)
class AnalysisConfig:
    """The options of one analysis. Lists become tuples, `shard` "i/n" becomes (i, n), `nlc_directions` an int
    or "all"; `images` (an onnxaff.ImagePreprocess, or a dict of its options) becomes that dict
    (ImagePreprocess.options()). A field may also be given as typed on the command line (onnxaff.analysis.textual:
    `metrics="a,b"`, `input_shapes="x=3x48x192"`, `pairs="IN:OUT"`, `batch_axes=["mask=1"]`, an image option's
    `"0.5,0.5,0.5"` or `"48x320"`). Per-input feeding (onnxaff.data.feeding): `batch_axes` {input: axis},
    `constants` {input: number, .npy path or array}, `input_ranges` {input: (low, high)} of synthetic values,
    `pad` the largest fraction of a synthetic mask zeroed at its tail."""

    metrics: tuple[str, ...] | None = DEFAULT_METRICS
    chunk_size: int | str = defaults.CHUNK_SIZE  # rows per chunk, or "Kd": K·D rows at a site of D features
    batch_size: int = defaults.BATCH_SIZE
    limit: int | None = None
    reduce: str = defaults.REDUCE
    device: str = defaults.DEVICE
    layout: str = defaults.LAYOUT
    seed: int = defaults.SEED
    input_shapes: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    images: Mapping | ImagePreprocess | None = None
    plugins: tuple[str, ...] = ()
    progress: bool = defaults.PROGRESS
    reduce_in: str = defaults.REDUCE_IN
    chunk_workers: int | None = None
    shard: tuple[int, int] | None = None
    pairs: tuple[tuple[str, str], ...] = ()
    blocks: tuple[str, ...] = ()
    threads: int | None = None
    graph_optimization: str = defaults.GRAPH_OPTIMIZATION
    nlc_directions: int | str = NLC_DIRECTIONS
    intervals: str = defaults.INTERVALS
    batch_axes: Mapping[str, int] = field(default_factory=dict)
    constants: Mapping = field(default_factory=dict)
    input_ranges: Mapping[str, tuple] = field(default_factory=dict)
    pad: float = defaults.PAD
    sample_rate: int = defaults.SAMPLE_RATE  # Hz an audio folder's files are resampled to
    tokenizer: str | object | None = None  # text data: a tokenizer.json path or a tokenizers.Tokenizer
    max_length: int | None = None  # text data: tokens per example (default: the model's, else 128)
    pack: bool = defaults.PACK  # text data: windows over all texts' tokens, no padding (onnxaff.data.text)
    mask: str = defaults.MASK  # the padding input [B, T]: "auto" one named attention_mask, "none" (onnxaff.graph.masks)
    protocol: str | None = defaults.PROTOCOL  # a named protocol (format.protocol.NAMED): sets the options it names

    def __post_init__(self):
        def put(name, value):
            object.__setattr__(self, name, value)

        for name, parse in TEXTUAL.items():  # the forms a person types ("x=3x48x192"), parsed once, here
            put(name, parse(getattr(self, name)))
        if self.metrics is not None:  # None: the declared defaults, resolved with the registry (Plan)
            metrics = (self.metrics,) if isinstance(self.metrics, str) else tuple(self.metrics)
            if not metrics or not all(isinstance(m, str) and m for m in metrics):
                raise ConfigError("metrics", f"{{option}} must name at least one metric, got {self.metrics!r}")
            put("metrics", metrics)
        for name, least, what in (("chunk_size", 2, "a whole number of at least 2"),
                                  ("batch_size", 1, "a positive whole number"), ("seed", -(2**63), "a whole number"),
                                  ("sample_rate", 1, "a positive whole number (Hz)")):
            put(name, _sized(name, getattr(self, name), least, what))
        for name, least, what in (("limit", 1, "a positive whole number"), ("max_length", 1, "a positive whole number"),
                                  ("chunk_workers", 0, "0 or a positive whole number"),
                                  ("threads", 1, "a positive whole number")):
            put(name, _whole(name, getattr(self, name), least, what, optional=True))
        if self.chunk_workers is not None and self.chunk_workers > MAX_WORKERS:
            raise ConfigError("chunk_workers", f"{{option}} {self.chunk_workers} is more scoring threads than can "
                              f"help (each holds chunks in memory); at most {MAX_WORKERS}")
        put("reduce", _reduction(self.reduce))
        _choice("reduce_in", self.reduce_in, ("graph", "numpy"), "reduce_in")
        _choice("graph_optimization", self.graph_optimization, tuple(GRAPH_OPTIMIZATIONS), "graph optimisation level")
        _choice("device", self.device, ("auto", "cpu", "cuda"), "device")
        _choice("intervals", self.intervals, INTERVALS, "interval method")
        _choice("layout", self.layout, ("auto", "channels_first", "channels_last"), "layout")
        if not isinstance(self.pack, bool):
            raise ConfigError("pack", f"{{option}} must be true or false, got {self.pack!r}")
        if not isinstance(self.progress, bool):
            raise ConfigError("progress", f"{{option}} must be true or false, got {self.progress!r}")
        put("input_shapes", _shapes(self.input_shapes))
        if isinstance(self.images, ImagePreprocess):
            put("images", self.images.options())
        if self.images is not None and not isinstance(self.images, Mapping):
            raise ConfigError("images", f"{{option}} must be an ImagePreprocess or a mapping of image options, got "
                              f"{self.images!r:.60}")
        if self.images is not None:
            ImagePreprocess.from_options(self.images)  # every key and value checked (the model's fit: when opened)
        put("images", None if self.images is None else dict(self.images))
        # Absolute: a checkpoint resumed or a part merged from another folder loads the same files.
        put("plugins", tuple(os.path.abspath(p) for p in _texts(self.plugins)))
        put("tokenizer", _tokenizer(self.tokenizer))
        put("pairs", _pairs(self.pairs))
        put("blocks", tuple(self.blocks))
        put("shard", parse_shard(self.shard))
        put("nlc_directions", parse_directions(self.nlc_directions))
        for name, value in check_feeding(self.batch_axes, self.constants, self.input_ranges, self.pad).items():
            put(name, value)
        if not isinstance(self.mask, str) or not self.mask:
            raise ConfigError("mask", f"{{option}} must name a model input, auto or none, got {self.mask!r}")
        for name, value in _protocol(self.protocol, self.plugins, vars(self)).items():
            put(name, value)

    @classmethod
    def of(cls, config: AnalysisConfig | None = None, **options) -> AnalysisConfig:
        """`config` with `options` replacing its fields (or a new config from the options alone)."""
        if config is None:
            return cls(**options)
        return dataclasses.replace(config, **options) if options else config

    def replace(self, **options) -> AnalysisConfig:
        return dataclasses.replace(self, **options)

    def signature_options(self, batch_size: int, metrics: list[str], audio: bool = False) -> dict:
        """The `options` a signature records (and a checkpoint key compares); `batch_size` is the one used,
        `metrics` the names asked for (the declared defaults where the config gives none); `audio`: the data is
        an audio folder, which `sample_rate` changes."""
        options = {
            "metrics": list(metrics), "chunk_size": self.chunk_size, "batch_size": batch_size,
            "limit": self.limit, "reduce": self.reduce, "reduce_in": self.reduce_in, "device": self.device,
            "layout": self.layout, "seed": self.seed,
            "input_shapes": {k: list(v) for k, v in self.input_shapes.items()},
            "pairs": [list(p) for p in self.pairs], "blocks": list(self.blocks),
            "plugins": [str(Path(p)) for p in self.plugins], "partial_chunk_rule": PARTIAL_CHUNK_RULE,
            "std": STD_RULE,
        }
        if self.nlc_directions != NLC_DIRECTIONS:  # recorded only when asked for: default runs' options unchanged
            options["nlc_directions"] = self.nlc_directions
        if self.intervals != "auto":  # changes the ci95 bounds only; recorded as nlc_directions is
            options["intervals"] = self.intervals
        # Per-input feeding, recorded where given (constants: in the data's description, with their values)
        if self.batch_axes:
            options["batch_axes"] = dict(self.batch_axes)
        if self.input_ranges:
            options["input_ranges"] = {k: list(v) for k, v in self.input_ranges.items()}
        if self.pad:
            options["pad"] = self.pad
        if audio:  # other data does not depend on it: their options unchanged
            options["sample_rate"] = self.sample_rate
        if self.tokenizer is not None:  # text data (its file's sha256: the data's description)
            options["tokenizer"] = self.tokenizer if isinstance(self.tokenizer, str) else "(a tokenizers.Tokenizer)"
        if self.max_length is not None:
            options["max_length"] = self.max_length
        if self.pack:
            options["pack"] = True
        return options


def _protocol(protocol: str | None, plugins: tuple[str, ...], fields: Mapping) -> dict:
    """The options a named protocol sets: an option left at its default takes the protocol's value; one given
    otherwise (in `fields`, the config's) is a contradiction, refused in one line. Its metrics: those declaring it
    (Metric.protocols)."""
    if protocol is None:
        return {}
    from onnxaff.format.protocol import NAMED
    from onnxaff.metrics import registry

    sets = NAMED.get(protocol) if isinstance(protocol, str) else None
    if sets is None:
        raise ConfigError("protocol", f"unknown protocol {protocol!r} for {{option}}; choose one of {', '.join(NAMED)}")
    metrics = tuple(sorted(n for n, r in registry(plugins).items() if protocol in r.cls.protocols))
    out = {}
    for name, value in {**sets, "metrics": metrics}.items():
        if fields[name] not in (default(name), value):
            raise contradiction(name, fields[name], protocol, value)
        out[name] = value
    return out


def refuse_given_against(protocol: str | None, given: Mapping) -> None:
    """Options said in so many words (`given`: keywords passed, flags typed) against the named `protocol` are
    refused even where their value is the default (`protocol="paper", chunk_size="4d"`), which the config's own
    rule cannot tell from an option left alone."""
    from onnxaff.format.protocol import NAMED

    sets = NAMED.get(protocol, {}) if isinstance(protocol, str) else {}
    for name in sorted(set(given) & set(sets)):
        if str(given[name]) != str(sets[name]):
            raise contradiction(name, given[name], protocol, sets[name])


def contradiction(name: str, given, protocol: str, sets) -> ConfigError:
    """The one-line refusal of an option given against a named protocol (here, and on the command line, which
    also knows a value typed equal to the default)."""
    was, want = (",".join(v) if name == "metrics" else str(v) for v in (given, sets))
    return ConfigError(name, f"{option(name, was)} contradicts {option('protocol', protocol)}, "
                       f"which sets {option(name, want)}: give one or the other")


def default(name: str):
    """The default of AnalysisConfig's field `name`: the one declaration of it, which the CLI's flags and the
    demo read instead of restating it."""
    f = next(f for f in dataclasses.fields(AnalysisConfig) if f.name == name)
    return f.default_factory() if f.default is dataclasses.MISSING else f.default


def _texts(value) -> tuple[str, ...]:
    """One text or a list of texts (a lone string is one item, not its characters)."""
    return (str(value),) if isinstance(value, str | Path) else tuple(str(v) for v in value or ())


def _tokenizer(value):
    """A path (absolute: a resumed run or a merged part reads the same file) or a tokenizers.Tokenizer."""
    if value is None or hasattr(value, "encode_batch"):
        return value
    if isinstance(value, str | os.PathLike) and str(value):
        return os.path.abspath(value)
    raise ConfigError("tokenizer", f"{{option}} must be a tokenizer.json path or a tokenizers.Tokenizer, "
                      f"got {value!r:.60}")


def _shapes(shapes) -> dict[str, tuple[int, ...]]:
    out = {}
    for name, dims in dict(shapes or {}).items():
        dims = tuple(dims) if isinstance(dims, tuple | list) else ()
        if not isinstance(name, str) or not dims or any(isinstance(d, bool) or not isinstance(d, int) or d <= 0
                                                         for d in dims):
            raise ConfigError("input_shapes", f"{{option}} {name!r}: expected positive dims after the batch axis")
        out[name] = dims
    return out


def _pairs(pairs) -> tuple[tuple[str, str], ...]:
    out = []
    for p in pairs:
        p = tuple(p) if isinstance(p, tuple | list) else ()
        if len(p) != 2 or not all(isinstance(t, str) and t for t in p):
            raise ConfigError("pairs", "{option} items must be (IN, OUT) tensor names")
        out.append(p)
    return tuple(out)

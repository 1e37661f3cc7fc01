"""The steps a run is planned in, one loader each (Polygraphy's loaders: small callables that build one thing and
never run it). A loader takes values or other loaders, builds when it is first called and keeps what it built,
so each step is tested alone (`ListSites(loaded, config)`) and `onnxaff.analysis.plan.Plan` is their composition.

Only `FirstBatch` reads data: the run's first usable batch, drawn once and only when asked, for what the graph
cannot say (a rank static shape inference missed; a symbolic height the MACs are counted on). Building the plan
reads none; the run asks at its start (`Plan.check`, the feeder), before its own first batch.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
import onnx

from onnxaff.analysis.budget import check_batches, check_sites, example_shapes, slow_chunk_warnings
from onnxaff.analysis.config import AnalysisConfig
from onnxaff.analysis.records import Stage
from onnxaff.analysis.sitelist import SiteList, list_sites, resolve_unknown_ranks
from onnxaff.collection.chunks import ROWS_FLOOR, width_multiple
from onnxaff.data import examples_in, fixed_batch_of, model_inputs, no_usable, open_source
from onnxaff.errors import ConfigError, OnnxaffError, option
from onnxaff.foundations.files import absolute
from onnxaff.graph import augment_model, load_model
from onnxaff.graph.batch import batch_axis, batch_symbols
from onnxaff.graph.blocks import stage_tracks
from onnxaff.graph.complexity import model_stats
from onnxaff.graph.inputs import input_hints
from onnxaff.graph.load import LoadedModel, from_proto, sha256_of, weight_files
from onnxaff.graph.masks import mask_input, site_masks
from onnxaff.graph.pairs import tensor_probe
from onnxaff.graph.reduction import graph_mode, sample_layout, sampled
from onnxaff.graph.rewrite import shape_probe
from onnxaff.graph.sites import Site
from onnxaff.metrics import Metric, Registered, default_metrics, registry, resolve, stage_metrics
from onnxaff.metrics.dispatch import serving
from onnxaff.metrics.loader import code_fingerprints
from onnxaff.runtime.sessions import Runner


class Loader:
    """Builds its one thing when first called and keeps it (a build that raised is tried again when asked)."""

    def __call__(self):
        if not self.built:
            self._value = self.build()
        return self._value

    @property
    def built(self) -> bool:
        return "_value" in vars(self)

    def build(self):
        raise NotImplementedError


def given(x):
    """What a loader builds, or a value as it is: a loader accepts either."""
    return x() if isinstance(x, Loader) else x


class LoadModel(Loader):
    """The model loaded once (graph/load.py: external data stays on disk; deployed forms expanded)."""

    def __init__(self, model):
        self.model = model

    def build(self) -> LoadedModel:
        return from_proto(self.model) if isinstance(self.model, onnx.ModelProto) else load_model(self.model)


class ModelInputs(Loader):
    """The inputs a batch feeds, each with its batch axis; a model computing from constants only is refused."""

    def __init__(self, loaded, config: AnalysisConfig):
        self.loaded, self.config = loaded, config

    def build(self) -> list:
        inputs = model_inputs(given(self.loaded).model, self.config.batch_axes)
        if not inputs:  # every value is a constant (so no site either): no batch to feed, nothing a data set changes
            raise OnnxaffError("the model has no inputs (its graph computes from constants only): nothing to analyse")
        return inputs


class ListSites(Loader):
    """The sites as `onnxaff sites` lists them (sitelist.list_sites), with pairs, blocks and residual stages; their
    shapes as static inference gives them (SettleSites fills in a rank it missed)."""

    def __init__(self, loaded, config: AnalysisConfig):
        self.loaded, self.config = loaded, config

    def build(self) -> SiteList:
        c = self.config
        listed = list_sites(given(self.loaded), c.layout, list(c.pairs), list(c.blocks), batch_axes=dict(c.batch_axes))
        if not listed.sites:
            raise OnnxaffError("the model has no non-linearity to analyse (no activation node or pattern found; "
                               f"{option('pairs', 'IN:OUT')} scores any two tensors)")
        return listed


@dataclass(frozen=True)
class Metrics:
    """The metrics resolved: `sites`' score the sites, `stages`' the residual stages; `asked` as the metrics name
    themselves (canonical specs); `fingerprints` {name: sha256 of its code} of each used (the run's key)."""

    registry: dict[str, Registered]
    sites: list[Metric]
    stages: list[Metric]
    asked: list[str]
    fingerprints: dict


class ResolveMetrics(Loader):
    """The metrics asked for (or the declared defaults), checked against the registry and the chunk size; residual
    stages get the trajectory metrics unasked. `sites`: the SiteList (whether it has residual stages)."""

    def __init__(self, config: AnalysisConfig, sites):
        self.config, self.sites = config, sites

    def build(self) -> Metrics:
        config = self.config
        available = registry(config.plugins)
        asked = resolve(default_metrics(available) if config.metrics is None else list(config.metrics),
                        available=available)
        metrics = [m for m in asked if not serving(m).stage]
        track = [m for m in asked if serving(m).stage]
        if given(self.sites).stages and not track:
            track = resolve(stage_metrics(available), available=available)
        for m in metrics + track:  # a chunk it cannot score at all: say so before the data pass
            if (ROWS_FLOOR if width_multiple(config.chunk_size) else config.chunk_size) < m.min_rows:
                raise ConfigError("chunk_size", f"{{option}} {config.chunk_size}: metric {m.spec} needs chunks of at "
                                  f"least {m.min_rows} rows")
        return Metrics(available, metrics, track, [m.spec for m in asked],
                       code_fingerprints(metrics + track, available))


class OpenSource(Loader):
    """The data source opened (data/registry.py: the kind that parses the spec), model-shaped; nothing read."""

    def __init__(self, data, config: AnalysisConfig, inputs, loaded):
        self.data, self.config, self.inputs, self.loaded = data, config, inputs, loaded

    def build(self):
        c = self.config
        return open_source(self.data, given(self.inputs), limit=c.limit, seed=c.seed, shapes=c.input_shapes,
                           images=c.images, sample_rate=c.sample_rate, tokenizer=c.tokenizer,
                           max_length=c.max_length, pack=c.pack, constants=c.constants,
                           input_ranges=c.input_ranges, pad=c.pad, hints=input_hints(given(self.loaded).view))


def described(data, source) -> str:
    """The data as a signature names them: the spec, or the source's own name for data given in Python."""
    return data if isinstance(data, str) else source.describe()["source"]


def batch_size(inputs, config: AnalysisConfig) -> int:
    """The batch the run draws: the model's fixed one, else the configured one."""
    return fixed_batch_of(inputs) or config.batch_size


class FirstBatch(Loader):
    """The run's first usable batch (from the data's start, as every run numbers them), None where no batch is
    usable: the one loader that reads data, drawn once for whatever asks (SettleSites, ModelInfo)."""

    def __init__(self, data, source, inputs, config: AnalysisConfig):
        self.data, self.source, self.inputs, self.config = data, source, inputs, config

    def build(self) -> dict | None:
        source, inputs = given(self.source), given(self.inputs)
        return next((b for b in source.batches(batch_size(inputs, self.config)) if examples_in(b, inputs)), None)

    def required(self) -> dict:
        """The batch, or the run's one-line refusal when every example is unusable."""
        if (batch := self()) is None:
            source = given(self.source)
            raise no_usable(described(self.data, source), source)
        return batch


@dataclass(frozen=True)
class Settled:
    """The sites listed, ranks resolved (`listed.sites`, in place), and those that can be analysed."""

    listed: SiteList
    ok: list[Site]


class SettleSites(Loader):
    """Every site with its rank: one static inference missed comes from the first batch (read only then); a model
    none of whose sites can be analysed is refused. `first`: a FirstBatch."""

    def __init__(self, loaded, sites, first: FirstBatch, config: AnalysisConfig):
        self.loaded, self.sites, self.first, self.config = loaded, sites, first, config

    def build(self) -> Settled:
        listed = given(self.sites)
        if any(s.unknown_rank for s in listed.sites):
            resolve_unknown_ranks(given(self.loaded), listed.sites, self.first.required(), self.config.layout)
        ok = [s for s in listed.sites if s.ok]
        if not ok:
            raise OnnxaffError("no site can be analysed: " + "; ".join(sorted({s.reason for s in listed.sites})))
        return Settled(listed, ok)


class Stages(Loader):
    """Residual stages with a probe site per track tensor (h⁰ … h^L), numbered after the listed sites."""

    def __init__(self, loaded, sites, config: AnalysisConfig):
        self.loaded, self.sites, self.config = loaded, sites, config

    def build(self) -> list[Stage]:
        view, listed = given(self.loaded).view, given(self.sites)
        entries, index = [], len(listed.sites)
        for k, stage in enumerate(listed.stages):
            tensors = stage_tracks(stage)
            probes = [tensor_probe(view, t, self.config.layout, index + j) for j, t in enumerate(tensors)]
            index += len(tensors)
            bad = next((p for p in probes if not p.ok), None)
            entries.append(Stage(index=k, id=f"stage:{stage[0].id}..{stage[-1].id}", blocks=[b.id for b in stage],
                                 tensors=tensors, status="ok" if bad is None else "skipped",
                                 reason="" if bad is None else f"{bad.input}: {bad.reason}", probes=probes))
        return entries


def stage_probes(stages: list[Stage]) -> list[list[Site]]:
    """The probe sites of each stage that can be analysed."""
    return [stage.probes for stage in stages if stage.ok]


class Budget(Loader):
    """Refuses a run that cannot be held (a batch before any is drawn, then the sites' chunk buffers); builds the
    warnings of a metric slow a chunk, to be read before the run starts."""

    def __init__(self, source, inputs, settled, stages, metrics, config: AnalysisConfig):
        self.source, self.inputs, self.settled, self.stages = source, inputs, settled, stages
        self.metrics, self.config = metrics, config

    def build(self) -> tuple[str, ...]:
        config, source, inputs = self.config, given(self.source), given(self.inputs)
        check_batches(source, inputs, batch_size(inputs, config))  # before a batch is drawn (an unknown rank's)
        ok, probes, m = given(self.settled).ok, stage_probes(given(self.stages)), given(self.metrics)
        examples = max(1, len(source) // (config.shard[1] if config.shard else 1))
        check_sites(ok, probes, m.sites, config, examples)
        return tuple(slow_chunk_warnings(ok, m.sites, m.stages if probes else [], probes, config, examples))


def needs_jvp(metrics: list[Metric]) -> bool:
    return any(serving(m).end_input == "jvp" for m in metrics)


@dataclass(frozen=True)
class Feeds:
    """The augmented model and which of its outputs a batch fetches: `slices[k]` are ok site k's (x, y, jvp...),
    `stage_slices[k]` stage k's track tensors, `stage_probes[k]` its probe sites."""

    augmented: onnx.ModelProto
    outputs: dict
    names: tuple[str, ...]
    slices: tuple[slice, ...]
    stage_slices: tuple[slice, ...]
    stage_probes: tuple[list[Site], ...]


class Augment(Loader):
    """The augmented model (graph/rewrite.py): each ok site's X and Y, and each stage's tracks, as outputs. Under
    reduce="sample:K" the sites that can draw their positions in the graph do (`host()`: the model in which every
    site's are drawn on the host, what a batch whose shapes are not the probe's goes through)."""

    def __init__(self, loaded, settled, stages, metrics, config: AnalysisConfig, first=None, inputs=None):
        self.loaded, self.settled, self.stages, self.metrics, self.config = loaded, settled, stages, metrics, config
        self.first, self.inputs = first, inputs

    def build(self, draw: bool = True) -> Feeds:
        loaded, ok, stages, config = given(self.loaded), given(self.settled).ok, given(self.stages), self.config
        masks = site_masks(loaded.view, ok, mask_input(config.mask, loaded.view), loaded.base_dir)
        probes = [t for p in stage_probes(stages) for t in p]
        k = sampled(config.reduce) if draw and config.reduce_in != "numpy" else None
        # sample:K: the sites' positions drawn in the graph where it can (the stages' tracks keep the host's draw)
        drawn = {s.index for s in ok if s.index not in masks} - {t.index for t in probes} if k else set()
        augmented, outputs = augment_model(loaded.model, ok + probes, graph_mode(config.reduce),
                                           raw=config.reduce_in == "numpy", jvp=needs_jvp(given(self.metrics).sites),
                                           view=loaded.view, masks=masks, sample=k, sample_sites=drawn,
                                           sample_shapes=self._probed([s for s in ok if s.index in drawn]))
        names, slices, stage_slices = [], [], []
        for s in ok:
            own = outputs[s.index].names
            slices.append(slice(len(names), len(names) + len(own)))
            names += own
        for probes in stage_probes(stages):  # a residual stage: its tracks' features side by side as X (h⁰ … h^L)
            own = [outputs[t.index].x for t in probes]
            stage_slices.append(slice(len(names), len(names) + len(own)))
            names += own
        return Feeds(augmented, outputs, tuple(names), tuple(slices), tuple(stage_slices),
                     tuple(stage_probes(stages)))

    def host(self) -> Feeds:
        """The model whose sites all export their positions (sample:K drawn on the host), built once when asked."""
        if "_host" not in vars(self):
            self._host = self.build(draw=False) if any(o.sample for o in self().outputs.values()) else self()
        return self._host

    def _probed(self, sites: list[Site]) -> dict[int, tuple[list, list]]:
        """X's and Y's shapes on one example of the first batch, for the sites whose static shapes leave P symbolic
        (a model whose inputs fix every dim but the batch can still hide them from shape inference: a padding
        computed from a Shape). Every batch's shapes are checked against them (`BatchRunner._drawn_hold`)."""
        pending = [s for s in sites if s.rank is not None and s.rank >= 3 and not batch_axis(s) and s.scope is None
                   and (sample_layout(s.side("x")) is None or sample_layout(s.side("y")) is None)]
        if not pending or self.first is None or (batch := given(self.first)) is None:
            return {}
        inputs = given(self.inputs) if self.inputs is not None else []
        if fixed_batch_of(inputs) is None:  # one example is enough to read the shapes after the batch axis
            axes = {i.name: i.batch_axis for i in inputs}
            batch = {k: v if axes.get(k) is None else np.take(v, [0], axis=axes[k]) for k, v in batch.items()}
        loaded = given(self.loaded)
        model, names = shape_probe(loaded.model, [t for s in pending for t in (s.input, s.output)])
        try:
            arrays = Runner(loaded, model, device="cpu").run(names, batch)
        except OnnxaffError:  # the host's draw for them, as before
            return {}
        return {s.index: ([int(d) for d in arrays[2 * k]], [int(d) for d in arrays[2 * k + 1]])
                for k, s in enumerate(pending)}


class ModelInfo(Loader):
    """The signature's `model`: identity (the file's and its weights' sha256), inputs, site counts and the stats
    (parameters, MACs on the shapes the run feeds: the source's own, else the first batch's)."""

    def __init__(self, loaded, settled, inputs, source, first: FirstBatch):
        self.loaded, self.settled, self.inputs, self.source, self.first = loaded, settled, inputs, source, first

    def build(self) -> dict:
        loaded, listed, inputs = given(self.loaded), given(self.settled).listed, given(self.inputs)
        stats = model_stats(loaded.model, listed.activations, loaded.view,
                            batch=batch_symbols(loaded.view, {s.name: s.batch_axis for s in inputs}),
                            fed=lambda: fed_shapes(given(self.source), inputs, self.first))
        info = {**_identity(loaded, listed.activations), "stats": stats}
        if listed.extra:
            info["extra_sites"] = {g: sum(s.group == g for s in listed.extra) for g in ("pair", "block")}
        return info


def fed_shapes(source, inputs, first) -> dict[str, list[int]] | None:
    """One example's shape per input as the run feeds it, its batch axis 1 (what the MACs are counted on): the
    source's own, else the first batch's (`first`: a FirstBatch; an image folder's come from decoding); None
    where no batch is usable."""
    shapes = example_shapes(source, inputs)
    if all(isinstance(d, int) and d > 0 for shape in shapes.values() for d in shape):
        return {s.name: list(shapes[s.name]) if s.batch_axis is None else
                [*shapes[s.name][:s.batch_axis], 1, *shapes[s.name][s.batch_axis:]] for s in inputs}
    if (batch := given(first)) is None:
        return None
    return {s.name: [1 if k == s.batch_axis else d for k, d in enumerate(batch[s.name].shape)]
            for s in inputs if s.name in batch}


def _identity(loaded: LoadedModel, sites: list[Site]) -> dict:
    m = loaded.model
    if loaded.path is not None:
        digest, path, name = sha256_of(loaded.path), str(absolute(loaded.path)), loaded.path.stem
        # The .onnx of an external-data model holds no weights: each weight file is identified too, so a
        # signature names the network it measured and a checkpoint refuses swapped weights.
        external = weight_files(loaded.path.parent, loaded.external_locations)
    else:
        digest, path, name = hashlib.sha256(m.SerializeToString()).hexdigest(), None, m.graph.name or "model"
        external = []
    info = {
        "name": name, "path": path, "sha256": digest, "producer": m.producer_name,
        "producer_version": m.producer_version, "opset": loaded.opset, "ir_version": m.ir_version,
        "inputs": [i.describe() for i in model_inputs(m)], "nodes": len(m.graph.node),
        "sites": len(sites), "sites_ok": sum(s.ok for s in sites),
    }
    if external:
        info["external_data"] = external
    return info

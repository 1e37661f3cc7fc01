"""The Plan of a run: everything a run is prepared from, as loaders (Polygraphy's, as against its runners).

The loaded model and its sites, the residual stages, the metrics resolved, the data source opened, the
augmented model and which of its outputs feed which site: each a loader of `onnxaff.analysis.loaders`, built
when first read. Building a Plan reads no data; `onnxaff.analysis.lifecycle` checks (`Plan.check`) and executes it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

from onnxaff.analysis.config import AnalysisConfig
from onnxaff.analysis.loaders import (
    Augment,
    Budget,
    FirstBatch,
    ListSites,
    LoadModel,
    ModelInfo,
    ModelInputs,
    OpenSource,
    ResolveMetrics,
    SettleSites,
    Stages,
    batch_size,
    described,
    needs_jvp,
    stage_probes,
)
from onnxaff.analysis.records import SiteRecord, StageRecord
from onnxaff.collection.chunks import site_chunk_rows
from onnxaff.data import fixed_batch_of
from onnxaff.graph.masks import mask_input
from onnxaff.graph.neighbourhood import site_neighbourhood
from onnxaff.graph.reduction import feature_dim, graph_mode


def shard_window(total: int, shard: tuple[int, int] | None, unit: int) -> tuple[int, int]:
    """[start, stop) of shard i of n: whole units of `unit` examples, the last shard also takes the tail."""
    if shard is None:
        return 0, total
    i, n = shard
    units = total // unit
    start = (i * units // n) * unit
    stop = total if i == n - 1 else ((i + 1) * units // n) * unit
    return start, stop


class Plan:
    """A prepared run: the loaders of `onnxaff.analysis.loaders` composed. Building it reads nothing; each part is
    built when first read and kept (the plan is not changed after; its data source keeps a read position).
    `names` are the augmented model's outputs a batch fetches; `slices[k]` are ok site k's (x, y, jvp...),
    `stage_slices[k]` stage k's track tensors; the window [start, stop) is the shard's."""

    def __init__(self, model, data: str | list[str], config: AnalysisConfig):
        self.config, self.loaders = config, Loaders.of(model, data, config)

    @classmethod
    def build(cls, model, data: str | list[str], config: AnalysisConfig) -> Plan:
        """The plan of a run of `model` on `data`: nothing built yet, no data read."""
        return cls(model, data, config)

    def check(self) -> Plan:
        """Build what refuses a run before its first batch, in the order a person fixes them: the model, its inputs,
        its sites, the metrics, the batch the inputs fix, the data source, what memory holds (a site whose rank
        static inference missed reads the first batch here: the run's start)."""
        ld = self.loaders
        for step in (ld.load, ld.inputs, ld.sites, ld.metrics, lambda: self.fixed_batch, ld.source, ld.budget):
            step()
        return self

    loaded = property(lambda self: self.loaders.load())
    inputs = property(lambda self: self.loaders.inputs())
    sites = property(lambda self: self.loaders.settled().listed.sites)
    ok_sites = property(lambda self: self.loaders.settled().ok)
    stages = property(lambda self: self.loaders.stages())
    registry = property(lambda self: self.loaders.metrics().registry)
    metrics = property(lambda self: self.loaders.metrics().sites)
    track_metrics = property(lambda self: self.loaders.metrics().stages)
    fingerprints = property(lambda self: self.loaders.metrics().fingerprints)
    source = property(lambda self: self.loaders.source())
    host_feeds = property(lambda self: self.loaders.feeds.host())  # every site's sample:K drawn on the host
    augmented = property(lambda self: self.loaders.feeds().augmented)
    outputs = property(lambda self: self.loaders.feeds().outputs)
    names = property(lambda self: self.loaders.feeds().names)
    slices = property(lambda self: self.loaders.feeds().slices)
    stage_slices = property(lambda self: self.loaders.feeds().stage_slices)
    stage_probes = property(lambda self: self.loaders.feeds().stage_probes)
    model_info = property(lambda self: self.loaders.model_info())
    slow_chunks = property(lambda self: self.loaders.budget())  # (also in `warnings`) read before the run starts
    start = property(lambda self: self.window[0])
    stop = property(lambda self: self.window[1])

    @cached_property
    def data(self) -> str:
        return described(self.loaders.data, self.source)

    @cached_property
    def fixed_batch(self) -> int | None:
        return fixed_batch_of(self.inputs)

    @cached_property
    def batch_size(self) -> int:
        return batch_size(self.inputs, self.config)

    @cached_property
    def warnings(self) -> tuple[str, ...]:
        """What was expanded, links an image walk met, a batch the model fixes, metrics slow a chunk."""
        fixed = ([f"the model's batch size is fixed at {self.batch_size}: batches of {self.batch_size}"]
                 if self.batch_size != self.config.batch_size else [])
        return (*self.loaded.notes, *self.source.warnings, *fixed, *self.slow_chunks)

    @cached_property
    def unit(self) -> int:
        """Shard boundaries and pooled blocks: whole batches and whole chunks of every site."""
        return math.lcm(self.batch_size, *chunk_sizes(self.ok_sites, stage_probes(self.stages), self.config))

    @cached_property
    def window(self) -> tuple[int, int]:
        return shard_window(len(self.source), self.config.shard, self.unit)

    @cached_property
    def options(self) -> dict:
        """The signature's options; `mask`, the padding input used, only where one is or another was asked for (a
        model without one is recorded as before)."""
        config = self.config
        options = config.signature_options(self.batch_size, self.loaders.metrics().asked,
                                           audio=self.data.startswith("audio:"))
        padding = mask_input(config.mask, self.loaded.view)
        if padding is not None or config.mask != "auto":
            options["mask"] = padding or "none"
        return options

    @property
    def needs_jvp(self) -> bool:
        return needs_jvp(self.metrics)

    def site_records(self) -> list[SiteRecord]:
        """The sites as a signature records them, each with where it sits in the graph (the nodes before and
        after it: onnxaff.graph.neighbourhood, for the report's drawing)."""
        view = self.loaded.view
        return [SiteRecord(s, site_neighbourhood(view, s)) for s in self.sites]

    def stage_records(self) -> list[StageRecord]:
        """The residual stages as a signature records them (without their probe sites)."""
        return [st.record() for st in self.stages]

    @property
    def host_reduce(self) -> str | None:
        """The reduction done in numpy (reduce_in="numpy": the naive baseline), None when the graph does it."""
        return graph_mode(self.config.reduce) if self.config.reduce_in == "numpy" else None


@dataclass(frozen=True)
class Loaders:
    """A plan's loaders, each given the ones it builds from: only `first` reads data."""

    data: str | list
    load: LoadModel
    inputs: ModelInputs
    sites: ListSites
    metrics: ResolveMetrics
    source: OpenSource
    first: FirstBatch
    settled: SettleSites
    stages: Stages
    budget: Budget
    feeds: Augment
    model_info: ModelInfo

    @classmethod
    def of(cls, model, data, config: AnalysisConfig) -> Loaders:
        load = LoadModel(model)
        inputs, sites = ModelInputs(load, config), ListSites(load, config)
        metrics, source = ResolveMetrics(config, sites), OpenSource(data, config, inputs, load)
        first = FirstBatch(data, source, inputs, config)
        settled, stages = SettleSites(load, sites, first, config), Stages(load, sites, config)
        return cls(data, load, inputs, sites, metrics, source, first, settled, stages,
                   Budget(source, inputs, settled, stages, metrics, config),
                   Augment(load, settled, stages, metrics, config, first, inputs),
                   ModelInfo(load, settled, inputs, source, first))


def chunk_sizes(sites, stage_probes, config: AnalysisConfig) -> list[int]:
    """Each site's rows per chunk, then each stage's (collection.chunks.site_chunk_rows; 1 where D is symbolic)."""
    mode = graph_mode(config.reduce)
    dims = [(feature_dim(s, mode), feature_dim(s.side("y"), mode)) for s in sites]
    for probes in stage_probes:
        dims.append((sum(d) if None not in (d := [feature_dim(p, mode) for p in probes]) else None,))
    return [site_chunk_rows(config.chunk_size, d) or 1 for d in dims]

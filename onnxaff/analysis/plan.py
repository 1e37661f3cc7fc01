"""The Plan of a run: everything built once before any batch (Polygraphy's loaders, as against its runners).

The loaded model and its sites, the residual stages, the metrics resolved, the data source opened, the
augmented model and which of its outputs feed which site. A Plan is read only; `onnxaff.analysis.lifecycle` executes it.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

import onnx

from onnxaff.analysis.budget import check_batches, check_sites, fed_shapes, slow_chunk_warnings
from onnxaff.analysis.config import AnalysisConfig
from onnxaff.analysis.records import SiteRecord, Stage, StageRecord
from onnxaff.chunks import ROWS_FLOOR, site_chunk_rows, width_multiple
from onnxaff.data import examples_in, fixed_batch_of, model_inputs, no_usable, open_source
from onnxaff.errors import ConfigError, OnnxaffError, option
from onnxaff.files import absolute
from onnxaff.graph import augment_model, load_model
from onnxaff.graph.batch import batch_symbols
from onnxaff.graph.blocks import stage_tracks
from onnxaff.graph.complexity import model_stats
from onnxaff.graph.inputs import input_hints
from onnxaff.graph.load import LoadedModel, from_proto, sha256_of, weight_files
from onnxaff.graph.masks import mask_input, site_masks
from onnxaff.graph.neighbourhood import site_neighbourhood
from onnxaff.graph.pairs import tensor_probe
from onnxaff.graph.reduction import feature_dim, graph_mode
from onnxaff.graph.sites import Site
from onnxaff.graph.view import GraphView
from onnxaff.metrics import Metric, Registered, default_metrics, registry, resolve, stage_metrics
from onnxaff.metrics.dispatch import serving
from onnxaff.metrics.loader import code_fingerprints
from onnxaff.sitelist import list_sites, resolve_unknown_ranks


def shard_window(total: int, shard: tuple[int, int] | None, unit: int) -> tuple[int, int]:
    """[start, stop) of shard i of n: whole units of `unit` examples, the last shard also takes the tail."""
    if shard is None:
        return 0, total
    i, n = shard
    units = total // unit
    start = (i * units // n) * unit
    stop = total if i == n - 1 else ((i + 1) * units // n) * unit
    return start, stop


@dataclass(frozen=True)
class Plan:
    """A prepared run. `names` are the augmented model's outputs a batch fetches; `slices[k]` are site k's
    (x, y, jvp...), `stage_slices[k]` stage k's track tensors; the window [start, stop) is the shard's."""

    config: AnalysisConfig
    data: str
    loaded: LoadedModel
    sites: list[Site]
    ok_sites: list[Site]
    stages: list[Stage]
    registry: dict[str, Registered]
    metrics: list[Metric]
    track_metrics: list[Metric]
    inputs: list
    source: object
    batch_size: int
    fixed_batch: int | None
    warnings: tuple[str, ...]
    augmented: onnx.ModelProto
    outputs: dict
    names: tuple[str, ...]
    slices: tuple[slice, ...]
    stage_slices: tuple[slice, ...]
    stage_probes: tuple[list[Site], ...]
    unit: int
    start: int
    stop: int
    options: dict
    model_info: dict
    fingerprints: dict  # {metric name: sha256 of its code} of every metric used, as loaded (the run's key)
    slow_chunks: tuple[str, ...] = ()  # warnings (also in `warnings`) a person should read before the run starts

    @property
    def needs_jvp(self) -> bool:
        return any(serving(m).end_input == "jvp" for m in self.metrics)

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

    @classmethod
    def build(cls, model, data: str | list[str], config: AnalysisConfig) -> Plan:
        loaded = from_proto(model) if isinstance(model, onnx.ModelProto) else load_model(model)
        inputs = model_inputs(loaded.model, config.batch_axes)
        if not inputs:  # every value is a constant (so no site either): no batch to feed, nothing a data set changes
            raise OnnxaffError("the model has no inputs (its graph computes from constants only): nothing to analyse")
        listed = list_sites(loaded, config.layout, list(config.pairs), list(config.blocks),  # as `onnxaff sites`
                            batch_axes=dict(config.batch_axes))
        sites = listed.sites
        if not sites:
            raise OnnxaffError("the model has no non-linearity to analyse (no activation node or pattern found; "
                               f"{option('pairs', 'IN:OUT')} scores any two tensors)")
        available = registry(config.plugins)
        asked = default_metrics(available) if config.metrics is None else list(config.metrics)
        metrics, track_metrics, asked = _resolve_metrics(asked, available, bool(listed.stages))
        for m in metrics + track_metrics:  # a chunk it cannot score at all: say so before the data pass
            if (ROWS_FLOOR if width_multiple(config.chunk_size) else config.chunk_size) < m.min_rows:
                raise ConfigError("chunk_size", f"{{option}} {config.chunk_size}: metric {m.spec} needs chunks of at "
                                  f"least {m.min_rows} rows")
        fingerprints = code_fingerprints(metrics + track_metrics, available)
        fixed_batch = fixed_batch_of(inputs)
        source = open_source(data, inputs, limit=config.limit, seed=config.seed, shapes=config.input_shapes,
                             images=config.images, sample_rate=config.sample_rate, tokenizer=config.tokenizer,
                             max_length=config.max_length, pack=config.pack, constants=config.constants,
                             input_ranges=config.input_ranges, pad=config.pad, hints=input_hints(loaded.view))
        data = data if isinstance(data, str) else source.describe()["source"]  # texts given in Python
        batch_size = fixed_batch or config.batch_size
        warnings = list(loaded.notes) + list(source.warnings)  # what was expanded; links an image walk met
        if batch_size != config.batch_size:
            warnings.append(f"the model's batch size is fixed at {batch_size}: batches of {batch_size}")
        check_batches(source, inputs, batch_size)  # before the first batch is drawn (an unknown rank's probe)
        if any(s.unknown_rank for s in sites):
            first = next((b for b in source.batches(batch_size) if examples_in(b, inputs)), None)
            if first is None:
                raise no_usable(data, source)
            resolve_unknown_ranks(loaded, sites, first, config.layout)
        ok_sites = [s for s in sites if s.ok]
        if not ok_sites:
            raise OnnxaffError("no site can be analysed: " + "; ".join(sorted({s.reason for s in sites})))
        stages = _stage_entries(loaded.view, listed.stages, config.layout, first_index=len(sites))
        track_sites = [t for stage in stages if stage.ok for t in stage.probes]
        probes = [stage.probes for stage in stages if stage.ok]
        examples = max(1, len(source) // (config.shard[1] if config.shard else 1))
        check_sites(ok_sites, probes, metrics, config, examples)
        slow = slow_chunk_warnings(ok_sites, metrics, track_metrics if probes else [], probes, config, examples)
        warnings += slow
        padding = mask_input(config.mask, loaded.view)
        masks = site_masks(loaded.view, ok_sites, padding, loaded.base_dir)
        augmented, outputs = augment_model(loaded.model, ok_sites + track_sites, graph_mode(config.reduce),
                                           raw=config.reduce_in == "numpy",
                                           jvp=any(serving(m).end_input == "jvp" for m in metrics),
                                           view=loaded.view, masks=masks)
        names, slices, stage_slices, stage_probes = _feeds(ok_sites, stages, outputs)
        unit = math.lcm(batch_size, *chunk_sizes(ok_sites, probes, config))  # shard boundaries, pooled blocks
        start, stop = shard_window(len(source), config.shard, unit)
        stats = model_stats(loaded.model, listed.activations, loaded.view,  # MACs on the shapes the run feeds
                            batch=batch_symbols(loaded.view, {s.name: s.batch_axis for s in inputs}),
                            fed=lambda: fed_shapes(source, inputs, batch_size))
        model_info = {**_model_info(loaded, listed.activations), "stats": stats}
        if listed.extra:
            model_info["extra_sites"] = {g: sum(s.group == g for s in listed.extra) for g in ("pair", "block")}
        return cls(config=config, data=data, loaded=loaded, sites=sites, ok_sites=ok_sites, stages=stages,
                   registry=available, metrics=metrics, track_metrics=track_metrics, inputs=inputs, source=source,
                   batch_size=batch_size, fixed_batch=fixed_batch, warnings=tuple(warnings), augmented=augmented,
                   outputs=outputs, names=names, slices=slices, stage_slices=stage_slices, stage_probes=stage_probes,
                   unit=unit, start=start, stop=stop,
                   options=_with_mask(config.signature_options(batch_size, asked, audio=data.startswith("audio:")),
                                      config, padding),
                   model_info=model_info, fingerprints=fingerprints, slow_chunks=tuple(slow))


def chunk_sizes(sites, stage_probes, config: AnalysisConfig) -> list[int]:
    """Each site's rows per chunk, then each stage's (onnxaff.chunks.site_chunk_rows; 1 where D is symbolic)."""
    mode = graph_mode(config.reduce)
    dims = [(feature_dim(s, mode), feature_dim(s.side("y"), mode)) for s in sites]
    for probes in stage_probes:
        dims.append((sum(d) if None not in (d := [feature_dim(p, mode) for p in probes]) else None,))
    return [site_chunk_rows(config.chunk_size, d) or 1 for d in dims]


def _with_mask(options: dict, config: AnalysisConfig, padding: str | None) -> dict:
    """The signature's options and `mask`, the padding input used, only where one is or another was asked for (a
    model without one is recorded as before)."""
    if padding is not None or config.mask != "auto":
        options["mask"] = padding or "none"
    return options


def _resolve_metrics(names, available: dict, has_stages: bool) -> tuple[list[Metric], list[Metric], list[str]]:
    """Site metrics, stage metrics, and the names asked for as the metrics name themselves (canonical specs)."""
    asked = resolve(list(names), available=available)
    metrics = [m for m in asked if not serving(m).stage]
    track_metrics = [m for m in asked if serving(m).stage]
    if has_stages and not track_metrics:  # residual stages get the trajectory metrics unasked
        track_metrics = resolve(stage_metrics(available), available=available)
    return metrics, track_metrics, [m.spec for m in asked]


def _feeds(ok_sites: list[Site], stages: list[dict], outputs: dict) -> tuple:
    """The output names a batch fetches, and which of them feed each site and each residual stage."""
    names, slices, stage_slices, stage_probes = [], [], [], []
    for s in ok_sites:
        own = outputs[s.index].names
        slices.append(slice(len(names), len(names) + len(own)))
        names += own
    for stage in stages:  # a residual stage: its tracks' features side by side as X (h⁰ … h^L)
        if not stage.ok:
            continue
        stage_probes.append(stage.probes)
        own = [outputs[t.index].x for t in stage.probes]
        stage_slices.append(slice(len(names), len(names) + len(own)))
        names += own
    return tuple(names), tuple(slices), tuple(stage_slices), tuple(stage_probes)


def _stage_entries(view: GraphView, stages: list[list], layout: str, first_index: int) -> list[Stage]:
    """Residual stages with a probe site per track tensor (h⁰ … h^L), numbered after the real sites."""
    entries, index = [], first_index
    for k, stage in enumerate(stages):
        tensors = stage_tracks(stage)
        probes = []
        for t in tensors:
            probes.append(tensor_probe(view, t, layout, index))
            index += 1
        bad = next((p for p in probes if not p.ok), None)
        entries.append(Stage(index=k, id=f"stage:{stage[0].id}..{stage[-1].id}", blocks=[b.id for b in stage],
                             tensors=tensors, status="ok" if bad is None else "skipped",
                             reason="" if bad is None else f"{bad.input}: {bad.reason}", probes=probes))
    return entries


def _model_info(loaded: LoadedModel, sites: list[Site]) -> dict:
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

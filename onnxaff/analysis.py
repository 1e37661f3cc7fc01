"""The main job: data through the augmented model, per-site chunks and moments, metrics, signature.

Chunk rule: rows are cut into consecutive chunks of `chunk_size`; every full chunk is scored and a
site's score is the mean over its chunks (std with ddof=0, and the count). A trailing partial chunk
is dropped, so every score comes from equally sized samples, except when a site has no full chunk
at all: then the partial chunk (≥ 2 rows) is scored and the metric entry says `partial: true`.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import os
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx

from onnxaff import __version__
from onnxaff.collect import ChunkBuffer, JvpAccumulator, Moments
from onnxaff.data import model_inputs, open_source
from onnxaff.errors import OnnxaffError
from onnxaff.graph import augment_model, discover_sites, load_model
from onnxaff.graph.load import LoadedModel, from_proto, sha256_of
from onnxaff.graph.rewrite import REDUCTIONS, SiteOutputs, numpy_features
from onnxaff.graph.sites import Site, settle_shape
from onnxaff.graph.stats import model_stats
from onnxaff.graph.view import GraphView
from onnxaff.metrics import Chunk, JvpStats, Metric, registry, resolve
from onnxaff.network import NetworkNLC
from onnxaff.progress import Progress
from onnxaff.runtime import Runner, ort
from onnxaff.scoring import ChunkScorer, evaluate
from onnxaff.signature import Signature

DEFAULT_METRICS = ("affinity", "affinity_lw")
PARTIAL_CHUNK_RULE = "full chunks only; a site with no full chunk scores its one partial chunk (partial: true)"


@dataclass
class SiteState:
    """Everything collected for one site during a run."""

    site: Site
    outputs: SiteOutputs
    buffer: ChunkBuffer
    moments: Moments | None = None
    values: dict[str, list[float]] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    rows: int = 0
    nonfinite_rows: int = 0
    chunks: int = 0
    chunk_rows: int = 0
    dims: tuple[int, int] | None = None
    previous: Chunk | None = None  # for chunk_pair metrics
    jvp: JvpAccumulator | None = None
    pending: list[Future] = field(default_factory=list)  # chunk scores still being computed, in chunk order
    partial: bool = False  # the one partial chunk was scored (no full chunk)

    def output_names(self) -> list[str]:
        names = [self.outputs.x, self.outputs.y]
        if self.jvp is not None:
            names += list(self.outputs.jvp.names.values())
        return names

    def add_jvp(self, n: int, arrays: list[np.ndarray]) -> None:
        if self.jvp is None or self.nonfinite_rows:
            return
        stats = dict(zip(self.outputs.jvp.names, arrays, strict=True))
        if not all(np.isfinite(a).all() for a in stats.values()):
            self.nonfinite_rows = max(self.nonfinite_rows, 1)
            return
        self.jvp.add(n, stats)

    def add(self, x: np.ndarray, y: np.ndarray, metrics: list[Metric], scorer: ChunkScorer) -> None:
        if self.dims is None:
            self.dims = (x.shape[1], y.shape[1])
        if x.shape[0] != y.shape[0]:
            raise OnnxaffError(f"site {self.site.id}: X gives {x.shape[0]} rows and Y {y.shape[0]}")
        self.rows += x.shape[0]
        bad = ~(np.isfinite(x).all(axis=1) & np.isfinite(y).all(axis=1))
        if bad.any():
            self.nonfinite_rows += int(bad.sum())
        if self.nonfinite_rows:
            return  # a flagged site gets no number at all
        if any(m.needs == "moments" for m in metrics):  # d² float64 work per batch: only when a metric pools
            if self.moments is None:
                self.moments = Moments(*self.dims)
            self.moments.update(x, y)
        for cx, cy in self.buffer.add(x, y):
            self.score(cx, cy, metrics, scorer)

    def score(self, x: np.ndarray, y: np.ndarray, metrics: list[Metric], scorer: ChunkScorer) -> None:
        self.chunks += 1
        self.chunk_rows = x.shape[0]
        chunk = Chunk(np.asarray(x, np.float64), np.asarray(y, np.float64))
        jobs = []
        for m in metrics:
            if self._not_applicable(m):
                continue
            if m.needs == "chunk":
                jobs.append((m, chunk))
            elif m.needs == "chunk_pair" and self.previous is not None:
                jobs.append((m, (self.previous, chunk)))
        if jobs:
            self.pending.append(scorer.submit(jobs))
        if any(m.needs == "chunk_pair" for m in metrics):
            self.previous = chunk  # kept only when asked for: a chunk per site is real memory

    def collect(self) -> None:
        """Record the finished chunk scores in chunk order (the first error of a metric is kept)."""
        for future in self.pending:
            for name, value, error in future.result():
                self._store(name, value, error)
        self.pending = []

    def _not_applicable(self, m: Metric) -> str | None:
        if m.equal_dims and self.dims and self.dims[0] != self.dims[1]:
            return f"needs equal feature dimensions (X: {self.dims[0]}, Y: {self.dims[1]})"
        if m.needs == "jvp" and self.jvp is None:
            return "Jacobian-vector products need float32/float64 tensors and the site's own nodes"
        return None

    def _store(self, name: str, value: float | None, error: str | None) -> None:
        if error is not None:
            self.errors.setdefault(name, error)
        else:
            self.values.setdefault(name, []).append(value)

    def _record(self, m: Metric, sample) -> None:
        self._store(m.name, *evaluate(m, sample))

    def finish(self, metrics: list[Metric], scorer: ChunkScorer) -> None:
        """Score the partial chunk if it is all there is (sets `partial`), collect the chunks, then the pooled."""
        rest = self.buffer.remainder()
        if not self.nonfinite_rows and self.chunks == 0 and rest is not None and rest[0].shape[0] >= 2:
            self.score(*rest, metrics, scorer)
            self.partial = True
        self.collect()
        if not self.nonfinite_rows and self.moments is not None and self.moments.n >= 2:
            for m in metrics:
                if m.needs == "moments" and not self._not_applicable(m):
                    self._record(m, self.moments)
        traces = self.jvp.traces() if self.jvp is not None and not self.nonfinite_rows else None
        if traces is not None:
            stats = JvpStats(self.jvp.form, *traces)
            for m in metrics:
                if m.needs == "jvp":
                    self._record(m, stats)

    def entry(self, m: Metric, partial: bool) -> dict:
        values = self.values.get(m.name, [])
        out = {"mean": None, "std": None, "chunks": len(values), "status": "ok"}
        if self.nonfinite_rows:
            out["status"] = "nonfinite"
        elif (reason := self._not_applicable(m)) is not None:
            out.update(status="not_applicable", reason=reason)
        elif m.name in self.errors:
            out.update(status="error", error=self.errors[m.name])
        elif not values:
            out["status"] = "no_data"
        elif not values and m.needs == "chunk_pair" and self.chunks < 2:
            out.update(status="no_data", reason="needs at least two chunks")
        elif not values and m.needs == "jvp" and self.jvp is not None and self.jvp.short_batches:
            out.update(status="no_data", reason="needs batches of at least 2 examples")
        if values and out["status"] == "ok":
            out.update(mean=float(np.mean(values)), std=float(np.std(values)), values=values)
            if partial and m.needs in ("chunk", "chunk_pair"):
                out["partial"] = True
            if m.needs in ("moments", "jvp"):
                out.update(chunks=0, std=None, pooled_rows=self.rows)
            if self.dims and (note := m.caveat(self.chunk_rows or self.rows, *self.dims)):
                out["caveat"] = note
        return out


def _batch_loop(source, batch_size: int, fixed: bool, runner: Runner, names: list[str], states: list[SiteState],
                slices: list[slice], network: NetworkNLC | None, metrics: list[Metric], scorer: ChunkScorer,
                bar: Progress, host_reduce: str | None) -> tuple[int, int]:
    """Every batch through the runtime and into the sites' collectors. Returns (used, dropped) examples."""
    used = dropped = 0
    for batch in source.batches(batch_size):
        n = next(iter(batch.values())).shape[0]
        if n == 0:
            continue  # every file of this batch was unreadable (they are counted by the source)
        if fixed and n != batch_size:
            dropped += n  # a fixed-batch model cannot take the short last batch
            continue
        arrays = runner.run(names, batch)
        for st, part in zip(states, slices, strict=True):
            x, y, *jvp = arrays[part]
            if host_reduce is not None:
                x, y = numpy_features(x, st.site, host_reduce), numpy_features(y, st.site, host_reduce)
            st.add(x, y, metrics, scorer)
            st.add_jvp(n, jvp)
        if network is not None:
            network.add(batch, arrays[len(arrays) - len(network.output_names):])
        used += n
        bar.update(n)
    return used, dropped


def _resolve_unknown_ranks(loaded: LoadedModel, sites: list[Site], feed: dict, layout: str) -> None:
    """Sites whose rank shape inference missed (dynamic Reshape, ...) get it from one real batch."""
    pending = [s for s in sites if s.status == "skipped" and s.reason.startswith("unknown rank")]
    if not pending:
        return
    probes = [dataclasses.replace(s, status="ok") for s in pending]
    raw, outs = augment_model(loaded.model, probes, raw=True)
    names = [n for s in probes for n in (outs[s.index].x, outs[s.index].y)]
    arrays = Runner(loaded, raw, device="cpu").run(names, feed)
    view = GraphView(loaded.model.graph, opset=loaded.opset)
    for k, s in enumerate(pending):
        xa, ya = arrays[2 * k], arrays[2 * k + 1]
        s.status, s.reason = "ok", ""
        s.input_shape = ["N", *xa.shape[1:]]
        s.output_shape = ["N", *ya.shape[1:]]
        settle_shape(view, s, layout)
        if s.ok:
            s.params = {**s.params, "shape_from": "a probe batch (static shape inference failed)"}


def _model_info(loaded: LoadedModel, sites: list[Site]) -> dict:
    m = loaded.model
    if loaded.path is not None:
        digest, path, name = sha256_of(loaded.path), str(loaded.path.resolve()), loaded.path.stem
    else:
        digest, path, name = hashlib.sha256(m.SerializeToString()).hexdigest(), None, m.graph.name or "model"
    return {
        "name": name, "path": path, "sha256": digest, "producer": m.producer_name,
        "producer_version": m.producer_version, "opset": loaded.opset, "ir_version": m.ir_version,
        "inputs": [i.describe() for i in model_inputs(m)], "nodes": len(m.graph.node),
        "sites": len(sites), "sites_ok": sum(s.ok for s in sites),
    }


def analyze(
    model: str | os.PathLike | onnx.ModelProto,
    data: str,
    *,
    metrics: tuple[str, ...] | list[str] = DEFAULT_METRICS,
    chunk_size: int = 512,
    batch_size: int = 64,
    limit: int | None = None,
    reduce: str = "mean",
    device: str = "auto",
    layout: str = "auto",
    seed: int = 0,
    input_shapes: dict | None = None,
    images: dict | None = None,
    plugins: tuple[str, ...] | list[str] = (),
    progress: bool = True,
    reduce_in: str = "graph",
    chunk_workers: int | None = None,
) -> Signature:
    """Run `data` through `model` and return its non-linearity signature.

    reduce_in="numpy" exposes the full activation tensors and reduces them on the host: the naive
    design, kept as the benchmarks' baseline and as a check of the in-graph reduction. chunk_workers
    threads score chunks while the runtime works (0: in the batch loop; None: one per spare core).
    """
    started = time.perf_counter()
    if chunk_size < 2:
        raise OnnxaffError(f"--chunk-size must be at least 2, got {chunk_size}")
    if batch_size < 1:
        raise OnnxaffError(f"--batch-size must be positive, got {batch_size}")
    if reduce not in REDUCTIONS:
        raise OnnxaffError(f"unknown reduction {reduce!r}; choose one of {', '.join(REDUCTIONS)}")
    if reduce_in not in ("graph", "numpy"):
        raise OnnxaffError(f"unknown reduce_in {reduce_in!r}; choose graph or numpy")
    loaded = from_proto(model) if isinstance(model, onnx.ModelProto) else load_model(model)
    sites = discover_sites(loaded.model, layout=layout, infer_shapes=False)
    if not sites:
        raise OnnxaffError("the model has no non-linearity to analyse (no activation node or pattern found)")
    reg = registry(plugins)
    metric_objs = resolve(list(metrics), available=reg)
    inputs = model_inputs(loaded.model)
    source = open_source(data, inputs, limit=limit, seed=seed, shapes=input_shapes, images=images)

    fixed = {i.fixed_batch for i in inputs} - {None}
    fixed_batch = next(iter(fixed)) if len(fixed) == 1 else None
    effective_batch = fixed_batch or batch_size
    warnings: list[str] = []
    if effective_batch != batch_size:
        warnings.append(f"the model's batch size is fixed at {effective_batch}: batches of {effective_batch}")

    if any(s.status == "skipped" and s.reason.startswith("unknown rank") for s in sites):
        first = next((b for b in source.batches(effective_batch) if next(iter(b.values())).shape[0]), None)
        if first is None:
            raise OnnxaffError(f"no usable example in {data}")
        _resolve_unknown_ranks(loaded, sites, first, layout)
    ok_sites = [s for s in sites if s.ok]
    if not ok_sites:
        raise OnnxaffError("no site can be analysed: " + "; ".join(sorted({s.reason for s in sites})))
    needs_jvp = any(m.needs == "jvp" for m in metric_objs)
    on_host = reduce_in == "numpy"
    augmented, outputs = augment_model(loaded.model, ok_sites, reduce, raw=on_host, jvp=needs_jvp)
    runner = Runner(loaded, augmented, device=device)
    states = [SiteState(s, outputs[s.index], ChunkBuffer(chunk_size)) for s in ok_sites]
    for st in states:
        if st.outputs.jvp is not None:
            st.jvp = JvpAccumulator(st.outputs.jvp.form)
    slices, names = [], []
    for st in states:
        own = st.output_names()
        slices.append(slice(len(names), len(names) + len(own)))
        names += own
    network = NetworkNLC(loaded, inputs, device) if needs_jvp else None
    if network is not None:
        names += network.output_names

    bar = Progress(len(source), enabled=progress)
    scorer = ChunkScorer(chunk_workers)
    try:
        used, dropped = _batch_loop(source, effective_batch, fixed_batch is not None, runner, names, states, slices,
                                    network, metric_objs, scorer, bar, reduce if on_host else None)
        for st in states:
            st.finish(metric_objs, scorer)
    finally:
        scorer.close()
    bar.close()
    if dropped:
        warnings.append(f"{dropped} trailing examples dropped: the model's batch size is fixed at {effective_batch}")

    site_dicts = []
    for s in sites:
        d = s.to_dict()
        st = next((x for x in states if x.site is s), None)
        if st is None:
            d["metrics"] = {}
            site_dicts.append(d)
            continue
        partial = st.partial
        d.update(dim=st.dims[0] if st.dims else None, dim_y=st.dims[1] if st.dims else None,
                 rows=st.rows, chunks=st.chunks, partial_chunk=partial)
        if st.nonfinite_rows:
            d["status"] = "flagged"
            d["reason"] = f"NaN/Inf in the features of {st.nonfinite_rows} of {st.rows} rows"
            warnings.append(f"site {s.index} ({s.id}): {d['reason']}")
        d["metrics"] = {m.name: st.entry(m, partial) for m in metric_objs}
        for name, err in st.errors.items():
            warnings.append(f"site {s.index} ({s.id}): metric {name} failed: {err}")
        if partial:
            warnings.append(f"site {s.index} ({s.id}): fewer rows ({st.rows}) than one chunk ({chunk_size})")
        site_dicts.append(d)
    skipped = [s for s in sites if not s.ok]
    if skipped:
        warnings.append(f"{len(skipped)} site(s) skipped: " + "; ".join(sorted({s.reason for s in skipped})))

    seconds = time.perf_counter() - started
    description = source.describe()
    description.update(samples=used, dropped=dropped)
    if description.get("skipped"):
        warnings.append(f"{len(description['skipped'])} unreadable file(s) skipped: "
                        + ", ".join(s["file"] for s in description["skipped"][:10]))
    if used == 0:
        raise OnnxaffError(f"no usable example in {data}")
    return Signature(
        model={**_model_info(loaded, sites), "stats": model_stats(loaded.model, sites)},
        network={"nlc": network.result()} if network is not None else {},
        data=description,
        options={"metrics": list(metrics), "chunk_size": chunk_size, "batch_size": effective_batch,
                 "limit": limit, "reduce": reduce, "reduce_in": reduce_in, "device": device, "layout": layout,
                 "seed": seed,
                 "input_shapes": {k: list(v) for k, v in (input_shapes or {}).items()},
                 "plugins": [str(Path(p)) for p in plugins], "partial_chunk_rule": PARTIAL_CHUNK_RULE,
                 "std": "population std (ddof=0) over chunk scores"},
        runtime={"providers": runner.providers, "onnxruntime": ort().__version__, "seconds": round(seconds, 3),
                 "samples_per_second": round(used / seconds, 2) if seconds > 0 else None},
        metrics={m.name: {**m.info(), "origin": reg[m.name].origin} for m in metric_objs},
        sites=site_dicts,
        warnings=warnings,
        onnxaff_version=__version__,
        created=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    )

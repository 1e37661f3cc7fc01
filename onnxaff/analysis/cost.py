"""What a run will cost, known before it runs (`--dry-run`): each site's D, rows per chunk, chunks and the few_rows
flags it will get, and the predicted inference, scoring (per metric), peak memory and wall time.

Predicted from a short calibration on this machine, now (docs/cost.md): the plan and the sessions are built as
the run builds them (their time is the run's too); two batches go through the augmented model into the sites'
collectors (the first, of a few examples, warms the session); of each metric's job shapes at a row count a few
are timed on rows of the site's own features (drawn again with a little jitter up to the chunk's size where the
calibration gave fewer) and the others read off them (onnxaff.analysis.calibrate); the rest is extrapolated to
the data's length. The flags come from the rule a run applies (onnxaff.collection.stats.metric_flags). Nothing is
written: no checkpoint, no signature.
"""

from __future__ import annotations

import dataclasses
import math
import os
import statistics
import time
from concurrent.futures import Future
from dataclasses import dataclass, field

from onnxaff.analysis.budget import site_memory
from onnxaff.analysis.calibrate import Jobs
from onnxaff.analysis.config import AnalysisConfig
from onnxaff.analysis.feeder import Feeder
from onnxaff.analysis.plan import Plan
from onnxaff.collection.chunks import site_chunk_rows
from onnxaff.collection.stats import metric_flags, rows_needed
from onnxaff.data import no_usable
from onnxaff.foundations.memory import status_bytes
from onnxaff.graph.reduction import feature_dim, graph_mode
from onnxaff.metrics.dispatch import serving
from onnxaff.runtime.sessions import CUDA, Runner

WARM_EXAMPLES = 8  # the first calibration batch, which warms the session (counted once); then one full batch


@dataclass(frozen=True)
class SiteCost:
    """One site (or residual stage, kind "stage") as the run will see it: `rows` per chunk, `chunks` expected
    (full ones; one partial chunk when there is none), the metric specs it will flag `few_rows`, and the
    predicted scoring seconds per metric."""

    index: int
    id: str
    kind: str
    status: str
    dim: int | None = None
    dim_y: int | None = None
    rows_per_example: float = 0.0
    rows: int = 0
    chunks: int = 0
    partial: bool = False
    few_rows: list[str] = field(default_factory=list)
    rows_needed: dict[str, int] = field(default_factory=dict)  # rows each row-ruled metric needs (rows_per_dim × D)
    seconds: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Estimate:
    """A run's predicted cost. `seconds`: startup (the interpreter, as far as the caller says), setup (plan and
    sessions, measured), inference (batches through the augmented model into the sites), plain_inference (the
    plain model over the same batches, for the ratio; None unless asked), scoring (per metric spec), wall;
    `peak_bytes` the largest resident memory; `calibration_seconds` what this estimate took; `notes` the plan's
    warnings and what was declared rather than timed (text naming configuration fields, as a signature's warnings)."""

    model: str
    data: str
    examples: int
    batch_size: int
    batches: int
    chunk_size: int
    reduce: str
    intervals: str
    metrics: list[str]
    provider: str
    workers: int
    sites: list[SiteCost]
    stages: list[SiteCost]
    seconds: dict
    peak_bytes: int
    calibration_seconds: float
    notes: list[str] = field(default_factory=list)
    examples_needed: int | None = None  # examples from which no site is flagged few_rows (None: none is short)
    chunk_size_needed: int | None = None  # the chunk size that takes too (None: this one does)

    @property
    def wall_seconds(self) -> float:
        return self.seconds["wall"]

    @property
    def scoring_seconds(self) -> float:
        return sum(self.seconds["scoring"].values())

    def to_dict(self) -> dict:
        """Plain JSON types (`json.dumps` takes it)."""
        return dataclasses.asdict(self)


def process_age() -> float:
    """Seconds since this process started (its interpreter and imports: what the real run's start costs too)."""
    try:
        with open("/proc/self/stat", encoding="ascii") as f:
            start = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime", encoding="ascii") as f:
            up = float(f.read().split()[0])
        return max(0.0, up - start / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return 0.0


def estimate(model, data, config: AnalysisConfig | None = None, *, startup: float = 0.0, plain: bool = False,
             **options) -> Estimate:
    """Predict what `analyze(model, data, config)` will cost on this machine, from a calibration of a few seconds.

    `startup`: seconds the caller's process took to get here (the CLI passes `process_age()`), added to the wall;
    `plain`: also time the plain model on the calibration batches (a session more: `plain_inference`, else None)."""
    config = AnalysisConfig.of(config, **options)
    began = time.perf_counter()
    plan = Plan.build(model, data, config)
    feeder = Feeder(plan, keyed=False)  # a preview saves no state: its key needs no file read for it
    setup = time.perf_counter() - began
    fed = _Fed(feeder)
    examples = plan.stop - plan.start
    if plan.fixed_batch is not None:  # the short last batch is dropped
        examples -= examples % plan.batch_size
    timer = Jobs(config)
    for timing in (False, True):  # first the shapes each site's jobs have, then the timed anchors among them
        timer.timing, timer.diagnostics = timing, 0.0
        sites = [_site_cost(plan, s, feeder.state.sites, fed, timer, examples) for s in plan.sites]
        stages = [_stage_cost(plan, k, st, fed, timer, examples) for k, st in enumerate(feeder.state.stages)]
    timer.scorer.close()
    plain = fed.extrapolate(fed.plain(plan), examples) if plain else None
    scoring = {m.spec: 0.0 for m in plan.metrics + plan.track_metrics}
    for cost in sites + stages:
        for spec, s in cost.seconds.items():
            scoring[spec] += s
    inference = fed.extrapolate(fed.times, examples) + (0.0 if fed.cut_chunks else timer.diagnostics)
    gpu = CUDA in feeder.runner.providers
    # On the CPU the cores are shared: onnxruntime fills them for `inference`, and the scoring's CPU seconds spread
    # over as many threads as score at once, up to the cores (the work's sum over the cores is the floor).
    spread = min(max(1, timer.workers), os.cpu_count() or 1)
    body = max(inference, sum(scoring.values())) if gpu else inference + sum(scoring.values()) / spread
    memory = sum(b for b, _, _ in site_memory(plan.ok_sites, plan.stage_probes, plan.metrics, config, examples))
    peak = fed.rss + fed.file_per_example * max(0, examples - fed.examples) + memory + timer.working_bytes
    seconds = {"startup": startup, "setup": setup, "inference": inference,
               "plain_inference": plain, "scoring": scoring,
               "wall": startup + setup + body}
    return Estimate(model=plan.model_info["name"], data=plan.data, examples=examples, batch_size=plan.batch_size,
                    batches=math.ceil(examples / plan.batch_size), chunk_size=config.chunk_size, reduce=config.reduce,
                    intervals=config.intervals, metrics=[m.spec for m in plan.metrics + plan.track_metrics],
                    provider=feeder.runner.providers[0], workers=timer.workers, sites=sites, stages=stages,
                    seconds=seconds, peak_bytes=int(peak), calibration_seconds=time.perf_counter() - began,
                    notes=[*plan.warnings, *timer.notes], **data_need(sites, plan.metrics, config.chunk_size))


def data_need(sites: list[SiteCost], metrics, chunk_size: int | str) -> dict[str, int | None]:
    """The examples (and the chunk size) from which no site is flagged few_rows: a pooled metric's rows grow with
    the examples; a chunk metric's are capped at the chunk size, and a single partial chunk has them all."""
    pooled = {m.spec for m in metrics if serving(m).pooled}
    examples = chunk = None
    for s in sites:
        for spec, need in s.rows_needed.items():
            if spec not in s.few_rows or not s.rows_per_example:
                continue
            examples = max(examples or 0, math.ceil(need / s.rows_per_example))
            own = site_chunk_rows(chunk_size, (s.dim, s.dim_y or s.dim))  # "Kd": per site, its wider side as the run
            if spec not in pooled and need > (own or need):
                chunk = max(chunk or 0, need)
    return {"examples_needed": examples, "chunk_size_needed": chunk}


class _Recorder:
    """A scorer that runs nothing: the calibration's chunk jobs stay pending (the jobs are timed apart, by class)."""

    stop = False

    def submit(self, jobs) -> Future:
        return Future()


class _Fed:
    """The calibration batches through the run's own Feeder: their times, the rows each site got, memory."""

    def __init__(self, feeder: Feeder):
        plan = feeder.plan
        self.times, self.batches, self.examples, self.cut_chunks = [], [], 0, False
        files = status_bytes("RssFile")
        warm = plan.batch_size if plan.fixed_batch is not None else min(plan.batch_size, WARM_EXAMPLES)
        windows = [(warm, plan.start, min(plan.stop, plan.start + warm)),
                   (plan.batch_size, plan.start + warm, plan.stop)]
        runner = feeder.batches  # its seconds: both models' where a batch went the host's way
        for size, start, stop in windows:
            batches = plan.source.batches(size, start=start, stop=stop)
            try:
                clock, runtime = time.perf_counter(), runner.seconds
                batch = next(iter(batches), None)
                if batch is None:
                    break
                n = feeder.feed(batch, _Recorder())
                self.times.append((time.perf_counter() - clock, n))
                besides = self.times[-1][0] - (runner.seconds - runtime)  # reading and collecting
            finally:
                getattr(batches, "close", lambda: None)()
            self.examples += n
            self.batches.append(batch)
            for st in feeder.state.sites + feeder.state.stages:  # one chunk a site is enough to draw rows from
                self.cut_chunks |= bool(st.schedule.pending) and len(self.times) > 1
                del st.schedule.pending[1:]
        if not self.examples:
            raise no_usable(plan.data, plan.source)
        self.rss = status_bytes("VmRSS")
        self.file_per_example = max(0, status_bytes("RssFile") - files) / self.examples
        if len(self.times) > 1 and self.times[-1][1]:
            # The first full batch also pays the arena's growth and first touches (PP-LCNet: inference +23 %): the
            # runtime alone on it again, plus what reading and collecting took the first time, is the steady batch.
            runtime = runner.seconds
            feeder.batches.arrays(self.batches[-1], self.times[-1][1], plan.start + self.examples - self.times[-1][1])
            self.times[-1] = (min(self.times[-1][0], besides + runner.seconds - runtime), self.times[-1][1])

    @staticmethod
    def extrapolate(times: list[tuple[float, int]], examples: int) -> float:
        """The first batch once, the others at the steady batches' rate per example."""
        first, n0 = times[0]
        steady = times[1:] or times
        rate = statistics.median(t / max(n, 1) for t, n in steady)
        return first + rate * max(0, examples - n0)

    def plain(self, plan: Plan) -> list[tuple[float, int]]:
        """The plain model's times on the same batches (its own session, built after the memory was read)."""
        config = plan.config
        runner = Runner(plan.loaded, plan.loaded.model, device=config.device, threads=config.threads,
                        graph_optimization=config.graph_optimization)
        names = [o.name for o in plan.loaded.model.graph.output]
        times = []
        for batch, (_, n) in zip(self.batches, self.times, strict=True):
            clock = time.perf_counter()
            runner.run(names, batch)
            times.append((time.perf_counter() - clock, n))
        return times


def _site_cost(plan: Plan, site, states, fed: _Fed, timer: Jobs, examples: int) -> SiteCost:
    base = dict(index=site.index, id=site.id, kind=site.kind, status=site.status)
    st = next((st for st in states if st.index == site.index), None)
    if st is None:
        return SiteCost(**base)
    dims = st.observed.dims or (feature_dim(site, graph_mode(plan.config.reduce)),
                                    feature_dim(site.side("y"), graph_mode(plan.config.reduce)))
    total, rows, chunks, partial = _chunking(st, fed, examples, st.schedule.buffer.size)
    few, needs, seconds = [], {}, {}
    for m in plan.metrics:
        if st.not_applicable(m) is not None or None in dims:
            continue
        how = serving(m)
        if how.row_rule:
            needs[m.spec] = rows_needed(m.rows_per_dim, max(dims))
        flags = metric_flags(m, total if how.pooled else rows, max(dims), partial, set())  # the run's own rule
        if "few_rows" in flags:
            few.append(m.spec)
        seconds[m.spec] = timer.site_seconds(m, st, rows, chunks)
    if chunks and any(serving(m).site_chunks for m in plan.metrics):
        timer.diagnostics += chunks * timer.diagnostic_seconds(st, rows, plan.metrics)
    return SiteCost(**base, dim=dims[0], dim_y=dims[1], rows_per_example=st.observed.rows / fed.examples, rows=rows,
                    chunks=chunks, partial=partial, few_rows=few, rows_needed=needs, seconds=seconds)


def _stage_cost(plan: Plan, k: int, st, fed: _Fed, timer: Jobs, examples: int) -> SiteCost:
    stage = [s for s in plan.stages if s.ok][k]
    total, rows, chunks, partial = _chunking(st, fed, examples, st.schedule.buffer.size)
    seconds = {m.spec: timer.site_seconds(m, st, rows, chunks) for m in plan.track_metrics}
    dim = st.observed.dims[0] if st.observed.dims else None
    return SiteCost(index=stage.index, id=stage.id, kind="stage", status=stage.status, dim=dim,
                    rows_per_example=st.observed.rows / fed.examples, rows=rows, chunks=chunks, partial=partial,
                    seconds=seconds)


def _chunking(st, fed: _Fed, examples: int, chunk_size: int) -> tuple[int, int, int, bool]:
    """(rows in all, rows per chunk, chunks, partial) by the chunk rule (onnxaff.collection.chunks): full chunks only,
    one partial chunk (≥ 2 rows) when there is none."""
    total = round(st.observed.rows / fed.examples * examples)
    if total >= chunk_size:
        return total, chunk_size, total // chunk_size, False
    return total, total, int(total >= 2), True

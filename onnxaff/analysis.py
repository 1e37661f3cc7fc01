"""The main job: data through the augmented model, per-site chunks and moments, metrics, signature.

Chunk rule: rows are cut into consecutive chunks of `chunk_size`; every full chunk is scored and a
site's score is the mean over its chunks (std with ddof=0, and the count). A trailing partial chunk
is dropped, so every score comes from equally sized samples, except when a site has no full chunk
at all: then the partial chunk (≥ 2 rows) is scored and the metric entry says `partial: true`.

A run can be checkpointed (every N batches and on SIGINT/SIGTERM) and resumed, and it can cover one
shard of the data: shard boundaries fall on multiples of lcm(chunk size, batch size), so the parts'
chunks are exactly one run's chunks and `onnxaff.shards.merge_parts` rebuilds one run's signature.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import hashlib
import json
import math
import os
import signal
import threading
import time
from pathlib import Path

import numpy as np
import onnx

from onnxaff import __version__
from onnxaff.checkpoint import prepare as prepare_checkpoint
from onnxaff.collect import ChunkBuffer, JvpAccumulator
from onnxaff.data import model_inputs, open_source
from onnxaff.dispatch import serving
from onnxaff.errors import DataFailed, Interrupted, OnnxaffError, StopWhileWaiting
from onnxaff.graph import augment_model, load_model
from onnxaff.graph.blocks import stage_tracks
from onnxaff.graph.load import LoadedModel, default_opset, from_proto, sha256_of
from onnxaff.graph.pairs import tensor_probe
from onnxaff.graph.rewrite import REDUCTIONS, numpy_features
from onnxaff.graph.sites import Site, settle_shape
from onnxaff.graph.stats import model_stats
from onnxaff.graph.view import GraphView
from onnxaff.metrics import Metric, default_metrics, metric_info, registry, resolve, stage_metrics
from onnxaff.network import DIRECTIONS as NLC_DIRECTIONS
from onnxaff.network import EXAMPLES as NLC_EXAMPLES
from onnxaff.network import NetworkNLC, network_results, parse_directions
from onnxaff.progress import Progress
from onnxaff.runtime import Runner, ort
from onnxaff.scoring import ChunkScorer
from onnxaff.signature import Signature
from onnxaff.site_state import SiteState
from onnxaff.sitelist import list_sites
from onnxaff.state import load_state, save_state
from onnxaff.stats import flag_warnings

DEFAULT_METRICS = None  # the metrics declaring `default` (onnxaff.metrics.default_metrics)
PARTIAL_CHUNK_RULE = "full chunks only; a site with no full chunk scores its one partial chunk (partial: true)"
STATE_KIND_CHECKPOINT, STATE_KIND_PART = "checkpoint", "part"


def parse_shard(text: str | None) -> tuple[int, int] | None:
    """`i/n` (0-based i) -> (i, n)."""
    if text is None:
        return None
    a, slash, b = text.partition("/")
    try:
        i, n = int(a), int(b)
    except ValueError:
        i = n = -1
    if not slash or n < 1 or not 0 <= i < n:
        raise OnnxaffError(f"--shard {text!r} is not i/n with 0 <= i < n (e.g. 0/3)")
    return i, n


def shard_window(total: int, shard: tuple[int, int] | None, unit: int) -> tuple[int, int]:
    """[start, stop) of shard i of n: whole units of `unit` examples, the last shard also takes the tail."""
    if shard is None:
        return 0, total
    i, n = shard
    units = total // unit
    start = (i * units // n) * unit
    stop = total if i == n - 1 else ((i + 1) * units // n) * unit
    return start, stop


def _stage_entries(model: onnx.ModelProto, stages: list[list], layout: str, first_index: int) -> list[dict]:
    """Residual stages with a probe site per track tensor (h⁰ … h^L), numbered after the real sites."""
    view = GraphView(model.graph, opset=default_opset(model))
    entries, index = [], first_index
    for k, stage in enumerate(stages):
        tensors = stage_tracks(stage)
        probes = []
        for t in tensors:
            probes.append(tensor_probe(view, t, layout, index))
            index += 1
        bad = next((p for p in probes if not p.ok), None)
        entries.append({
            "index": k, "id": f"stage:{stage[0].id}..{stage[-1].id}", "blocks": [b.id for b in stage],
            "tensors": tensors, "status": "ok" if bad is None else "skipped",
            "reason": "" if bad is None else f"{bad.input}: {bad.reason}", "probes": probes,
        })
    return entries


def stage_results(stages: list[dict], states: list[SiteState], metrics: list[Metric]) -> list[dict]:
    """The signature's `stages`: each residual stage's trajectory metrics (see onnxaff_plugins.trajectory)."""
    out, ok = [], iter(states)
    for stage in stages:
        d = {k: v for k, v in stage.items() if k != "probes"}
        d["length"] = len(stage["blocks"])
        if stage["status"] == "ok":
            st = next(ok)
            d.update(rows=st.rows, chunks=st.chunks, partial_chunk=st.partial,
                     dim=st.dims[0] // st.tracks if st.dims else None)
            d["metrics"] = {m.name: st.entry(m, st.partial) for m in metrics}
        else:
            d["metrics"] = {}
        out.append(d)
    return out


def site_entries(bases: list[dict], states: dict[int, SiteState], metrics: list[Metric],
                 chunk_size: int) -> tuple[list[dict], list[str]]:
    """The signature's per-site dicts and the warnings they raise, from discovery dicts and collectors."""
    out, warnings = [], []
    for base in bases:
        d = dict(base)
        st = states.get(d["index"])
        if st is None:
            d["metrics"] = {}
            out.append(d)
            continue
        label = f"site {d['index']} ({d['id']})"
        d.update(dim=st.dims[0] if st.dims else None, dim_y=st.dims[1] if st.dims else None,
                 rows=st.rows, chunks=st.chunks, partial_chunk=st.partial)
        if st.nonfinite_rows:
            d["status"] = "flagged"
            d["reason"] = f"NaN/Inf in the features of {st.nonfinite_rows} of {st.rows} rows"
            warnings.append(f"{label}: {d['reason']}")
        d["metrics"] = {m.name: st.entry(m, st.partial) for m in metrics}
        for name, err in st.errors.items():
            warnings.append(f"{label}: metric {name} failed: {err}")
        out.append(d)
    warnings += flag_warnings(out, metrics)  # one line per flag kind (partial chunks included), not one per site
    skipped = [b for b in bases if b["status"] != "ok"]
    if skipped:
        warnings.append(f"{len(skipped)} site(s) skipped: " + "; ".join(sorted({b['reason'] for b in skipped})))
    return out, warnings


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
        # The .onnx of an external-data model holds no weights: each weight file is identified too, so a
        # signature names the network it measured and a checkpoint refuses swapped weights.
        external = [{"location": loc, "bytes": (loaded.path.parent / loc).stat().st_size,
                     "sha256": sha256_of(loaded.path.parent / loc)} for loc in loaded.external_locations]
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


class Analysis:
    """A prepared run: model loaded and augmented, data opened, one collector per site.

    `run()` feeds the data window through the runtime; `state()`/`restore()` save and continue it;
    `signature()` scores what is left and assembles the result.
    """

    def __init__(self, model, data: str, *, metrics=DEFAULT_METRICS, chunk_size: int = 512, batch_size: int = 64,
                 limit: int | None = None, reduce: str = "mean", device: str = "auto", layout: str = "auto",
                 seed: int = 0, input_shapes: dict | None = None, images: dict | None = None, plugins=(),
                 progress: bool = True, reduce_in: str = "graph", chunk_workers: int | None = None,
                 shard: tuple[int, int] | None = None, pairs=(), blocks=(), threads: int | None = None,
                 nlc_directions: int | str = NLC_DIRECTIONS):
        if chunk_size < 2:
            raise OnnxaffError(f"--chunk-size must be at least 2, got {chunk_size}")
        if batch_size < 1:
            raise OnnxaffError(f"--batch-size must be positive, got {batch_size}")
        if reduce not in REDUCTIONS:
            raise OnnxaffError(f"unknown reduction {reduce!r}; choose one of {', '.join(REDUCTIONS)}")
        if reduce_in not in ("graph", "numpy"):
            raise OnnxaffError(f"unknown reduce_in {reduce_in!r}; choose graph or numpy")
        self.data_spec, self.chunk_size, self.device, self.progress = data, chunk_size, device, progress
        self.chunk_workers, self.reduce = chunk_workers, reduce
        self.loaded = loaded = from_proto(model) if isinstance(model, onnx.ModelProto) else load_model(model)
        self.pairs, self.blocks = [tuple(p) for p in pairs], list(blocks)
        listed = list_sites(loaded, layout, self.pairs, self.blocks)  # as `onnxaff sites` lists them
        activations, extra, stages, self.sites = listed.activations, listed.extra, listed.stages, listed.sites
        sites = self.sites
        if not sites:
            raise OnnxaffError("the model has no non-linearity to analyse (no activation node or pattern found; "
                               "--pairs IN:OUT scores any two tensors)")
        self.registry = registry(plugins)
        metrics = default_metrics(self.registry) if metrics is None else list(metrics)
        asked = resolve(metrics, available=self.registry)
        self.metrics = [m for m in asked if not serving(m).stage]
        self.track_metrics = [m for m in asked if serving(m).stage]
        if stages and not self.track_metrics:  # residual stages get the declared stage metrics unasked
            self.track_metrics = resolve(stage_metrics(self.registry), available=self.registry)
        self.inputs = inputs = model_inputs(loaded.model)
        self.source = open_source(data, inputs, limit=limit, seed=seed, shapes=input_shapes, images=images)

        fixed = {i.fixed_batch for i in inputs} - {None}
        self.fixed_batch = next(iter(fixed)) if len(fixed) == 1 else None
        self.batch_size = self.fixed_batch or batch_size
        self.warnings: list[str] = list(getattr(self.source, "warnings", []))  # e.g. links an image walk met
        if self.batch_size != batch_size:
            self.warnings.append(f"the model's batch size is fixed at {self.batch_size}: batches of {self.batch_size}")

        if any(s.status == "skipped" and s.reason.startswith("unknown rank") for s in sites):
            first = next((b for b in self.source.batches(self.batch_size) if next(iter(b.values())).shape[0]), None)
            if first is None:
                raise _no_usable(data, self.source)
            _resolve_unknown_ranks(loaded, sites, first, layout)
        ok_sites = [s for s in sites if s.ok]
        if not ok_sites:
            raise OnnxaffError("no site can be analysed: " + "; ".join(sorted({s.reason for s in sites})))
        needs_jvp = any(serving(m).end_input == "jvp" for m in self.metrics)
        self.host_reduce = reduce if reduce_in == "numpy" else None
        self.stages = _stage_entries(loaded.model, stages, layout, first_index=len(sites))
        track_sites = [t for stage in self.stages if stage["status"] == "ok" for t in stage["probes"]]
        augmented, outputs = augment_model(loaded.model, ok_sites + track_sites, reduce, raw=reduce_in == "numpy",
                                           jvp=needs_jvp)
        self.runner = Runner(loaded, augmented, device=device, threads=threads)
        self.states = [SiteState(s, outputs[s.index], ChunkBuffer(chunk_size)) for s in ok_sites]
        for st in self.states:
            if st.outputs.jvp is not None:
                st.jvp = JvpAccumulator(st.outputs.jvp.form)
        self.slices, self.names = [], []
        for st in self.states:
            own = st.output_names()
            self.slices.append(slice(len(self.names), len(self.names) + len(own)))
            self.names += own
        # A residual stage: its tracks' features side by side as X (h⁰ … h^L), chunked like a site.
        self.stage_states: list[SiteState] = []
        self.stage_slices: list[slice] = []
        self.stage_probes: list[list[Site]] = []
        for stage in self.stages:
            if stage["status"] != "ok":
                continue
            self.stage_probes.append(stage["probes"])
            own = [outputs[t.index].x for t in stage["probes"]]
            self.stage_states.append(SiteState(None, None, ChunkBuffer(chunk_size), tracks=len(own)))
            self.stage_slices.append(slice(len(self.names), len(self.names) + len(own)))
            self.names += own
        self.shard = shard
        self.unit = math.lcm(chunk_size, self.batch_size)  # shard boundaries and pooled-moment blocks
        self.start, self.stop = shard_window(len(self.source), shard, self.unit)
        # One run's network NLC uses the first EXAMPLES examples: a shard takes its part of those (batch-aligned,
        # as shard boundaries are), so the merged parts use exactly one run's examples.
        nlc_directions = parse_directions(nlc_directions)
        self.network = (NetworkNLC(loaded, inputs, device, examples=max(0, NLC_EXAMPLES - self.start),
                                   threads=threads, directions=nlc_directions)
                        if needs_jvp else None)
        if self.network is not None:
            self.names += self.network.output_names
        self.cursor, self.used, self.dropped = self.start, 0, 0
        self.skipped_before: list = []  # unreadable files of earlier sessions of a resumed run
        self.seconds_before = 0.0
        self.options = {
            "metrics": list(metrics), "chunk_size": chunk_size, "batch_size": self.batch_size, "limit": limit,
            "reduce": reduce, "reduce_in": reduce_in, "device": device, "layout": layout, "seed": seed,
            "input_shapes": {k: list(v) for k, v in (input_shapes or {}).items()},
            "pairs": [list(p) for p in self.pairs], "blocks": self.blocks,
            "plugins": [str(Path(p)) for p in plugins], "partial_chunk_rule": PARTIAL_CHUNK_RULE,
            "std": "population std (ddof=0) over chunk scores",
        }
        if nlc_directions != NLC_DIRECTIONS:  # recorded only when asked for: default runs' options stay as they were
            self.options["nlc_directions"] = nlc_directions
        self.model_info = {**_model_info(loaded, activations), "stats": model_stats(loaded.model, activations)}
        if extra:
            self.model_info["extra_sites"] = {g: sum(s.group == g for s in extra) for g in ("pair", "block")}
        self._stop_signal: int | None = None
        self._finished = False

    # --- identity of a run, for checkpoints and parts ---

    def key(self) -> dict:
        """What a saved state must match to be continued or merged: model, data and numeric options."""
        describe = {k: v for k, v in self.source.describe().items() if k not in ("skipped", "workers")}
        path = Path(self.data_spec)
        if path.is_file():
            st = path.stat()
            describe["file"] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns}
        data = hashlib.sha256(json.dumps(describe, sort_keys=True, default=str).encode()).hexdigest()
        numeric = {k: v for k, v in self.options.items() if k not in ("device",)}
        model = self.model_info["sha256"]
        if external := self.model_info.get("external_data"):
            model = hashlib.sha256(json.dumps([model, external], sort_keys=True).encode()).hexdigest()
        return {"model_sha256": model, "data_sha256": data, "options": numeric,
                "total": len(self.source), "unit": self.unit}

    # --- the batch loop ---

    def run(self, checkpoint: str | Path | None = None, every: int = 0, finish: bool = False) -> None:
        """Feed [cursor, stop) through the runtime. With a checkpoint path, save the state every `every`
        batches and on SIGINT/SIGTERM (then raise Interrupted), and when the data source fails (DataFailed); with
        `finish` too, the end-of-data scoring runs here, where a signal still saves the state (the one from before
        the finish)."""
        if every < 0:
            raise OnnxaffError(f"--checkpoint-every must be 0 or positive, got {every}")
        if checkpoint is not None:
            prepare_checkpoint(checkpoint)  # a file that is not a checkpoint is refused, never replaced
        self._stop_signal = None  # an API caller may run again after catching Interrupted
        bar = Progress(self.stop - self.start, enabled=self.progress)
        bar.update(self.cursor - self.start)
        scorer = ChunkScorer(self.chunk_workers)
        restore = self._catch_signals(scorer) if checkpoint is not None else {}
        if restore and hasattr(self.source, "should_stop"):  # a source that waits (decoders) checks the flag
            self.source.should_stop = lambda: (self._stop_signal or scorer.stop_signal) is not None
        session_start, batches = time.perf_counter(), 0
        try:
            for st in self.states:  # chunks a stopped run left unscored come first
                st.rescore(self.metrics, scorer)
            for st in self.stage_states:
                st.rescore(self.track_metrics, scorer)
            for batch in self.source.batches(self.batch_size, start=self.cursor, stop=self.stop):
                self._feed(batch, scorer, bar)
                self.cursor = min(self.cursor + self.batch_size, self.stop)
                batches += 1
                stop = self._stop_signal or scorer.stop_signal  # the latter: a plugin raised KeyboardInterrupt
                if checkpoint is None:
                    if stop is not None:
                        raise KeyboardInterrupt
                    continue
                if stop is not None:
                    self.seconds_before += time.perf_counter() - session_start
                    self._interrupted(checkpoint, stop, self.state(STATE_KIND_CHECKPOINT))
                if every and batches % every == 0:
                    elapsed = time.perf_counter() - session_start
                    self.seconds_before += elapsed
                    session_start += elapsed
                    self.save(checkpoint, STATE_KIND_CHECKPOINT)
            if checkpoint is not None:
                elapsed = time.perf_counter() - session_start
                self.seconds_before += elapsed
                session_start += elapsed
                self._end_or_save(checkpoint, scorer, finish)
        except DataFailed as exc:  # between batches: the state up to the last complete one is whole, keep it
            if checkpoint is None:
                raise
            self.seconds_before += time.perf_counter() - session_start
            session_start = time.perf_counter()
            state = self.state(STATE_KIND_CHECKPOINT)
            if isinstance(exc, StopWhileWaiting):
                self._interrupted(checkpoint, self._stop_signal or scorer.stop_signal or signal.SIGINT, state)
            save_state(checkpoint, state)
            raise DataFailed(f"{exc}; the state after {self.cursor - self.start} of {self.stop - self.start} "
                             f"examples saved to {checkpoint} (continue with --resume)") from None
        finally:
            for sig, handler in restore.items():
                signal.signal(sig, signal.SIG_DFL if handler is None else handler)  # None: set from C
            scorer.close()
            bar.close()
        self.seconds_before += time.perf_counter() - session_start

    def _interrupted(self, checkpoint, signum: int, state: dict) -> None:
        save_state(checkpoint, state)
        raise Interrupted(f"{signal.Signals(signum).name} after {self.cursor - self.start} of "
                          f"{self.stop - self.start} examples; state saved to {checkpoint} (continue with --resume)")

    def _end_or_save(self, checkpoint, scorer: ChunkScorer, finish: bool) -> None:
        """The last chunk scores (and with `finish` the pooled metrics), stoppable: a signal or a plugin's
        KeyboardInterrupt meanwhile saves the state from before the finish, so --resume finishes from there."""
        for st in self.states + self.stage_states:
            st.collect()  # gives up on a stop; the chunks not done are saved unscored
        if not finish:
            if stop := self._stop_signal or scorer.stop_signal:
                self._interrupted(checkpoint, stop, self.state(STATE_KIND_CHECKPOINT))
            return
        before = self.state(STATE_KIND_CHECKPOINT)
        try:
            if not (self._stop_signal or scorer.stop_signal):
                self.finish(scorer)
        except KeyboardInterrupt:
            if not (self._stop_signal or scorer.stop_signal):
                raise
        if stop := self._stop_signal or scorer.stop_signal:
            self._restore(checkpoint, before)  # in memory too: a caller may run() again after Interrupted
            self._interrupted(checkpoint, stop, before)

    def _feed(self, batch: dict, scorer: ChunkScorer, bar: Progress) -> None:
        n = next(iter(batch.values())).shape[0]
        if n == 0:
            return  # every file of this batch was unreadable (they are counted by the source)
        if self.fixed_batch is not None and n != self.batch_size:
            self.dropped += n  # a fixed-batch model cannot take the short last batch
            return
        arrays = self.runner.run(self.names, batch)
        for st, part in zip(self.states, self.slices, strict=True):
            x, y, *jvp = arrays[part]
            if self.host_reduce is not None:
                x = numpy_features(x, st.site, self.host_reduce)
                y = numpy_features(y, st.site.side("y"), self.host_reduce)
            st.add(x, y, self.metrics, scorer, block=self.cursor // self.unit)
            st.add_jvp(n, jvp)
        for st, part, probes in zip(self.stage_states, self.stage_slices, self.stage_probes, strict=True):
            h = arrays[part]
            if self.host_reduce is not None:
                h = [numpy_features(a, probe, self.host_reduce) for a, probe in zip(h, probes, strict=True)]
            x = np.concatenate(h, axis=1)
            st.add(x, x[:, :0], self.track_metrics, scorer, block=self.cursor // self.unit)
        if self.network is not None:
            self.network.add(batch, arrays[len(arrays) - len(self.network.output_names):])
        self.used += n
        bar.update(n)

    def _catch_signals(self, scorer: ChunkScorer) -> dict:
        """SIGINT/SIGTERM only set a flag, so the state is saved at a batch boundary, never mid-batch. The
        scorer's waits give up on it, so a stuck metric cannot hold the batch loop (its chunk is saved unscored)."""
        if threading.current_thread() is not threading.main_thread():
            return {}

        def handler(signum, frame):
            if self._stop_signal is not None:  # a second signal: stop now, without saving
                raise KeyboardInterrupt
            self._stop_signal = scorer.stop_signal = signum

        return {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}

    # --- saved state ---

    def state(self, kind: str) -> dict:
        return {
            "kind": kind, "key": self.key(), "cursor": self.cursor, "start": self.start, "stop": self.stop,
            "shard": None if self.shard is None else list(self.shard), "used": self.used, "dropped": self.dropped,
            "skipped": [list(s) for s in self._skipped()], "seconds": self.seconds_before,
            "sites": [st.to_state() for st in self.states],
            "stages": [st.to_state() for st in self.stage_states],
            "stages_base": [{k: v for k, v in st.items() if k != "probes"} for st in self.stages],
            "sites_base": [s.to_dict() for s in self.sites],
            "network": None if self.network is None else self.network.to_state(),
            "signature": self._header(),
        }

    def save(self, path: str | Path, kind: str) -> Path:
        return save_state(path, self.state(kind))

    def restore(self, path: str | Path) -> None:
        """Continue a checkpoint of this very run; anything else is refused with the reason."""
        saved = load_state(path)
        try:
            self._restore(path, saved)
        except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:  # a state file edited or
            raise OnnxaffError(f"checkpoint {path} is damaged ({type(exc).__name__}: {exc})") from None  # mixed

    def _restore(self, path, saved: dict) -> None:
        if not isinstance(saved, dict) or saved.get("kind") != STATE_KIND_CHECKPOINT:
            raise OnnxaffError(f"{path} is a shard part, not a checkpoint")
        self._finished = False  # each site's state says whether it was finished
        mine = self.key()
        theirs = saved["key"]
        for field_, what in (("model_sha256", "another model"), ("data_sha256", "another data set"),
                             ("options", "other options"), ("total", "another data set")):
            if theirs.get(field_) != mine.get(field_):
                detail = ""
                if field_ == "options":
                    diff = sorted(k for k in {*mine["options"], *theirs["options"]}
                                  if mine["options"].get(k) != theirs["options"].get(k))
                    detail = f" ({', '.join(diff)})"
                raise OnnxaffError(f"checkpoint {path} is from {what}{detail}; remove it or run without --resume")
        if (saved["start"], saved["stop"]) != (self.start, self.stop):
            raise OnnxaffError(f"checkpoint {path} covers examples [{saved['start']}, {saved['stop']}), "
                               f"this run [{self.start}, {self.stop}) (another --shard)")
        if (len(saved["sites"]), len(saved["stages"])) != (len(self.states), len(self.stage_states)):
            raise OnnxaffError(f"checkpoint {path} has {len(saved['sites'])} sites, this run {len(self.states)}")
        for st, d in zip(self.states + self.stage_states, saved["sites"] + saved["stages"], strict=True):
            st.restore(d)
        if self.network is not None and saved["network"] is not None:
            self.network.restore(saved["network"])
        self.cursor, self.used, self.dropped = saved["cursor"], saved["used"], saved["dropped"]
        self.skipped_before = [tuple(s) for s in saved["skipped"]]
        self.seconds_before = saved["seconds"]

    def _skipped(self) -> list:
        return self.skipped_before + list(getattr(self.source, "skipped", []))

    # --- the result ---

    def _header(self) -> dict:
        """Everything of the signature that does not come from the collectors."""
        description = self.source.describe()
        if "skipped" in description:
            root = Path(description["source"])
            description["skipped"] = [{"file": Path(f).relative_to(root).as_posix(), "reason": r}
                                      for f, r in self._skipped()]
        description.update(samples=self.used, dropped=self.dropped)
        if self.shard is not None:
            description["shard"] = {"index": self.shard[0], "count": self.shard[1], "start": self.start,
                                    "stop": self.stop}
        return {
            "model": self.model_info, "data": description, "options": self.options,
            "runtime": {"providers": self.runner.providers, "onnxruntime": ort().__version__},
            "metrics": {m.name: metric_info(m, self.registry[type(m).name].origin)
                        for m in self.metrics + self.track_metrics},
            "warnings": list(self.warnings),
        }

    def finish(self, scorer: ChunkScorer | None = None) -> None:
        """Score what only the end of the data can: a lone partial chunk, pooled metrics (once)."""
        if self._finished:
            return
        with ChunkScorer(self.chunk_workers) if scorer is None else contextlib.nullcontext(scorer) as scorer:
            for st in self.states:
                st.finish(self.metrics, scorer)
            for st in self.stage_states:
                st.finish(self.track_metrics, scorer)
        self._finished = True

    def signature(self) -> Signature:
        self.finish()
        header = self._header()
        seconds = self.seconds_before
        header["runtime"].update(seconds=round(seconds, 3),
                                 samples_per_second=round(self.used / seconds, 2) if seconds > 0 else None)
        network = network_results(self.network.to_state(), self.metrics) if self.network is not None else {}
        states = {st.site.index: st for st in self.states}
        sig = assemble(header, [s.to_dict() for s in self.sites], states, self.metrics, network)
        sig.stages = stage_results(self.stages, self.stage_states, self.track_metrics)
        if self.used == 0 and self.shard is None:
            raise _no_usable(self.data_spec, self.source)
        if self.shard is None:
            _check_some_number(sig, self.used)
        return sig


def _check_some_number(sig: Signature, used: int) -> None:
    """Data too small for every metric (one example, one partial chunk for a chunk-pair metric) is an error,
    not a signature of empty entries that exits 0."""
    entries = [e for s in sig.sites for e in s.get("metrics", {}).values()]
    if any(e["status"] == "ok" for e in entries) or not any(e["status"] == "no_data" for e in entries):
        return  # a number somewhere, or nothing for want of data (NaN/Inf sites are flagged and warned about)
    reasons = sorted({e.get("reason", "needs at least 2 rows in a chunk") for e in entries
                      if e["status"] == "no_data"})
    raise OnnxaffError(f"no site got a number from {used} example(s): {'; '.join(reasons)} "
                       f"(chunk size {sig.options['chunk_size']}); give more data")


def _no_usable(data: str, source) -> OnnxaffError:
    """All data skipped: say how many and why the first one was, which is the usual cause for all."""
    skipped = getattr(source, "skipped", None) or []
    if not skipped:
        return OnnxaffError(f"no usable example in {data}")
    path, reason = skipped[0]
    return OnnxaffError(f"no usable example in {data}: {len(skipped)} skipped, the first ({Path(path).name}) "
                        f"because {reason}")


def assemble(header: dict, bases: list[dict], states: dict[int, SiteState], metrics: list[Metric],
             network: dict) -> Signature:
    """A Signature from the run header, the discovery dicts and the finished collectors."""
    sites, site_warnings = site_entries(bases, states, metrics, header["options"]["chunk_size"])
    data = header["data"]
    warnings = list(header["warnings"])
    if data.get("dropped"):
        warnings.append(f"{data['dropped']} trailing examples dropped: the model's batch size is fixed at "
                        f"{header['options']['batch_size']}")
    warnings += site_warnings
    if data.get("skipped"):
        warnings.append(f"{len(data['skipped'])} unreadable file(s) skipped: "
                        + ", ".join(s["file"] for s in data["skipped"][:10]))
    return Signature(
        model=header["model"], network=network, data=data, options=header["options"], runtime=header["runtime"],
        metrics=header["metrics"], sites=sites, warnings=warnings, onnxaff_version=__version__,
        created=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    )


def analyze(
    model: str | os.PathLike | onnx.ModelProto,
    data: str,
    *,
    checkpoint: str | os.PathLike | None = None,
    checkpoint_every: int = 0,
    resume: bool = False,
    **options,
) -> Signature:
    """Run `data` through `model` and return its non-linearity signature.

    Options are Analysis's: metrics, chunk_size, batch_size, limit, reduce, device, layout, seed,
    input_shapes, images, plugins, progress, reduce_in, chunk_workers, shard, threads (onnxruntime's
    intra-op threads; default: one per core). reduce_in="numpy" exposes
    the full activation tensors and reduces them on the host: the naive design, kept as the benchmarks'
    baseline and as a check of the in-graph reduction. chunk_workers threads score chunks while the
    runtime works (0: in the batch loop; None: one per spare core).

    With `checkpoint`, the state is saved there every `checkpoint_every` batches and on SIGINT/SIGTERM
    (raising Interrupted); `resume=True` continues from it. A file there that is not an onnxaff checkpoint is
    refused. The file stays until the caller removes it; the CLI saves the finished pass there too before it
    writes the signature, and removes it once that is written (onnxaff.checkpoint.write_result).
    """
    if resume and checkpoint is None:
        raise OnnxaffError("--resume needs a checkpoint path")
    run = Analysis(model, data, **options)
    if resume:
        if not Path(checkpoint).exists():
            raise OnnxaffError(f"no checkpoint to resume at {checkpoint}")
        run.restore(checkpoint)
    run.run(checkpoint, checkpoint_every, finish=True)
    return run.signature()

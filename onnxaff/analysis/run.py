"""Analysis: a Plan executed. The batch loop, signals, progress, checkpoints of the live RunState.

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
import signal
import threading
import time
from pathlib import Path

import numpy as np

from onnxaff.analysis.assemble import check_some_number
from onnxaff.analysis.checkpoint import STATE_KIND_CHECKPOINT, check_resumable, load_state, run_key, save_state
from onnxaff.analysis.checkpoint import prepare as prepare_checkpoint
from onnxaff.analysis.config import AnalysisConfig, check_checkpoint_every
from onnxaff.analysis.plan import Plan
from onnxaff.analysis.runstate import RunState
from onnxaff.collect import ChunkBuffer, JvpAccumulator
from onnxaff.data import no_usable
from onnxaff.errors import DataFailed, Interrupted, OnnxaffError, StopWhileWaiting
from onnxaff.graph.rewrite import feature_rounding, numpy_features
from onnxaff.metrics import metric_info
from onnxaff.network import EXAMPLES as NLC_EXAMPLES
from onnxaff.network import NetworkNLC
from onnxaff.progress import Progress
from onnxaff.runtime import Runner, ort
from onnxaff.scoring import ChunkScorer
from onnxaff.signature import Signature
from onnxaff.site_state import SiteState

# A second signal within this many seconds of the first is the same request again (the state is still saved).
REPEAT_SECONDS = 1.0


class Analysis:
    """A prepared run: a Plan, the runtime sessions that execute it and the live RunState it fills.

    `run()` feeds the data window through the runtime; `state()`/`restore()` save and continue it;
    `signature()` scores what is left and assembles the result. Options: an AnalysisConfig, or its fields
    as keywords.
    """

    def __init__(self, model, data: str, config: AnalysisConfig | None = None, **options):
        self.config = config = AnalysisConfig.of(config, **options)
        self.plan = plan = Plan.build(model, data, config)
        self.runner = Runner(plan.loaded, plan.augmented, device=config.device, threads=config.threads,
                             graph_optimization=config.graph_optimization)
        states = [SiteState(s, plan.outputs[s.index], ChunkBuffer(config.chunk_size)) for s in plan.ok_sites]
        for st in states:
            if st.outputs.jvp is not None:
                st.jvp = JvpAccumulator(st.outputs.jvp.form)
        stage_states = [SiteState(None, None, ChunkBuffer(config.chunk_size), tracks=len(probes))
                        for probes in plan.stage_probes]
        # One run's network NLC uses the first EXAMPLES examples: a shard takes its part of those (batch-aligned,
        # as shard boundaries are), so the merged parts use exactly one run's examples.
        self.network = (NetworkNLC(plan.loaded, plan.inputs, config.device, examples=max(0, NLC_EXAMPLES - plan.start),
                                   threads=config.threads, directions=config.nlc_directions,
                                   graph_optimization=config.graph_optimization)
                        if plan.needs_jvp else None)
        self.names = list(plan.names) + (self.network.output_names if self.network is not None else [])
        self.live = RunState(
            kind=STATE_KIND_CHECKPOINT, key={}, cursor=plan.start, start=plan.start, stop=plan.stop,
            shard=config.shard, used=0, dropped=0, skipped=[], seconds=0.0, sites=states, stages=stage_states,
            sites_base=[s.to_dict() for s in plan.sites],
            stages_base=[{k: v for k, v in st.items() if k != "probes"} for st in plan.stages],
            network=None, header={}, indices=[s.index for s in plan.ok_sites])
        self._stop_signal: int | None = None
        self._finished = False
        self._clock = time.perf_counter()

    # --- what callers and tests read ---

    loaded = property(lambda self: self.plan.loaded)
    sites = property(lambda self: self.plan.sites)
    source = property(lambda self: self.plan.source)
    start = property(lambda self: self.live.start)
    stop = property(lambda self: self.live.stop)
    cursor = property(lambda self: self.live.cursor)
    states = property(lambda self: self.live.sites)
    stage_states = property(lambda self: self.live.stages)

    def key(self) -> dict:
        """What a saved state must match to be continued or merged: model, data, options, plugin files, the code
        of each metric used."""
        plan = self.plan
        return run_key(plan.data, plan.source.describe(), len(plan.source), plan.options, plan.model_info,
                       plan.unit, plan.fingerprints)

    # --- the batch loop ---

    def run(self, checkpoint: str | Path | None = None, every: int = 0, finish: bool = False) -> None:
        """Feed [cursor, stop) through the runtime. With a checkpoint path, save the state every `every`
        batches and on SIGINT/SIGTERM (then raise Interrupted), and when the data source fails (DataFailed); with
        `finish` too, the end-of-data scoring runs here, where a signal still saves the state (the one from before
        the finish)."""
        check_checkpoint_every(every)
        if checkpoint is not None:
            prepare_checkpoint(checkpoint)  # a file that is not a checkpoint is refused, never replaced
        self._stop_signal = None  # an API caller may run again after catching Interrupted
        bar = Progress(self.stop - self.start, enabled=self.config.progress)
        bar.update(self.cursor - self.start)
        scorer = ChunkScorer(self.config.chunk_workers)
        restore = self._catch_signals(scorer) if checkpoint is not None else {}
        if restore and hasattr(self.source, "should_stop"):  # a source that waits (decoders) checks the flag
            self.source.should_stop = lambda: (self._stop_signal or scorer.stop_signal) is not None
        self._clock = time.perf_counter()
        try:
            self._batches(checkpoint, every, scorer, bar)
            if checkpoint is not None:
                self._tick()
                self._end_or_save(checkpoint, scorer, finish)
        except DataFailed as exc:  # between batches: the state up to the last complete one is whole, keep it
            if checkpoint is None:
                raise
            self._tick()
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
        self._tick()

    def _batches(self, checkpoint, every: int, scorer: ChunkScorer, bar: Progress) -> None:
        for st in self.states:  # chunks a stopped run left unscored come first
            st.rescore(self.plan.metrics, scorer)
        for st in self.stage_states:
            st.rescore(self.plan.track_metrics, scorer)
        batches = 0
        for batch in self.source.batches(self.plan.batch_size, start=self.cursor, stop=self.stop):
            self._feed(batch, scorer, bar)
            self.live.cursor = min(self.cursor + self.plan.batch_size, self.stop)
            batches += 1
            stop = self._stop_signal or scorer.stop_signal  # the latter: a plugin raised KeyboardInterrupt
            if checkpoint is None:
                if stop is not None:
                    raise KeyboardInterrupt
                continue
            if stop is not None:
                self._tick()
                self._interrupted(checkpoint, stop, self.state(STATE_KIND_CHECKPOINT))
            if every and batches % every == 0:
                self._tick()
                self.save(checkpoint, STATE_KIND_CHECKPOINT)

    def _tick(self) -> None:
        """Add the time since the last tick to the run's seconds (which a resumed run carries on)."""
        now = time.perf_counter()
        self.live.seconds += now - self._clock
        self._clock = now

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
        plan = self.plan
        if plan.fixed_batch is not None and n != plan.batch_size:
            self.live.dropped += n  # a fixed-batch model cannot take the short last batch
            return
        arrays = self.runner.run(self.names, batch)
        block, host = self.cursor // plan.unit, plan.host_reduce
        for st, part in zip(self.states, plan.slices, strict=True):
            x, y, *rest = arrays[part]
            out = st.outputs
            split = len(rest) - len(out.shapes or ())
            jvp, shapes = rest[:split], rest[split:]
            if out.rounding is None:  # a symbolic P: this batch's shapes (Shape outputs, or the raw arrays') give it
                st.note_rounding(feature_rounding(st.site, plan.config.reduce, out.doubles,
                                                  tuple(shapes) if shapes else (x.shape, y.shape)))
            if host is not None:
                x, y = numpy_features(x, st.site, host), numpy_features(y, st.site.side("y"), host)
            st.add(x, y, plan.metrics, scorer, block=block)
            st.add_jvp(n, jvp)
        for st, part, probes in zip(self.stage_states, plan.stage_slices, plan.stage_probes, strict=True):
            h = arrays[part]
            if host is not None:
                h = [numpy_features(a, probe, host) for a, probe in zip(h, probes, strict=True)]
            x = np.concatenate(h, axis=1)
            st.add(x, x[:, :0], plan.track_metrics, scorer, block=block)
        if self.network is not None:
            self.network.add(batch, arrays[len(arrays) - len(self.network.output_names):])
        self.live.used += n
        bar.update(n)

    def _catch_signals(self, scorer: ChunkScorer) -> dict:
        """SIGINT/SIGTERM only set a flag, so the state is saved at a batch boundary, never mid-batch. The
        scorer's waits give up on it, so a stuck metric cannot hold the batch loop (its chunk is saved unscored)."""
        if threading.current_thread() is not threading.main_thread():
            return {}

        first_at = [0.0]

        def handler(signum, frame):
            if self._stop_signal is None:
                self._stop_signal = scorer.stop_signal = signum
                first_at[0] = time.monotonic()
            # `timeout`, schedulers and process groups send a signal twice at once, and SIGTERM never means
            # "hurry" (SIGKILL follows if anything): only a later Ctrl-C stops now, without saving.
            elif signum == signal.SIGINT and time.monotonic() - first_at[0] > REPEAT_SECONDS:
                raise KeyboardInterrupt

        return {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}

    # --- saved state ---

    def run_state(self, kind: str) -> RunState:
        """The live state with what a saved one needs besides the collectors: key, header, skipped files."""
        return dataclasses.replace(
            self.live, kind=kind, key=self.key(), skipped=self._skipped(), header=self._header(),
            network=None if self.network is None else self.network.to_state())

    def state(self, kind: str) -> dict:
        return self.run_state(kind).to_state()

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
        """The key checked, the saved state read by RunState.from_state into the live collectors (which keep
        their sites and outputs); the live run then takes its position and counters, the network NLC its state."""
        check_resumable(path, self.key(), saved)
        self._finished = False  # each site's state says whether it was finished
        state = RunState.from_state(saved, live=self.live, label=f"checkpoint {path}")
        if self.network is not None and state.network is not None:
            self.network.restore(state.network)
        live = self.live
        live.cursor, live.used, live.dropped, live.seconds = state.cursor, state.used, state.dropped, state.seconds
        live.skipped = state.skipped  # unreadable files of earlier sessions

    def _skipped(self) -> list:
        return self.live.skipped + list(getattr(self.source, "skipped", []))

    # --- the result ---

    def _header(self) -> dict:
        """Everything of the signature that does not come from the collectors."""
        plan = self.plan
        description = self.source.describe()  # skipped files and counts: RunState._data, from the state itself
        if self.config.shard is not None:
            description["shard"] = {"index": self.config.shard[0], "count": self.config.shard[1],
                                    "start": self.start, "stop": self.stop}
        return {
            "model": plan.model_info, "data": description, "options": plan.options,
            "runtime": {"providers": self.runner.providers, "onnxruntime": ort().__version__,
                        "threads": self.config.threads, "graph_optimization": self.config.graph_optimization},
            "metrics": {m.name: metric_info(m, plan.registry[type(m).name].origin)
                        for m in plan.metrics + plan.track_metrics},
            "warnings": list(plan.warnings),
        }

    def finish(self, scorer: ChunkScorer | None = None) -> None:
        """Score what only the end of the data can: a lone partial chunk, pooled metrics (once)."""
        if self._finished:
            return
        with ChunkScorer(self.config.chunk_workers) if scorer is None else contextlib.nullcontext(scorer) as scorer:
            for st in self.states:
                st.finish(self.plan.metrics, scorer)
            for st in self.stage_states:
                st.finish(self.plan.track_metrics, scorer)
        self._finished = True

    def signature(self) -> Signature:
        self.finish()
        sig = self.run_state(STATE_KIND_CHECKPOINT).to_signature(self.plan.metrics, self.plan.track_metrics)
        if self.live.used == 0 and self.config.shard is None:
            raise no_usable(self.plan.data, self.source)
        if self.config.shard is None:
            check_some_number(sig, self.live.used)
        return sig

"""One run's lifecycle, the same for the CLI, the Python API, studies, shards and Ray.

`open_run` builds the plan and the runtime, takes the checkpoint's lock and, as asked, continues the
checkpoint of this very run (the one resume path); `Run.execute` feeds the data window with progress, saving
the state every N batches and on SIGINT/SIGTERM (then raising Interrupted) and when the data source fails;
`Run.signature` finishes and assembles; `checkpoint.write_result` keeps the finished pass in the checkpoint until the
result is written. A shard part is the state saved unfinished (`part_state`): merging finishes once.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import onnx

from onnxaff.analysis.assemble import check_some_number
from onnxaff.analysis.checkpoint import (
    STATE_KIND_CHECKPOINT,
    STATE_KIND_PART,
    prepare,
    save_state,
)
from onnxaff.analysis.config import AnalysisConfig, check_checkpoint_every
from onnxaff.analysis.feeder import Feeder
from onnxaff.analysis.plan import Plan
from onnxaff.analysis.resume import Resume
from onnxaff.collection.scoring import MetricScorer
from onnxaff.data import no_usable
from onnxaff.errors import ConfigError, DataFailed, Interrupted, Message, StopWhileWaiting, option
from onnxaff.format.signature import Signature
from onnxaff.foundations.files import exclusive, lock_beside
from onnxaff.foundations.progress import Progress
from onnxaff.foundations.stopping import StopFlag

RESUME = ("never", "always", "auto")  # a checkpoint there is replaced / must be continued / is continued if there
ON_MISMATCH = ("refuse", "restart")  # a checkpoint of another run: an error / a note and a fresh start


def open_run(model: str | os.PathLike | onnx.ModelProto, data: str | list[str], config: AnalysisConfig | None = None, *,
             checkpoint: str | os.PathLike | None = None, resume: str = "never", on_mismatch: str = "refuse",
             echo: Callable[[str], None] | None = None, warn: Callable[[str], None] | None = None,
             **options) -> Run:
    """A prepared run (a context manager: it holds the checkpoint's lock until closed).

    A file at `checkpoint` that is not an onnxaff checkpoint is refused, never replaced. `echo` receives what a
    person may like to know (a checkpoint continued, or one of another run replaced), `warn` (default: `echo`)
    what they should read (a checkpoint replaced because no resume was asked for), as `Message`s: text naming
    configuration fields, which the CLI renders with its flags.
    """
    config = AnalysisConfig.of(config, **options)
    if resume not in RESUME:
        raise ConfigError("resume", f"{{option}} must be one of {', '.join(RESUME)}, got {resume!r}")
    if on_mismatch not in ON_MISMATCH:
        raise ConfigError("on_mismatch", f"{{option}} must be one of {', '.join(ON_MISMATCH)}, got {on_mismatch!r}")
    if resume != "never" and checkpoint is None:
        raise ConfigError("resume", "{option} needs a checkpoint path")
    held = contextlib.ExitStack()
    try:
        if checkpoint is not None:
            held.enter_context(exclusive(lock_beside(checkpoint), f"the checkpoint {checkpoint}"))
            prepare(checkpoint)
        # The data's content (every file's sha256) keys a state that is saved (a checkpoint, a shard's part); a
        # run that saves none does not read every file of its folder for it (a --limit over a large folder).
        keyed = checkpoint is not None or config.shard is not None
        run = Run(Feeder(Plan.build(model, data, config), keyed=keyed), checkpoint, held)
        note = (lambda line: echo(Message(line))) if echo else (lambda line: None)
        Resume(run.checkpoint, run.feeder).apply(resume, on_mismatch, note,
                                                 (lambda line: warn(Message(line))) if warn else note)
    except BaseException:
        held.close()
        raise
    return run


class Run:
    """A Plan executed by a Feeder, with the run's checkpoint, signals and progress."""

    def __init__(self, feeder: Feeder, checkpoint: str | os.PathLike | None, held: contextlib.ExitStack):
        self.feeder, self.plan, self.config = feeder, feeder.plan, feeder.plan.config
        self.checkpoint = None if checkpoint is None else Path(checkpoint)
        self._held = held
        self._stop = StopFlag()
        self._clock = time.perf_counter()

    state = property(lambda self: self.feeder.state)
    runner = property(lambda self: self.feeder.runner)

    def __enter__(self) -> Run:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Release the checkpoint's lock (the checkpoint itself stays until the result is written)."""
        self._held.close()

    # --- the batch loop ---

    def execute(self, every: int = 0, finish: bool = True) -> None:
        """Feed [cursor, stop) through the runtime; with `finish`, the end-of-data scores too (where a signal still
        saves the state from before the finish). With a checkpoint, the state is saved every `every` batches, on
        SIGINT/SIGTERM (raising Interrupted) and when the data source fails (DataFailed); without one, a stop
        raises KeyboardInterrupt."""
        check_checkpoint_every(every)
        self._stop = stop = StopFlag()  # an API caller may execute again after catching Interrupted
        saving = self.checkpoint is not None
        st = self.state
        bar = Progress(st.stop - st.start, enabled=self.config.progress, resumed=st.cursor - st.start)
        self._clock = time.perf_counter()
        try:
            with stop.catching() if saving else contextlib.nullcontext(), \
                    MetricScorer(self.config.chunk_workers, stop) as scorer:
                try:
                    self._batches(every, scorer, bar)
                    bar.close()  # the data are through; the end-of-data scoring has a line of its own
                    self._end(scorer, finish)
                except StopWhileWaiting:  # a stop while the source waited: at a batch boundary
                    self._stopped()
                except DataFailed as exc:  # between batches: the state up to the last complete one is whole
                    if not saving:
                        raise
                    self._data_failed(exc)
        finally:
            bar.close()
        self._tick()

    def _batches(self, every: int, scorer: MetricScorer, bar: Progress) -> None:
        feeder, plan, st = self.feeder, self.plan, self.state
        feeder.rescore(scorer)
        batches = plan.source.batches(plan.batch_size, start=st.cursor, stop=st.stop, should_stop=self._stop)
        for k, batch in enumerate(batches, 1):
            bar.update(feeder.feed(batch, scorer))
            if self._stop:
                self._stopped()
            if self.checkpoint is not None and every and k % every == 0:
                self.save()

    def _end(self, scorer: MetricScorer, finish: bool) -> None:
        """The last chunk scores (and with `finish` the pooled metrics), stoppable: a stop meanwhile saves the
        state from before the finish, so a resumed run finishes from there."""
        self.state.collect()  # gives up on a stop; the chunks not done are saved unscored
        if not finish:
            if self._stop:
                self._stopped()
            return
        before = self.saved() if self.checkpoint is not None else None
        st = self.state
        sites = Progress(len(st.sites) + len(st.stages), label="score", unit="sites",
                         enabled=self.config.progress and not self._stop)
        try:
            if not self._stop:
                st.finish(self.plan.metrics, self.plan.track_metrics, scorer, done=lambda: sites.update(1))
        except KeyboardInterrupt:
            if not self._stop:
                raise
        finally:
            sites.close()
        if self._stop:
            if before is not None:  # in memory too: a caller may execute() again after Interrupted
                self.feeder.take(before, "the state before the finish")
            self._stopped(before)

    def _stopped(self, saved: dict | None = None) -> None:
        """Save (`saved`, else the state now) and raise Interrupted; without a checkpoint, KeyboardInterrupt."""
        if self.checkpoint is None:
            raise KeyboardInterrupt
        save_state(self.checkpoint, self.saved() if saved is None else saved)
        st = self.state
        raise Interrupted(f"{signal.Signals(self._stop.signum or signal.SIGINT).name} after {st.cursor - st.start} "
                          f"of {st.stop - st.start} examples; state saved to {self.checkpoint} (continue with "
                          f"{option('resume')})")

    def _data_failed(self, exc: DataFailed) -> None:
        self.save()
        st = self.state
        raise DataFailed(f"{exc.template}; the state after {st.cursor - st.start} of {st.stop - st.start} examples "
                         f"saved to {self.checkpoint} (continue with {option('resume')})") from None

    def _tick(self) -> None:
        """Add the time since the last tick to the run's seconds (which a resumed run carries on)."""
        now = time.perf_counter()
        self.state.ran(now - self._clock)
        self._clock = now

    # --- saved state and the result ---

    def saved(self, kind: str = STATE_KIND_CHECKPOINT) -> dict:
        """The state as a file holds it (the time so far counted in), its key holding the data's content."""
        self._tick()
        self.feeder.key_content()
        return self.feeder.synced().to_state(kind)

    def save(self, path: str | os.PathLike | None = None, kind: str = STATE_KIND_CHECKPOINT) -> Path:
        return save_state(self.checkpoint if path is None else path, self.saved(kind))

    def part_state(self) -> dict:
        """This shard's collector state, unfinished: merging the parts finishes once."""
        return self.saved(STATE_KIND_PART)

    def signature(self) -> Signature:
        plan = self.plan
        state = self.feeder.synced()
        with MetricScorer(self.config.chunk_workers) as scorer:  # a part's own signature finishes here
            sig = state.to_signature(plan.metrics, plan.track_metrics, scorer)
        if self.config.shard is None:
            if state.used == 0:
                raise no_usable(plan.data, plan.source)
            check_some_number(sig, state.used)
        return sig

"""RunState: everything a run has collected, the one thing a single run, a resumed run, shards and Ray end with.

Saved as a plain dict (`to_state`, the on-disk checkpoint and part format); `merge` appends the state of the
next slice of the data, so merging the n parts of a sharded run and finishing once is exactly one run.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from onnxaff.analysis.assemble import assemble, stage_results
from onnxaff.analysis.checkpoint import STATE_KIND_CHECKPOINT, code_mismatch, key_mismatch
from onnxaff.analysis.records import SiteRecord, StageRecord
from onnxaff.analysis.statecheck import check_same_run, check_state
from onnxaff.collection.scoring import MetricScorer
from onnxaff.collection.site_state import SiteState
from onnxaff.errors import OnnxaffError, option
from onnxaff.format.signature import Signature
from onnxaff.foundations.statefields import from_state, saved, to_state, transient
from onnxaff.metrics import Metric, registry, resolve
from onnxaff.metrics.dispatch import serving
from onnxaff.metrics.loader import code_fingerprints
from onnxaff.runtime.network import merge_nlc_states, network_results


def _skipped_state(items) -> list:
    return [list(s) for s in items]


def _sites_state(states: list[SiteState]) -> list[dict]:
    return [st.to_state() for st in states]


def _sites_from(items: list[dict]) -> list[SiteState]:
    return [SiteState.from_state(d) for d in items]


def _records_state(records: list[SiteRecord] | list[StageRecord]) -> list[dict]:
    return [r.to_dict() for r in records]


def _records_from(kind: type[SiteRecord] | type[StageRecord]) -> Callable[[list[dict]], list]:
    return lambda items: [kind.from_dict(d) for d in items]


@dataclass
class RunState:
    """A run's position in its data window, its collectors and the signature header of its prepared plan.

    Saved as one flat dict derived from the fields (onnxaff.foundations.statefields): the checkpoint and part format.
    `sites`/`stages` are the collectors; `header` is the signature minus what the collectors give; `kind` says
    what a saved state is for (a checkpoint to continue, a shard part to merge). `windows`, `ragged` and
    `tail_ragged` exist only while parts are merged.
    """

    key: dict
    cursor: int
    start: int
    stop: int
    shard: tuple[int, int] | None = saved(None, encode=list, decode=tuple)
    used: int = 0
    dropped: int = 0
    skipped: list[tuple[str, str]] = saved(factory=list, encode=_skipped_state,
                                          decode=lambda s: [tuple(x) for x in s])
    seconds: float = 0.0
    sites: list[SiteState] = saved(factory=list, encode=_sites_state, decode=_sites_from)
    stages: list[SiteState] = saved(factory=list, encode=_sites_state, decode=_sites_from)
    site_records: list[SiteRecord] = saved(factory=list, encode=_records_state, decode=_records_from(SiteRecord))
    stage_records: list[StageRecord] = saved(factory=list, encode=_records_state, decode=_records_from(StageRecord))
    network: dict | None = None
    header: dict = saved(factory=dict)
    kind: str = STATE_KIND_CHECKPOINT
    windows: list[list[int]] = transient(factory=list)  # the [start, stop) of merged shards
    ragged: list[str] = transient(factory=list)  # merged shards that ended between chunk boundaries
    tail_ragged: bool = transient(False)  # this (last merged) part ended between chunk boundaries

    @property
    def indices(self) -> list[int]:
        return [st.index for st in self.sites]

    def to_state(self, kind: str | None = None) -> dict:
        """The saved form (pending chunk scores collected first), as `kind` when given."""
        d = to_state(self)
        if kind is not None:
            d["kind"] = kind
        return d

    @classmethod
    def from_state(cls, d: dict, live: RunState | None = None, label: str = "the state") -> RunState:
        """The one reader of the saved format. With `live` (the state of the same prepared run, for a resume),
        the saved window and sites must be `live`'s, and the collectors take what the run gives (site labels,
        JVP output names). A state whose counters disagree (statecheck), or of another window or site count, is
        refused (`label` names it); `live` is never changed."""
        check_state(d, label)
        if live is not None:
            if (d["start"], d["stop"]) != (live.start, live.stop):
                raise OnnxaffError(f"{label} covers examples [{d['start']}, {d['stop']}), "
                                   f"this run [{live.start}, {live.stop}) (another {option('shard')})")
            if (len(d["sites"]), len(d["stages"])) != (len(live.sites), len(live.stages)):
                raise OnnxaffError(f"{label} has {len(d['sites'])} sites, this run {len(live.sites)}")
            check_same_run(d, live, label)
        state = from_state(cls, d)
        state.tail_ragged = any(s["buffer"]["x"] is not None for s in d["sites"])
        intervals = (d.get("header") or {}).get("options", {}).get("intervals", "auto")
        given = [None] * len(state.sites + state.stages) if live is None else live.sites + live.stages
        for mine, theirs in zip(state.sites + state.stages, given, strict=True):
            mine.take_run(intervals, theirs)
        return state

    # --- the run's books: the batch loop reports what happened, the state writes its own fields ---

    def passed(self, n: int, used: bool, batch_size: int, skipped: list[tuple[str, str]]) -> None:
        """A batch whole in the state: its `n` examples used, or dropped (a fixed-batch model's short last batch),
        the cursor past it (at most the window's stop), and the unreadable files skipped so far."""
        self.used, self.dropped = (self.used + n, self.dropped) if used else (self.used, self.dropped + n)
        self.cursor, self.skipped = min(self.cursor + batch_size, self.stop), skipped

    def ran(self, seconds: float) -> None:
        """Time spent on the run (a resumed run carries it on)."""
        self.seconds += seconds

    def adopt(self, live: RunState) -> None:
        """The key, header and site and stage records of `live`: the prepared plan's, never a saved file's."""
        self.key, self.header = live.key, live.header
        self.site_records, self.stage_records = live.site_records, live.stage_records

    def rekey(self, key: dict) -> None:
        """The key again, now holding the data's content (an unkeyed run's state to be saved after all)."""
        self.key = key

    def sync_network(self, sums: dict | None) -> None:
        """The network NLC's sums as they are now (they live outside the collectors)."""
        self.network = sums

    def collect(self) -> None:
        """Every collector's finished chunk scores recorded (gives up on a stop)."""
        for st in self.sites + self.stages:
            st.collect()

    def finish(self, metrics: list[Metric], track_metrics: list[Metric], scorer: MetricScorer,
               done: Callable[[], None] | None = None) -> None:
        """The end-of-data scores of every collector (a no-op for finished ones): the one finish path; `done` is
        called after each (a progress bar's step)."""
        todo = [(st, metrics) for st in self.sites] + [(st, track_metrics) for st in self.stages]
        ahead = max(1, scorer.workers)  # the next sites' end jobs run beside this one's (not all at once: the bar)
        for k, (st, ms) in enumerate(todo):
            for later, later_ms in todo[k:k + 1 + ahead]:
                later.start_finish(later_ms, scorer)
            st.finish(ms, scorer)
            if done is not None:
                done()

    def metrics(self) -> tuple[list[Metric], list[Metric]]:
        """The site metrics and the trajectory metrics this state was collected with (plugins loaded again).

        Refused when the code of one of them is not the code the state was collected with (a plugin file edited,
        a metric package upgraded since): the collected scores and what would be scored now would mix."""
        options = self.header["options"]
        available = registry(options["plugins"])
        metrics = [m for m in resolve(options["metrics"], available=available) if not serving(m).stage]
        names = {m.spec for m in metrics}
        track_metrics = resolve([n for n in self.header["metrics"] if n not in names], available=available)
        if (what := code_mismatch(code_fingerprints(metrics + track_metrics, available), self.key.get("metrics"))):
            which = "" if self.shard is None else f" {self.shard[0]}/{self.shard[1]}"
            raise OnnxaffError(f"the {self.kind}{which} is from {what}, not the code present now: write it again "
                               f"with this code")
        return metrics, track_metrics

    def merge(self, other: RunState, metrics: list[Metric], track_metrics: list[Metric],
              scorer: MetricScorer) -> None:
        """Append `other`, the state of the data slice right after this one (a part of the same run; the parts'
        shard counts and order are checked once, by onnxaff.results.shards.merge_states)."""
        if (what := key_mismatch(self.key, other.key)) is not None:
            raise OnnxaffError(f"parts cannot be merged: one is from {what}")
        if self.tail_ragged:
            self.ragged.append(f"{self.shard[0]}/{self.shard[1]}")
        for mine, theirs, ms in ((self.sites, other.sites, metrics), (self.stages, other.stages, track_metrics)):
            for st, o in zip(mine, theirs, strict=True):
                st.merge(o, ms, scorer)
        if self.network is not None:
            self.network = merge_nlc_states([self.network, other.network])
        self.windows = (self.windows or [[self.start, self.stop]]) + [[other.start, other.stop]]
        self.used, self.dropped = self.used + other.used, self.dropped + other.dropped
        self.skipped = self.skipped + other.skipped
        self.seconds += other.seconds
        self.stop = self.cursor = other.stop
        self.shard, self.tail_ragged = other.shard, other.tail_ragged

    def to_signature(self, metrics: list[Metric], track_metrics: list[Metric],
                     scorer: MetricScorer | None = None) -> Signature:
        """Finish every collector (a no-op for finished ones) and assemble the signature."""
        with MetricScorer(0) if scorer is None else contextlib.nullcontext(scorer) as scorer:
            self.finish(metrics, track_metrics, scorer)
        data, runtime = self._data(), dict(self.header["runtime"], seconds=round(self.seconds, 3))
        if self.windows:
            runtime["seconds_is"] = "sum over the shards"
        runtime["samples_per_second"] = round(self.used / self.seconds, 2) if self.seconds > 0 else None
        network = network_results(self.network, metrics) if self.network is not None else {}
        sig = assemble({**self.header, "data": data, "runtime": runtime}, self.site_records,
                       dict(zip(self.indices, self.sites, strict=True)), metrics, network)
        if self.ragged:
            sig.warnings.append(ragged_warning(self.ragged, self.sites))
        sig.warnings += count_warning(self.used + self.dropped + len(self.skipped), self.stop - self.start, self.header)
        sig.stages = stage_results(self.stage_records, self.stages, track_metrics)
        return sig

    def _data(self) -> dict:
        data = dict(self.header["data"])
        if self.windows:
            data.pop("shard", None)
        data.update(samples=self.used, dropped=self.dropped)
        if self.windows:
            data["merged_from"] = {"shards": len(self.windows), "windows": self.windows}
        if "skipped" in data:
            root = Path(data["source"])
            data["skipped"] = [{"file": Path(f).relative_to(root).as_posix(), "reason": r} for f, r in self.skipped]
        return data


def ragged_warning(ragged: list[str], sites: list[SiteState]) -> str:
    """Merged shards that ended between chunk boundaries, and what can put them there: unreadable files, a
    fixed batch size, and rows masks left out (a part's kept rows then end off the boundary too)."""
    causes = ["unreadable files", "dropped batches"]
    if any(st.observed.masked_rows for st in sites):
        causes.append("rows masks left out")
    why = ", ".join(causes[:-1]) + " or " + causes[-1]
    return f"shard(s) {', '.join(ragged)} ended between chunk boundaries ({why}): the merged chunks there differ " \
           "from one run's"


def count_warning(given: int, declared: int, header: dict) -> list[str]:
    """A source that gave other examples (used, dropped, unreadable) than its length declares (a checked third-party
    source is refused for it: onnxaff.data.guarded): the scores are of what it gave; a shard or a resume splits by
    the declared count."""
    if given == declared:
        return []
    data = header.get("data") or {}
    what = f"{data.get('kind') or 'data'} source {data.get('source') or ''}".rstrip()
    return [f"the {what} gave {given} examples (used, dropped and unreadable) where its length declares "
            f"{declared}: the scores are of the {given}; a shard or a resumed run splits the data by the declared "
            "count"]

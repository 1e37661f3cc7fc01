"""RunState: everything a run has collected, the one thing a single run, a resumed run, shards and Ray end with.

Saved as a plain dict (`to_state`, the on-disk checkpoint and part format); `merge` appends the state of the
next slice of the data, so merging the n parts of a sharded run and finishing once is exactly one run.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path

from onnxaff.analysis.assemble import assemble, stage_results
from onnxaff.analysis.checkpoint import code_mismatch, key_mismatch
from onnxaff.analysis.statecheck import check_same_run, check_state
from onnxaff.collect import ChunkBuffer
from onnxaff.errors import OnnxaffError
from onnxaff.metrics import Metric, registry, resolve
from onnxaff.metrics.dispatch import serving
from onnxaff.metrics.loader import code_fingerprints
from onnxaff.network import merge_nlc_states, network_results
from onnxaff.scoring import ChunkScorer
from onnxaff.signature import Signature
from onnxaff.site_state import SiteState


@dataclass
class RunState:
    """A run's position in its data window, its collectors and the signature header of its prepared plan.

    `sites`/`stages` are the collectors (live ones during a run, rebuilt ones from a file); `header` is the
    signature minus what the collectors give; `windows` lists the [start, stop) of merged shards.
    """

    kind: str
    key: dict
    cursor: int
    start: int
    stop: int
    shard: tuple[int, int] | None
    used: int
    dropped: int
    skipped: list[tuple[str, str]]
    seconds: float
    sites: list[SiteState]
    stages: list[SiteState]
    sites_base: list[dict]
    stages_base: list[dict]
    network: dict | None
    header: dict
    indices: list[int] = field(default_factory=list)  # the site index of each collector
    windows: list[list[int]] = field(default_factory=list)
    ragged: list[str] = field(default_factory=list)  # merged shards that ended between chunk boundaries
    tail_ragged: bool = False  # this (last merged) part ended between chunk boundaries

    def to_state(self) -> dict:
        return {
            "kind": self.kind, "key": self.key, "cursor": self.cursor, "start": self.start, "stop": self.stop,
            "shard": None if self.shard is None else list(self.shard), "used": self.used, "dropped": self.dropped,
            "skipped": [list(s) for s in self.skipped], "seconds": self.seconds,
            "sites": [st.to_state() for st in self.sites], "stages": [st.to_state() for st in self.stages],
            "stages_base": self.stages_base, "sites_base": self.sites_base, "network": self.network,
            "signature": self.header,
        }

    @classmethod
    def from_state(cls, d: dict, live: RunState | None = None, label: str = "the state") -> RunState:
        """The one reader of the saved format. With `live` (the live state of the same prepared run, for --resume),
        `live`'s collectors are restored in place and become the returned state's: they keep the site/outputs links
        a saved state lacks. A state whose counters disagree (statecheck), or of another window or site count, is
        refused (`label` names it) before anything of `live` changes."""
        check_state(d, label)
        state = cls(
            kind=d["kind"], key=d["key"], cursor=d["cursor"], start=d["start"], stop=d["stop"],
            shard=None if d["shard"] is None else tuple(d["shard"]), used=d["used"], dropped=d["dropped"],
            skipped=[tuple(s) for s in d["skipped"]], seconds=d["seconds"], sites=[], stages=[],
            sites_base=d["sites_base"], stages_base=d["stages_base"], network=d["network"], header=d["signature"],
            indices=[s["index"] for s in d["sites"]],
            tail_ragged=any(s["buffer"]["x"] is not None for s in d["sites"]),
        )
        if live is None:
            state.sites = [SiteState(None, None, ChunkBuffer(s["buffer"]["size"])) for s in d["sites"]]
            state.stages = [SiteState(None, None, ChunkBuffer(s["buffer"]["size"])) for s in d["stages"]]
        else:
            if (state.start, state.stop) != (live.start, live.stop):
                raise OnnxaffError(f"{label} covers examples [{state.start}, {state.stop}), "
                                   f"this run [{live.start}, {live.stop}) (another --shard)")
            if (len(d["sites"]), len(d["stages"])) != (len(live.sites), len(live.stages)):
                raise OnnxaffError(f"{label} has {len(d['sites'])} sites, this run {len(live.sites)}")
            check_same_run(d, live, label)
            state.sites, state.stages = live.sites, live.stages
        for st, saved in zip(state.sites + state.stages, d["sites"] + d["stages"], strict=True):
            st.restore(saved)
        return state

    def metrics(self) -> tuple[list[Metric], list[Metric]]:
        """The site metrics and the trajectory metrics this state was collected with (plugins loaded again).

        Refused when the code of one of them is not the code the state was collected with (a plugin file edited,
        a metric package upgraded since): the collected scores and what would be scored now would mix."""
        options = self.header["options"]
        available = registry(options["plugins"])
        metrics = [m for m in resolve(options["metrics"], available=available) if not serving(m).stage]
        names = {m.name for m in metrics}
        track_metrics = resolve([n for n in self.header["metrics"] if n not in names], available=available)
        if (what := code_mismatch(code_fingerprints(metrics + track_metrics, available), self.key.get("metrics"))):
            which = "" if self.shard is None else f" {self.shard[0]}/{self.shard[1]}"
            raise OnnxaffError(f"the {self.kind}{which} is from {what}, not the code present now: write it again "
                               f"with this code")
        return metrics, track_metrics

    def merge(self, other: RunState, metrics: list[Metric], track_metrics: list[Metric],
              scorer: ChunkScorer) -> None:
        """Append `other`, the state of the data slice right after this one (a part of the same run)."""
        if (what := key_mismatch(self.key, other.key)) is not None:
            raise OnnxaffError(f"parts cannot be merged: one is from {what}")
        if other.shard is None or self.shard is None or other.shard[1] != self.shard[1]:
            raise OnnxaffError("parts come from different shard counts")
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
                     scorer: ChunkScorer | None = None) -> Signature:
        """Finish every collector (a no-op for finished ones) and assemble the signature."""
        with ChunkScorer(0) if scorer is None else contextlib.nullcontext(scorer) as scorer:
            for st in self.sites:
                st.finish(metrics, scorer)
            for st in self.stages:
                st.finish(track_metrics, scorer)
        data, runtime = self._data(), dict(self.header["runtime"], seconds=round(self.seconds, 3))
        if self.windows:
            runtime["seconds_is"] = "sum over the shards"
        runtime["samples_per_second"] = round(self.used / self.seconds, 2) if self.seconds > 0 else None
        network = network_results(self.network, metrics) if self.network is not None else {}
        sig = assemble({**self.header, "data": data, "runtime": runtime}, self.sites_base,
                       dict(zip(self.indices, self.sites, strict=True)), metrics, network)
        if self.ragged:  # unreadable files or a fixed batch size left a part short of a chunk boundary
            sig.warnings.append(f"shard(s) {', '.join(self.ragged)} ended between chunk boundaries (unreadable files "
                                f"or dropped batches): the merged chunks there differ from one run's")
        sig.stages = stage_results(self.stages_base, self.stages, track_metrics)
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

"""The batch loop's one job: a Plan's batches through the runtime, each site's rows handed to its collector
(how rows become chunks and scores: onnxaff.collection.chunks). Signals, checkpoints and progress are the run's
(onnxaff.analysis.lifecycle), not the feeder's.
"""

from __future__ import annotations

import numpy as np

from onnxaff.analysis.batchrun import BatchRunner
from onnxaff.analysis.budget import rows_per_example
from onnxaff.analysis.checkpoint import run_key
from onnxaff.analysis.plan import Plan, chunk_sizes
from onnxaff.analysis.runstate import RunState
from onnxaff.analysis.statecheck import check_ranges
from onnxaff.collection.chunks import site_chunk_rows
from onnxaff.collection.scoring import MetricScorer
from onnxaff.collection.site_state import SiteState
from onnxaff.data import examples_in
from onnxaff.graph.masks import numpy_masked
from onnxaff.graph.reduction import (
    feature_rounding,
    graph_mode,
    host_batch_first,
    numpy_features,
    sample_rows,
    sampled,
)
from onnxaff.metrics import metric_info
from onnxaff.runtime.network import EXAMPLES as NLC_EXAMPLES
from onnxaff.runtime.network import NetworkNLC
from onnxaff.runtime.sessions import ort


class Feeder:
    """A Plan, the runtime sessions that execute it (`batches`), and the RunState its batches fill."""

    runner = property(lambda self: self.batches.runner)  # the augmented model's session

    def __init__(self, plan: Plan, keyed: bool = True):
        self.plan, self.keyed = plan.check(), keyed  # keyed: the state's key holds the data's content (it may be saved)
        config = plan.config
        # One run's network NLC uses the first EXAMPLES examples: a shard takes its part of those (batch-aligned,
        # as shard boundaries are), so the merged parts use exactly one run's examples.
        self.network = (NetworkNLC(plan.loaded, plan.source.varying, config.device,
                                   examples=max(0, NLC_EXAMPLES - plan.start), threads=config.threads,
                                   directions=config.nlc_directions, graph_optimization=config.graph_optimization)
                        if plan.needs_jvp else None)
        self.batches = BatchRunner(plan, self.network.output_names if self.network is not None else [])
        self.rows_per_example = [rows_per_example(s, plan.config.reduce, plan.outputs[s.index].mask)
                                 for s in plan.ok_sites]
        self.state = self.fresh_state()
        self.earlier_skipped: list[tuple[str, str]] = []  # unreadable files of the sessions before a resume

    def fresh_state(self) -> RunState:
        plan = self.plan
        sites = []
        examples = len(plan.source) - (len(plan.source) % plan.batch_size if plan.fixed_batch is not None else 0)
        sizes = chunk_sizes(plan.ok_sites, plan.stage_probes, plan.config)  # 1: D symbolic, set by the first batch
        for s, per, size in zip(plan.ok_sites, self.rows_per_example, sizes, strict=False):
            out = plan.outputs[s.index]
            jvp = None if out.jvp is None else (out.jvp.form, out.jvp.names)
            sites.append(SiteState.open(size, index=s.index, label=f"site {s.id}",
                                        rounding=out.rounding, jvp=jvp, intervals=plan.config.intervals,
                                        expected_rows=None if per is None else per * examples))
        stages = [SiteState.open(size, label=f"stage {k}", tracks=len(probes), intervals=plan.config.intervals)
                  for k, (probes, size) in enumerate(zip(plan.stage_probes, sizes[len(sites):], strict=True))]
        return RunState(key=self._key(), cursor=plan.start, start=plan.start, stop=plan.stop,
                        shard=plan.config.shard, sites=sites, stages=stages,
                        site_records=plan.site_records(), stage_records=plan.stage_records(),
                        header=self._header())

    def _key(self) -> dict:
        """What a saved state must match to be continued or merged: model, data, options, plugin files, the code
        of each metric used."""
        plan = self.plan
        reading = {s.id: s.params["batch_axis"] for s in plan.sites if s.params.get("batch_axis")}
        return run_key(plan.data, plan.source.describe(), len(plan.source), plan.options, plan.model_info,
                       plan.unit, plan.fingerprints, reading, content=self.keyed)

    def _header(self) -> dict:
        """Everything of the signature that does not come from the collectors (skipped files and counts come
        from the state: RunState._data)."""
        plan, config = self.plan, self.plan.config
        description = plan.source.describe()
        if config.shard is not None:
            description["shard"] = {"index": config.shard[0], "count": config.shard[1],
                                    "start": plan.start, "stop": plan.stop}
        return {
            "model": plan.model_info, "data": description, "options": plan.options,
            "runtime": {"providers": self.batches.runner.providers, "onnxruntime": ort().__version__,
                        "threads": config.threads, "graph_optimization": config.graph_optimization},
            "metrics": {m.spec: metric_info(m, plan.registry[type(m).name].origin)
                        for m in plan.metrics + plan.track_metrics},
            "warnings": list(plan.warnings),
        }

    def rescore(self, scorer: MetricScorer) -> None:
        """Chunks a stopped run left unscored come first."""
        for st in self.state.sites:
            st.rescore(self.plan.metrics, scorer)
        for st in self.state.stages:
            st.rescore(self.plan.track_metrics, scorer)

    def feed(self, batch: dict, scorer: MetricScorer) -> int:
        """One batch through the runtime and into the collectors; returns the examples used."""
        n = examples_in(batch, self.plan.inputs)
        plan = self.plan
        if n == 0 or (plan.fixed_batch is not None and n != plan.batch_size):
            # every file of this batch was unreadable (they are counted by the source), or a fixed-batch model
            # cannot take the short last batch
            self._passed(n, used=False)
            return 0
        self._rows(batch, n, scorer)
        self._passed(n, used=True)
        return n

    def _passed(self, n: int, used: bool) -> None:
        """Past a batch whole in the state: its examples, the cursor, the files the source skipped so far."""
        self.state.passed(n, used, self.plan.batch_size, self.earlier_skipped + list(self.plan.source.skipped))

    def _rows(self, batch: dict, n: int, scorer: MetricScorer) -> None:
        plan, state = self.plan, self.state
        block, host = state.cursor // plan.unit, plan.host_reduce
        arrays, feeds = self.batches.arrays(batch, n, state.cursor)
        for k, (st, site, part) in enumerate(zip(state.sites, plan.ok_sites, feeds.slices, strict=True)):
            out = feeds.outputs[site.index]
            x, y, jvp, shapes, missing = out.unpack(arrays[part])
            if out.rounding is None:  # a symbolic P: this batch's shapes (Shape outputs, or the raw arrays') give it
                st.observed.note_rounding(feature_rounding(site, graph_mode(plan.config.reduce), out.doubles,
                                                       tuple(shapes) if shapes else (x.shape, y.shape)))
            if host is not None and not out.reduced and out.mask is not None:
                x, y, missing = numpy_masked(*host_batch_first(x, y, site), host, out.mask, batch)
                missing = [missing]
            elif host is not None and not out.reduced:
                x, y = numpy_features(x, site, host), numpy_features(y, site.side("y"), host)
            gone = np.logical_or.reduce([np.asarray(m) > 0 for m in missing]) if missing else None
            # K positions per example, by its index (a site drawn in the graph has them already: the same rows)
            if out.sample is None and (k_sampled := sampled(plan.config.reduce)) is not None:
                rows = sample_rows(plan.config.seed, state.cursor, n, x.shape[0], k_sampled, gone)
                x, y, gone = x[rows], y[rows], None if gone is None else gone[rows]
            if st.expected_rows is not None and x.shape[0] != n * self.rows_per_example[k]:
                st.forget_expected_rows()  # not the rows the shapes promised: the site's halves wait for the end
            sized(st, plan.config.chunk_size, x, y)
            st.add(x, y, plan.metrics, scorer, block=block, missing=gone)
            st.add_jvp(n, jvp)
        for st, part, probes in zip(state.stages, feeds.stage_slices, plan.stage_probes, strict=True):
            h = arrays[part]
            if host is not None:
                h = [numpy_features(a, probe, host) for a, probe in zip(h, probes, strict=True)]
            x = np.concatenate(h, axis=1)
            if (k_sampled := sampled(plan.config.reduce)) is not None:  # the sites' rule: K positions an example
                x = x[sample_rows(plan.config.seed, state.cursor, n, x.shape[0], k_sampled)]
            sized(st, plan.config.chunk_size, x)
            st.add(x, x[:, :0], plan.track_metrics, scorer, block=block)
        if self.network is not None:
            self.network.add(batch, arrays[len(arrays) - len(self.network.output_names):])

    def take(self, saved: dict, label: str) -> None:
        """Continue from a saved state of this very run (RunState.from_state refuses any other, changing
        nothing); the network NLC takes its part."""
        state = RunState.from_state(saved, live=self.state, label=label)
        check_ranges(saved, {m.spec: tuple(m.range) for m in self.plan.metrics + self.plan.track_metrics}, label)
        if self.network is not None and state.network is not None:
            self.network.restore(state.network)
        state.adopt(self.state)  # what the plan itself says, never the file's
        self.state, self.earlier_skipped = state, list(state.skipped)

    def key_content(self) -> None:
        """The key with the data's content, once a state of an unkeyed run is to be saved after all (run.save)."""
        if not self.keyed:
            self.keyed = True
            self.state.rekey(self._key())

    def synced(self) -> RunState:
        """The state with what lives outside the collectors: the network NLC's sums."""
        self.state.sync_network(None if self.network is None else self.network.to_state())
        return self.state


def sized(st: SiteState, chunk_size, *features: np.ndarray) -> None:
    """Under chunk_size "Kd" a site whose D is symbolic (opened with 1-row chunks) takes its chunk size from its
    first batch's features."""
    st.size_chunks(site_chunk_rows(chunk_size, tuple(f.shape[1] for f in features)))

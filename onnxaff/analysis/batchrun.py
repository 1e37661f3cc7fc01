"""A batch's arrays out of onnxruntime: the augmented model's session, the index inputs of the sites that draw
their sample:K positions in the graph, and the model that exports whole maps for a batch whose shapes are not the
ones the gathers were laid out for (its positions drawn on the host instead: the same rows either way)."""

from __future__ import annotations

import numpy as np

from onnxaff.analysis.plan import Plan
from onnxaff.errors import OnnxaffError
from onnxaff.graph.reduction import sample_index, sample_layout, sampled
from onnxaff.runtime.sessions import Runner


class BatchRunner:
    """`extra`: output names of the original model run beside the augmented one's (the network NLC's)."""

    def __init__(self, plan: Plan, extra: list[str]):
        config = plan.config
        self.plan, self.extra = plan, list(extra)
        self.runner = Runner(plan.loaded, plan.augmented, device=config.device, threads=config.threads,
                             graph_optimization=config.graph_optimization)
        self.names = list(plan.names) + self.extra
        # sample:K drawn in the graph: each index input the augmented model takes, with its layout (one per layout)
        self.sample_inputs = dict(plan.outputs[s.index].sample for s in plan.ok_sites
                                  if plan.outputs[s.index].sample is not None)
        self.host_runner: Runner | None = None  # for a batch whose shapes are not the probe's (_drawn_hold)
        self.host_only = False  # a batch did not fit the gathers: this and every later batch the host's way

    @property
    def seconds(self) -> float:
        """Seconds spent in onnxruntime so far, both models (the dry run's calibration)."""
        return self.runner.seconds + (self.host_runner.seconds if self.host_runner is not None else 0.0)

    def run(self, batch: dict, n: int, first: int) -> list[np.ndarray]:
        """The augmented model's arrays for a batch of `n` examples, the first at index `first` of the data (what
        the positions drawn in the graph are seeded by)."""
        if self.sample_inputs:
            config = self.plan.config
            k = sampled(config.reduce)
            batch = {**batch, **{name: sample_index(config.seed, first, n, k, layout)
                                 for name, layout in self.sample_inputs.items()}}
        return self.runner.run(self.names, batch)

    def arrays(self, batch: dict, n: int, first: int):
        """(arrays, feeds): the augmented model's, or, for a batch its gathers do not fit (and every batch after
        it: a model whose maps vary would otherwise run twice a batch), the host model's with its own Feeds."""
        if not self.host_only:
            try:
                arrays = self.run(batch, n, first)
            except OnnxaffError:
                if not self.sample_inputs:
                    raise
                arrays = None  # positions beyond a smaller map: the host way (which says a real failure)
            if arrays is not None and (not self.sample_inputs or self._drawn_hold(arrays, n)):
                return arrays, self.plan
            self.host_only = True
        return self._host_arrays(batch)

    def _drawn_hold(self, arrays: list[np.ndarray], n: int) -> bool:
        """Whether every site drawn in the graph has, in this batch (its Shape outputs), the layout its gathers
        were laid out for and the batch's n examples on axis 0, so its gathered rows are the positions it was meant
        to draw (a map holding the examples twice, or one fewer, keeps static dims after axis 0 all the same)."""
        plan = self.plan
        for site, part in zip(plan.ok_sites, plan.slices, strict=True):
            out = plan.outputs[site.index]
            if out.sample is None:
                continue
            shapes = out.unpack(arrays[part])[3]
            for side, shape in zip((site.side("x"), site.side("y")), shapes, strict=True):
                if int(shape[0]) != n or sample_layout(side, shape) != out.sample[1]:
                    return False
        return True

    def _host_arrays(self, batch: dict):
        """A batch through the model whose sites all export their positions (drawn on the host): (arrays, feeds)."""
        plan, config = self.plan, self.plan.config
        feeds = plan.host_feeds
        if self.host_runner is None:
            self.host_runner = Runner(plan.loaded, feeds.augmented, device=config.device, threads=config.threads,
                                      graph_optimization=config.graph_optimization)
        return self.host_runner.run(list(feeds.names) + self.extra, batch), feeds

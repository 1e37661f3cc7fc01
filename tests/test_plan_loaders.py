"""The plan as loaders (onnxaff/analysis/loaders.py, issue 48): each step built alone from values or other
loaders, once and only when asked; a Plan builds nothing until a part is read, and no data are read while
planning: only the first batch, at the run's start, where the graph cannot say a rank or the fed shapes."""

from __future__ import annotations

import numpy as np
import pytest

from onnxaff.analysis import loaders as ld
from onnxaff.analysis.config import AnalysisConfig
from onnxaff.analysis.feeder import Feeder
from onnxaff.analysis.plan import Plan
from onnxaff.data.arrays import Arrays
from onnxaff.errors import ConfigError, OnnxaffError
from onnxaff.graph.load import from_proto
from tests.builders import HEADER, chain, mlp, with_weights
from tests.conftest import parse

CONFIG = AnalysisConfig(metrics=("affinity",), chunk_size=32, batch_size=8, reduce="mean", progress=False)

# A dynamic Reshape: static inference misses the rank of the Tanh's input (its shape comes from a batch).
UNKNOWN_RANK = parse("""<ir_version: 8, opset_import: ["" : 17]>
g (float[N, 4] x) => (float y) <int64 one = {1}, int64[1] zero = {0}, int64[1] m1 = {-1}> {
  r = Relu(x)
  sh = Shape(r)
  rk = Size(sh)
  rk1 = Sub(rk, one)
  e = Unsqueeze(rk1, zero)
  head = Slice(sh, zero, e)
  t = Concat<axis=0>(head, m1)
  q = Reshape(r, t)
  u = Tanh(q)
  y = ReduceSum<keepdims=0>(u)
}""")


@pytest.fixture
def reads(monkeypatch) -> list[int]:
    """Every batch an array source yields, by its size: the data the run read."""
    drawn, batches = [], Arrays.batches

    def counted(self, *args, **kwargs):
        for batch in batches(self, *args, **kwargs):
            drawn.append(len(next(iter(batch.values()))))
            yield batch

    monkeypatch.setattr(Arrays, "batches", counted)
    return drawn


@pytest.fixture
def npy(tmp_path) -> str:
    """40 examples of an input x [N, 8] (the mlp's), as a .npy file."""
    path = tmp_path / "x.npy"
    np.save(path, np.random.default_rng(1).standard_normal((40, 8)).astype(np.float32))
    return str(path)


@pytest.fixture
def npy4(tmp_path) -> str:
    path = tmp_path / "x4.npy"
    np.save(path, np.random.default_rng(2).standard_normal((20, 4)).astype(np.float32))
    return str(path)


def test_a_loader_builds_once_when_first_called_and_takes_a_value_or_a_loader(rng):
    model = mlp(rng)
    load = ld.LoadModel(model)
    assert not load.built
    loaded = load()
    assert load.built and load() is loaded and loaded.model.graph.name == model.graph.name
    by_loader, by_value = ld.ListSites(load, CONFIG)(), ld.ListSites(from_proto(model), CONFIG)()
    assert [s.kind for s in by_loader.sites] == [s.kind for s in by_value.sites] == ["relu", "tanh"]


def test_inputs_and_sites_alone_and_their_refusals():
    loaded = from_proto(chain("Relu", "Tanh"))
    assert [i.name for i in ld.ModelInputs(loaded, CONFIG)()] == ["x"]
    with pytest.raises(OnnxaffError, match="the model has no non-linearity to analyse"):
        ld.ListSites(from_proto(chain("Neg", "Identity")), CONFIG)()
    constants = parse('<ir_version: 8, opset_import: ["" : 17]> g () => (float[N, 2] y) '
                      "<float[1, 2] c = {1.0, -1.0}, int64[2] s = {3, 2}> { e = Expand(c, s)  y = Tanh(e) }")
    with pytest.raises(OnnxaffError, match="the model has no inputs"):
        ld.ModelInputs(from_proto(constants), CONFIG)()


def test_metrics_alone(rng):
    sites = ld.ListSites(from_proto(mlp(rng)), CONFIG)()
    m = ld.ResolveMetrics(AnalysisConfig(metrics=("affinity", "r2"), chunk_size=32), sites)()
    assert [x.spec for x in m.sites] == m.asked == ["affinity", "r2"] and m.stages == []
    assert set(m.fingerprints) == {"affinity", "r2"} and "affinity" in m.registry
    with pytest.raises(ConfigError, match="needs chunks of at least"):
        ld.ResolveMetrics(AnalysisConfig(metrics=("affinity_bc",), chunk_size=6), sites)()


def test_the_source_opens_and_the_first_batch_is_read_once(rng, npy, reads):
    loaded = from_proto(mlp(rng))
    inputs = ld.ModelInputs(loaded, CONFIG)()
    source = ld.OpenSource(npy, CONFIG, inputs, loaded)()
    assert len(source) == 40 and reads == []  # opened, nothing read
    first = ld.FirstBatch(npy, source, inputs, CONFIG)
    batch = first()
    assert first() is batch and first.required() is batch and reads == [8]
    assert np.array_equal(batch["x"], np.load(npy)[:8])


def test_settled_sites_read_a_batch_only_for_a_rank_inference_missed(npy4, reads):
    known = from_proto(chain("Relu", "Tanh"))
    inputs = ld.ModelInputs(known, CONFIG)()
    first = ld.FirstBatch(npy4, ld.OpenSource(npy4, CONFIG, inputs, known), inputs, CONFIG)
    settled = ld.SettleSites(known, ld.ListSites(known, CONFIG), first, CONFIG)()
    assert [s.kind for s in settled.ok] == ["relu", "tanh"] and reads == [] and not first.built
    loaded = from_proto(UNKNOWN_RANK)
    listed = ld.ListSites(loaded, CONFIG)()
    assert [s.ok for s in listed.sites] == [True, False]
    first = ld.FirstBatch(npy4, ld.OpenSource(npy4, CONFIG, inputs, loaded), inputs, CONFIG)
    settled = ld.SettleSites(loaded, listed, first, CONFIG)()
    assert settled.ok == listed.sites and settled.ok[1].input_shape == ["N", 4] and reads == [8]


def test_stages_alone():
    from tests.test_pairs_blocks import residual_stage

    config = AnalysisConfig(blocks=("residual",), layout="auto")
    loaded = from_proto(residual_stage([[0.5, 0.25]] * 2))
    listed = ld.ListSites(loaded, config)()
    (stage,) = ld.Stages(loaded, listed, config)()
    assert stage.ok and stage.tensors == ["x", "h0", "h1"]
    assert [p.index for p in stage.probes] == [len(listed.sites) + k for k in range(3)]
    assert ld.Stages(loaded, ld.ListSites(loaded, CONFIG), CONFIG)() == []


def test_the_augmented_model_feeds_each_site_its_outputs(rng):
    loaded = from_proto(mlp(rng))
    sites = ld.ListSites(loaded, CONFIG)
    settled = ld.SettleSites(loaded, sites, None, CONFIG)  # no rank to resolve: no first batch asked
    feeds = ld.Augment(loaded, settled, ld.Stages(loaded, sites, CONFIG), ld.ResolveMetrics(CONFIG, sites), CONFIG)()
    assert set(feeds.names) <= {o.name for o in feeds.augmented.graph.output}
    for site, part in zip(settled().ok, feeds.slices, strict=True):
        assert list(feeds.names[part]) == feeds.outputs[site.index].names
    assert feeds.stage_slices == feeds.stage_probes == ()


def test_the_model_info_counts_macs_on_the_first_batch_only_where_the_source_cannot_say_its_shapes(
        tmp_path, monkeypatch, reads):
    """A Conv over a symbolic H x W: its MACs on the shapes the run feeds, the source's own (arrays), else its
    first batch's (an image folder's come from decoding), read once for whatever asks."""
    model = with_weights(HEADER + """ g (float[N, 1, H, W] x) => (float[N, 2, H2, W2] y) {
        c = Conv(x, w)
        y = Relu(c)
    }""", w=np.ones((2, 1, 3, 3), np.float32))
    np.save(tmp_path / "img.npy", np.ones((20, 1, 5, 5), np.float32))
    plan = Plan.build(model, str(tmp_path / "img.npy"), CONFIG)
    known = plan.model_info
    assert known["stats"]["macs"] == 2 * 9 * 3 * 3 and known["sites_ok"] == 1 and reads == []
    monkeypatch.setattr(Arrays, "example_shapes", lambda self: {})  # as an image folder
    plan = Plan.build(model, str(tmp_path / "img.npy"), CONFIG)
    plan.loaders.sites(), plan.loaders.source()
    assert reads == []
    assert plan.model_info == known and reads == [8]
    plan.ok_sites, plan.unit, plan.augmented  # noqa: B018
    assert reads == [8]


def test_the_plan_builds_nothing_until_a_part_is_read(rng, npy, reads):
    plan = Plan.build(mlp(rng), npy, CONFIG)
    loaders = [plan.loaders.load, plan.loaders.inputs, plan.loaders.sites, plan.loaders.metrics,
               plan.loaders.source, plan.loaders.first, plan.loaders.settled, plan.loaders.stages,
               plan.loaders.budget, plan.loaders.feeds, plan.loaders.model_info]
    assert not any(x.built for x in loaders)
    assert [s.kind for s in plan.sites] == ["relu", "tanh"]
    assert [x.built for x in loaders] == [True, False, True, False, False, False, True, False, False, False, False]
    assert plan.stages == [] and not plan.loaders.feeds.built
    assert reads == []


def test_no_example_is_read_while_planning(rng, npy, reads):
    """Planning, and every part of the plan a run reads before its first batch, read no example; the run's
    batches are its own."""
    plan = Plan.build(mlp(rng), npy, CONFIG).check()
    for name in ("loaded", "inputs", "sites", "ok_sites", "stages", "metrics", "track_metrics", "fingerprints",
                 "source", "augmented", "names", "slices", "model_info", "slow_chunks", "data", "batch_size",
                 "warnings", "unit", "start", "stop", "options"):
        getattr(plan, name)
    feeder = Feeder(plan, keyed=False)
    assert reads == [] and not plan.loaders.first.built
    assert (plan.unit, plan.start, plan.stop, feeder.state.cursor) == (32, 0, 40, 0)


def test_a_rank_inference_missed_is_resolved_at_the_runs_start(npy4, reads):
    plan = Plan.build(UNKNOWN_RANK, npy4, CONFIG)
    for name in ("loaded", "inputs", "metrics", "source", "data", "batch_size"):
        getattr(plan, name)
    plan.loaders.sites(), plan.loaders.stages()
    assert reads == []  # planning
    feeder = Feeder(plan, keyed=False)  # the run's start: the first batch, once, for the rank
    assert reads == [8] and [s.status for s in plan.sites] == ["ok", "ok"]
    assert plan.sites[1].params["shape_from"].startswith("a probe batch") and feeder.state.cursor == 0


def test_a_refusal_comes_at_the_runs_start_in_the_order_before(npy4):
    plan = Plan.build(chain("Neg", "Identity"), "no such data", CONFIG)  # planning refuses nothing
    with pytest.raises(OnnxaffError, match="no non-linearity"):  # the sites before the data
        plan.check()

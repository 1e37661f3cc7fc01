"""reduce="sample:K" drawn inside the augmented graph: a Gather at host-computed indices (graph.reduction.sample_index)
gives, value for value, the rows the host draws from the whole `positions` map (sample_rows), so scores do not
depend on which path a site took; sites the graph cannot draw from (a symbolic dim, a mask, the examples off
axis 0, a residual stage's tracks) keep the host's draw."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxaff
from onnxaff.analysis.config import AnalysisConfig
from onnxaff.analysis.feeder import Feeder
from onnxaff.analysis.plan import Plan
from onnxaff.collection.scoring import MetricScorer
from onnxaff.graph import augment_model, discover_sites
from onnxaff.graph.reduction import sample_index, sample_layout, sample_rows
from tests.builders import save
from tests.conftest import run
from tests.test_rows_protocol import CIN, SEED, N, S, conv_model

K = 16


def mixed_model(rng, dims=(6, 5), elem=TensorProto.FLOAT) -> onnx.ModelProto:
    """Channels-first maps [n, 4, H, W] (Conv, Relu), the same moved channels-last (Transpose, Tanh) and a rank-3
    [n, H·W, 4] tensor (Reshape, Sigmoid): three layouts, each with more positions than K when H·W > 16."""
    h, w = dims
    shape = ["n", 3, h, w]
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("Transpose", ["r"], ["t"], perm=[0, 2, 3, 1]),
        helper.make_node("Tanh", ["t"], ["u"]),
        helper.make_node("Reshape", ["u", "shape"], ["v"]),
        helper.make_node("Sigmoid", ["v"], ["y"]),
    ]
    inits = [numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32) / 3, "w"),
             numpy_helper.from_array(rng.standard_normal(4).astype(np.float32) / 4, "b"),
             numpy_helper.from_array(np.array([0, -1, 4], np.int64), "shape")]
    graph = helper.make_graph(nodes, "mixed", [helper.make_tensor_value_info("x", elem, shape)],
                              [helper.make_tensor_value_info("y", elem, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model)


def host_rows(full: dict, raw_outs, site, first: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The host's draw: every position's row ([n·P, D], the feature axis moved last), then sample_rows."""
    sides = []
    for side in ("x", "y"):
        a, axis = full[getattr(raw_outs[site.index], side)], site.side(side).feature_axis
        sides.append(np.moveaxis(a, axis, -1).reshape(-1, a.shape[axis]))
    rows = sample_rows(SEED, first, n, sides[0].shape[0], K)
    return sides[0][rows], sides[1][rows]


@pytest.mark.parametrize("first", [0, 37])
def test_the_graph_draws_the_host_rows_value_for_value(rng, first):
    model = mixed_model(rng)
    sites = [s for s in discover_sites(model) if s.ok]
    assert len(sites) == 3 and {s.rank for s in sites} == {3, 4}
    aug, outs = augment_model(model, sites, "positions", sample=K, sample_sites={s.index for s in sites})
    onnx.checker.check_model(aug, full_check=True)
    raw, raw_outs = augment_model(model, sites, "positions", raw=True)
    n = 5
    x = rng.standard_normal((n, 3, 6, 5)).astype(np.float32)
    feeds = {"x": x}
    for s in sites:
        name, layout = outs[s.index].sample
        assert layout == sample_layout(s)
        feeds[name] = sample_index(SEED, first, n, K, layout)
    got, full = run(aug, feeds), run(raw, {"x": x})
    for s in sites:
        want_x, want_y = host_rows(full, raw_outs, s, first, n)
        assert got[outs[s.index].x].shape == (n * K, s.input_shape[s.feature_axis])
        assert np.array_equal(got[outs[s.index].x], want_x) and np.array_equal(got[outs[s.index].y], want_y)


def test_fewer_positions_than_k_draws_them_all(rng):
    model = mixed_model(rng, dims=(3, 3))  # 9 positions an example
    sites = [s for s in discover_sites(model) if s.ok]
    aug, outs = augment_model(model, sites, "positions", sample=K, sample_sites={s.index for s in sites})
    raw, raw_outs = augment_model(model, sites, "positions", raw=True)
    x = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    feeds = {"x": x, **{outs[s.index].sample[0]: sample_index(SEED, 0, 4, K, outs[s.index].sample[1])
                        for s in sites}}
    got, full = run(aug, feeds), run(raw, {"x": x})
    for s in sites:
        want_x, _ = host_rows(full, raw_outs, s, 0, 4)
        assert len(want_x) == 4 * 9 and np.array_equal(got[outs[s.index].x], want_x)


def test_sites_the_graph_cannot_draw_from_keep_the_host_path(rng):
    """A symbolic H, W: P is not known before a batch; a site not listed in sample_sites (a stage's track)."""
    model = mixed_model(rng, dims=("h", "w"))
    sites = [s for s in discover_sites(model) if s.ok]
    _, outs = augment_model(model, sites, "positions", sample=K, sample_sites={s.index for s in sites})
    assert all(outs[s.index].sample is None for s in sites)
    model = mixed_model(rng)
    sites = [s for s in discover_sites(model) if s.ok]
    aug, outs = augment_model(model, sites, "positions", sample=K, sample_sites={sites[0].index})
    assert outs[sites[0].index].sample is not None and all(outs[s.index].sample is None for s in sites[1:])
    assert [i.name for i in aug.graph.input] == ["x", outs[sites[0].index].sample[0]]
    _, outs = augment_model(model, sites, "positions", sample=K, sample_sites={s.index for s in sites}, raw=True)
    assert all(outs[s.index].sample is None for s in sites)


def test_an_analysis_scores_the_same_numbers_either_way(rng, tmp_path):
    """The default protocol with the positions drawn in the graph, and with the whole maps reduced on the host
    (reduce_in="numpy", which draws on the host): every number equal, bit for bit."""
    model = save(conv_model(rng), tmp_path / "m.onnx")
    x = rng.standard_normal((N, CIN, S, S)).astype(np.float32)
    np.savez(tmp_path / "data.npz", x=x)
    runs = [onnxaff.analyze(model, str(tmp_path / "data.npz"), progress=False, seed=SEED, batch_size=24,
                            reduce_in=where) for where in ("graph", "numpy")]
    for a, b in zip(runs[0].sites, runs[1].sites, strict=True):
        assert a["status"] == "ok" and a["rows"] == N * K
        assert a["metrics"] == b["metrics"]


def feeders(model, tmp_path, x):
    """A feeder per path over the same data: positions drawn in the graph, and on the host (reduce_in="numpy")."""
    path = save(model, tmp_path / "m.onnx")
    np.savez(tmp_path / "data.npz", x=x)
    return [Feeder(Plan.build(path, str(tmp_path / "data.npz"),
                              AnalysisConfig(metrics=["affinity"], seed=SEED, batch_size=len(x), reduce_in=where)))
            for where in ("graph", "numpy")]


def scores(feeder: Feeder) -> list:
    for st in feeder.state.sites:
        st.collect()
    return [st.scores.values for st in feeder.state.sites]


def test_symbolic_maps_are_drawn_at_the_probe_shapes_and_a_batch_of_others_goes_the_host_way(rng, tmp_path):
    """Shape inference leaves H and W symbolic; the first batch's shapes let the graph draw (one index input a
    layout), every batch is checked against them, and a batch of other shapes goes through the model that exports
    whole maps (drawn on the host): the scores are those of the host path all along."""
    model = mixed_model(rng, dims=("h", "w"))
    n = 8
    graph, host = feeders(model, tmp_path, rng.standard_normal((n, 3, 6, 5)).astype(np.float32))
    assert all(graph.plan.outputs[s.index].sample for s in graph.plan.ok_sites) and not host.batches.sample_inputs
    assert set(graph.batches.sample_inputs.values()) == {(4, 30, 30), (4, 30, 1)}  # channels first; last, and rank 3
    with MetricScorer(workers=0) as scorer:
        for dims in ((6, 5), (8, 5), (6, 5), (7, 4)):  # more positions than the probe's, then fewer
            batch = {"x": rng.standard_normal((n, 3, *dims)).astype(np.float32)}
            for f in (graph, host):
                assert f.feed(dict(batch), scorer) == n
            first_odd = dims == (6, 5) and graph.state.used == n
            assert (graph.batches.host_runner is None) == first_odd  # the host model: only from the first odd batch on
        assert [st.observed.rows for st in graph.state.sites] == [st.observed.rows for st in host.state.sites]
        assert scores(graph) == scores(host) and all(v for v in scores(graph))


def batch_mixed_model(rng, kind: str) -> onnx.ModelProto:
    """Conv, then a tensor whose axis 0 is not the batch's n although shape inference keeps its other dims static:
    the examples twice (Concat of the map and its negation, or Tile ×2) or one example fewer (Slice); then the
    sites (Relu, Tanh) on it."""
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1])]
    if kind == "concat":
        nodes += [helper.make_node("Neg", ["c"], ["m"]), helper.make_node("Concat", ["c", "m"], ["cc"], axis=0)]
    elif kind == "tile":
        nodes += [helper.make_node("Tile", ["c", "reps"], ["cc"])]
    else:
        nodes += [helper.make_node("Slice", ["c", "start", "end", "axis"], ["cc"])]
    nodes += [helper.make_node("Relu", ["cc"], ["r"]), helper.make_node("Tanh", ["r"], ["y"])]
    inits = [numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32) / 3, "w"),
             numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b"),
             numpy_helper.from_array(np.array([2, 1, 1, 1], np.int64), "reps"),
             *(numpy_helper.from_array(np.array([v], np.int64), k)
               for k, v in (("start", 0), ("end", -1), ("axis", 0)))]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, 6, 5])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model)


@pytest.mark.parametrize("kind", ["concat", "tile", "slice"])
def test_a_map_whose_first_axis_is_not_the_batch_goes_the_host_way(rng, tmp_path, kind):
    """Only the dims after axis 0 make a site's layout, so a map holding the examples twice (or one fewer) looked
    drawable: its gather read the first n slices only (other rows, other scores: Relu 0.6191 against the host's
    0.6674), or indices past a smaller map (an error on the CPU, zeros on a GPU). Every drawn site's shape is
    checked against the batch, and a batch that fails goes through the whole-map model, as do the batches after
    it; the dry run's re-run of a batch takes the same way."""
    from onnxaff.analysis.cost import estimate

    path = save(batch_mixed_model(rng, kind), tmp_path / "m.onnx")
    np.savez(tmp_path / "d.npz", x=rng.standard_normal((48, 3, 6, 5)).astype(np.float32))
    runs = [onnxaff.analyze(path, str(tmp_path / "d.npz"), progress=False, seed=3, batch_size=16,
                            metrics=["affinity"], chunk_size=64, reduce_in=where) for where in ("graph", "numpy")]
    assert [s["status"] for s in runs[0].sites] == ["ok", "ok"]
    for a, b in zip(runs[0].sites, runs[1].sites, strict=True):
        assert a["rows"] == b["rows"] and a["metrics"] == b["metrics"]
    assert estimate(path, str(tmp_path / "d.npz"), AnalysisConfig(batch_size=16, metrics=["affinity"],
                                                                  chunk_size=64, seed=3)).sites

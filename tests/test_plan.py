"""The plan of a run (onnxaff/analysis/plan.py), built without running a batch: the shard windows, which
augmented outputs feed which site, the batch size a model fixes, and the refusals before any work."""

from __future__ import annotations

import math

import pytest

from onnxaff.analysis.config import AnalysisConfig
from onnxaff.analysis.plan import Plan, shard_window
from onnxaff.errors import OnnxaffError
from tests.builders import chain, mlp
from tests.conftest import parse


@pytest.mark.parametrize("unit", [1, 3, 8, 64])
@pytest.mark.parametrize("n", [1, 2, 3, 5, 7])
def test_shards_split_whole_units_evenly_and_the_last_takes_the_tail(unit, n):
    for total in list(range(0, 3 * n * unit + 2)) + [1000, 1001, 4097]:
        windows = [shard_window(total, (i, n), unit) for i in range(n)]
        examples = [e for start, stop in windows for e in range(start, stop)]
        assert examples == list(range(total)), (total, windows)  # in order, each once, nothing left out
        assert all(start % unit == 0 for start, _ in windows)
        assert all(stop % unit == 0 for _, stop in windows[:-1]) and windows[-1][1] == total
        whole = [(stop - start) // unit for start, stop in windows[:-1]] + [(total - windows[-1][0]) // unit]
        assert max(whole) - min(whole) <= 1 and sum(whole) == total // unit, (total, windows)
        assert shard_window(total, None, unit) == (0, total)


def test_outputs_feed_each_site_in_order(rng):
    config = AnalysisConfig(metrics=("affinity",), chunk_size=32, batch_size=8, progress=False)
    plan = Plan.build(mlp(rng), "synthetic:gaussian:n=100", config)
    assert [s.kind for s in plan.sites] == ["relu", "tanh"] and plan.ok_sites == plan.sites
    produced = {o.name for o in plan.augmented.graph.output}
    assert set(plan.names) <= produced and len(set(plan.names)) == len(plan.names)
    assert [sl.start for sl in plan.slices] == [0, plan.slices[0].stop] and plan.slices[-1].stop == len(plan.names)
    for site, sl in zip(plan.ok_sites, plan.slices, strict=True):
        assert list(plan.names[sl]) == plan.outputs[site.index].names
    assert (plan.batch_size, plan.fixed_batch, plan.warnings) == (8, None, ())
    assert plan.unit == 32 and (plan.start, plan.stop) == (0, 100)
    assert plan.model_info["sites"] == 2 and plan.model_info["stats"]["parameters"] == 8 * 16 + 16 + 16 * 4


def test_a_fixed_batch_model_sets_the_batch_and_the_shard_unit():
    config = AnalysisConfig(metrics=("affinity",), chunk_size=6, batch_size=64, progress=False, shard=(1, 2))
    plan = Plan.build(chain("Relu", dims="4, 3"), "synthetic:gaussian:n=50", config)
    assert (plan.batch_size, plan.fixed_batch) == (4, 4)
    assert plan.warnings == ("the model's batch size is fixed at 4: batches of 4",)
    assert plan.unit == math.lcm(6, 4) and (plan.start, plan.stop) == (24, 50)
    assert plan.options["batch_size"] == 4


def test_a_model_without_sites_or_inputs_is_refused():
    config = AnalysisConfig(progress=False)
    with pytest.raises(OnnxaffError, match="the model has no non-linearity to analyse"):
        Plan.build(chain("Neg", "Identity"), "synthetic:gaussian:n=8", config).check()
    constants = parse('<ir_version: 8, opset_import: ["" : 17]> g () => (float[N, 2] y) '
                      "<float[1, 2] c = {1.0, -1.0}, int64[2] s = {3, 2}> { e = Expand(c, s)  y = Tanh(e) }")
    with pytest.raises(OnnxaffError, match="the model has no inputs"):
        Plan.build(constants, "synthetic:gaussian:n=8", config).check()

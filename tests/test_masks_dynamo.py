"""A causal mask folded into a constant (what the dynamo exporter writes) masks its softmax as a computed one does.

The dynamo exporter computes a causal mask from static shapes at export time and writes it as one float
initializer [B, 1, T, T] (−3.4e38 above the diagonal) beside the weights, in external data; a quantizer stores it
as integers and a scale. Before, such a softmax was no masked site and its float32 feature means overflowed: NaN
in every row. tests/fixtures/build_causal.py builds tiny GPT-2 and Llama decoders through both torch exporters.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import onnxaff
from onnxaff.graph import load_model
from onnxaff.graph.masks import THRESHOLD, site_masks
from onnxaff.graph.sites import find_sites
from tests.builders import HEADER, with_weights
from tests.test_affinity import brute_force_affinity

CAUSAL = Path(__file__).parent / "fixtures" / "causal"
FMIN = float(np.finfo(np.float32).min)
N, H, T, C = 160, 2, 66, 4  # T·T = 4356 mask values: more than the 4096 of a constant read anywhere upstream


def decoder_scores(path: Path, data: Path) -> list[tuple]:
    sig = onnxaff.analyze(path, str(data), metrics=["affinity"], batch_size=2, chunk_size=64, progress=False,
                          chunk_workers=0)
    return [(s["kind"], s["status"], s["metrics"]["affinity"]["mean"]) for s in sig.sites]


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_dynamo_causal_softmax_scores_as_the_torchscript_export(name, tmp_path):
    """The same weights through both exporters: the same sites, every score finite, within 1e-5 (measured: GPT-2
    equal, Llama within 2e-9: the exporters order a few float32 operations differently)."""
    dynamo = onnx.load(CAUSAL / f"{name}_dynamo.onnx", load_external_data=False)
    folded = [t for t in dynamo.graph.initializer if list(t.dims) == [2, 1, 48, 48]]
    assert len(folded) == 1 and folded[0].data_location == onnx.TensorProto.EXTERNAL  # the form this holds
    ids = np.random.default_rng(3).integers(0, 64, (64, 48))
    np.savez(tmp_path / "ids.npz", input_ids=ids)
    script = decoder_scores(CAUSAL / f"{name}_torchscript.onnx", tmp_path / "ids.npz")
    folded = decoder_scores(CAUSAL / f"{name}_dynamo.onnx", tmp_path / "ids.npz")
    assert [s[:2] for s in folded] == [s[:2] for s in script]
    assert sum(kind == "softmax" for kind, _, _ in script) == 2
    assert all(status == "ok" and np.isfinite(score) for _, status, score in folded)
    assert [s[2] for s in folded] == pytest.approx([s[2] for s in script], abs=1e-5)


# Scores plus an added constant: a folded mask (causal), a bias without mask values, or the constant behind a Mul.
ADDED = HEADER + f""" g (float[N, {H}, {T}, {C}] x) => (float[N, {H}, {T}, {C}] y) {{
    q = MatMul(x, wq)
    k = MatMul(x, wk)
    kt = Transpose<perm=[0, 1, 3, 2]>(k)
    s = MatMul(q, kt)
    z = Add(s, added)
    p = Softmax<axis=-1>(z)
    y = MatMul(p, x)
}}"""
SCALED = ADDED.replace("z = Add(s, added)", "z = Mul(s, added)")
QUANTIZED = ADDED.replace("z = Add(s, added)", "m = DequantizeLinear(added, scale, zero)\n    z = Add(s, m)")


def causal() -> np.ndarray:
    return np.where(np.tril(np.ones((T, T), bool)), 0.0, FMIN).astype(np.float32)[None, None]


def added_model(rng, added: np.ndarray, text: str = ADDED, **more) -> onnx.ModelProto:
    return with_weights(text, wq=rng.standard_normal((C, C)).astype(np.float32),
                        wk=rng.standard_normal((C, C)).astype(np.float32), added=added, **more)


def written(model: onnx.ModelProto, folder: Path, external: bool = True) -> Path:
    """The model saved to folder (a copy: onnx.save moves the tensors of the one it is given to external data)."""
    path, copy = folder / "m.onnx", onnx.ModelProto()
    copy.CopyFrom(model)
    onnx.save(copy, path, save_as_external_data=external, location="m.onnx.data", size_threshold=0)
    return path


def masked(path: Path, base_dir: bool = True) -> dict:
    loaded = load_model(path)
    return site_masks(loaded.view, find_sites(loaded.view), None, loaded.base_dir if base_dir else None)


def test_a_folded_mask_in_external_data_masks_its_softmax(rng, tmp_path):
    path = written(added_model(rng, causal()), tmp_path)
    got = masked(path)
    assert len(got) == 1 and next(iter(got.values())).threshold == THRESHOLD
    assert masked(path, base_dir=False) == {}  # without the model's folder the constant is not read


def test_a_folded_mask_stored_inline_or_quantized_masks_its_softmax(rng, tmp_path):
    assert len(masked(written(added_model(rng, causal()), tmp_path, external=False))) == 1
    scale = np.float32(-FMIN / 127)  # int8 −127 · scale is the mask value again, 0 is 0
    q = np.where(causal() < 0, -127, 0).astype(np.int8)
    model = added_model(rng, q, QUANTIZED, scale=np.array(scale), zero=np.array(0, np.int8))
    assert len(masked(written(model, tmp_path))) == 1


@pytest.mark.parametrize("form", ["per_axis_no_zero_point", "per_axis_one_of_shape_1", "per_block"])
def test_a_folded_mask_quantized_per_axis_or_block_masks_its_softmax(form, rng, tmp_path):
    q = np.where(causal() < 0, -127, 0).astype(np.int8)
    text, more = QUANTIZED.replace("DequantizeLinear(added, scale, zero)", "DequantizeLinear<axis=3>(added, scale)"), {}
    if form == "per_axis_no_zero_point":  # one scale per key; the zero point left out (0)
        more["scale"] = np.linspace(1.0, 2.0, T).astype(np.float32) * np.float32(-FMIN / 254)
    elif form == "per_axis_one_of_shape_1":
        more["scale"] = np.array([-FMIN / 127], np.float32)
    else:  # opset 21: a scale per block of 8 keys, of q's rank
        text = text.replace('"" : 17', '"" : 21').replace("<axis=3>", "<axis=3, block_size=8>")
        text = text.replace("DequantizeLinear<axis=3, block_size=8>(added, scale)",
                            "DequantizeLinear<axis=3, block_size=8>(added, scale, zero)")
        more["scale"] = np.full((1, 1, T, -(-T // 8)), -FMIN / 127, np.float32)
        more["zero"] = np.zeros((1, 1, T, -(-T // 8)), np.int8)
    assert len(masked(written(added_model(rng, q, text, **more), tmp_path))) == 1


def test_dequantize_parameters_that_do_not_fit_are_no_mask_and_no_crash(rng, tmp_path):
    q = np.where(causal() < 0, -127, 0).astype(np.int8)
    text = QUANTIZED.replace("DequantizeLinear(added, scale, zero)", "DequantizeLinear<axis=3>(added, scale, zero)")
    model = added_model(rng, q, text, scale=np.ones(T - 1, np.float32),  # one scale short of the axis
                        zero=np.zeros(T - 1, np.int8))
    assert masked(written(model, tmp_path, external=False)) == {}


def test_a_mask_constant_node_of_floats_masks_its_softmax(rng, tmp_path):
    """Constant<value_floats=...> (and value_float), not only a tensor attribute, holds mask values."""
    text = ADDED.replace("z = Add(s, added)", f"m = Constant<value_floats=[0.0, {FMIN}]>()\n"
                         "    m1 = Slice(m, one, two)\n    z = Add(s, m1)")
    model = added_model(rng, np.zeros((), np.float32), text, one=np.array([1], np.int64),
                        two=np.array([2], np.int64))
    assert len(masked(written(model, tmp_path, external=False))) == 1


def test_a_computed_mask_through_quantize_dequantize_masks_its_softmax(rng, tmp_path):
    """quantize_static's QDQ form of a computed mask: Where → QuantizeLinear (int8) → DequantizeLinear → Softmax;
    the integer tensor between carries the mask value (before, only float tensors did and this softmax was NaN)."""
    text = ADDED.replace("z = Add(s, added)", "w = Where(keep, s, neg)\n    wq8 = QuantizeLinear(w, scale, zero)\n"
                         "    z = DequantizeLinear(wq8, scale, zero)")
    model = added_model(rng, np.zeros((), np.float32), text, keep=np.tril(np.ones((T, T), bool)),
                        neg=np.array(FMIN, np.float32), scale=np.array(-FMIN / 127, np.float32),
                        zero=np.array(0, np.int8))
    assert len(masked(written(model, tmp_path, external=False))) == 1


@pytest.mark.parametrize("case", ["bias", "behind_mul"])
def test_no_mask_where_nothing_masking_is_added(case, rng, tmp_path):
    """(A folded mask of more than 2²⁴ values is read in parts: tests/test_masks_effect.py.)"""
    if case == "bias":  # an added constant of ordinary values
        model = added_model(rng, rng.standard_normal((1, 1, T, T)).astype(np.float32))
    else:  # mask-like values that scale the scores are no mask and are not read
        model = added_model(rng, causal(), SCALED)
    assert masked(written(model, tmp_path)) == {}


def test_the_folded_mask_is_scored_over_its_unmasked_positions(rng, tmp_path):
    """End to end on the external-data file: the brute force's features are the float64 means over the unmasked
    positions of the raw softmax input and output (axes H and the queries; D = T keys)."""
    model = added_model(rng, causal())
    path = written(model, tmp_path)
    x = rng.standard_normal((N, H, T, C)).astype(np.float32)
    z, p = fetched(model, {"x": x}, "z", "p")
    keep = np.broadcast_to(z > FMIN / 2, z.shape)
    fx = np.where(keep, z, 0).sum(axis=(1, 2)) / keep.sum(axis=(1, 2))
    fy = np.where(keep, p, 0).sum(axis=(1, 2)) / keep.sum(axis=(1, 2))
    np.savez(tmp_path / "x.npz", x=x)
    sig = onnxaff.analyze(path, str(tmp_path / "x.npz"), metrics=["affinity"], chunk_size=N, reduce="mean",
                          progress=False)
    site = next(s for s in sig.sites if s["kind"] == "softmax")
    assert site["status"] == "ok" and np.isfinite(site["metrics"]["affinity"]["mean"])
    assert site["metrics"]["affinity"]["mean"] == pytest.approx(brute_force_affinity(fx, fy), rel=1e-9)


def test_the_folded_mask_leaves_its_masked_query_rows_unscored_by_default(rng, tmp_path):
    """The default (sample:16) on the external-data file: of the H·T = 132 query rows of an example only the last
    query of each head holds no masked key; the draw takes those two before any masked row (docs/statistics.md),
    so an example gives H rows and 16 − H are left out, counted. The brute force: those rows of the raw z and p."""
    model = added_model(rng, causal())
    path = written(model, tmp_path)
    x = rng.standard_normal((N, H, T, C)).astype(np.float32)
    z, p = fetched(model, {"x": x}, "z", "p")
    assert not (z[:, :, -1] <= FMIN / 2).any() and (z[:, :, :-1] <= FMIN / 2).any(axis=-1).all()
    np.savez(tmp_path / "x.npz", x=x)
    sig = onnxaff.analyze(path, str(tmp_path / "x.npz"), metrics=["affinity"], chunk_size=N * H, progress=False)
    site = next(s for s in sig.sites if s["kind"] == "softmax")
    entry = site["metrics"]["affinity"]
    assert site["status"] == "ok" and entry["status"] == "ok" and entry["chunks"] == 1
    assert site["rows"] == N * H and entry["masked_rows"] == N * (16 - H)
    want = brute_force_affinity(z[:, :, -1].reshape(N * H, T), p[:, :, -1].reshape(N * H, T))
    assert entry["mean"] == pytest.approx(want, rel=1e-6)  # raw float32 rows: tests/test_masks_sampled.py's


def fetched(model: onnx.ModelProto, feeds: dict, *names: str) -> list[np.ndarray]:
    import onnxruntime as ort

    exposed = onnx.shape_inference.infer_shapes(model)
    known = {vi.name: vi for vi in exposed.graph.value_info}
    exposed.graph.output.extend(known[n] for n in names)
    session = ort.InferenceSession(exposed.SerializeToString(), providers=["CPUExecutionProvider"])
    return [a.astype(np.float64) for a in session.run(list(names), feeds)]


def test_the_fixture_mask_is_the_causal_one():
    """What the builder's docstring says the dynamo export holds: −3.4e38 exactly above the diagonal."""
    model = onnx.load(CAUSAL / "gpt2_dynamo.onnx")
    mask = next(numpy_helper.to_array(t) for t in model.graph.initializer if list(t.dims) == [2, 1, 48, 48])
    want = np.where(np.tril(np.ones((48, 48), bool)), 0.0, FMIN)
    assert np.array_equal(mask, np.broadcast_to(want, mask.shape))

"""Masks by effect (issue 50): any constant that drives exp to 0 in the softmax masks, whichever an exporter wrote.

Identical causal attentions scored 0.5705 with a −inf mask, 0.2374 with −1.6e38 and 0.5568 with −1e9 or −10000:
only values ≤ −1.7e38 were read as masks. Every such constant (≤ −1e4, onnxaff/graph/masks.py derives the bound)
must give the −inf mask's score. The same model and data with another constant give the same unmasked scores and
the same softmax outputs (exp(s + c − m) is exactly 0 for each), so the scores are compared to the bit (measured:
equal). Also: no numpy RuntimeWarning from a −inf mask, and a folded mask of more than 2²⁴ values (a causal mask
past 4,096 tokens) masks its softmax instead of reading "NaN/Inf in the features".
"""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import pytest

import onnxaff
from onnxaff.graph import load_model
from onnxaff.graph.masks import THRESHOLD, site_masks
from onnxaff.graph.sites import find_sites
from tests.builders import HEADER, with_weights
from tests.test_affinity import brute_force_affinity

FMIN = float(np.finfo(np.float32).min)
N, H, T, C = 40, 2, 6, 4
CONSTANTS = [-1.6e38, -1e9, -1e4, FMIN]  # what the hostile tester's exporters wrote, and transformers' finfo.min
# The rows an example gives the causal softmax: the paper's mean, one; the default's sample:16 draws all H·T = 12
# query rows and leaves out each that holds a masked key: the last query of each head is left, H rows.
PROTOCOLS = {"mean": ({"reduce": "mean"}, 1), "default": ({}, H)}

# Scores, the mask written by a Where (transformers) or added (a folded causal mask, BERT's (1 − m)·c), Softmax.
WHERE = HEADER + """ g ({t}[N, {H}, {T}, {C}] x) => ({t}[N, {H}, {T}, {C}] y) {{
    q = MatMul(x, wq)
    k = MatMul(x, wk)
    kt = Transpose<perm=[0, 1, 3, 2]>(k)
    s = MatMul(q, kt)
    z = Where(causal, s, neg)
    p = Softmax<axis=-1>(z)
    y = MatMul(p, x)
}}"""
ADDED = WHERE.replace("z = Where(causal, s, neg)", "z = Add(s, neg)")


def attention(kind: str, neg: float, dtype=np.float32, seed: int = 0) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)  # the same weights for every constant
    w = {n: rng.standard_normal((C, C)).astype(dtype) for n in ("wq", "wk")}
    tril = np.tril(np.ones((T, T), bool))
    text = (WHERE if kind == "where" else ADDED).format(t="float16" if dtype == np.float16 else "float", H=H, T=T,
                                                        C=C)
    if kind == "where":
        return with_weights(text, causal=tril, neg=np.array(neg, dtype), **w)
    with np.errstate(invalid="ignore"):  # 0 · −inf: where() picks 0 there
        added = np.where(tril, 0.0, neg).astype(dtype)[None, None]
    return with_weights(text, neg=added, **w)


def score(model: onnx.ModelProto, tmp_path, reduce_in: str = "graph", x: np.ndarray | None = None,
          **options) -> dict:
    onnx.save(model, tmp_path / "m.onnx")
    if x is not None:
        np.savez(tmp_path / "x.npz", x=x)
    sig = onnxaff.analyze(tmp_path / "m.onnx", str(tmp_path / "x.npz"), metrics=["affinity"], progress=False,
                          chunk_size=512, reduce_in=reduce_in, **options)
    return next(s for s in sig.sites if s["kind"] == "softmax")


@pytest.mark.parametrize("protocol", sorted(PROTOCOLS))
@pytest.mark.parametrize("reduce_in", ["graph", "numpy"])
@pytest.mark.parametrize("kind", ["where", "added"])
def test_every_mask_constant_scores_as_the_inf_mask(kind, reduce_in, protocol, tmp_path):
    """Before: 0.2374 (−1.6e38), 0.5568 (−1e9, −1e4) against 0.5705 for −inf, all "ok" (means)."""
    options, per_example = PROTOCOLS[protocol]
    x = np.random.default_rng(1).standard_normal((N, H, T, C)).astype(np.float32)
    reference = score(attention(kind, -np.inf), tmp_path, reduce_in, x, **options)
    assert reference["status"] == "ok" and np.isfinite(reference["metrics"]["affinity"]["mean"])
    for neg in CONSTANTS:
        got = score(attention(kind, neg), tmp_path, reduce_in, **options)
        assert got["status"] == "ok", (neg, got)
        assert got["metrics"]["affinity"]["mean"] == reference["metrics"]["affinity"]["mean"], neg
        assert got["rows"] == reference["rows"] == N * per_example


def test_the_inf_mask_score_is_the_hand_masked_one(tmp_path):
    """The reference itself, independently: the raw z and p, masked positions (−inf) dropped by hand in float64."""
    import onnxruntime as ort

    x = np.random.default_rng(1).standard_normal((N, H, T, C)).astype(np.float32)
    model = attention("where", -np.inf)
    exposed = onnx.shape_inference.infer_shapes(model)
    exposed.graph.output.extend(v for v in exposed.graph.value_info if v.name in ("z", "p"))
    z, p = (a.astype(np.float64) for a in ort.InferenceSession(exposed.SerializeToString()).run(["z", "p"], {"x": x}))
    keep = np.isfinite(z)
    fx, fy = ((np.where(keep, a, 0).sum(axis=(1, 2)) / keep.sum(axis=(1, 2))) for a in (z, p))
    got = score(model, tmp_path, x=x, reduce="mean")["metrics"]["affinity"]["mean"]
    assert got == pytest.approx(brute_force_affinity(fx, fy), rel=1e-9)  # test_masks.py's tolerance, same route


def test_float16_masks_by_effect_too(tmp_path):
    """float16: −10000 and −65504 (its lowest) drive exp to 0 as −inf does (before: only ≤ −32752 was a mask)."""
    x = np.random.default_rng(2).standard_normal((N, H, T, C)).astype(np.float16)
    reference = score(attention("where", -np.inf, np.float16), tmp_path, x=x)
    assert reference["status"] == "ok"
    for neg in (-65504.0, -1e4):
        got = score(attention("where", neg, np.float16), tmp_path)
        assert got["status"] == "ok" and got["metrics"]["affinity"]["mean"] == reference["metrics"]["affinity"]["mean"]


def test_scores_far_from_any_mask_are_never_masked(tmp_path):
    """The threshold sits below any genuine score: scores down to about −3,000 behind a Where that masks nothing
    (so the site can hold masks) keep every position, and score as the plain mean of every position; under the
    default, every one of the H·T query rows of each example is a row."""
    import onnxruntime as ort

    x = (np.random.default_rng(3).standard_normal((N, H, T, C)) * 11).astype(np.float32)
    rng = np.random.default_rng(0)
    w = {n: rng.standard_normal((C, C)).astype(np.float32) for n in ("wq", "wk")}
    model = with_weights(WHERE.format(t="float", H=H, T=T, C=C), causal=np.ones((T, T), bool),
                         neg=np.array(-np.inf, np.float32), **w)
    exposed = onnx.shape_inference.infer_shapes(model)
    exposed.graph.output.extend(v for v in exposed.graph.value_info if v.name in ("z", "p"))
    z, p = (a.astype(np.float64) for a in ort.InferenceSession(exposed.SerializeToString()).run(["z", "p"], {"x": x}))
    assert -5000 < z.min() < -2000  # genuine scores this low stay data
    site = score(model, tmp_path, x=x, reduce="mean")
    assert site["status"] == "ok" and site["metrics"]["affinity"].get("masked_rows", 0) == 0
    want = brute_force_affinity(z.mean(axis=(1, 2)), p.mean(axis=(1, 2)))
    assert site["metrics"]["affinity"]["mean"] == pytest.approx(want, rel=1e-9)
    site = score(model, tmp_path)
    assert site["status"] == "ok" and site["metrics"]["affinity"].get("masked_rows", 0) == 0
    assert site["rows"] == N * H * T and site["metrics"]["affinity"]["chunks"] == 1
    want = brute_force_affinity(z.reshape(-1, T), p.reshape(-1, T))
    assert site["metrics"]["affinity"]["mean"] == pytest.approx(want, rel=1e-6)  # test_masks_sampled.py's
    path = tmp_path / "m.onnx"
    loaded = load_model(path)
    (mask,) = site_masks(loaded.view, find_sites(loaded.view), None).values()
    assert mask.threshold == THRESHOLD == -5000.0


def test_an_inf_mask_leaks_no_runtime_warning(tmp_path, capfd):
    """Before: "RuntimeWarning: invalid value encountered in multiply" from the island pass (−inf · slope)."""
    x = np.random.default_rng(1).standard_normal((N, H, T, C)).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        site = score(attention("where", -np.inf), tmp_path, x=x)
        score(attention("added", -np.inf), tmp_path)
    assert site["status"] == "ok"
    assert "Warning" not in capfd.readouterr().err


BIG = 4097  # a causal mask of 4097 × 4097 > 2²⁴ values, sliced to the T keys and queries the scores have
SLICED = ADDED.replace("z = Add(s, neg)", "a = Slice(neg, zeros, ends, axes)\n    z = Add(s, a)")


def big_mask_model(neg: np.ndarray) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w = {n: rng.standard_normal((C, C)).astype(np.float32) for n in ("wq", "wk")}
    return with_weights(SLICED.format(t="float", H=H, T=T, C=C), neg=neg, zeros=np.zeros(2, np.int64),
                        ends=np.array([T, T], np.int64), axes=np.array([2, 3], np.int64), **w)


@pytest.mark.parametrize("external", [False, True])
def test_a_mask_of_more_than_2_24_values_masks_its_softmax(external, tmp_path):
    """Before: the constant was not read (over 2²⁴ values), the site was no masked site, and its float32 means of
    −3.4e38 read "NaN/Inf in the features". Now it is read in parts, inline or from external data, and scores
    as the same mask of T × T values."""
    big = np.zeros((1, 1, BIG, BIG), np.float32)
    big[0, 0][np.triu_indices(BIG, 1)] = FMIN
    model = big_mask_model(big)
    del big
    path = tmp_path / "m.onnx"
    onnx.save(model, path, save_as_external_data=external, location="m.onnx.data", size_threshold=1 << 20)
    loaded = load_model(path)
    assert len(site_masks(loaded.view, find_sites(loaded.view), None, loaded.base_dir)) == 1
    x = np.random.default_rng(1).standard_normal((N, H, T, C)).astype(np.float32)
    np.savez(tmp_path / "x.npz", x=x)
    sig = onnxaff.analyze(path, str(tmp_path / "x.npz"), metrics=["affinity"], progress=False, chunk_size=512)
    got = next(s for s in sig.sites if s["kind"] == "softmax")
    small = tmp_path / "small"
    small.mkdir()
    want = score(attention("added", FMIN), small, x=x)
    assert got["status"] == "ok", got
    assert got["metrics"]["affinity"]["mean"] == want["metrics"]["affinity"]["mean"]

"""Masked positions (onnxaff.graph.masks): a softmax input's mask values and a padding input's padded tokens are
left out of the features; a row without positions is dropped and counted (docs/metrics.md, "Masked positions").

Every score is checked against a brute-force computation here: the raw softmax (or Tanh) input and output fetched
from onnxruntime, the masked positions dropped by hand in float64, scored by the independent affinity of
tests/test_affinity.py. The features here are means over positions (reduce="mean", asked for where the default
would read rows); the default's sampled positions with masks: tests/test_masks_sampled.py.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest

import onnxaff
from onnxaff.errors import OnnxaffError
from onnxaff.graph import load_model
from onnxaff.graph.masks import site_masks
from tests.builders import HEADER, save, with_weights
from tests.conftest import FIXTURES, one_line_error, run, run_cli
from tests.test_affinity import brute_force_affinity

FMIN = float(np.finfo(np.float32).min)
N, H, T, C = 40, 2, 6, 4

# A causal attention map [N, H, T, T] (Where with finfo.min, as transformers writes it) and its softmax.
CAUSAL = HEADER + f""" g (float[N, {H}, {T}, {C}] x) => (float[N, {H}, {T}, {C}] y) {{
    q = MatMul(x, wq)
    k = MatMul(x, wk)
    kt = Transpose<perm=[0, 1, 3, 2]>(k)
    s = MatMul(q, kt)
    z = Where(causal, s, neg)
    p = Softmax<axis=-1>(z)
    y = MatMul(p, x)
}}"""

# A padded encoder: scores + (1 − mask)·finfo.min from an attention_mask input, then a Tanh on [N, T, C] tokens.
PADDED = HEADER + f""" g (float[N, {T}, {C}] x, int64[N, {T}] attention_mask) => (float[N, {T}, {C}] y) {{
    q = MatMul(x, wq)
    k = MatMul(x, wk)
    kt = Transpose<perm=[0, 2, 1]>(k)
    s = MatMul(q, kt)
    s4 = Unsqueeze(s, one)
    mf = Cast<to=1>(attention_mask)
    inv = Sub(onef, mf)
    add = Mul(inv, neg)
    a4 = Unsqueeze(add, axes12)
    z = Add(s4, a4)
    p = Softmax<axis=-1>(z)
    p3 = Squeeze(p, one)
    h = MatMul(p3, x)
    y = Tanh(h)
}}"""

# The same attention without any mask: one input, no Where, no mask constant.
PLAIN = HEADER + f""" g (float[N, {H}, {T}, {C}] x) => (float[N, {H}, {T}, {C}] y) {{
    q = MatMul(x, wq)
    k = MatMul(x, wk)
    kt = Transpose<perm=[0, 1, 3, 2]>(k)
    s = MatMul(q, kt)
    p = Softmax<axis=-1>(s)
    y = MatMul(p, x)
}}"""


def _weights(rng) -> dict:
    return {"wq": rng.standard_normal((C, C)).astype(np.float32), "wk": rng.standard_normal((C, C)).astype(np.float32)}


def causal_model(rng) -> onnx.ModelProto:
    return with_weights(CAUSAL, causal=np.tril(np.ones((T, T), dtype=bool)), neg=np.array(FMIN, np.float32),
                        **_weights(rng))


def padded_model(rng) -> onnx.ModelProto:
    return with_weights(PADDED, neg=np.array(FMIN, np.float32), onef=np.array(1.0, np.float32),
                        one=np.array([1], np.int64), axes12=np.array([1, 2], np.int64), **_weights(rng))


def plain_model(rng) -> onnx.ModelProto:
    return with_weights(PLAIN, **_weights(rng))


def padding(rng) -> np.ndarray:
    """Every third example padded: its last 1 or 2 tokens are 0."""
    mask = np.ones((N, T), np.int64)
    for n in range(0, N, 3):
        mask[n, T - 1 - n % 2:] = 0
    return mask


def raw(model: onnx.ModelProto, feeds: dict, *tensors: str) -> list[np.ndarray]:
    """The model's internal tensors, fetched by adding them as graph outputs."""
    exposed = onnx.shape_inference.infer_shapes(model)
    known = {vi.name: vi for vi in list(exposed.graph.value_info) + list(exposed.graph.output)}
    exposed.graph.output.extend(known[t] for t in tensors if t not in {o.name for o in exposed.graph.output})
    got = run(exposed, feeds)
    return [got[t].astype(np.float64) for t in tensors]


def hand_mean(a: np.ndarray, keep: np.ndarray, axes: tuple) -> tuple[np.ndarray, np.ndarray]:
    """The mean over kept positions of each feature, by hand; and whether each row has a feature with none."""
    keep = np.broadcast_to(keep, a.shape)
    total = np.zeros(a.shape[0:1] + tuple(a.shape[d] for d in range(1, a.ndim) if d not in axes))
    count = np.zeros_like(total)
    for index in np.ndindex(*a.shape):
        if keep[index]:
            out = (index[0], *(index[d] for d in range(1, a.ndim) if d not in axes))
            total[out] += a[index]
            count[out] += 1
    with np.errstate(invalid="ignore"):
        return total / count, (count == 0).any(axis=1)


def analyse(model, feeds: dict, tmp_path, **options):
    data = tmp_path / "data.npz"
    np.savez(data, **feeds)
    return onnxaff.analyze(save(model, tmp_path / "m.onnx"), str(data), metrics=["affinity"], progress=False,
                           chunk_size=512, **options)


def site_of(sig, kind: str) -> dict:
    return next(s for s in sig.sites if s["kind"] == kind)


def assert_score(site: dict, x: np.ndarray, y: np.ndarray, masked: int = 0) -> None:
    entry = site["metrics"]["affinity"]
    assert site["status"] == "ok" and entry["status"] == "ok", site
    assert entry.get("masked_rows", 0) == masked and site["rows"] == len(x)
    assert np.isfinite(entry["mean"])
    assert entry["mean"] == pytest.approx(brute_force_affinity(x, y), rel=1e-9)


@pytest.mark.parametrize("reduce_in", ["graph", "numpy"])
def test_causal_softmax_is_scored_over_its_unmasked_positions(reduce_in, rng, tmp_path):
    model = causal_model(rng)
    x = rng.standard_normal((N, H, T, C)).astype(np.float32)
    z, p = raw(model, {"x": x}, "z", "p")
    keep = z > FMIN / 2
    assert (~keep).any() and np.isfinite(z).all()
    fx, gone_x = hand_mean(z, keep, (1, 2))
    fy, _ = hand_mean(p, keep, (1, 2))
    assert not gone_x.any()  # the last query sees every key
    sig = analyse(model, {"x": x}, tmp_path, reduce="mean", reduce_in=reduce_in)
    assert_score(site_of(sig, "softmax"), fx, fy)
    assert "mask" not in sig.options  # no padding input: the options read as before


@pytest.mark.parametrize("reduce_in", ["graph", "numpy"])
def test_padded_examples_leave_their_padding_out(reduce_in, rng, tmp_path):
    model = padded_model(rng)
    x = rng.standard_normal((N, T, C)).astype(np.float32)
    mask = padding(rng)
    feeds = {"x": x, "attention_mask": mask}
    z, p, h, y = raw(model, feeds, "z", "p", "h", "y")
    tokens = mask != 0
    # the softmax: masked values (padded keys) and padded queries out; a padded key leaves its example out
    keep = (z > FMIN / 2) & tokens[:, None, :, None]
    fx, gone = hand_mean(z, keep, (1, 2))
    fy, _ = hand_mean(p, keep, (1, 2))
    padded = int((~tokens).any(axis=1).sum())
    assert gone.sum() == padded > 0
    sig = analyse(model, feeds, tmp_path, reduce="mean", reduce_in=reduce_in)
    assert_score(site_of(sig, "softmax"), fx[~gone], fy[~gone], masked=padded)
    # the Tanh on [N, T, C]: the token mean over unpadded tokens only
    hx, none_gone = hand_mean(h, tokens[:, :, None], (1,))
    hy, _ = hand_mean(y, tokens[:, :, None], (1,))
    assert not none_gone.any()
    assert_score(site_of(sig, "tanh"), hx, hy)
    assert sig.options["mask"] == "attention_mask"


def test_token_mean_equals_the_hand_masked_mean(rng, tmp_path):
    """The Tanh's X features as the augmented model returns them: float64 means over the unpadded tokens."""
    model = padded_model(rng)
    x = rng.standard_normal((N, T, C)).astype(np.float32)
    mask = padding(rng)
    (h,) = raw(model, {"x": x, "attention_mask": mask}, "h")
    loaded = load_model(save(model, tmp_path / "m.onnx"))
    from onnxaff.graph.rewrite import augment_model
    from onnxaff.graph.sites import find_sites

    sites = [s for s in find_sites(loaded.view) if s.ok]
    masks = site_masks(loaded.view, sites, "attention_mask")
    tanh = next(s for s in sites if s.kind == "tanh")
    assert masks[tanh.index].pad == (1, 1) and masks[tanh.index].threshold is None
    augmented, outputs = augment_model(loaded.model, sites, "mean", view=loaded.view, masks=masks)
    got = run(augmented, {"x": x, "attention_mask": mask})[outputs[tanh.index].x]
    want = (h * (mask != 0)[:, :, None]).sum(axis=1) / (mask != 0).sum(axis=1)[:, None]
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_positions_drop_the_padded_rows_and_count_them(rng, tmp_path):
    model = padded_model(rng)
    x = rng.standard_normal((N, T, C)).astype(np.float32)
    mask = padding(rng)
    sig = analyse(model, {"x": x, "attention_mask": mask}, tmp_path, reduce="positions")
    tanh, softmax = site_of(sig, "tanh"), site_of(sig, "softmax")
    padded_tokens = int((mask == 0).sum())
    assert tanh["metrics"]["affinity"]["masked_rows"] == padded_tokens
    assert tanh["rows"] == N * T - padded_tokens and tanh["status"] == "ok"
    # every query row of a padded example holds a masked key
    padded = int((mask == 0).any(axis=1).sum())
    assert softmax["metrics"]["affinity"]["masked_rows"] == padded * T
    assert softmax["rows"] == (N - padded) * T and softmax["status"] == "ok"


@pytest.mark.parametrize("reduce_in", ["graph", "numpy"])
def test_flatten_leaves_out_every_row_with_a_masked_cell(reduce_in, rng, tmp_path):
    x = rng.standard_normal((N, H, T, C)).astype(np.float32)
    # a causal map masks cells of every example: the only site has no row left, and the run says why
    with pytest.raises(OnnxaffError, match="no site got a number from 40 example.*masks left out every row"):
        analyse(causal_model(rng), {"x": x}, tmp_path, reduce="flatten", reduce_in=reduce_in)


def test_nan_in_a_softmax_input_still_flags_the_site(rng, tmp_path):
    x = rng.standard_normal((N, H, T, C)).astype(np.float32)
    x[3, 0, 2, 1] = np.nan
    for reduce_in in ("graph", "numpy"):
        sig = analyse(causal_model(rng), {"x": x}, tmp_path, reduce_in=reduce_in)
        site = site_of(sig, "softmax")
        assert site["status"] == "flagged" and site["metrics"]["affinity"]["status"] == "nonfinite"


def test_a_model_without_masks_is_reduced_as_before(rng, tmp_path):
    model = plain_model(rng)
    loaded = load_model(save(model, tmp_path / "m.onnx"))
    from onnxaff.graph.sites import find_sites

    assert site_masks(loaded.view, find_sites(loaded.view), None) == {}
    x = rng.standard_normal((N, H, T, C)).astype(np.float32)
    s, p = raw(model, {"x": x}, "s", "p")
    sig = analyse(model, {"x": x}, tmp_path, reduce="mean")
    entry = site_of(sig, "softmax")["metrics"]["affinity"]
    assert "masked_rows" not in entry
    # the float32 ReduceMean of before: equal to the float64 mean to float32 rounding only
    assert entry["mean"] == pytest.approx(brute_force_affinity(s.mean(axis=(1, 2)), p.mean(axis=(1, 2))), rel=1e-5)
    assert "mask" not in sig.options


def test_mask_naming_a_missing_input_is_one_line(rng, tmp_path, capfd):
    path = save(padded_model(rng), tmp_path / "m.onnx")
    one_line_error(run_cli(capfd, "analyze", path, "--data", "synthetic:gaussian", "--limit", "8", "--out",
                           tmp_path / "s.json", "--mask", "nosuch", "--quiet"), "--mask 'nosuch'")


def test_mask_none_turns_the_padding_off(rng, tmp_path):
    model = padded_model(rng)
    x = rng.standard_normal((N, T, C)).astype(np.float32)
    sig = analyse(model, {"x": x, "attention_mask": padding(rng)}, tmp_path, mask="none")
    assert sig.options["mask"] == "none"
    tanh = site_of(sig, "tanh")
    # the default's sample:16 on T = 6 tokens: every token a row, the padded ones too
    assert "masked_rows" not in tanh["metrics"]["affinity"] and tanh["rows"] == N * T


@pytest.mark.parametrize("name", ["bert_tiny", "gpt_tiny"])
def test_text_fixtures_score_every_softmax(name, rng, tmp_path):
    path = FIXTURES / "text" / f"{name}.onnx"
    inputs = [i.name for i in onnx.load(path).graph.input]
    feeds = {"input_ids": rng.integers(0, 50, (48, 16)).astype(np.int64)}
    if "attention_mask" in inputs:
        mask = np.ones((48, 16), np.int64)
        mask[::4, 12:] = 0
        feeds.update(attention_mask=mask, token_type_ids=np.zeros((48, 16), np.int64))
    data = tmp_path / "data.npz"
    np.savez(data, **feeds)
    sig = onnxaff.analyze(str(path), str(data), metrics=["affinity", "nlc"], progress=False, chunk_size=512,
                          reduce="mean")
    softmaxes = [s for s in sig.sites if s["kind"] == "softmax"]
    assert softmaxes
    for site in softmaxes:  # the NLC's directions leave the masked positions alone (graph.jvp)
        assert site["status"] == "ok", site
        for entry in site["metrics"].values():
            assert entry["status"] == "ok" and np.isfinite(entry["mean"]), site
    # against the brute force: the raw attention maps, masked values and padded queries dropped by hand
    model = onnx.load(path)
    tokens = feeds.get("attention_mask", np.ones((48, 16), np.int64)) != 0
    for site in softmaxes:
        z, p = raw(model, feeds, site["input"], site["output"])
        keep = (z > FMIN / 2) & tokens[:, None, :, None]
        fx, gone = hand_mean(z, keep, (1, 2))
        fy, _ = hand_mean(p, keep, (1, 2))
        assert gone.sum() == (12 if name == "bert_tiny" else 0)  # every 4th example padded; causal: none
        assert site["metrics"]["affinity"].get("masked_rows", 0) == gone.sum() and site["rows"] == (~gone).sum()
        assert site["metrics"]["affinity"]["mean"] == pytest.approx(brute_force_affinity(fx[~gone], fy[~gone]),
                                                                    rel=1e-9)

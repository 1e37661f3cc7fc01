"""Fused attention (com.microsoft Attention / MultiHeadAttention, ONNX Attention) rewritten for analysis: the
rewrite computes what onnxruntime's fused kernel computes, and its softmax is a site (issue 26)."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

import onnxaff
from onnxaff.analysis.sitelist import list_sites
from onnxaff.graph import load
from onnxaff.graph.expand import attention
from onnxaff.graph.load import from_proto

B, S, L, D, N = 3, 5, 4, 8, 2
RNG = np.random.default_rng(26)
# Batch 1 attends to the first keys only, batch 2 to none: a fully masked row tells a mask value of −10000
# (a uniform shift: the unmasked softmax) from the lowest float (uniform weights).
PAD = np.array([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [0, 0, 0, 0, 0]], np.int32)


def weight(name, *shape):
    return nh.from_array(RNG.standard_normal(shape).astype(np.float32), name)


def vi(name, elem, shape):
    return h.make_tensor_value_info(name, elem, shape)


def model(nodes, inputs, outputs, inits=(), opset=17):
    graph = h.make_graph(nodes, "attention", inputs, outputs, list(inits))
    return h.make_model(graph, opset_imports=[h.make_opsetid("", opset), h.make_opsetid("com.microsoft", 1)])


def contrib_attention(mask=False, bias=True, sizes=None, **attrs):
    q, k, v = sizes or (D, D, D)
    inits = [weight("w", D, q + k + v)] + ([weight("b", q + k + v)] if bias else [])
    ins = ["x", "w", "b" if bias else "", "mask" if mask else ""]
    if sizes:
        attrs["qkv_hidden_sizes"] = list(sizes)
    node = h.make_node("Attention", ins, ["y"], domain="com.microsoft", name="attn0", num_heads=N, **attrs)
    inputs = [vi("x", T.FLOAT, ["B", S, D])] + ([vi("mask", T.INT32, ["B", S])] if mask else [])
    return model([node], inputs, [vi("y", T.FLOAT, ["B", S, v])], inits)


def contrib_mha(mask=False, bias=True, **attrs):
    ins = ["q", "k", "v", "b" if bias else "", "mask" if mask else ""]
    node = h.make_node("MultiHeadAttention", ins, ["y"], domain="com.microsoft", name="mha0", num_heads=N, **attrs)
    inputs = [vi("q", T.FLOAT, ["B", S, D]), vi("k", T.FLOAT, ["B", L, D]), vi("v", T.FLOAT, ["B", L, 2 * D])]
    inputs += [vi("mask", T.INT32, ["B", L])] if mask else []
    return model([node], inputs, [vi("y", T.FLOAT, ["B", S, 2 * D])], [weight("b", 4 * D)] if bias else [])


def onnx_attention(three_d=False, mask=None, **attrs):
    if three_d:
        shapes = [["B", S, D], ["B", L, D], ["B", L, 2 * D]]
        attrs |= {"q_num_heads": N, "kv_num_heads": N}
    else:
        shapes = [["B", N, S, D // N], ["B", N, L, D // N], ["B", N, L, D]]
    ins = ["q", "k", "v"] + (["mask"] if mask is not None else [])
    node = h.make_node("Attention", ins, ["y"], name="sdpa0", **attrs)
    inputs = [vi(n, T.FLOAT, s) for n, s in zip("qkv", shapes, strict=True)]
    inputs += [vi("mask", mask, [S, L])] if mask is not None else []
    out = ["B", S, 2 * D] if three_d else ["B", N, S, D]
    return model([node], inputs, [vi("y", T.FLOAT, out)], opset=23)


def feed_for(m):
    feed = {}
    for i in m.graph.input:
        shape = [B if isinstance(d, str) else d for d in
                 [x.dim_param or x.dim_value for x in i.type.tensor_type.shape.dim]]
        elem = i.type.tensor_type.elem_type
        if elem == T.INT32:
            feed[i.name] = PAD[:, : shape[1]].copy()
        elif elem == T.BOOL:
            feed[i.name] = RNG.random(shape) > 0.4
        else:
            feed[i.name] = RNG.standard_normal(shape).astype(np.float32)
    return feed


def run(m, feed):
    session = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feed)[0]


def expanded(m):
    loaded = from_proto(m)
    onnx.checker.check_model(loaded.model)
    return loaded


CASES = {
    "attention": lambda: contrib_attention(),
    "attention_mask": lambda: contrib_attention(mask=True),
    "attention_causal_mask": lambda: contrib_attention(mask=True, unidirectional=1),
    "attention_sizes_scale": lambda: contrib_attention(bias=False, sizes=(4, 4, 6), scale=0.3),
    "attention_filter": lambda: contrib_attention(mask=True, mask_filter_value=-50.0),
    "mha": lambda: contrib_mha(),
    "mha_mask": lambda: contrib_mha(mask=True),
    "mha_nobias_causal": lambda: contrib_mha(bias=False, mask=True, unidirectional=1),
    "onnx_4d": lambda: onnx_attention(),
    "onnx_4d_bool_causal": lambda: onnx_attention(mask=T.BOOL, is_causal=1),
    "onnx_3d_float_mask": lambda: onnx_attention(three_d=True, mask=T.FLOAT, scale=0.25),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_rewrite_equals_onnxruntime(case):
    m = CASES[case]()
    loaded = expanded(m)
    assert not any(attention.is_fused(n) for n in loaded.model.graph.node)
    assert len(loaded.notes) == 1 and "rewritten" in loaded.notes[0]
    feed = feed_for(m)
    want, got = run(m, feed), run(loaded.model, feed)
    assert want.shape == got.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_mask_values_are_the_kernels():
    """A wrong mask value (−10000 where onnxruntime writes the lowest float, or the reverse) changes the output."""
    m = contrib_attention(mask=True, unidirectional=1)
    feed = feed_for(m)
    want = run(m, feed)
    saved = dict(attention.LOWEST)
    try:
        attention.LOWEST[T.FLOAT] = -10000.0
        assert np.abs(run(expanded(m).model, feed) - want).max() > 1e-2
    finally:
        attention.LOWEST.update(saved)
    filtered = contrib_attention(mask=True, mask_filter_value=-3.0)
    assert np.abs(run(expanded(filtered).model, feed) - run(filtered, feed)).max() < 1e-5


@pytest.mark.parametrize("case", sorted(CASES))
def test_softmax_is_a_site(case):
    m = CASES[case]()
    sites = list_sites(from_proto(m)).sites
    fused = next(n for n in m.graph.node if attention.is_fused(n))
    assert [(s.kind, s.id, s.status) for s in sites] == [("softmax", f"{fused.name}/softmax", "ok")]
    assert sites[0].params == {"axis": -1} and sites[0].layout == "softmax_axis" and sites[0].feature_axis == 3


def test_site_id_of_an_unnamed_node():
    m = contrib_attention()
    m.graph.node[0].name = ""
    assert [s.id for s in list_sites(from_proto(m)).sites] == ["Attention:y/softmax"]


def unsupported():
    past = contrib_attention()
    past.graph.node[0].input.append("past")
    past.graph.input.append(vi("past", T.FLOAT, [2, "B", N, 0, D // N]))
    rotary = contrib_attention()
    rotary.graph.node[0].attribute.append(h.make_attribute("do_rotary", 1))
    softcap = onnx_attention(softcap=30.0)
    gqa = onnx_attention(three_d=True)
    gqa.graph.node[0].attribute[-1].i = 1  # kv_num_heads
    return {"past": (past, "input past"), "rotary": (rotary, "attribute do_rotary"),
            "softcap": (softcap, "attribute softcap"), "gqa": (gqa, "grouped query heads")}


@pytest.mark.parametrize("case", ["past", "rotary", "softcap", "gqa"])
def test_unsupported_form_is_a_skipped_site(case):
    m, what = unsupported()[case]
    loaded = from_proto(m)
    assert any(attention.is_fused(n) for n in loaded.model.graph.node)
    (site,) = list_sites(loaded).sites
    op = m.graph.node[0].op_type
    assert site.kind == "softmax" and site.status == "skipped" and site.id.endswith("/softmax")
    assert f"fused {op}" in site.reason and what in site.reason, site.reason
    assert what in loaded.notes[0]


def test_analyze_scores_the_softmax_sites(tmp_path):
    """Attention → MultiHeadAttention (self-attention on its output), and ONNX Attention: each softmax scored."""
    a = contrib_attention()
    mha = h.make_node("MultiHeadAttention", ["y", "y", "y", "b2"], ["z"], domain="com.microsoft", name="mha1",
                      num_heads=N)
    a.graph.node.append(mha)
    a.graph.initializer.append(weight("b2", 3 * D))
    del a.graph.output[:]
    a.graph.output.append(vi("z", T.FLOAT, ["B", S, D]))
    for m, ids in ((a, ["attn0/softmax", "mha1/softmax"]), (onnx_attention(three_d=True), ["sdpa0/softmax"])):
        path = tmp_path / f"{ids[0].split('/')[0]}.onnx"
        onnx.save(m, path)
        assert [s.id for s in list_sites(load.load_model(path)).sites] == ids
        sig = onnxaff.analyze(path, "synthetic:gaussian", limit=64, chunk_size=32, progress=False)
        assert [s["id"] for s in sig.sites] == ids
        for s in sig.sites:
            assert s["kind"] == "softmax" and s["status"] == "ok"
            for entry in s["metrics"].values():
                assert entry["status"] == "ok" and np.isfinite(entry["mean"]), entry
        assert any("rewritten into standard ONNX" in w for w in sig.warnings)

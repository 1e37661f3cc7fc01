"""Residual, attention and mlp blocks: hand-written graphs, PyTorch exports and the shipped models.

Graphs are written in ONNX text format; weights are declared as graph inputs named w_* and turned
into random initializers (`with_weights`), so the text shows structure only. Every test that finds
blocks also runs the model with each block's input and output exported, and checks their shapes.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from onnxaff.graph import discover_sites, load_model
from onnxaff.graph.blocks import KINDS, discover_blocks, residual_stages, stage_tracks
from onnxaff_models import shipped_models
from tests.conftest import FIXTURES, TORCH_FIXTURES, parse, run

MANIFEST = TORCH_FIXTURES
HEADER = '<ir_version: 8, opset_import: ["" : 17, "com.microsoft" : 1]>\n'


def with_weights(text: str, seed: int = 0) -> onnx.ModelProto:
    """The model of `text` with every w_* graph input made a random initializer of its declared shape."""
    model = parse(HEADER + text)
    rng = np.random.default_rng(seed)
    keep = []
    for vi in model.graph.input:
        if vi.name.startswith("w_"):
            dims = [d.dim_value for d in vi.type.tensor_type.shape.dim]
            value = (rng.standard_normal(dims) * 0.3).astype(np.float32)
            model.graph.initializer.append(numpy_helper.from_array(value, vi.name))
        else:
            keep.append(vi)
    del model.graph.input[:]
    model.graph.input.extend(keep)
    onnx.checker.check_model(model)
    return model


def counts(blocks) -> dict[str, int]:
    c = Counter(b.kind for b in blocks)
    return {k: c.get(k, 0) for k in KINDS}


def block_values(model: onnx.ModelProto, blocks, feeds: dict) -> dict[str, np.ndarray]:
    """Every block input and output, computed by onnxruntime (graph inputs taken from the feeds)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    have = {o.name for o in m.graph.output} | set(feeds)
    for name in dict.fromkeys(t for b in blocks for t in (b.input, b.output)):
        if name not in have:
            m.graph.output.append(onnx.ValueInfoProto(name=name))
    return {**feeds, **run(m, feeds)}


def assert_runtime_shapes(model, blocks, feeds, expected: dict[str, tuple] | None = None):
    """Each block tensor exists at runtime, agrees with the inferred shape, and has `expected` shapes."""
    values = block_values(model, blocks, feeds)
    for b in blocks:
        for tensor, inferred in ((b.input, b.input_shape), (b.output, b.output_shape)):
            shape = values[tensor].shape
            assert inferred is not None and len(inferred) == len(shape), (b.id, tensor, inferred, shape)
            assert all(not isinstance(d, int) or d == s for d, s in zip(inferred, shape, strict=True)), (b.id, tensor)
    for tensor, shape in (expected or {}).items():
        assert values[tensor].shape == shape, tensor
    return values


# --- residual ------------------------------------------------------------------------------------

RES_STAGE = """
stage (float[N, 4, 6, 6] x, float[N, 4, 6, 6] other, float[4, 4, 3, 3] w_1a, float[4, 4, 3, 3] w_1b,
       float[4, 4, 3, 3] w_2a, float[4, 4, 3, 3] w_2b, float[4, 4, 3, 3] w_3a, float[4, 4, 3, 3] w_3b,
       float[8, 4, 3, 3] w_dn, float[8, 8, 3, 3] w_4a, float[8, 8, 3, 3] w_4b,
    float[4, 4, 1, 1] w_g)
    => (float[N, 8, 3, 3] y, float[N, 4, 6, 6] u, float[N, 4, 6, 6] v, float[N, 4, 6, 6] w, float[N, 4, 6, 6] ctx) {
    bias = Constant <value = float[1, 4, 1, 1] {0.1, 0.2, 0.3, 0.4}> ()
    h0 = Add(x, bias)
    c1 = Conv <pads = [1, 1, 1, 1]> (h0, w_1a)
    r1 = Relu(c1)
    d1 = Conv <pads = [1, 1, 1, 1]> (r1, w_1b)
    s1 = Add(h0, d1)
    a1 = Relu(s1)
    c2 = Conv <pads = [1, 1, 1, 1]> (a1, w_2a)
    r2 = Relu(c2)
    d2 = Conv <pads = [1, 1, 1, 1]> (r2, w_2b)
    s2 = Add(d2, a1)
    c3 = Conv <pads = [1, 1, 1, 1]> (s2, w_3a)
    r3 = Relu(c3)
    d3 = Conv <pads = [1, 1, 1, 1]> (r3, w_3b)
    s3 = Add(s2, d3)
    dn = Conv <strides = [2, 2], pads = [1, 1, 1, 1]> (s3, w_dn)
    c4 = Conv <pads = [1, 1, 1, 1]> (dn, w_4a)
    r4 = Relu(c4)
    d4 = Conv <pads = [1, 1, 1, 1]> (r4, w_4b)
    s4 = Add(dn, d4)
    y = Relu(s4)
    u = Add(x, other)
    v = Add(s3, s3)
    half = Constant <value = float {0.5}> ()
    hs = Mul(s3, half)
    w = Add(s3, hs)
    gp = GlobalAveragePool(s3)
    gc = Conv(gp, w_g)
    ctx = Add(s3, gc)
}
"""


def test_residual_stage_and_what_is_not_a_block(rng):
    model = with_weights(RES_STAGE)
    blocks = discover_blocks(model)
    assert counts(blocks) == {"residual": 4, "attention": 0, "mlp": 0}
    # The bias add (h0), the sum of two inputs (u), x + x (v), x + 0.5x (w) and x plus a broadcast
    # global context (ctx, GCNet-style) are not blocks.
    assert [(b.input, b.output) for b in blocks] == [("h0", "s1"), ("a1", "s2"), ("s2", "s3"), ("dn", "s4")]
    assert [b.index for b in blocks] == [0, 1, 2, 3] and len({b.id for b in blocks}) == 4
    assert all(b.ok and b.params["shortcut"] == "identity" for b in blocks)
    assert blocks[1].params["skip"] == "a1" and blocks[1].params["branches"] == ["d2"]
    assert [b.params["after"] for b in blocks] == [None, blocks[0].id, blocks[1].id, None]
    # The ReLU between blocks 1 and 2 links them; the strided conv before block 4 starts a new stage.
    stages = residual_stages(blocks)
    assert [[b.output for b in s] for s in stages] == [["s1", "s2", "s3"], ["s4"]]
    assert stage_tracks(stages[0]) == ["h0", "s1", "s2", "s3"] and stage_tracks(stages[1]) == ["dn", "s4"]
    assert residual_stages(blocks, min_blocks=2) == stages[:1]
    feeds = {"x": rng.standard_normal((3, 4, 6, 6)).astype(np.float32),
             "other": rng.standard_normal((3, 4, 6, 6)).astype(np.float32)}
    assert_runtime_shapes(model, blocks, feeds, {"s3": (3, 4, 6, 6), "s4": (3, 8, 3, 3), "dn": (3, 8, 3, 3)})
    # The nodes of block 1: its two convs, the ReLU between them and the Add; not the bias add.
    assert blocks[0].op_types == ["Conv", "Relu", "Conv", "Add"]
    assert blocks[0].to_dict()["nodes"] == blocks[0].nodes and "node_indices" not in blocks[0].to_dict()


PROJECTION = """
proj (float[N, 4, 8, 8] x, float[8, 4, 3, 3] w_1, float[8, 8, 3, 3] w_2, float[8, 4, 1, 1] w_s,
      float[8] w_g, float[8] w_b, float[8] w_m) => (float[N, 8, 4, 4] y) {
    c1 = Conv <strides = [2, 2], pads = [1, 1, 1, 1]> (x, w_1)
    r1 = Relu(c1)
    c2 = Conv <pads = [1, 1, 1, 1]> (r1, w_2)
    sc = Conv <strides = [2, 2]> (x, w_s)
    one = Constant <value = float[8] {1, 1, 1, 1, 1, 1, 1, 1}> ()
    bn = BatchNormalization(sc, w_g, w_b, w_m, one)
    s = Add(c2, bn)
    y = Relu(s)
}
"""


def test_projection_shortcut_block(rng):
    model = with_weights(PROJECTION)
    (b,) = discover_blocks(model)
    assert (b.kind, b.input, b.output) == ("residual", "x", "s")
    assert b.params["shortcut"] == "projection" and b.params["skip"] == "bn"
    assert b.input_shape == ["N", 4, 8, 8] and b.output_shape == ["N", 8, 4, 4]
    assert sorted(b.op_types) == sorted(["Conv", "Relu", "Conv", "Conv", "BatchNormalization", "Add"])
    assert residual_stages([b]) == []  # h0 and h1 have different shapes: no trajectory
    assert_runtime_shapes(model, [b], {"x": rng.standard_normal((2, 4, 8, 8)).astype(np.float32)},
                          {"s": (2, 8, 4, 4)})


# --- attention and mlp ---------------------------------------------------------------------------

SINGLE_HEAD = """
attn (float[N, 5, 8] x, float[8, 8] w_q, float[8] w_bq, float[8, 8] w_k, float[8, 8] w_v, float[8, 8] w_o,
      float[8] w_bo) => (float[N, 5, 8] y) {
    q0 = MatMul(x, w_q)
    q = Add(q0, w_bq)
    k = MatMul(x, w_k)
    v = MatMul(x, w_v)
    kt = Transpose <perm = [0, 2, 1]> (k)
    s = MatMul(q, kt)
    scale = Constant <value = float {0.35355339}> ()
    ss = Mul(scale, s)
    p = Softmax <axis = -1> (ss)
    o = MatMul(p, v)
    o1 = MatMul(o, w_o)
    o2 = Add(w_bo, o1)
    y = Add(x, o2)
}
"""


def test_single_head_attention(rng):
    model = with_weights(SINGLE_HEAD)
    blocks = discover_blocks(model)
    assert [(b.kind, b.input, b.output) for b in blocks] == [("attention", "x", "o2"), ("residual", "x", "y")]
    att, res = blocks
    assert att.params["form"] == "decomposed" and att.params["out_projection"]
    # The projections, scores, softmax and output projection; not the scale constant, not the residual Add.
    assert att.op_types == ["MatMul", "Add", "MatMul", "MatMul", "Transpose", "MatMul", "Mul", "Softmax", "MatMul",
                            "MatMul", "Add"]
    assert res.params["contains"] == [att.id]
    assert "attention" not in {b.kind for b in discover_blocks(model, kinds=("residual", "mlp"))}
    with pytest.raises(ValueError, match="unknown block kind"):
        discover_blocks(model, kinds=("transformer",))
    assert_runtime_shapes(model, blocks, {"x": rng.standard_normal((3, 5, 8)).astype(np.float32)},
                          {"o2": (3, 5, 8)})


def layer_norm(p: str, x: str) -> str:
    """LayerNorm over the last axis, spelled out as PyTorch exports it before opset 17."""
    return f"""
    {p}mu = ReduceMean <axes = [-1]> ({x})
    {p}xc = Sub({x}, {p}mu)
    {p}sq = Pow({p}xc, two)
    {p}var = ReduceMean <axes = [-1]> ({p}sq)
    {p}ve = Add({p}var, eps)
    {p}sd = Sqrt({p}ve)
    {p}xn = Div({p}xc, {p}sd)
    {p}xg = Mul({p}xn, w_{p}gamma)
    {p}ln = Add({p}xg, w_{p}beta)"""


def transformer_layer(p: str, x: str) -> str:
    """Pre-norm layer: x + attention(LN(x)) with 2 heads and a key mask, then + GELU mlp(LN(·))."""
    return layer_norm(f"{p}a", x) + f"""
    {p}q0 = MatMul({p}aln, w_{p}q)
    {p}q1 = Add({p}q0, w_{p}bq)
    {p}q2 = Reshape({p}q1, heads)
    {p}q = Transpose <perm = [0, 2, 1, 3]> ({p}q2)
    {p}k0 = MatMul({p}aln, w_{p}k)
    {p}k1 = Add({p}k0, w_{p}bk)
    {p}k2 = Reshape({p}k1, heads)
    {p}k = Transpose <perm = [0, 2, 3, 1]> ({p}k2)
    {p}v0 = MatMul({p}aln, w_{p}v)
    {p}v1 = Add({p}v0, w_{p}bv)
    {p}v2 = Reshape({p}v1, heads)
    {p}v = Transpose <perm = [0, 2, 1, 3]> ({p}v2)
    {p}s = MatMul({p}q, {p}k)
    {p}ss = Div({p}s, sqrt_dh)
    {p}sm = Add({p}ss, mask)
    {p}pr = Softmax <axis = -1> ({p}sm)
    {p}o = MatMul({p}pr, {p}v)
    {p}ot = Transpose <perm = [0, 2, 1, 3]> ({p}o)
    {p}om = Reshape({p}ot, merged)
    {p}o1 = MatMul({p}om, w_{p}o)
    {p}o2 = Add({p}o1, w_{p}bo)
    {p}h = Add({x}, {p}o2)""" + layer_norm(f"{p}m", f"{p}h") + f"""
    {p}f0 = MatMul({p}mln, w_{p}1)
    {p}f1 = Add({p}f0, w_{p}b1)
    {p}g0 = Div({p}f1, sqrt2)
    {p}g1 = Erf({p}g0)
    {p}g2 = Add({p}g1, one)
    {p}g3 = Mul({p}f1, {p}g2)
    {p}g4 = Mul({p}g3, half)
    {p}f2 = MatMul({p}g4, w_{p}2)
    {p}f3 = Add({p}f2, w_{p}b2)
    {p}out = Add({p}h, {p}f3)"""


def transformer_weights(p: str) -> str:
    sq = ", ".join(f"float[8, 8] w_{p}{n}" for n in "qkvo")
    vec = ", ".join(f"float[8] w_{p}{n}" for n in ("bq", "bk", "bv", "bo", "b2", "agamma", "abeta", "mgamma", "mbeta"))
    return f"{sq}, {vec}, float[8, 16] w_{p}1, float[16] w_{p}b1, float[16, 8] w_{p}2"


TRANSFORMER = (
    f"tf (float[N, 5, 8] x, float[N, M, Q, K] mask, {transformer_weights('l0')}, {transformer_weights('l1')})"
    " => (float[N, 5, 8] l1out) {"
    """
    two = Constant <value = float {2.0}> ()
    eps = Constant <value = float {1e-5}> ()
    one = Constant <value = float {1.0}> ()
    half = Constant <value = float {0.5}> ()
    sqrt2 = Constant <value = float {1.4142135}> ()
    sqrt_dh = Constant <value = float {2.0}> ()
    heads = Constant <value = int64[4] {0, 0, 2, 4}> ()
    merged = Constant <value = int64[3] {0, 0, 8}> ()"""
    + transformer_layer("l0", "x") + transformer_layer("l1", "l0out") + "\n}"
)


def test_two_layer_multi_head_transformer_with_decomposed_layer_norm(rng):
    model = with_weights(TRANSFORMER)
    assert [s.kind for s in discover_sites(model)] == ["softmax", "gelu", "softmax", "gelu"]
    blocks = discover_blocks(model)
    assert counts(blocks) == {"residual": 4, "attention": 2, "mlp": 2}
    got = [(b.kind, b.input, b.output) for b in blocks]
    assert got == [
        ("attention", "l0aln", "l0o2"), ("residual", "x", "l0h"),
        ("mlp", "l0mln", "l0f3"), ("residual", "l0h", "l0out"),
        ("attention", "l1aln", "l1o2"), ("residual", "l0out", "l1h"),
        ("mlp", "l1mln", "l1f3"), ("residual", "l1h", "l1out"),
    ]
    by_out = {b.output: b for b in blocks}
    assert by_out["l0f3"].params == {"activation": "gelu", "activation_site": by_out["l0f3"].params["activation_site"],
                                     "gated": False}
    # The masked scores (Add of the scores and a mask input) are neither a residual nor a bias add,
    # though layer 1's scores derive from the mask through layer 0 (the mask's shape is symbolic).
    assert all(b.output not in ("l0sm", "l1sm") for b in blocks)
    # Each residual block holds its layer norm and its attention or mlp block.
    assert by_out["l0h"].params["contains"] == [by_out["l0o2"].id]
    assert by_out["l0out"].params["contains"] == [by_out["l0f3"].id]
    assert {"ReduceMean", "Sqrt", "Softmax"} <= set(by_out["l0h"].op_types)
    (stage,) = residual_stages(blocks)
    assert stage_tracks(stage) == ["x", "l0h", "l0out", "l1h", "l1out"]
    feeds = {"x": rng.standard_normal((3, 5, 8)).astype(np.float32),
             "mask": np.where(rng.random((3, 1, 1, 5)) < 0.2, -1e4, 0.0).astype(np.float32)}
    assert_runtime_shapes(model, blocks, feeds, {t: (3, 5, 8) for t in stage_tracks(stage)})


GATED = """
glu (float[N, 6] x, float[6, 12] w_1, float[6, 12] w_3, float[12, 6] w_2) => (float[N, 6] y) {
    a = MatMul(x, w_1)
    sg = Sigmoid(a)
    silu = Mul(a, sg)
    up = MatMul(x, w_3)
    gated = Mul(silu, up)
    down = MatMul(gated, w_2)
    y = Add(x, down)
}
"""

CLASSIFIER = """
mlp (float[N, 6] x, float[6, 12] w_1, float[12] w_b1, float[12, 12] w_2, float[12] w_b2, float[12, 3] w_3)
    => (float[N, 3] y) {
    h1 = Gemm(x, w_1, w_b1)
    a1 = Relu(h1)
    h2 = Gemm(a1, w_2, w_b2)
    a2 = Relu(h2)
    h3 = MatMul(a2, w_3)
    y = Softmax <axis = -1> (h3)
}
"""


def test_gated_mlp_and_a_classifier_that_is_no_feed_forward(rng):
    model = with_weights(GATED)
    blocks = discover_blocks(model)
    assert [(b.kind, b.input, b.output) for b in blocks] == [("mlp", "x", "down"), ("residual", "x", "y")]
    assert blocks[0].params["gated"] and blocks[0].params["activation"] == "silu"
    assert_runtime_shapes(model, blocks, {"x": rng.standard_normal((4, 6)).astype(np.float32)}, {"down": (4, 6)})
    # dense-ReLU-dense-ReLU-dense-softmax: every dense-act-dense feeds another activation.
    assert discover_blocks(with_weights(CLASSIFIER)) == []


CONTRIB = """
ort (float[N, 5, 8] x, float[8, 8] w_q, float[8, 8] w_k, float[8, 8] w_v, float[8, 8] w_o, float[8] w_bo,
     float[8, 24] w_qkv, float[24] w_bqkv) => (float[N, 5, 8] y, float[N, 5, 8] z) {
    q = MatMul(x, w_q)
    k = MatMul(x, w_k)
    v = MatMul(x, w_v)
    m = com.microsoft.MultiHeadAttention <num_heads = 2> (q, k, v)
    o = MatMul(m, w_o)
    o1 = Add(o, w_bo)
    y = Add(x, o1)
    a = com.microsoft.Attention <num_heads = 2> (x, w_qkv, w_bqkv)
    z = MatMul(a, w_o)
}
"""


def test_onnxruntime_fused_attention_nodes(rng):
    model = with_weights(CONTRIB)
    att = discover_blocks(model, kinds=("attention",))
    assert [(b.input, b.output, b.params["form"]) for b in att] == [
        ("x", "o1", "com.microsoft.MultiHeadAttention"), ("x", "z", "com.microsoft.Attention")]
    values = block_values(model, att, {"x": rng.standard_normal((2, 5, 8)).astype(np.float32)})
    assert values["o1"].shape == values["z"].shape == (2, 5, 8)


# --- exported and shipped models -----------------------------------------------------------------

# (tokens, width) of each transformer fixture: PyTorch's exports keep batch, tokens, width in that order.
TOKENS = {"tiny_vit": (16, 16), "encoder": (9, 16), "prenorm_vit": (10, 16)}


@pytest.mark.parametrize("name", sorted(n for n in MANIFEST if "blocks" in MANIFEST[n]))
def test_torch_fixture_blocks(name, rng):
    entry = MANIFEST[name]
    model = load_model(FIXTURES / f"{name}.onnx").model
    blocks = discover_blocks(model, infer_shapes=False)
    assert counts(blocks) == entry["blocks"]
    assert all(b.ok for b in blocks), [(b.id, b.reason) for b in blocks if not b.ok]
    x = rng.standard_normal((3, *entry["input_shape"][1:])).astype(np.float32)
    values = assert_runtime_shapes(model, blocks, {"input": x})
    res = [b for b in blocks if b.kind == "residual"]
    if entry["model"] == "res_cnn":  # three ResNet blocks at one resolution: one stage of three
        assert all(values[t].shape == (3, 8, 16, 16) for b in res for t in (b.input, b.output))
        assert [len(s) for s in residual_stages(blocks)] == [3]
    if entry["model"] in TOKENS:
        t, d = TOKENS[entry["model"]]
        for b in blocks:
            assert values[b.output].shape == (3, t, d), (b.id, b.output)
            # nn.MultiheadAttention's first layer reads the stream before the exporter's transpose.
            assert values[b.input].shape in ((3, t, d), (3, d, t)), (b.id, b.input)
        for stage in residual_stages(blocks):
            assert all(values[h].shape == (3, t, d) for h in stage_tracks(stage))
    if entry["model"] in ("encoder", "prenorm_vit"):  # 2 layers: every residual block chained
        assert sum(len(s) for s in residual_stages(blocks)) >= 3


SHIPPED = {m.name: m for m in shipped_models()}
# Blocks each shipped network's build script defines (models/build.py): the residual CNN has two
# stages of two SkipInit blocks, the ViT two pre-LN layers; every other network has none.
SHIPPED_BLOCKS = {
    "torch_rescnn_relu": ({"residual": 4, "attention": 0, "mlp": 0}, [2, 2]),
    "torch_vit": ({"residual": 4, "attention": 2, "mlp": 2}, [4]),
}


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_shipped_model_blocks(name, rng):
    model = load_model(SHIPPED[name].path).model
    blocks = discover_blocks(model, infer_shapes=False)
    expected, stages = SHIPPED_BLOCKS.get(name, ({k: 0 for k in KINDS}, []))
    assert counts(blocks) == expected
    assert [len(s) for s in residual_stages(blocks)] == stages
    if blocks:
        inp = SHIPPED[name].entry["input"]
        x = rng.random((2, *inp["shape"][1:])).astype(np.float32)
        assert_runtime_shapes(model, blocks, {inp["name"]: x})


def test_blocks_from_the_loaded_models_one_view():
    """find_blocks over LoadedModel.view gives what discover_blocks gives over the proto; the view is built
    once and again only when the model proto is replaced."""
    from onnxaff.graph.blocks import find_blocks
    from onnxaff.graph.sites import find_sites

    loaded = load_model(SHIPPED["torch_vit"].path)
    view = loaded.view
    assert loaded.view is view
    sites = find_sites(view)
    assert [s.to_dict() for s in sites] == [s.to_dict() for s in discover_sites(loaded.model, infer_shapes=False)]
    got = [(b.to_dict(), b.node_indices) for b in find_blocks(view, sites=sites)]
    assert got == [(b.to_dict(), b.node_indices) for b in discover_blocks(loaded.model, infer_shapes=False)]
    loaded.model = onnx.shape_inference.infer_shapes(loaded.model)
    assert loaded.view is not view and loaded.view.graph is loaded.model.graph


def test_block_params_on_one_line():
    """`onnxaff sites --blocks` prints each block's params as text: tensor names, not numbers."""
    from onnxaff.graph.sites import format_params

    blocks = discover_blocks(load_model(SHIPPED["torch_rescnn_relu"].path).model, infer_shapes=False)
    line = format_params(blocks[1].params)
    assert f"branches=[{blocks[1].params['branches'][0]}]" in line and "contains=[]" in line
    assert f"after={blocks[0].id}" in line and format_params({"slope": [0.25] * 64}) == "slope=[64 values]"


def _lowest_index_topological(preds: list[list[int]]) -> list[int]:
    """Brute force: repeatedly take the lowest-indexed node whose producers are all placed."""
    placed, order = set(), []
    while len(order) < len(preds):
        ready = [i for i in range(len(preds)) if i not in placed and all(p in placed for p in preds[i])]
        if not ready:
            return list(range(len(preds)))
        order.append(min(ready))
        placed.add(order[-1])
    return order


@pytest.mark.parametrize("model", [m.path for m in shipped_models()] + sorted(FIXTURES.glob("*.onnx")),
                         ids=lambda p: p.stem)
def test_forward_order_is_the_lowest_index_topological_order(model):
    from onnxaff.graph.view import GraphView

    loaded = load_model(model)
    view: GraphView = loaded.view
    producers = [[view.producer[t] for t in dict.fromkeys(n.input) if t in view.producer and view.producer[t] != i]
                 for i, n in enumerate(view.nodes)]
    assert [sorted(p) for p in view.predecessors] == [sorted(dict.fromkeys(p)) for p in producers]
    expected = _lowest_index_topological(view.predecessors)
    assert sorted(view.order, key=view.order.__getitem__) == expected


def test_forward_order_of_a_file_out_of_order_and_of_a_cycle():
    from onnxaff.graph.view import GraphView

    # Nodes written consumers first: forward order is b, a, c (b feeds a, a and b feed c).
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("Relu", ["h"], ["y1"]), onnx.helper.make_node("Tanh", ["x"], ["h"]),
         onnx.helper.make_node("Add", ["y1", "h"], ["y"])], "g",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1])])
    assert GraphView(graph).order == {1: 0, 0: 1, 2: 2}
    cyclic = onnx.helper.make_graph(
        [onnx.helper.make_node("Relu", ["b"], ["a"]), onnx.helper.make_node("Tanh", ["a"], ["b"])], "c",
        [], [onnx.helper.make_tensor_value_info("b", onnx.TensorProto.FLOAT, [1])])
    assert GraphView(cyclic).order == {0: 0, 1: 1}  # invalid ONNX: file order

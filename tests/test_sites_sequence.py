"""Rank-3 site tensors: [N, T, C] tokens, or [N, C, T] around a 1-D Conv (audio, OCR), read off the graph
strictly (graph/layout.py); --layout overrides."""

import json

import numpy as np

from onnxaff.graph import discover_sites
from onnxaff.graph.reduction import feature_dim
from tests.builders import save, with_weights
from tests.conftest import run_cli

HEADER = '<ir_version: 8, opset_import: ["" : 17]>\n'
C, T = 6, 20


def conv1d_model(body: str, out: str = f"float[N, {C}, {T}] y", opset: int = 17, **extra):
    """x [N, 2, T] through `h = Conv(x, w, b)` (kernel 3, pads 1: [N, C, T]) and then `body`."""
    rng = np.random.default_rng(0)
    weights = dict(w=rng.standard_normal((C, 2, 3)).astype(np.float32),
                   b=rng.standard_normal(C).astype(np.float32), **extra)
    return with_weights(HEADER.replace("17", str(opset)) + f"""g (float[N, 2, {T}] x) => ({out}) {{
        h = Conv<kernel_shape = [3], pads = [1, 1]>(x, w, b)
        {body}
    }}""", **weights)


def one(model, **kw):
    (site,) = [s for s in discover_sites(model, **kw) if s.group == "activation"]
    return site


def test_conv1d_relu_is_channels_first_with_d_the_channels():
    site = one(conv1d_model("y = Relu(h)"))
    assert (site.rank, site.layout, site.feature_axis) == (3, "channels_first", 1)
    assert feature_dim(site, "mean") == C


def test_conv1d_decomposed_gelu_is_channels_first():
    site = one(conv1d_model("""s = Constant<value = float {1.4142135}>()
        d = Div(h, s)
        e = Erf(d)
        one = Constant<value = float {1.0}>()
        p = Add(e, one)
        m = Mul(h, p)
        half = Constant<value = float {0.5}>()
        y = Mul(m, half)"""))
    assert (site.kind, site.layout, site.feature_axis) == ("gelu", "channels_first", 1)
    assert feature_dim(site, "mean") == C


def test_batch_normalization_on_rank_3_is_channels_first():
    rng = np.random.default_rng(1)
    model = with_weights(HEADER + f"""g (float[N, {C}, {T}] x) => (float[N, {C}, {T}] y) {{
        n = BatchNormalization(x, scale, bias, mean, var)
        y = Tanh(n)
    }}""", scale=rng.random(C).astype(np.float32), bias=rng.random(C).astype(np.float32),
        mean=rng.random(C).astype(np.float32), var=rng.random(C).astype(np.float32) + 1)
    site = one(model)
    assert (site.layout, site.feature_axis, feature_dim(site, "mean")) == ("channels_first", 1, C)


def test_read_as_channels_first_by_a_conv1d_downstream_through_padding():
    rng = np.random.default_rng(2)
    model = with_weights(HEADER + f"""g (float[N, {C}, {T}] x) => (float[N, 4, {T}] y) {{
        r = Relu(x)
        p = Pad(r, pads)
        y = Conv<kernel_shape = [3]>(p, w)
    }}""", pads=np.array([0, 0, 2, 0, 0, 0], np.int64), w=rng.standard_normal((4, C, 3)).astype(np.float32))
    site = one(model)
    assert (site.layout, site.feature_axis) == ("channels_first", 1)


def test_token_model_stays_tokens():
    rng = np.random.default_rng(3)
    model = with_weights(HEADER + f"""g (float[N, {T}, 8] x) => (float[N, {T}, {C}] y) {{
        h = MatMul(x, w)
        a = Add(h, b)
        y = Sigmoid(a)
    }}""", w=rng.standard_normal((8, C)).astype(np.float32), b=rng.standard_normal(C).astype(np.float32))
    site = one(model)
    assert (site.layout, site.feature_axis, feature_dim(site, "mean")) == ("tokens", 2, C)


def test_conv1d_then_transpose_then_gelu_is_tokens():
    model = conv1d_model("""t = Transpose<perm = [0, 2, 1]>(h)
        y = Gelu(t)""", out=f"float[N, {T}, {C}] y", opset=20)
    site = one(model)
    assert (site.layout, site.feature_axis, feature_dim(site, "mean")) == ("tokens", 2, C)


def test_vit_tokens_do_not_pick_up_the_patch_embedding_conv2d():
    """Conv2d [N, C, 2, 2] → Reshape [N, C, 4] → Transpose [0, 2, 1] → tokens: the walk stops at the rank change."""
    rng = np.random.default_rng(4)
    model = with_weights(HEADER + f"""g (float[N, 3, 8, 8] x) => (float[N, 4, {C}] y) {{
        c = Conv<kernel_shape = [4, 4], strides = [4, 4]>(x, w)
        f = Reshape(c, shape)
        t = Transpose<perm = [0, 2, 1]>(f)
        a = Add(t, pos)
        y = Relu(a)
    }}""", w=rng.standard_normal((C, 3, 4, 4)).astype(np.float32), shape=np.array([0, C, 4], np.int64),
        pos=rng.standard_normal((1, 4, C)).astype(np.float32))
    site = one(model)
    assert (site.layout, site.feature_axis, feature_dim(site, "mean")) == ("tokens", 2, C)


def test_vit_without_transpose_is_not_channels_first_either():
    """[N, C, H·W] out of a Conv2d and a Reshape, then an activation: no 1-D op on a rank-3 path, so tokens."""
    rng = np.random.default_rng(5)
    model = with_weights(HEADER + f"""g (float[N, 3, 8, 8] x) => (float[N, {C}, 4] y) {{
        c = Conv<kernel_shape = [4, 4], strides = [4, 4]>(x, w)
        f = Reshape(c, shape)
        y = Relu(f)
    }}""", w=rng.standard_normal((C, 3, 4, 4)).astype(np.float32), shape=np.array([0, C, 4], np.int64))
    assert one(model).layout == "tokens"


def test_each_transpose_0_2_1_flips_the_layout():
    rng = np.random.default_rng(6)
    w2 = rng.standard_normal((4, C, 1)).astype(np.float32)
    model = conv1d_model("""t = Transpose<perm = [0, 2, 1]>(h)
        g = Gelu(t)
        u = Transpose<perm = [0, 2, 1]>(g)
        r = Relu(u)
        y = Conv<kernel_shape = [1]>(r, w2)""", out=f"float[N, 4, {T}] y", opset=20, w2=w2)
    gelu, relu = [s for s in discover_sites(model) if s.group == "activation"]
    assert (gelu.layout, gelu.feature_axis) == ("tokens", 2)
    assert (relu.layout, relu.feature_axis) == ("channels_first", 1)


def test_layout_overrides_rank_3():
    conv = conv1d_model("y = Relu(h)")
    site = one(conv, layout="channels_last")
    assert (site.layout, site.feature_axis, feature_dim(site, "mean")) == ("tokens", 2, T)
    rng = np.random.default_rng(3)
    tokens = with_weights(HEADER + f"""g (float[N, {T}, 8] x) => (float[N, {T}, {C}] y) {{
        h = MatMul(x, w)
        y = Sigmoid(h)
    }}""", w=rng.standard_normal((8, C)).astype(np.float32))
    site = one(tokens, layout="channels_first")
    assert (site.layout, site.feature_axis, feature_dim(site, "mean")) == ("channels_first", 1, T)


def test_sites_command_shows_d_the_channels_and_obeys_layout(capfd, tmp_path):
    path = save(conv1d_model("y = Relu(h)"), tmp_path / "conv1d.onnx")
    code, out, err = run_cli(capfd, "sites", path, "--format", "json")
    assert code == 0, err
    (site,) = json.loads(out)
    assert (site["layout"], site["feature_axis"], site["dim"]) == ("channels_first", 1, C)
    code, out, err = run_cli(capfd, "sites", path, "--format", "json", "--layout", "channels_last")
    assert code == 0, err
    assert json.loads(out)[0]["dim"] == T

"""Shapes a site or a count reads (issue 50): no site on index or shape arithmetic, D from the shapes the graph
computes rather than a value_info that lies, and MACs counted on the shapes a run fed."""

import json
import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import onnxaff
from onnxaff.graph import discover_sites, load_model
from onnxaff.graph.complexity import model_stats
from tests.builders import HEADER, with_weights
from tests.conftest import need, parse, run_cli

HEAD = '<ir_version: 8, opset_import: ["" : 17]>\n'
LAYER = "<float[6, 6] w = {" + ", ".join(str(round(0.1 * ((7 * k) % 11 - 5), 2)) for k in range(36)) + "}>"

# DeBERTa-v2's relative positions (TorchScript export): int64 indices clipped to ±k, then used as data.
INT_CLIP_OF_DATA = HEAD + f"""g (float[N, 6] x, int64[N, 6] pos) => (float[N, 6] y) {LAYER} {{
    h = MatMul(x, w)
    lo = Constant<value = int64 {{-2}}>()
    hi = Constant<value = int64 {{2}}>()
    c = Clip(pos, lo, hi)
    cf = Cast<to = 1>(c)
    a = Add(h, cf)
    y = MatMul(a, w)
}}"""
# The same Clip on positions computed from the input's shape (Shape → Gather → Range → Sub).
INT_CLIP_OF_SHAPE = HEAD + f"""g (float[N, 6] x) => (float[N, 6] y) {LAYER} {{
    h = MatMul(x, w)
    s = Shape(x)
    one = Constant<value = int64 {{1}}>()
    t = Gather<axis = 0>(s, one)
    zero = Constant<value = int64 {{0}}>()
    r = Range(zero, t, one)
    u = Unsqueeze(r, one)
    rel = Sub(r, u)
    lo = Constant<value = int64 {{-2}}>()
    hi = Constant<value = int64 {{2}}>()
    c = Clip(rel, lo, hi)
    cf = Cast<to = 1>(c)
    m = ReduceMean<axes = [0], keepdims = 0>(cf)
    a = Add(h, m)
    y = MatMul(a, w)
}}"""


def same_padding(dtype: int, clip: str) -> str:
    """timm's "same" padding (TorchScript EfficientNetV2): the padding of H, ceil(H / 2) clamped at 0, computed
    in floating point (dtype 1 float, 10 float16) from Shape; the data only goes through Pad and a Relu."""
    return HEAD + f"""g (float[N, 3, H, W] x) => (float[N, 3, ?, ?] y) {{
    s = Shape(x)
    two_i = Constant<value = int64 {{2}}>()
    hh = Gather<axis = 0>(s, two_i)
    hf = Cast<to = {dtype}>(hh)
    two = Constant<value_float = 2.0>()
    two_t = Cast<to = {dtype}>(two)
    q = Div(hf, two_t)
    c = Ceil(q)
    p = {clip}
    pi = Cast<to = 7>(p)
    one = Constant<value = int64 {{1}}>()
    pv = Reshape(pi, one)
    z6 = Constant<value = int64[6] {{0, 0, 0, 0, 0, 0}}>()
    pads = Concat<axis = 0>(z6, pv, pv)
    xp = Pad(x, pads)
    y = Relu(xp)
}}"""


@pytest.mark.parametrize("text", [INT_CLIP_OF_DATA, INT_CLIP_OF_SHAPE], ids=["data", "shape"])
def test_int64_clip_of_indices_is_no_site(text):
    assert discover_sites(parse(text)) == []


@pytest.mark.parametrize("dtype", [1, 10], ids=["float32", "float16"])
@pytest.mark.parametrize("clip", ["Clip(c, z)", "Relu(c)", "Max(c, z)"])
def test_clamp_of_shape_arithmetic_is_no_site(dtype, clip):
    text = same_padding(dtype, clip).replace("    p = ", f"    zf = Constant<value_float = 0.0>()\n    z = Cast<to = "
                                             f"{dtype}>(zf)\n    p = ")
    sites = discover_sites(parse(text))
    assert [(s.kind, s.input, s.status) for s in sites] == [("relu", "xp", "ok")]  # only the Relu of the data


@pytest.mark.parametrize("clip", ["Relu(cd)", "Identity(cd)"], ids=["relu", "zero_point_at_min"])
def test_clamp_of_quantized_shape_arithmetic_is_no_site(clip):
    """The QDQ export of the same padding: the padding quantized (uint8, zero point 0: a Q that looks like an
    absorbed ReLU) before the clamp, or in place of it; only the Relu of the data is a site."""
    qdq = ("    c = Ceil(q)\n    sc = Constant<value_float = 0.05>()\n    zp = Constant<value = uint8 {0}>()\n"
           "    cq = QuantizeLinear(c, sc, zp)\n    cd = DequantizeLinear(cq, sc, zp)\n")
    text = same_padding(1, clip).replace("    c = Ceil(q)\n", qdq)
    sites = discover_sites(parse(text))
    assert [(s.kind, s.input, s.status) for s in sites] == [("relu", "xp", "ok")]


def lying_value_info(rng, claim: int = 4) -> onnx.ModelProto:
    """x·w (w 8×16) → Relu, with a value_info that declares the MatMul's output [N, claim] (real: [N, 16])."""
    model = with_weights(HEADER + """ g (float[N, 8] x) => (float[N, 16] y) {
        h = MatMul(x, w)
        y = Relu(h)
    }""", w=rng.standard_normal((8, 16)).astype(np.float32))
    model.graph.value_info.append(helper.make_tensor_value_info("h", TensorProto.FLOAT, ["N", claim]))
    onnx.checker.check_model(model)
    return model


@pytest.mark.parametrize("external", [False, True], ids=["inline", "external_data"])
def test_sites_takes_d_from_the_graph_not_a_lying_value_info(tmp_path, capfd, rng, external):
    path = tmp_path / "lie.onnx"
    onnx.save(lying_value_info(rng), path, save_as_external_data=external, size_threshold=0, location="lie.bin")
    code, out, err = run_cli(capfd, "sites", path, "--format", "json")
    assert code == 0, err
    (site,) = json.loads(out)["sites"] if isinstance(json.loads(out), dict) else json.loads(out)
    assert site["input_shape"] == ["N", 16]
    assert "value_info declares h as [N, 4], but its graph computes [N, 16]" in err
    (found,) = discover_sites(lying_value_info(rng))
    assert found.input_shape == ["N", 16]


def test_analyze_uses_the_real_d_and_scores_as_the_honest_twin(tmp_path, rng):
    """The twin is the same model without the value_info: same code, same machine, same data, so the scores are
    the same to the bit."""
    lying = lying_value_info(np.random.default_rng(1))
    honest = onnx.ModelProto.FromString(lying.SerializeToString())
    del honest.graph.value_info[:]
    x = rng.standard_normal((256, 8)).astype(np.float32)
    sigs = [onnxaff.analyze(m, x, progress=False) for m in (lying, honest)]
    (lied, told) = (s.sites[0] for s in sigs)
    assert lied["dim"] == told["dim"] == 16 and lied["input_shape"] == ["N", 16]
    assert lied["metrics"]["affinity"]["mean"] == told["metrics"]["affinity"]["mean"]
    assert any("value_info declares h" in w for w in sigs[0].warnings)


def conv_net(tmp_path):
    """A small conv net (grouped and strided convs, a Linear) exported by TorchScript with symbolic N, H, W; the
    module and the file."""
    torch = need("torch")
    nn = torch.nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.c1, self.c2 = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=4)
            self.c3, self.fc = nn.Conv2d(8, 16, 1), nn.Linear(16, 5)

        def forward(self, x):
            x = torch.relu(self.c3(torch.relu(self.c2(torch.relu(self.c1(x))))))
            return self.fc(x.mean((2, 3)))

    torch.manual_seed(0)
    net, path = Net().eval(), tmp_path / "convnet.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(net, (torch.randn(2, 3, 40, 48),), str(path), input_names=["x"], output_names=["y"],
                          dynamic_axes={"x": {0: "N", 2: "H", 3: "W"}}, opset_version=17, dynamo=False)
    return net, path


def hook_macs(net, shape) -> int:
    """MACs of one example of `shape` counted by forward hooks: Conv out elements × in_channels/groups × kernel,
    Linear out elements × in_features (the convention of docs/signature.md, independent of the graph)."""
    import torch

    total, handles = [0], []

    def hook(m, _, out):
        per = out.numel() // out.shape[0]
        if isinstance(m, torch.nn.Conv2d):
            total[0] += per * m.in_channels // m.groups * m.kernel_size[0] * m.kernel_size[1]
        elif isinstance(m, torch.nn.Linear):
            total[0] += per * m.in_features

    handles = [m.register_forward_hook(hook) for m in net.modules() if isinstance(m, torch.nn.Conv2d | torch.nn.Linear)]
    with torch.no_grad():
        net(torch.zeros(1, *shape))
    for h in handles:
        h.remove()
    return total[0]


@pytest.mark.parametrize("hw", [(40, 48), (24, 32)])
def test_macs_are_counted_on_the_shape_the_run_fed(tmp_path, hw):
    """Before: 568 MACs (every symbolic dim read as 1), against 545,360 by hooks at 40×48 and 218,192 at 24×32."""
    net, path = conv_net(tmp_path)
    x = np.random.default_rng(0).standard_normal((16, 3, *hw)).astype(np.float32)
    stats = onnxaff.analyze(path, x, progress=False).model["stats"]
    assert stats["macs_unknown_nodes"] == []
    assert stats["macs"] == hook_macs(net, (3, *hw))
    assert stats["gflops"] == round(stats["macs"] / 1e9, 6)


def test_macs_on_an_image_folder_are_the_decoded_size(tmp_path, capfd):
    """An image folder says its size only by decoding: counted on the first batch's shape (a 28×32 crop)."""
    from PIL import Image

    net, path = conv_net(tmp_path)
    folder = tmp_path / "images"
    folder.mkdir()
    for i in range(4):
        pixels = (np.random.default_rng(i).random((30, 36, 3)) * 255).astype(np.uint8)
        Image.fromarray(pixels).save(folder / f"{i}.png")
    out = tmp_path / "sig.json"
    code, _, err = run_cli(capfd, "analyze", path, "--data", folder, "--crop", "28x32", "--out", out)
    assert code == 0, err
    stats = json.loads(out.read_text())["model"]["stats"]
    assert stats["macs_unknown_nodes"] == [] and stats["macs"] == hook_macs(net, (3, 28, 32))


def test_macs_without_a_fed_shape_are_unknown_never_counted_at_1(tmp_path):
    """No feeds to read the spatial dims from: the convolutions are listed unknown and left out, the Linear
    (batch × 16 → 5: its batch symbol is the input's) is counted."""
    net, path = conv_net(tmp_path)
    loaded = load_model(path)
    stats = model_stats(loaded.model, [], loaded.view)
    assert sorted(stats["macs_unknown_nodes"]) == ["/c1/Conv", "/c2/Conv", "/c3/Conv"]
    assert stats["macs"] == 16 * 5


def test_correlate_leaves_out_gflops_of_a_partial_count():
    from onnxaff.format.signature import Signature
    from onnxaff.results.comparison import correlate

    def sig(name, score, gflops, unknown):
        sites = [{"index": 0, "id": "s0", "kind": "relu", "status": "ok", "metrics": {"affinity": {"mean": score}}}]
        stats = {"parameters": 10, "gflops": gflops, "depth_sites": 1, "macs_unknown_nodes": unknown}
        return Signature(model={"name": name, "sha256": name * 8, "stats": stats}, data={}, options={}, runtime={},
                         metrics={"affinity": {}}, sites=sites)

    accuracy = {"a": "0.7", "b": "0.75", "c": "0.8", "d": "0.72"}
    whole = [sig(n, 0.5 + k / 10, 1.0 + k, []) for k, n in enumerate(accuracy)]
    assert "GFLOPs" in correlate(whole, accuracy)["table"]["all"]
    whole[2] = sig("c", 0.7, 0.003, ["/c1/Conv"])
    result = correlate(whole, accuracy)
    assert "GFLOPs" not in result["table"]["all"] and "GFLOPs" in result["left_out"]
    assert any("GFLOPs left out" in w and "c" in w for w in result["warnings"])


def test_macs_past_a_pad_whose_pads_are_computed_from_constants(tmp_path):
    """TorchScript's F.pad writes its pads as ConstantOfShape → Concat → Reshape → Slice → Transpose → Reshape →
    Cast (EfficientNet-Lite0's static padding): onnx's inference propagates none of it, so every dim past the Pad
    was unknown (Lite0 at 224x224: macs 0, 50 nodes unknown; now 385,187,552, the hooks' count). Here one Pad
    (8x8 to 9x9: bottom and right by 1) and a 3x3 Conv: 4 output channels x 7 x 7 positions x 3 x 3 x 3 = 5,292
    MACs."""
    model = with_weights(HEAD + """g (float[N, 3, 8, 8] x) => (float[N, 4, 7, 7] y) {
        four = Constant<value = int64[1] {4}>()
        lead = Constant<value = int64[4] {0, 1, 0, 1}>()
        zeros = ConstantOfShape<value = int64[1] {0}>(four)
        both = Concat<axis = 0>(lead, zeros)
        pairs_shape = Constant<value = int64[2] {-1, 2}>()
        pairs = Reshape(both, pairs_shape)
        start = Constant<value = int64[1] {-1}>()
        end = Constant<value = int64[1] {-9223372036854775807}>()
        axis = Constant<value = int64[1] {0}>()
        step = Constant<value = int64[1] {-1}>()
        rev = Slice(pairs, start, end, axis, step)
        cols = Transpose<perm = [1, 0]>(rev)
        flat_shape = Constant<value = int64[1] {-1}>()
        flat = Reshape(cols, flat_shape)
        pads = Cast<to = 7>(flat)
        xp = Pad(x, pads)
        c = Conv<kernel_shape = [3, 3]>(xp, w)
        y = Relu(c)
    }""", w=np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32))
    onnx.checker.check_model(model)
    x = np.random.default_rng(1).standard_normal((8, 3, 8, 8)).astype(np.float32)
    stats = onnxaff.analyze(model, x, progress=False).model["stats"]
    assert stats["macs_unknown_nodes"] == [] and stats["macs"] == 4 * 7 * 7 * 3 * 3 * 3


def test_the_macs_fold_never_allocates_a_large_value():
    """A folded causal mask's ConstantOfShape([32768, 32768]) (4 GB) and a Range of 10⁹ are left as nodes, judged by
    their inputs before any evaluation (the fold is for pads and shapes: at most 128 values)."""
    import tracemalloc

    from onnx import numpy_helper

    from onnxaff.graph.infer import _fold_shape_math

    def const(name, value):
        return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.array(value, np.int64)))

    g = helper.make_graph([const("s", [32768, 32768]), helper.make_node("ConstantOfShape", ["s"], ["m"]),
                           const("a", 0), const("b", 10**9), const("c", 1), helper.make_node("Range", ["a", "b", "c"],
                                                                                             ["r"])],
                          "g", [], [helper.make_tensor_value_info("m", TensorProto.FLOAT, None)])
    tracemalloc.start()
    try:
        _fold_shape_math(g, [helper.make_opsetid("", 17)])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert [n.op_type for n in g.node] == ["ConstantOfShape", "Range"] and peak < 64e6

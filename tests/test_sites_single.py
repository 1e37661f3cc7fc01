"""Every single-node activation kind, written inline, is found as exactly one site."""

import pytest

from onnxaff.graph import discover_sites
from tests.conftest import parse

HEADER = '<ir_version: 8, opset_import: ["" : {opset}]>\n'


def one_node(body: str, opset: int = 17, extra_inits: str = "") -> str:
    return HEADER.format(opset=opset) + (
        f"g (float[N, 4, 5, 5] x) => (float[N, 4, 5, 5] y) {extra_inits}{{\n{body}\n}}"
    )


CASES = [
    ("y = Relu(x)", 17, "relu", {}),
    ("y = LeakyRelu<alpha = 0.1>(x)", 17, "leaky_relu", {"alpha": pytest.approx(0.1)}),
    ("y = Elu(x)", 17, "elu", {"alpha": 1.0}),
    ("y = Selu(x)", 17, "selu", {"alpha": pytest.approx(1.6732632), "gamma": pytest.approx(1.050701)}),
    ("y = Celu<alpha = 0.5>(x)", 17, "celu", {"alpha": 0.5}),
    ("y = Sigmoid(x)", 17, "sigmoid", {}),
    ("y = HardSigmoid(x)", 17, "hard_sigmoid", {"alpha": pytest.approx(0.2), "beta": 0.5}),
    ("y = HardSwish(x)", 17, "hardswish", {}),
    ("y = Tanh(x)", 17, "tanh", {}),
    ("y = Softplus(x)", 17, "softplus", {}),
    ("y = Softsign(x)", 17, "softsign", {}),
    ("y = Gelu(x)", 20, "gelu", {}),
    ('y = Gelu<approximate = "tanh">(x)', 20, "gelu_tanh", {}),
    ("y = Mish(x)", 18, "mish", {}),
    ("y = ThresholdedRelu<alpha = 0.5>(x)", 17, "thresholded_relu", {"alpha": 0.5}),
    ("y = Softmax<axis = 1>(x)", 17, "softmax", {"axis": 1}),
    ("y = LogSoftmax<axis = 1>(x)", 17, "log_softmax", {"axis": 1}),
    ("lo = Constant<value = float {0.0}>()\nhi = Constant<value = float {6.0}>()\ny = Clip(x, lo, hi)", 17,
     "relu6", {"min": 0.0, "max": 6.0}),
    ("lo = Constant<value = float {0.0}>()\ny = Clip(x, lo)", 17, "relu", {}),
    ("lo = Constant<value = float {-1.0}>()\nhi = Constant<value = float {1.0}>()\ny = Clip(x, lo, hi)", 17,
     "clip", {"min": -1.0, "max": 1.0}),
    ("y = Clip<min = 0.0, max = 6.0>(x)", 10, "relu6", {"min": 0.0, "max": 6.0}),
    ("z = Constant<value = float {0.0}>()\ny = Max(z, x)", 17, "relu", {}),
    ("c = Constant<value = float {0.5}>()\ny = Max(x, c)", 17, "clamp_min", {"bound": 0.5}),
    ("c = Constant<value = float {6.0}>()\ny = Min(x, c)", 17, "clamp_max", {"bound": 6.0}),
]


@pytest.mark.parametrize("body,opset,kind,params", CASES, ids=[c[2] + str(i) for i, c in enumerate(CASES)])
def test_single_node_kind(body, opset, kind, params):
    (site,) = discover_sites(parse(one_node(body, opset)))
    assert (site.kind, site.input, site.output, site.status) == (kind, "x", "y", "ok")
    assert site.params == params
    assert site.rank == 4 and site.feature_axis == 1
    assert site.elementwise == (kind not in ("softmax", "log_softmax"))


def test_prelu_with_initializer_slope():
    text = HEADER.format(opset=17) + (
        "g (float[N, 4, 5, 5] x) => (float[N, 4, 5, 5] y)\n"
        "<float[4, 1, 1] slope = {0.1, 0.2, 0.3, 0.4}> { y = PRelu(x, slope) }"
    )
    (site,) = discover_sites(parse(text))
    assert (site.kind, site.input, site.output) == ("prelu", "x", "y")


def test_max_of_two_tensors_is_not_a_site():
    text = HEADER.format(opset=17) + (
        "g (float[N, 4] x, float[N, 4] z) => (float[N, 4] y) { y = Max(x, z) }"
    )
    assert discover_sites(parse(text)) == []


def test_forward_order_not_file_order_and_unique_ids():
    # Nodes listed out of order with empty and repeated names.
    text = HEADER.format(opset=17) + """g (float[N, 3] x) => (float[N, 3] y) {
        y = Tanh(b)
        b = Sigmoid(a)
        a = Relu(x)
    }"""
    model = onnx_model = parse_unchecked(text)
    for node in onnx_model.graph.node:
        node.name = "dup"
    sites = discover_sites(model)
    assert [s.kind for s in sites] == ["relu", "sigmoid", "tanh"]
    assert [s.index for s in sites] == [0, 1, 2]
    assert len({s.id for s in sites}) == 3
    for node in onnx_model.graph.node:
        node.name = ""
    ids = [s.id for s in discover_sites(model)]
    assert len(set(ids)) == 3 and ids == [s.id for s in discover_sites(model)]  # deterministic


def parse_unchecked(text):
    import onnx.parser

    return onnx.parser.parse_model(text)


def test_sites_inside_subgraph_are_listed_with_their_place():
    text = HEADER.format(opset=17) + """g (float[N, 3] x, bool c) => (float[N, 3] y) {
        a = Relu(x)
        y = If(c) <then_branch = t () => (float[N, 3] o) { o = Tanh(a) },
                   else_branch = e () => (float[N, 3] o) { o = Sigmoid(a) }>
    }"""
    sites = discover_sites(parse(text))
    assert [(s.kind, s.status) for s in sites] == [("relu", "ok"), ("tanh", "ok"), ("sigmoid", "ok")]
    assert [s.id for s in sites[1:]] == ["If#1/then/Tanh:o", "If#1/else/Sigmoid:o"]


def test_unknown_rank_is_skipped():
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    (site,) = discover_sites(helper.make_model(graph))
    assert site.status == "skipped" and "unknown rank" in site.reason


def test_shape_known_on_one_side_of_an_elementwise_site_serves_both():
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 7])],
    )
    (site,) = discover_sites(helper.make_model(graph), infer_shapes=False)
    assert site.ok and site.input_shape == ["N", 7] and site.feature_axis == 1


@pytest.mark.parametrize("rank,axis,layout", [(2, 1, "vector"), (3, 2, "tokens"), (5, 1, "channels_first")])
def test_feature_axis_by_rank(rank, axis, layout):
    dims = ", ".join(["N"] + ["3"] * (rank - 1))
    text = HEADER.format(opset=17) + f"g (float[{dims}] x) => (float[{dims}] y) {{ y = Relu(x) }}"
    (site,) = discover_sites(parse(text))
    assert (site.feature_axis, site.layout) == (axis, layout)


def test_channels_last_read_off_transpose_and_overridable():
    text = HEADER.format(opset=17) + """g (float[N, 3, 8, 8] x) => (float[N, 8, 8, 3] y) {
        t = Transpose<perm = [0, 2, 3, 1]>(x)
        y = Relu(t)
    }"""
    (site,) = discover_sites(parse(text))
    assert (site.layout, site.feature_axis) == ("channels_last", 3)
    (site,) = discover_sites(parse(text), layout="channels_first")
    assert (site.layout, site.feature_axis) == ("channels_first", 1)


@pytest.mark.parametrize("opset,attr,axis", [(13, "", 3), (17, "<axis = -1>", 3), (11, "", 1), (17, "<axis = 2>", 2)])
def test_softmax_features_are_its_normalised_axis(opset, attr, axis):
    # the mean of an attention map over its keys is the constant 1/T: the keys are the features instead
    text = HEADER.format(opset=opset) + (
        f"g (float[N, 2, 5, 5] x) => (float[N, 2, 5, 5] y) {{ y = Softmax{attr}(x) }}"
    )
    (site,) = discover_sites(parse(text))
    assert (site.feature_axis, site.layout) == (axis, "softmax_axis")


@pytest.mark.parametrize("axis", [0, -4])
def test_softmax_over_the_batch_axis_is_skipped_with_the_reason(axis, tmp_path):
    # Normalised across examples, its "features" would be the batch: analysing it crashed (IndexError).
    import numpy as np

    import onnxaff
    from onnxaff.errors import OnnxaffError

    model = parse(one_node(f"y = Softmax<axis = {axis}>(x)"))
    (site,) = discover_sites(model)
    assert site.status == "skipped" and "batch axis" in site.reason
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    np.save(tmp_path / "x.npy", np.random.default_rng(0).standard_normal((8, 4, 5, 5)).astype(np.float32))
    with pytest.raises(OnnxaffError, match="no site can be analysed: normalised along the batch axis"):
        onnxaff.analyze(path, str(tmp_path / "x.npy"), chunk_size=4, metrics=["affinity"], progress=False)

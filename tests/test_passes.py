"""Discovery's passes one at a time (graph/passes/): each finds its own form, on graphs written inline, and leaves
what an earlier pass took; together, in their order, they are find_sites."""

import numpy as np
import pytest
from onnx import TensorProto, helper

from onnxaff.graph.passes import passes
from onnxaff.graph.passes.absorbed_relus import AbsorbedRelus
from onnxaff.graph.passes.anchored import AnchoredRules
from onnxaff.graph.passes.fused_attention import FusedAttention
from onnxaff.graph.passes.islands import ElementwiseIslands
from onnxaff.graph.passes.recurrent_gates import WholeRecurrentGates
from onnxaff.graph.passes.single_nodes import SingleNodes
from onnxaff.graph.passes.softmax import DecomposedSoftmax
from onnxaff.graph.passes.stacked_gates import StackedGates
from onnxaff.graph.passes.subgraphs import SubgraphSites
from onnxaff.graph.sites import find_sites
from onnxaff.graph.view import GraphView
from tests.conftest import parse

HEAD = '<ir_version: 8, opset_import: ["" : 17]> g (float[N, 4] x) => (float[N, 4] y) '
GELU = """c = Constant<value_float = 0.70710677>()  one = Constant<value_float = 1.0>()
    half = Constant<value_float = 0.5>()  u = Mul(x, c)  e = Erf(u)  a = Add(e, one)  m = Mul(x, a)  h = Mul(m, half)"""
SOFTMAX = "ax = Constant<value_ints = [1]>()  e = Exp(x)  s = ReduceSum<keepdims = 1>(e, ax)  h = Div(e, s)"
LEAKY = "k = Constant<value_float = 0.2>()  z = Constant<value_float = 0.0>()  kx = Mul(x, k)  p = Less(x, z)  " \
        "h = Where(p, kx, x)"
ABSORBED = """w = Constant<value = float[4, 4] {1,0,0,0,0,1,0,0,0,0,1,0,0,0,0,1}>()  s = Constant<value_float = 0.05>()
    zp = Constant<value = uint8 {0}>()  mm = MatMul(x, w)  q = QuantizeLinear(mm, s, zp)
    h = DequantizeLinear(q, s, zp)"""


def view_of(body: str, tail: str = "y = Relu(h)") -> GraphView:
    return GraphView(parse(f"{HEAD}{{ {body}  {tail} }}").graph, opset=17)


@pytest.mark.parametrize("body, step, kind", [
    (GELU, AnchoredRules(), "gelu"),
    (SOFTMAX, DecomposedSoftmax(), "softmax"),
    (LEAKY, ElementwiseIslands(), "leaky_relu"),
    (ABSORBED, AbsorbedRelus(), "relu"),
])
def test_each_pass_finds_its_form_and_leaves_what_is_taken(body, step, kind):
    view = view_of(body)
    (found,) = step.find(view, set(), "auto")
    position, site = found
    assert site.kind == kind and site.output == "h" and position == view.order[site.node_indices[-1]]
    assert step.find(view, set(site.node_indices), "auto") == []  # taken by an earlier pass: left alone
    # The single-node pass takes the Relu after it, and only that.
    assert [s.kind for _, s in SingleNodes().find(view, set(site.node_indices), "auto")] == ["relu"]


def test_the_passes_in_order_are_find_sites():
    view = view_of(GELU, "r = Relu(h)  y = Add(r, x)")
    taken, found = set(), []
    for step in passes():
        for _, site in step.find(view, taken, "auto"):
            assert taken.isdisjoint(site.node_indices)  # a node belongs to one site
            taken.update(site.node_indices)
            found.append(site.kind)
    assert found == [s.kind for s in find_sites(view)] == ["gelu", "relu"]


def test_the_order_is_declared_once():
    assert [type(p) for p in passes()] == [StackedGates, AbsorbedRelus, DecomposedSoftmax, AnchoredRules,
                                          ElementwiseIslands, SingleNodes, SubgraphSites, WholeRecurrentGates,
                                          FusedAttention]
    assert all(p.name and callable(p.find) for p in passes())


def test_the_node_passes_take_what_lives_inside_nodes():
    d = 4
    branch = helper.make_graph([helper.make_node("Tanh", ["x"], ["t"])], "then", [],
                               [helper.make_tensor_value_info("t", TensorProto.FLOAT, ["N", d])])
    other = helper.make_graph([helper.make_node("Relu", ["x"], ["r"])], "else", [],
                              [helper.make_tensor_value_info("r", TensorProto.FLOAT, ["N", d])])
    w = helper.make_tensor("w", TensorProto.FLOAT, [1, 4 * 3, d], np.zeros(4 * 3 * d, np.float32))
    r = helper.make_tensor("r", TensorProto.FLOAT, [1, 4 * 3, 3], np.zeros(4 * 3 * 3, np.float32))
    graph = helper.make_graph(
        [helper.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=other, name="switch"),
         helper.make_node("LSTM", ["seq", "w", "r"], ["hs"], hidden_size=3, name="lstm")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", d]),
         helper.make_tensor_value_info("c", TensorProto.BOOL, []),
         helper.make_tensor_value_info("seq", TensorProto.FLOAT, ["T", "N", d])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", d]),
         helper.make_tensor_value_info("hs", TensorProto.FLOAT, None)], [w, r])
    view = GraphView(graph, opset=17)
    found = SubgraphSites().find(view, set(), "auto")  # the bodies, handed back: discovery runs on them itself
    assert [(position, body.where) for position, body in found] == [(0, "switch/then"), (0, "switch/else")]
    assert [s.id for s in find_sites(view) if s.scope] == ["switch/then/Tanh:t", "switch/else/Relu:r"]
    gates = WholeRecurrentGates().find(view, set(), "auto")
    assert [s.kind for _, s in gates] == ["sigmoid", "sigmoid", "tanh", "sigmoid", "tanh"]
    assert all(s.status == "skipped" and "could not be unrolled" in s.reason for _, s in gates)
    assert FusedAttention().find(view, set(), "auto") == []

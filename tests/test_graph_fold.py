"""Constant folding (onnxaff/graph/fold.py), one node at a time: what it folds must be what onnxruntime computes
from the same constants, and what it cannot know (data, huge or malformed values, ops it does not model) is None."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.parser
import pytest

from onnxaff.graph.fold import MAX_FOLDED_SIZE, fold_node
from onnxaff.graph.view import GraphView
from tests.conftest import ort_session, parse

HEADER = '<ir_version: 8, opset_import: ["" : 17]>'


def _model(body: str, ctype: str, inits: str = "") -> str:
    """x passes through; `c` is the tensor under test, a second output so that onnxruntime computes it too."""
    inits = f"<{inits}>" if inits else ""
    return f"{HEADER} g (float[N] x) => (float[N] y, {ctype} c) {inits} {{ {body}  y = Identity(x) }}"


def _folded(model: onnx.ModelProto, name: str = "c"):
    view = GraphView(model.graph)
    return fold_node(view, view.nodes[view.producer[name]])


FOLDED = {  # case: (body, type of c, initializers)
    "castlike_lends_only_its_type": ("k = Constant <value = double {0.1}> ()  c = CastLike(k, x)", "float", ""),
    "sqrt_of_a_constant": ("two = Constant <value = float {2.0}> ()  c = Sqrt(two)", "float", ""),
    "div_of_initializers": ("c = Div(one, alpha)", "float", "float one = {1.0}, float alpha = {3.0}"),
    "a_chain_of_constants": ("two = Constant <value = float {2.0}> ()  r = Sqrt(two)  c = Mul(r, half)", "float",
                             "float half = {0.5}"),
    "constant_of_shape": ("s = Constant <value = int64[2] {2, 3}> ()  c = ConstantOfShape <value = float[1] {1.5}> (s)",
                          "float[2, 3]", ""),
    "constant_of_shape_default_zero": ("s = Constant <value = int64[1] {4}> ()  c = ConstantOfShape(s)", "float[4]",
                                       ""),
    "cast_to_int_truncates": ("k = Constant <value = float[3] {2.7, -2.7, 0.5}> ()  c = Cast <to = 7> (k)",
                              "int64[3]", ""),
    "where_selects": ("m = Constant <value = bool[3] {1, 0, 1}> ()  c = Where(m, a, b)", "float[3]",
                      "float[3] a = {1.0, 2.0, 3.0}, float[3] b = {-1.0, -2.0, -3.0}"),
    "broadcast_max": ("c = Max(a, zero)", "float[3]", "float[3] a = {-1.0, 0.25, 4.0}, float zero = {0.0}"),
    "pow_and_erf": ("p = Pow(a, two)  c = Erf(p)", "float[2]", "float[2] a = {0.3, -0.9}, float two = {2.0}"),
    "comparison": ("c = Less(a, b)", "bool[2]", "float[2] a = {1.0, 3.0}, float[2] b = {2.0, 2.0}"),
}


@pytest.mark.parametrize("case", sorted(FOLDED))
def test_a_folded_value_is_what_onnxruntime_computes(case):
    body, ctype, inits = FOLDED[case]
    model = parse(_model(body, ctype, inits))
    folded = _folded(model)
    assert folded is not None, case
    want = ort_session(model).run(["c"], {"x": np.ones(2, np.float32)})[0]
    assert folded.shape == want.shape
    if want.dtype.kind in "bi":
        assert folded.dtype.kind == want.dtype.kind and np.array_equal(folded, want)
    else:  # folding keeps float64: the float32 model agrees to its own precision
        np.testing.assert_allclose(folded, want.astype(np.float64), rtol=1e-6, atol=1e-7)


def test_castlike_keeps_the_constant_in_float64():
    """Discovery identifies the function, not its rounding: 0.1 stays 0.1, not float32(0.1)."""
    folded = _folded(parse(_model(*FOLDED["castlike_lends_only_its_type"])))
    assert folded.dtype == np.float64 and folded == 0.1


def test_a_scalar_through_a_shape_op_reads_as_a_scalar():
    """Unsqueeze of a scalar is the scalar itself (onnxruntime's [1]): discovery only reads scalars there."""
    model = parse(_model("k = Constant <value = float {1.5}> ()  ax = Constant <value = int64[1] {0}> ()  "
                         "c = Unsqueeze(k, ax)", "float[1]"))
    folded = _folded(model)
    assert folded.shape == () and folded == ort_session(model).run(["c"], {"x": np.ones(2, np.float32)})[0][0]


NOT_FOLDED = {  # case: (body, type of c, initializers)
    "reads_the_data": ("c = Add(x, one)", "float[N]", "float one = {1.0}"),
    "larger_than_the_cap": (f"s = Constant <value = int64[2] {{{MAX_FOLDED_SIZE}, 2}}> ()  c = ConstantOfShape(s)",
                            "float[?, 2]", ""),
    "reshape_needs_its_target": ("s = Constant <value = int64[1] {2}> ()  c = Reshape(a, s)", "float[2]",
                                 "float[1, 2] a = {1.0, 2.0}"),
    "not_an_elementwise_op": ("c = MatMul(a, a)", "float[2, 2]", "float[2, 2] a = {1.0, 2.0, 3.0, 4.0}"),
    "a_malformed_shape": ("s = Constant <value = int64[2] {-1, 2}> ()  c = ConstantOfShape(s)", "float[?, 2]", ""),
}


@pytest.mark.parametrize("case", sorted(NOT_FOLDED))
def test_what_folding_cannot_know_stays_unknown(case):
    body, ctype, inits = NOT_FOLDED[case]
    model = onnx.parser.parse_model(_model(body, ctype, inits))  # a malformed shape would fail the checker
    assert _folded(model) is None


def test_an_op_of_another_domain_is_not_folded():
    model = onnx.parser.parse_model(
        '<ir_version: 8, opset_import: ["" : 17, "custom.domain" : 1]> '
        "g (float[N] x) => (float c) <float one = {1.0}> { c = custom.domain.Sqrt(one) }")
    assert _folded(model) is None

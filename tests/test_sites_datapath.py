"""An island is a site only where it maps floating-point data: shape and integer arithmetic never is; a polynomial
between two layers is one, a normalisation's arithmetic beside its reduction is not."""

import numpy as np
import pytest

import onnxaff
from onnxaff.graph import discover_sites
from tests.conftest import parse, run

HEAD = '<ir_version: 8, opset_import: ["" : 17]>\n'
LAYERS = "<float[6, 6] w = {" + ", ".join(str(round(0.1 * ((7 * k) % 11 - 5), 2)) for k in range(36)) + "}>"


def mlp(body: str) -> str:
    """h = x·w; body reads h and writes a; y = a·w: the island sits between two weighted layers."""
    ids = "ids" in body  # an int64 input beside the data
    sig = "(float[N, 6] x) => (float[N, 6] y)"
    if ids:
        sig = "(float[N, 6] x, int64[N, 6] ids) => (float[N, 6] y, int64[N, 6] z)"
    return (HEAD + f"g {sig} {LAYERS} {{\nh = MatMul(x, w)\n{body}\ny = MatMul(a, w)\n"
            + ("z = Identity(ids)\n" if ids else "") + "}")


SHAPES = """s = Shape(h)
m1 = Constant<value = int64[2] {-1, 6}>()
e = Equal(s, m1)
one = Constant<value = int64[2] {1, 1}>()
k = Where(e, one, s)
m2 = Mul(k, m1)
a = Reshape(h, m2)"""
IDS = """m1 = Constant<value = int64[1] {0}>()
e = Equal(ids, m1)
one = Constant<value = int64[1] {1}>()
k = Where(e, one, ids)
k2 = Mul(k, ids)
kf = Cast<to = 1>(k2)
a = Add(h, kf)"""
LAYER_NORM = """r = ReduceMean<axes = [1]>(h)
d = Sub(h, r)
two = Constant<value_float = 2.0>()
q = Pow(d, two)
v = ReduceMean<axes = [1]>(q)
e = Constant<value_float = 1e-5>()
ve = Add(v, e)
sd = Sqrt(ve)
a = Div(d, sd)"""
RMS_NORM = """q = Mul(h, h)
v = ReduceMean<axes = [1]>(q)
e = Constant<value_float = 1e-5>()
ve = Add(v, e)
sd = Sqrt(ve)
inv = Reciprocal(sd)
a = Mul(h, inv)"""


@pytest.mark.parametrize("body", [SHAPES, IDS, LAYER_NORM, RMS_NORM], ids=["shape", "int64", "layernorm", "rmsnorm"])
def test_no_site(body):
    assert discover_sites(parse(mlp(body))) == []


POLY = """c = Constant<value_float = 0.1>()
q = Mul(h, h)
cq = Mul(q, c)
a = Add(h, cq)"""


@pytest.mark.parametrize("body, fn", [(POLY, lambda x: x + 0.1 * x * x), ("a = Mul(h, h)", lambda x: x * x)],
                         ids=["x+0.1x2", "x2"])
def test_a_polynomial_between_layers_is_an_elementwise_site(body, fn, tmp_path):
    from onnx import helper

    model = parse(mlp(body))
    sites = discover_sites(model)
    assert [(s.kind, s.input, s.output) for s in sites] == [("elementwise", "h", "a")]
    m = model.__deepcopy__()
    m.graph.output.extend(helper.make_tensor_value_info(t, 1, None) for t in ("h", "a"))
    x = np.random.default_rng(0).standard_normal((64, 6)).astype(np.float32)
    got = run(m, {"x": x})
    np.testing.assert_allclose(got["a"], fn(got["h"].astype(np.float64)), rtol=1e-5, atol=1e-5)
    sig = onnxaff.analyze(model, "synthetic:gaussian:n=64", progress=False, chunk_workers=0, metrics=["affinity"])
    [site] = sig.sites
    assert site["status"] == "ok" and 0.0 < site["metrics"]["affinity"]["mean"] < 1.0


def test_no_fixture_has_an_elementwise_site_on_integer_or_boolean_tensors():
    """Every model the project ships or builds (tests/fixtures and its subfolders, models/): an unnamed site
    always maps floating-point data."""
    from pathlib import Path

    from onnx import TensorProto

    from onnxaff.analysis.sitelist import list_sites
    from onnxaff.graph.load import load_model

    root = Path(__file__).resolve().parents[1]
    floats = {TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.BFLOAT16,
              TensorProto.UNDEFINED}
    paths = sorted([*root.glob("tests/fixtures/**/*.onnx"), *root.glob("models/*.onnx")])
    assert len(paths) > 25
    wrong = []
    for path in paths:
        loaded = load_model(path)
        for s in list_sites(loaded, "auto", [], []).sites:
            if s.kind == "elementwise" and s.scope is None:
                types = {loaded.view.elem_type(t) for t in (s.input, s.output)}
                if not types <= floats:
                    wrong.append(f"{path.name}: {s.id} {sorted(types)}")
    assert not wrong, wrong

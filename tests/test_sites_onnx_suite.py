"""ONNX's own node tests: each activation's `_expanded` function body gives its single node's sites.

The same sites (kind, parameters, input, output, status) in float32, float16 and bfloat16, and the same
affinity on the same data where onnxruntime's CPU provider runs both models: to 1e-6 in float32, 1e-4 in
float16 (onnxruntime 1.32's CPU provider loads every float16 pair here; onnxaff's data loader takes no
bfloat16 input, so bfloat16 is checked for sites, kinds and parameters only).
"""

import numpy as np
import onnx
import pytest

import onnxaff
from onnxaff.errors import OnnxaffError
from onnxaff.graph import discover_sites
from tests.onnx_node_suite import pairs

PAIRS = {p.name: p for p in pairs()}


def site_rows(model):
    return [(s.kind, s.params, s.input, s.output, s.status) for s in discover_sites(model)]


def test_the_suite_covers_every_activation_and_dtype():
    names = " ".join(PAIRS)
    for op in ("relu", "leakyrelu", "prelu", "elu", "selu", "celu", "hardsigmoid", "softplus", "softsign",
               "gelu_default", "gelu_tanh", "mish", "thresholdedrelu", "softmax", "logsoftmax", "clip", "swish",
               "hardswish"):
        assert f"test_{op}" in names, op
    assert {p.dtype for p in PAIRS.values()} == {"float32", "float16", "bfloat16"}
    assert any(n.endswith("_expanded_ver18") for n in PAIRS) and any(n.endswith("_expanded") for n in PAIRS)


@pytest.mark.parametrize("name", sorted(PAIRS))
def test_expanded_body_gives_the_single_node_sites(name):
    pair = PAIRS[name]
    single, expanded = site_rows(pair.single), site_rows(pair.expanded)
    assert expanded == single
    # Clip without bounds is the identity, and min > max a constant: no site in either spelling.
    assert len(single) == (0 if "default_inbounds" in name or "min_greater_than_max" in name else 1)


SPOT = {  # the table, spelled out
    "test_relu_expanded_ver18": ("relu", {}),
    "test_gelu_default_1_expanded": ("gelu", {}),
    "test_gelu_tanh_1_expanded": ("gelu_tanh", {}),
    "test_swish_expanded": ("silu", {}),
    "test_celu_expanded": ("celu", {"alpha": 2.0}),
    "test_leakyrelu_expanded": ("leaky_relu", {"alpha": pytest.approx(0.1)}),
    "test_elu_expanded_ver18": ("elu", {"alpha": 2.0}),
    "test_selu_expanded_ver18": ("selu", {"alpha": 2.0, "gamma": 3.0}),
    "test_thresholdedrelu_expanded_ver18": ("thresholded_relu", {"alpha": 2.0}),
    "test_hardsigmoid_expanded_ver18": ("hard_sigmoid", {"alpha": 0.5, "beta": pytest.approx(0.6)}),
    "test_softplus_expanded_ver18": ("softplus", {}),
    "test_softsign_expanded_ver18": ("softsign", {}),
    "test_softmax_axis_1_expanded": ("softmax", {"axis": 1}),
    "test_logsoftmax_axis_2_expanded_ver18": ("log_softmax", {"axis": 2}),
    "test_clip_expanded": ("clip", {"min": -1.0, "max": 1.0}),
}


@pytest.mark.parametrize("name", sorted(SPOT))
def test_expanded_kinds_and_fitted_parameters(name):
    (site,) = discover_sites(PAIRS[name].expanded)
    assert (site.kind, site.params, site.input) == (*SPOT[name], PAIRS[name].single.graph.input[0].name)
    assert len(site.op_types) > 1 or site.op_types == ["Max"]


def _affinity(model, tmp_path, tag):
    inp = model.graph.input[0]
    dims = [d.dim_value for d in inp.type.tensor_type.shape.dim]
    n = max(96, 2 * dims[0]) // dims[0] * dims[0]
    data = np.random.default_rng(7).standard_normal((n, *dims[1:])).astype(np.float32) * 3
    path = tmp_path / f"{tag}.onnx"
    onnx.save(model, path)
    np.save(tmp_path / f"{tag}.npy", data)
    sig = onnxaff.analyze(path, str(tmp_path / f"{tag}.npy"), chunk_size=32, metrics=["affinity", "nlc"],
                          progress=False, chunk_workers=0)
    return [(s["kind"], s["status"], s["params"], s["metrics"]["affinity"]["mean"], s["metrics"]["nlc"]["mean"])
            for s in sig.sites]


ANALYSED = sorted(n for n, p in PAIRS.items() if p.dtype != "bfloat16")


@pytest.mark.parametrize("name", ANALYSED)
def test_expanded_body_gives_the_single_node_affinity(name, tmp_path):
    pair = PAIRS[name]
    if not site_rows(pair.single) or all(r[-1] != "ok" for r in site_rows(pair.single)):
        for model in (pair.single, pair.expanded):  # nothing to analyse: the same one-line refusal
            with pytest.raises(OnnxaffError, match="no non-linearity|no site can be analysed"):
                _affinity(model, tmp_path, "m")
        return
    single, expanded = _affinity(pair.single, tmp_path, "a"), _affinity(pair.expanded, tmp_path, "b")
    assert [r[:3] for r in expanded] == [r[:3] for r in single]  # the signature entry carries the params
    # float16: the expansion rounds to half precision after each of its ops (eps 9.8e-4), the node once.
    tol = 1e-6 if pair.dtype == "float32" else 1e-4
    assert [r[3] for r in expanded] == pytest.approx([r[3] for r in single], abs=tol)
    # nlc differentiates the site's own nodes (cloned): the island's, or the node's.
    assert [r[4] for r in expanded] == pytest.approx([r[4] for r in single], abs=10 * tol)

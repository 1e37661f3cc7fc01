"""The shipped reference networks: each analysed on its shipped digits, checked against its manifest.

The manifest's site kinds come from the training frameworks (forward hooks, declared activations),
never from onnxaff, so comparing them with discovery can fail. Accuracies are recomputed here with
onnxruntime. Two exports of one set of weights must give one signature.
"""

from __future__ import annotations

import hashlib
import json
import math
import re

import numpy as np
import pytest

from onnxaff.format.signature import read_signature
from onnxaff_models import shipped_models
from tests.conftest import one_line_error, ort_session, run_cli

ZOO = {m.name: m for m in shipped_models()}
FRAMEWORKS = {m.framework.split()[0] for m in ZOO.values()}


def test_manifest_covers_every_framework_and_file():
    assert {"PyTorch", "scikit-learn", "TensorFlow", "onnx.helper"} <= FRAMEWORKS
    for m in ZOO.values():
        assert m.path.is_file() and m.data.is_file()
        assert hashlib.sha256(m.path.read_bytes()).hexdigest() == m.entry["sha256"], m.name


@pytest.fixture(scope="module")
def demo(shipped_demo):
    """One demo of every shipped network (what `onnxaff demo` runs), shared: its signatures serve every test
    below that reads a shipped network's scores, instead of a second analysis of each."""
    return shipped_demo


@pytest.fixture(scope="module")
def signatures(demo):
    return {name: read_signature(demo / "signatures" / f"{name}.json") for name in ZOO}


def default_rows(site: dict, examples: int) -> int:
    """Rows the default protocol (reduce sample:16) gives a site: 16 positions per example where its map has them
    (all where it has fewer), one row per example at a rank-2 site."""
    shape = site["input_shape"]
    positions = math.prod(d for axis, d in enumerate(shape) if axis not in (0, site["feature_axis"] % len(shape)))
    return examples * (min(16, positions) if site["rank"] >= 3 else 1)


@pytest.mark.parametrize("name", list(ZOO))
def test_sites_match_the_framework(name, signatures):
    """The demo runs the default protocol: each site's chunks hold max(64, 4·D) rows (chunk_size 4d) of the rows
    sample:16 gives it, a trailing partial chunk dropped."""
    m, sig = ZOO[name], signatures[name]
    assert [s["kind"] for s in sig.sites] == m.sites
    assert sig.data["samples"] == 1024
    assert sig.options["chunk_size"] == "4d" and sig.options["reduce"] == "sample:16"
    for s in sig.sites:
        rows = default_rows(s, 1024)
        chunk = max(64, 4 * max(s["dim"], s["dim_y"]))
        assert s["status"] == "ok" and s["rows"] == rows, s["id"]
        assert s["metrics"]["affinity"]["chunks"] == rows // chunk, s["id"]
    assert all(0.0 < v < 1.0 for v in sig.scores("affinity"))


@pytest.mark.parametrize("name", list(ZOO))
def test_accuracy_is_what_onnxruntime_measures(name):
    m = ZOO[name]
    with np.load(m.data) as d:
        x, labels = d["image"].astype(np.float32), d["label"]
    sess = ort_session(__import__("onnx").load(m.path))
    outputs = sess.run(None, {sess.get_inputs()[0].name: x})
    logits = next(o for o in outputs if o.dtype.kind == "f" and o.shape == (1024, 10))  # skl2onnx: label first
    assert float(np.mean(logits.argmax(1) == labels)) == m.accuracy
    assert m.accuracy > 0.85  # trained networks, not initialisations


@pytest.mark.parametrize(("a", "b"), [("torch_cnn_relu", "helper_cnn_relu"),
                                      ("torch_cnn_gelu_op17", "torch_cnn_gelu_op20")])
def test_same_weights_two_exports_same_signature(a, b, signatures):
    """PyTorch vs a hand-written onnx.helper graph; one network at opsets 17 (decomposed GELU) and 20."""
    sa, sb = signatures[a], signatures[b]
    assert sa.model["sha256"] != sb.model["sha256"]
    for s, t in zip(sa.sites, sb.sites, strict=True):
        assert s["kind"] == t["kind"] and s["dim"] == t["dim"]
        np.testing.assert_allclose(s["metrics"]["affinity"]["values"], t["metrics"]["affinity"]["values"],
                                   rtol=0, atol=1e-6)
    if b == "torch_cnn_gelu_op20":
        ops = {tuple(s["op_types"]) for s in sa.sites}, {tuple(s["op_types"]) for s in sb.sites}
        assert ops == ({("Div", "Erf", "Add", "Mul", "Mul")}, {("Gelu",)})


def test_what_the_demo_report_says_holds(signatures):
    """The demo's text claims these; if a rebuild breaks one, the text must change."""
    def stats(name):
        return signatures[name].summary()["affinity"]

    plain, res = stats("torch_cnn_relu"), stats("torch_rescnn_relu")
    assert res["mean"] > plain["mean"] and res["share_above_0.95"] > plain["share_above_0.95"]
    assert stats("torch_cnn_gelu_op17")["mean"] < plain["mean"]
    assert stats("torch_cnn_silu")["mean"] < plain["mean"]


def test_demo_writes_signatures_and_report(demo):
    out = demo
    sigs = {p.stem: json.loads(p.read_text()) for p in (out / "signatures").glob("*.json")}
    assert set(sigs) == set(ZOO)
    assert sigs["keras_cnn_relu"]["model"]["test_accuracy"] == ZOO["keras_cnn_relu"].accuracy
    page = (out / "report.html").read_text()
    assert "DTW" in page and "Correlation with accuracy" in page
    assert "src=\"http" not in page and not re.search(r"href=[\"'](?!#)", page)  # offline: only in-page links
    # the default metric's three PNGs (distribution, DTW heatmap, dendrogram), the six best statistics' SVG scatters
    assert page.count("data:image/png;base64,") >= 3 and page.count("<svg class=\"scatter\"") >= 6


def test_demo_subset_and_unknown_model(tmp_path, capfd):
    code, stdout, err = run_cli(capfd, "demo", "--out", tmp_path / "a", "--models", "sk_mlp_tanh,sk_mlp_relu")
    assert code == 0, err
    assert str((tmp_path / "a").resolve()) in stdout and "sk_mlp_tanh" in stdout and "sk_mlp_relu" in stdout
    assert sorted(p.name for p in (tmp_path / "a" / "signatures").iterdir()) == ["sk_mlp_relu.json", "sk_mlp_tanh.json"]
    one_line_error(run_cli(capfd, "demo", "--out", tmp_path / "b", "--models", "alexnet"),
                   "unknown shipped model 'alexnet'")

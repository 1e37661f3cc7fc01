"""`onnxaff analyze` end to end: CLI = API = an independent computation, and the signature contract."""

import json
import math
import os

import numpy as np
import onnx
import pytest

import onnxaff
from onnxaff.errors import OnnxaffError
from onnxaff.format.signature import read_signature
from tests.builders import chain, write_plugin
from tests.conftest import FIXTURES, TORCH_FIXTURES, parse, run_cli

ACTIVATIONS = """<ir_version: 8, opset_import: ["" : 17]>
g (float[N, 1] x) => (float[N, 1] r, float[N, 1] t, float[N, 1] s) {
    r = Relu(x)
    t = Tanh(x)
    s = Sigmoid(x)
}"""


def independent_affinity_1d(x, y, eps=1e-6):
    """d = 1 in closed form: T(x) = sqrt(σ_Y²/σ_X²)(x − m_X) + m_Y; 1-D OT pairs sorted values."""
    vx, vy = x.var(ddof=1) + eps, y.var(ddof=1) + eps
    t = np.sqrt(vy / vx) * (x - x.mean()) + y.mean()
    w2 = np.mean((np.sort(t) - np.sort(y)) ** 2)
    return 1 - np.sqrt(w2 / (2 * vy))


@pytest.fixture
def activation_case(tmp_path, rng):
    model = tmp_path / "acts.onnx"
    onnx.save(parse(ACTIVATIONS), model)
    x = rng.standard_normal((2048, 1)).astype(np.float32)
    data = tmp_path / "gauss.npy"
    np.save(data, x)
    return model, data, x


def test_cli_equals_api_equals_independent(activation_case, tmp_path, capfd):
    """The defaults on both sides: chunks of max(64, 4·D) = 64 rows at these D = 1 sites, 2048 rows: 32 chunks."""
    model, data, x = activation_case
    out = tmp_path / "sig.json"
    code, _, err = run_cli(capfd, "analyze", model, "--data", data, "--out", out, "--metrics", "affinity", "--quiet")
    assert code == 0, err
    from_cli = read_signature(out)
    from_api = onnxaff.analyze(model, str(data), metrics=["affinity"], progress=False)
    assert from_cli.scores() == from_api.scores()
    x64 = x[:, 0].astype(np.float64)
    for site, f in zip(from_api.sites, (lambda v: np.maximum(v, 0), np.tanh, lambda v: 1 / (1 + np.exp(-v))),
                       strict=True):
        chunks = [independent_affinity_1d(x64[i:i + 64], f(x64[i:i + 64])) for i in range(0, 2048, 64)]
        entry = site["metrics"]["affinity"]
        assert entry["chunks"] == 32 and entry["status"] == "ok"
        # float32 activations from the runtime against float64 ones here: agreement to ~1e-7.
        np.testing.assert_allclose(entry["values"], chunks, atol=2e-6)
        assert entry["mean"] == pytest.approx(np.mean(chunks), abs=2e-6)
        assert entry["std"] == pytest.approx(np.std(chunks), abs=2e-6)
    relu, tanh, sigm = from_api.scores()
    assert sigm > tanh > relu  # on N(0, 1), sigmoid is the most linear of the three


def test_signature_contract(activation_case, tmp_path):
    model, data, _ = activation_case
    two = ["affinity", "affinity_lw"]
    sig = onnxaff.analyze(model, str(data), progress=False, chunk_size=256, reduce="mean", metrics=two,
                          batch_size=100)
    d = json.loads(sig.write(tmp_path / "s.json").read_text())
    assert d["schema"] == "onnxaff.signature" and d["schema_version"] == 1
    assert len(d["model"]["sha256"]) == 64 and d["model"]["opset"] == 17
    assert d["data"]["samples"] == 2048 and d["data"]["kind"] == "arrays"
    assert d["options"]["chunk_size"] == 256 and d["options"]["reduce"] == "mean"
    assert d["runtime"]["providers"] == ["CPUExecutionProvider"]
    assert set(d["metrics"]) == {"affinity", "affinity_lw"}
    for k, s in enumerate(d["sites"]):
        assert s["index"] == k and s["dim"] == 1 and s["rows"] == 2048
        for m in ("affinity", "affinity_lw"):
            assert s["metrics"][m]["chunks"] == 8 and 0 < s["metrics"][m]["mean"] <= 1
    assert d["summary"]["affinity"]["sites"] == 3
    assert read_signature(tmp_path / "s.json").scores() == sig.scores()
    # chunk scores do not depend on the batch size, beyond float32 rounding: a CPU without AVX2 computes the last
    # elements of a batch with scalar code, which rounds differently (scores move by about 1e-8)
    again = onnxaff.analyze(model, str(data), progress=False, chunk_size=256, reduce="mean", metrics=two,
                            batch_size=7)
    np.testing.assert_allclose(again.scores(), sig.scores(), rtol=0, atol=1e-6)


MANIFEST = TORCH_FIXTURES


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_fixtures_end_to_end_synthetic(name):
    """The default reduction, sample:16: a rank-2 site gives its one row an example (96 rows, 2 chunks of 48), one
    with P positions min(16, P) rows (P known where its shape is static: the encoder's 9 tokens give 9)."""
    sig = onnxaff.analyze(FIXTURES / f"{name}.onnx", "synthetic:gaussian", limit=96, chunk_size=48,
                          progress=False)
    assert [s["kind"] for s in sig.sites] == MANIFEST[name]["kinds"]
    for s in sig.sites:
        assert s["status"] == "ok"
        per, left = divmod(s["rows"], 96)
        assert left == 0 and (per == 1 if s["rank"] == 2 else 1 <= per <= 16), s
        positions = [d for a, d in enumerate(s["input_shape"]) if a not in (0, s["feature_axis"])]
        if all(isinstance(d, int) for d in positions):
            assert per == min(16, math.prod(positions)), s
        for m in s["metrics"].values():
            assert m["status"] == "ok" and m["chunks"] == 2 * per and np.isfinite(m["mean"]), m


def test_partial_chunk_rule(activation_case):
    model, data, _ = activation_case
    small = onnxaff.analyze(model, str(data), limit=100, chunk_size=512, progress=False)
    entry = small.sites[0]["metrics"]["affinity"]
    assert entry["chunks"] == 1 and entry["partial"] is True
    big = onnxaff.analyze(model, str(data), limit=1100, chunk_size=512, progress=False)  # 2 full, 76 rows dropped
    entry = big.sites[0]["metrics"]["affinity"]
    assert entry["chunks"] == 2 and "partial" not in entry


def test_positions_reduction_counts_positions():
    sig = onnxaff.analyze(FIXTURES / "res_cnn_op17.onnx", "synthetic:gaussian", limit=4, reduce="positions",
                          chunk_size=512, progress=False)
    assert all(s["rows"] == 4 * 16 * 16 for s in sig.sites)
    assert all(s["metrics"]["affinity"]["chunks"] == 2 for s in sig.sites)


def test_plugin_that_raises_leaves_other_metrics_intact(tmp_path, activation_case):
    model, data, _ = activation_case
    plugin = write_plugin(tmp_path / "bad_metric.py", """
        class Broken(Metric):
            name = 'broken'
            description = 'always fails'
            def compute(self, chunk):
                raise RuntimeError('boom')
    """)
    sig = onnxaff.analyze(model, str(data), metrics=["affinity", "broken"], plugins=[plugin], progress=False)
    clean = onnxaff.analyze(model, str(data), metrics=["affinity"], progress=False)
    assert sig.scores("affinity") == clean.scores("affinity")
    for s in sig.sites:
        assert s["metrics"]["broken"]["status"] == "error" and "boom" in s["metrics"]["broken"]["error"]
    assert sum("metric broken failed" in w for w in sig.warnings) == 3


@pytest.mark.parametrize("kwargs,fragment", [
    ({"metrics": ["nope"]}, "unknown metric 'nope'"),
    ({"reduce": "median"}, "unknown reduction"),
    ({"chunk_size": 1}, "chunk_size must be"),  # the config field (the CLI says --chunk-size)
    ({"device": "tpu"}, "unknown device"),
])
def test_bad_options(activation_case, kwargs, fragment):
    model, data, _ = activation_case
    with pytest.raises(OnnxaffError, match=fragment):
        onnxaff.analyze(model, str(data), progress=False, **kwargs)


def test_bad_data(activation_case, tmp_path):
    model, _, _ = activation_case
    np.savez(tmp_path / "wrong.npz", y=np.zeros((4, 1), np.float32), z=np.zeros((4, 1), np.float32))
    with pytest.raises(OnnxaffError, match="no array for model input 'x'"):
        onnxaff.analyze(model, str(tmp_path / "wrong.npz"), progress=False)
    np.save(tmp_path / "shape.npy", np.zeros((4, 3), np.float32))
    with pytest.raises(OnnxaffError, match="expects"):
        onnxaff.analyze(model, str(tmp_path / "shape.npy"), progress=False)
    with pytest.raises(OnnxaffError, match="data not found"):
        onnxaff.analyze(model, str(tmp_path / "missing.bin"), progress=False)
    with pytest.raises(OnnxaffError, match="unknown synthetic"):
        onnxaff.analyze(model, "synthetic:poisson", progress=False)


def test_atomic_write_keeps_a_good_file_when_writing_fails(tmp_path, activation_case, monkeypatch):
    model, data, _ = activation_case
    sig = onnxaff.analyze(model, str(data), limit=64, progress=False)
    target = sig.write(tmp_path / "keep.json")
    before = target.read_text()
    import onnxaff.foundations.files as files_module

    def fail(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(files_module.os, "replace", fail)
    with pytest.raises(OnnxaffError, match="No space left on device"):
        sig.write(target)
    assert target.read_text() == before
    assert not list(tmp_path.glob(".keep.json.*"))  # no temporary left behind


def test_model_with_external_data_runs_where_it_lies(tmp_path, rng):
    from onnx import numpy_helper

    model = onnx.parser.parse_model("""<ir_version: 8, opset_import: ["" : 17]>
    g (float[N, 32] x) => (float[N, 32] y) {
        h = MatMul(x, w)
        y = Relu(h)
    }""")
    w = rng.standard_normal((32, 32)).astype(np.float32)
    model.graph.initializer.append(numpy_helper.from_array(w, "w"))
    sub = tmp_path / "weights"
    sub.mkdir()
    path = sub / "ext.onnx"
    onnx.save_model(model, str(path), save_as_external_data=True, location="ext.data", size_threshold=0)
    x = rng.standard_normal((256, 32)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    sig = onnxaff.analyze(path, str(tmp_path / "x.npy"), chunk_size=128, metrics=["affinity"], progress=False)
    inline = chain("Relu", width=32)
    np.save(tmp_path / "h.npy", x @ w)
    ref = onnxaff.analyze(inline, str(tmp_path / "h.npy"), chunk_size=128, metrics=["affinity"], progress=False)
    assert sig.scores() == pytest.approx(ref.scores(), abs=1e-6)


def test_written_files_get_the_usual_permissions(tmp_path):
    import stat

    from onnxaff.foundations.files import write_text_atomic

    old = os.umask(0o022)
    try:
        path = write_text_atomic(tmp_path / "report.html", "<html></html>")
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644  # not mkstemp's 0600

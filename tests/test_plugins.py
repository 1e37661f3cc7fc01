"""Third-party metrics: an entry point of another distribution, plugin files, name clashes."""

import json
import sys
import textwrap

import pytest

from onnxaff.errors import OnnxaffError
from onnxaff.metrics import registry, resolve
from tests.conftest import FIXTURES, run_cli

METRIC = textwrap.dedent('''
    import numpy as np
    from onnxaff.metrics import Chunk, Metric

    class MeanAbsChange(Metric):
        name = "mean_abs_change"
        description = "mean |Y - X| over a chunk"
        higher_is_more_linear = False
        range = (0.0, float("inf"))
        needs = "chunk"
        equal_dims = True

        def compute(self, chunk: Chunk) -> float:
            return float(np.mean(np.abs(chunk.y - chunk.x)))
''')


@pytest.fixture
def throwaway_distribution(tmp_path, monkeypatch):
    """A distribution on sys.path (as an installed wheel lays it out) with an onnxaff.metrics entry point;
    this process's sys.path, so the CLI runs in-process (importlib.metadata reads sys.path at each call)."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "throwaway_metric.py").write_text(METRIC)
    info = site / "throwaway_metric-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: throwaway-metric\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[onnxaff.metrics]\nmean_abs_change = throwaway_metric:MeanAbsChange\n")
    monkeypatch.syspath_prepend(str(site))
    yield
    sys.modules.pop("throwaway_metric", None)


def test_entry_point_metric_is_listed_and_runs(throwaway_distribution, tmp_path, capfd):
    code, out, err = run_cli(capfd, "plugins", "--format", "json")
    assert code == 0, err
    listed = json.loads(out)
    assert listed["mean_abs_change"]["origin"] == "entry point of throwaway-metric: throwaway_metric:MeanAbsChange"
    assert listed["mean_abs_change"]["direction"] == "lower = more linear"
    assert listed["affinity"]["origin"].startswith("entry point of onnxaff")
    defaults = sorted((v["default"], n) for n, v in listed.items() if v["default"] is not None)
    assert [n for _, n in defaults] == ["affinity"]  # what --metrics defaults to, as declared
    assert {n for n, v in listed.items() if v["stage_default"]} == {"lss", "ots"}
    out = tmp_path / "sig.json"
    code, _, err = run_cli(capfd, "analyze", FIXTURES / "res_cnn_op17.onnx", "--data", "synthetic:gaussian",
                           "--limit", "64", "--chunk-size", "32", "--quiet", "--metrics", "affinity,mean_abs_change",
                           "--out", out)
    assert code == 0, err
    sig = json.loads(out.read_text())
    for s in sig["sites"]:
        assert s["metrics"]["mean_abs_change"]["status"] == "ok" and s["metrics"]["mean_abs_change"]["mean"] >= 0
        assert s["metrics"]["affinity"]["status"] == "ok"


def test_plugin_file(tmp_path):
    path = tmp_path / "mine.py"
    path.write_text(METRIC)
    found = registry([str(path)])
    assert found["mean_abs_change"].origin == f"file {path}"
    (metric,) = resolve(["mean_abs_change"], [str(path)])
    assert metric.spec == type(metric).name == "mean_abs_change"


def test_duplicate_names_fail_loudly(tmp_path):
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text(METRIC)
    b.write_text(METRIC)
    with pytest.raises(OnnxaffError, match="two metrics are named 'mean_abs_change'"):
        registry([str(a), str(b)])
    clash = tmp_path / "clash.py"
    clash.write_text(METRIC.replace('"mean_abs_change"', '"affinity"'))
    with pytest.raises(OnnxaffError, match="two metrics are named 'affinity'"):
        registry([str(clash)])


def test_same_entry_point_listed_twice_is_one_metric(monkeypatch):
    from importlib import metadata

    real = metadata.entry_points

    def doubled(group):
        eps = list(real(group=group))
        return eps + eps  # what an editable install next to a regular one can look like

    monkeypatch.setattr("onnxaff.metrics.loader.metadata.entry_points", doubled)
    assert "affinity" in registry()


def test_bad_plugin_files(tmp_path):
    with pytest.raises(OnnxaffError, match="plugin file not found"):
        registry([str(tmp_path / "none.py")])
    broken = tmp_path / "broken.py"
    broken.write_text("import nonexistent_module_xyz\n")
    with pytest.raises(OnnxaffError, match="failed to import"):
        registry([str(broken)])
    empty = tmp_path / "empty.py"
    empty.write_text("x = 1\n")
    with pytest.raises(OnnxaffError, match="defines no Metric"):
        registry([str(empty)])

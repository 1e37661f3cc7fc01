"""The example studies (examples/NN_*.py) at a small size: they run, and their numbers obey closed-form facts."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import need

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def load(stem: str):
    """Import examples/<stem>.py (its name starts with a digit, so not by an import statement)."""
    spec = importlib.util.spec_from_file_location(f"example_{stem}", EXAMPLES / f"{stem}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def activations():
    ex = load("01_activation_functions")
    return ex, ex.run(quick=True)


@pytest.fixture(scope="module")
def polynomials():
    return load("02_polynomials").run(quick=True)


@pytest.fixture(scope="module")
def mlps():
    ex = load("03_random_mlps")
    return ex, ex.run(quick=True)


def test_activation_scores_match_closed_forms(activations):
    ex, rows = activations
    assert len(rows) == 3 * 3 * 2  # ReLU, Tanh, LeakyReLU(0.01) on a 3 × 2 grid
    assert all(0.0 <= r["affinity"] <= 1.0 + 1e-9 for r in rows)

    def cell(name, mu, sigma):
        return ex.lookup(rows, name, mu, sigma)

    # Input entirely positive: ReLU and LeakyReLU are the identity there.
    assert cell("ReLU", 5.0, 0.1)["affinity"] > 0.99
    assert cell("LeakyReLU(0.01)", 5.0, 1.0)["affinity"] > 0.999
    # Centred input: half folded, clearly non-linear; positive homogeneity makes σ irrelevant (same draws).
    relu0 = cell("ReLU", 0.0, 1.0)["affinity"]
    assert 0.5 < relu0 < 0.7
    assert cell("ReLU", 0.0, 0.1)["affinity"] == pytest.approx(relu0, abs=1e-3)
    # Tanh is near-linear on a narrow centred input, less so when it reaches the saturation.
    assert cell("Tanh", 0.0, 0.1)["affinity"] > 0.98 > cell("Tanh", 0.0, 1.0)["affinity"]
    # In 1-D linear CKA and r² are both corr².
    for r in rows:
        if r["cka"] is not None:
            assert r["cka"] == pytest.approx(r["r2"], abs=1e-9)
    # A constant output (ReLU on N(−1, 0.1)) is flagged as dominated by ε.
    assert cell("ReLU", -1.0, 0.1)["eps_dominated"] and not cell("ReLU", 0.0, 1.0)["eps_dominated"]


def test_activation_outputs_are_written(activations, tmp_path):
    ex, rows = activations
    paths = ex.write_outputs(rows, tmp_path)
    assert [p.suffix for p in paths] == [".csv", ".md", ".png"]
    assert all(p.stat().st_size > 0 for p in paths)
    assert len(paths[0].read_text().splitlines()) == len(rows) + 1


def test_polynomials(polynomials):
    by = {(r["domain"], r["degree"]): r for r in polynomials}
    for domain in ("U[-1, 1]", "U[0, 1]"):
        assert by[(domain, 1)]["affinity"] == pytest.approx(1.0, abs=1e-6)
        assert by[(domain, 1)]["affinity"] > by[(domain, 2)]["affinity"] > by[(domain, 3)]["affinity"]
    # x² on a symmetric input: uncorrelated with x (r² ≈ 0) yet far from affinity 0 — the score compares
    # distributions, and x² has the same distribution on U[−1, 1] as on U[0, 1].
    assert by[("U[-1, 1]", 2)]["r2"] < 0.05
    assert by[("U[-1, 1]", 2)]["affinity"] == pytest.approx(by[("U[0, 1]", 2)]["affinity"], abs=0.03)


def test_random_mlps(mlps):
    ex, result = mlps
    agg = ex.aggregate(result["rows"])
    assert len(result["rows"]) == 8 * 3 * 3  # configurations × seeds × layers
    assert all(0.0 <= r["affinity"] <= 1.0 + 1e-9 for r in result["rows"])

    def mean(config):
        return np.mean([a["affinity_mean"] for a in agg if a["config"] == config])

    # A larger weight scale drives the activations further from their linear regime.
    assert mean("ReLU ×6") < mean("ReLU ×1") - 0.05
    assert mean("Tanh ×6") < mean("Tanh ×1") - 0.1
    # All-positive weights after layer 1 keep every ReLU pre-activation positive: the identity.
    deep = [a for a in agg if a["config"] == "ReLU ×1 shifted" and a["layer"] == 3]
    assert deep[0]["affinity_mean"] > 0.99 and deep[0]["flat_share_mean"] == 0.0
    assert result["images"]["Tanh ×6"].shape == (16, 16)


def test_notebook_workflow_from_torch_modules_and_photos_to_a_report(tmp_path):
    """examples/05: three torch modules and a folder of photos to report.html with the top-level API only."""
    import ast

    import onnxaff

    need("torch")
    tree = ast.parse((EXAMPLES / "05_notebook_workflow.py").read_text(encoding="utf-8"))
    used = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name) and node.value.id == "onnxaff"}
    imports = [a.name for node in ast.walk(tree) if isinstance(node, ast.Import) for a in node.names] + \
        [node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
    assert used <= set(onnxaff.__all__) and {"analyze", "compare", "report", "ImagePreprocess"} <= used
    assert not [m for m in imports if m and m.startswith("onnxaff.")]
    result = load("05_notebook_workflow").run(tmp_path, quick=True)
    assert [s.kind for s in result["sites"]] == ["gelu", "gelu"]
    assert len(list((tmp_path / "photos").iterdir())) == 32
    for label, sig in result["signatures"].items():
        assert sig.model["name"] == f"cnn_{label}" and sig.model["export"]["exporter"] == "onnxaff.from_torch"
        assert sig.data["samples"] == 32 and sig.data["preprocessing"]["center_crop"] == [64, 64]
        assert [s["kind"] for s in sig.sites] == [label, label] and all(0 < v <= 1 for v in sig.scores("affinity"))
    page = result["report"].read_text(encoding="utf-8")
    assert result["report"] == tmp_path / "report.html" and all(label in page for label in ("relu", "gelu", "silu"))

"""What data a run needs (issue 49): the dry run's rows per site against the rows each metric declares it needs,
the examples (and chunk size) from which no site is flagged few_rows, held against the run itself; and the
flags that say something (constant_output only where the dead features move the score; texts per metric)."""

from __future__ import annotations

import numpy as np
import pytest

import onnxaff
from onnxaff.analysis.cost import estimate
from onnxaff.stats import rows_needed
from tests.builders import mlp, save
from tests.conftest import run_cli

OPTIONS = dict(chunk_size=128, batch_size=32, chunk_workers=0, progress=False)


@pytest.fixture(scope="module")
def two_widths(tmp_path_factory) -> str:
    """A Relu of D = 40 and a Tanh of D = 6, one row per example."""
    return save(mlp(np.random.default_rng(0), d_in=8, hidden=40, d_out=6),
                tmp_path_factory.mktemp("need") / "mlp.onnx")


def few_rows(sig) -> list[list[str]]:
    return [[m for m, e in s["metrics"].items() if "few_rows" in (e.get("flags") or [])] for s in sig.sites]


def test_the_dry_run_gives_each_metrics_rows_needed(two_widths):
    from onnxaff.metrics import resolve

    est = estimate(two_widths, "synthetic:gaussian:n=300", metrics=["affinity", "r2", "r2_pooled"], **OPTIONS)
    for s in est.sites:
        want = {m.spec: rows_needed(m.rows_per_dim, s.dim) for m in resolve(["affinity", "r2", "r2_pooled"])}
        assert s.rows_needed == want
    assert [s.rows_needed["affinity"] for s in est.sites] == [160, 24]  # 4·D at D = 40, D = 6 (rows_per_dim = 4)


@pytest.mark.parametrize("metrics", [["affinity"], ["affinity", "r2"], ["r2_pooled"]])
def test_the_examples_it_names_lift_every_few_rows_flag_in_the_run(two_widths, metrics):
    """The run at the examples (and chunk size) the dry run names has no few_rows; one example fewer has one."""
    est = estimate(two_widths, "synthetic:gaussian:n=100", metrics=metrics, **OPTIONS)
    assert est.examples_needed is not None and any(s.few_rows for s in est.sites)
    pooled = metrics == ["r2_pooled"]
    need = max(n for s in est.sites for n in s.rows_needed.values())
    assert est.examples_needed == need  # one row per example
    assert est.chunk_size_needed == (None if pooled else need)  # past the chunk of 128 only a larger chunk helps
    chunk = est.chunk_size_needed or OPTIONS["chunk_size"]
    options = {**OPTIONS, "chunk_size": chunk}
    sig = onnxaff.analyze(two_widths, f"synthetic:gaussian:n={est.examples_needed}", metrics=metrics, **options)
    assert few_rows(sig) == [[], []]
    short = onnxaff.analyze(two_widths, f"synthetic:gaussian:n={est.examples_needed - 1}", metrics=metrics, **options)
    assert any(few_rows(short))
    again = estimate(two_widths, f"synthetic:gaussian:n={est.examples_needed}", metrics=metrics, **options)
    assert again.examples_needed is None and not any(s.few_rows for s in again.sites)


def test_rows_per_example_count_in_the_examples_needed(tmp_path):
    """A site with 25 rows per example (positions of a [N, 6, 5, 5] Relu) needs 25 times fewer examples."""
    from tests.builders import chain

    model = save(chain("Relu", dims="N, 6, 5, 5"), tmp_path / "conv.onnx")
    est = estimate(model, "synthetic:gaussian:n=8", metrics=["affinity"], reduce="positions",
                   **{**OPTIONS, "chunk_size": 64, "batch_size": 4})
    (site,) = est.sites
    assert (site.rows_per_example, site.rows_needed, site.few_rows) == (25.0, {"affinity": 24}, [])
    est = estimate(model, "synthetic:gaussian:n=8", metrics=["affinity"], reduce="positions",
                   **{**OPTIONS, "chunk_size": 8, "batch_size": 4})
    assert est.sites[0].few_rows == ["affinity"]
    assert (est.examples_needed, est.chunk_size_needed) == (1, 24)  # 4·6 rows: ⌈24 / 25⌉ examples, chunks of 24


def test_the_dry_run_prints_the_need(two_widths, capfd):
    code, out, err = run_cli(capfd, "analyze", two_widths, "--data", "synthetic:gaussian:n=100", "--dry-run",
                             "--metrics", "affinity", "--chunk-size", "128", "--batch-size", "32",
                             "--chunk-workers", "0")
    assert code == 0, err
    assert "needs (affinity)" in out
    assert [line.split()[5] for line in out.splitlines() if "Relu" in line or "Tanh" in line] == ["160", "24"]
    assert "every site unflagged few_rows from 160 examples with --chunk-size 160" in out
    code, out, err = run_cli(capfd, "analyze", two_widths, "--data", "synthetic:gaussian:n=200", "--dry-run",
                             "--metrics", "affinity", "--chunk-size", "192", "--batch-size", "32",
                             "--chunk-workers", "0")
    assert code == 0, err
    assert "no site flagged few_rows with 200 examples" in out


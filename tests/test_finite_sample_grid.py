"""benchmarks/finite_sample_study.py --protocol-grid: the default protocol's bias on the synthetic grid.

docs/statistics.md's table is the committed JSON's, and a small run measures what the docs say it measures: the
study's sites and population values, chunks of the rows onnxaff's `--chunk-size 4d` cuts."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from benchmarks.finite_sample_study import SITE_KINDS, Site, grid_table, protocol_grid, score

ROOT = Path(__file__).resolve().parents[1]


def test_the_docs_table_is_the_committed_grid():
    result = json.loads((ROOT / "docs" / "statistics_default_grid.json").read_text(encoding="utf-8"))
    assert {c["d"] for c in result["cells"]} == {32, 64, 128, 256, 512}
    assert len(result["cells"]) == 5 * len(SITE_KINDS) * 2
    assert max(c["bias_se"] for c in result["cells"]) <= 0.002
    assert grid_table(result) in (ROOT / "docs" / "statistics.md").read_text(encoding="utf-8")


def test_a_small_grid_replays_its_sites_and_chunks():
    """d = 16: 4·16 = 64 rows, the protocol's floor; the paper's 512. The first site and its first chunk are drawn
    from the width's own stream, so a reader can redo any cell from (seed, d) alone."""
    result = protocol_grid(seed=7, dims=(16,), rows=1024)
    cells = result["cells"]
    assert [(c["sigma"], c["spectrum"]) for c in cells[::2]] == list(SITE_KINDS)
    assert [(c["protocol"], c["n"], c["chunks"]) for c in cells[:2]] == [("default", 64, 16), ("paper", 512, 8)]
    rng = np.random.default_rng([7, 16])
    first = Site(*SITE_KINDS[0], 16, rng)
    [Site(*kind, 16, rng) for kind in SITE_KINDS[1:]]
    assert cells[0]["population"] == first.population["affinity"]
    assert cells[0]["values"][0] == score("affinity", *first.draw(64, rng))
    for c in cells:
        assert c["bias"] == pytest.approx(np.mean(c["values"]) - c["population"], abs=1e-12)
        assert c["bias_se"] == pytest.approx(np.std(c["values"], ddof=1) / np.sqrt(c["chunks"]), rel=1e-9)

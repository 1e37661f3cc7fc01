"""Every number of the shipped models' runs is frozen: a change of code that moves one fails here.

tests/golden/numbers.json holds the demo's run and an every-metric `--blocks all` run of each shipped
network (tests/golden/freeze.py wrote it). Tolerance 1e-12: the same float64 maths in another order
moves a score by about 1e-15; a real change of method moves it by far more.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tests.golden.freeze import RUNS, run_all

FROZEN = json.loads((Path(__file__).parent / "golden" / "numbers.json").read_text())
MODELS = sorted({key.split("/")[0] for key in FROZEN})


def _differences(path: str, got, want, out: list) -> None:
    if isinstance(want, dict):
        if not isinstance(got, dict) or set(got) != set(want):
            out.append(f"{path}: keys {sorted(got) if isinstance(got, dict) else got} != {sorted(want)}")
            return
        for k in want:
            _differences(f"{path}.{k}", got[k], want[k], out)
    elif isinstance(want, list):
        if not isinstance(got, list) or len(got) != len(want):
            out.append(f"{path}: {got!r} != {want!r}")
            return
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            _differences(f"{path}[{i}]", g, w, out)
    elif isinstance(want, float) and isinstance(got, (int, float)) and not isinstance(got, bool):
        if not math.isclose(got, want, rel_tol=1e-12, abs_tol=1e-12):
            out.append(f"{path}: {got!r} != {want!r}")
    elif got != want:
        out.append(f"{path}: {got!r} != {want!r}")


@pytest.mark.parametrize("model", MODELS)
def test_every_number_of_a_shipped_model_is_unchanged(model):
    got = json.loads(json.dumps(run_all([model])))  # through JSON, as the frozen file went
    differences: list[str] = []
    for run in RUNS:
        key = f"{model}/{run}"
        _differences(key, got[key], FROZEN[key], differences)
    assert not differences, f"{len(differences)} numbers moved, first: " + "; ".join(differences[:5])

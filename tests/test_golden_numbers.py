"""Every number of the shipped models' runs is frozen: a change of code that moves one fails here.

tests/golden/numbers.json holds the demo's run and an every-metric `--blocks all` run of each shipped
network (`python -m tests.golden.freeze` wrote it, and the environment that produced it). Each metric is compared
at its measured tolerance (tests/golden/tolerances.json, from `python -m tests.golden.perturb`: ten times the
largest spread that onnxruntime's thread count, graph optimisation and the reduction path produce), so the
test passes on a machine whose float32 kernels round differently, and a real change of method, which moves a
score by far more, still fails. ONNXAFF_GOLDEN_RUNTIME="threads=1,graph_optimization=disable" runs the
models under such a perturbation (CI does, standing in for another CPU).
"""

from __future__ import annotations

import json
import os

import pytest

from onnxaff.format.signature import read_signature
from tests.golden.compare import differences, load, tolerances
from tests.golden.environment import describe, environment
from tests.golden.freeze import RUNS, numbers, run_all

FROZEN = load("numbers.json")
MODELS = sorted({key.split("/")[0] for key in FROZEN["runs"]})


def runtime_options(text: str | None) -> dict:
    """ONNXAFF_GOLDEN_RUNTIME's "threads=1,graph_optimization=disable,reduce_in=numpy" as analyze's keywords."""
    options = {}
    for item in filter(None, (text or "").split(",")):
        key, _, value = item.partition("=")
        options[key.strip()] = int(value) if key.strip() == "threads" else value.strip()
    return options


RUNTIME = runtime_options(os.environ.get("ONNXAFF_GOLDEN_RUNTIME"))


def report(model: str, found: list, runtime: dict) -> str:
    """Both environments and the worst five differences: enough to tell a change of method from a machine."""
    lines = [f"{len(found)} numbers of {model} moved beyond their measured tolerance",
             f"  frozen on: {describe(FROZEN['environment'])}",
             f"  this run:  {describe(environment())}" + (f", runtime {runtime}" if runtime else ""),
             "  worst five:"]
    lines += [f"    {d}" for d in found[:5]]
    return "\n".join(lines)


@pytest.mark.parametrize("model", MODELS)
def test_every_number_of_a_shipped_model_is_unchanged(model, request):
    if RUNTIME:
        got = run_all([model], **RUNTIME)
    else:  # the demo's run is what `onnxaff demo` computed once for the whole session (the same analysis)
        got = run_all([model], runs=[run for run in RUNS if run != "demo"])
        signature = read_signature(request.getfixturevalue("shipped_demo") / "signatures" / f"{model}.json")
        got[f"{model}/demo"] = json.loads(json.dumps(numbers(signature)))
    want = {f"{model}/{run}": FROZEN["runs"][f"{model}/{run}"] for run in RUNS}
    found = differences(got, want, tolerances())
    assert not found, report(model, found, RUNTIME)

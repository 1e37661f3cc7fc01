"""The golden comparison itself: a move inside a metric's measured tolerance passes, one beyond fails, labels
and flags compare exactly, and the failure report names both environments and the worst differences."""

from __future__ import annotations

import copy

from tests.golden.compare import differences
from tests.test_golden_numbers import report, runtime_options

RUN = {"sites": {"/Relu": {"kind": "relu", "status": "ok", "metrics": {
    "affinity": {"mean": 0.8, "std": 0.01, "values": [0.79, 0.81], "status": "ok", "flags": []},
    "r2": {"mean": 0.9, "std": None, "values": [0.9], "status": "ok", "flags": ["rank_ambiguous"]}}}},
    "stages": [{"lss": {"mean": 12.0, "std": None, "values": [12.0], "status": "ok", "flags": []}}],
    "network": {"nlc": {"examples": 64, "form": "directional", "status": "ok", "values": {"out": 3.0}}}}
TOL = {"affinity": 1e-6, "r2": 1e-9, "r2|rank_ambiguous": 1e-3, "lss": 1e-6, "network.nlc": 1e-5}


def moved(where: str, by: float) -> dict:
    """{"m": RUN} with one number moved by `by`."""
    run = copy.deepcopy(RUN)
    entry, key = {"affinity.mean": (run["sites"]["/Relu"]["metrics"]["affinity"], "mean"),
                  "r2.mean": (run["sites"]["/Relu"]["metrics"]["r2"], "mean"),
                  "lss.mean": (run["stages"][0]["lss"], "mean"),
                  "nlc.values": (run["network"]["nlc"]["values"], "out")}[where]
    entry[key] += by
    return {"m": run}


def test_within_the_tolerance_passes_and_beyond_fails():
    assert differences({"m": RUN}, {"m": RUN}, TOL) == []
    assert differences(moved("affinity.mean", 0.9e-6), {"m": RUN}, TOL) == []
    found = differences(moved("affinity.mean", 2e-6), {"m": RUN}, TOL)
    assert len(found) == 1 and found[0].key == "affinity" and 1.9 < found[0].excess < 2.1


def test_large_numbers_are_compared_relatively():
    assert differences(moved("lss.mean", 0.9e-5), {"m": RUN}, TOL) == []  # 12 · 1e-6
    assert differences(moved("nlc.values", 2.9e-5), {"m": RUN}, TOL) == []  # 3 · 1e-5
    assert [d.key for d in differences(moved("nlc.values", 4e-5), {"m": RUN}, TOL)] == ["network.nlc"]


def test_an_unstable_flag_takes_its_own_tolerance():
    assert differences(moved("r2.mean", 5e-4), {"m": RUN}, TOL) == []
    steady = copy.deepcopy(RUN)
    steady["sites"]["/Relu"]["metrics"]["r2"]["flags"] = []
    got = copy.deepcopy(steady)
    got["sites"]["/Relu"]["metrics"]["r2"]["mean"] += 5e-4
    assert [d.key for d in differences({"m": got}, {"m": steady}, TOL)] == ["r2"]


def test_labels_flags_and_missing_entries_compare_exactly():
    got = copy.deepcopy(RUN)
    got["sites"]["/Relu"]["metrics"]["affinity"]["flags"] = ["few_rows"]
    got["sites"]["/Relu"]["status"] = "error"
    del got["sites"]["/Relu"]["metrics"]["r2"]["std"]
    found = differences({"m": got}, {"m": RUN}, TOL)
    assert len(found) == 3 and all(d.excess == float("inf") for d in found)
    assert differences({"m": RUN}, {"m": RUN}, {}) == []  # a metric without a tolerance: exact only
    got = copy.deepcopy(RUN)
    got["sites"]["/Relu"]["metrics"]["affinity"]["std"] += 1e-15
    assert len(differences({"m": got}, {"m": RUN}, {})) == 1


def test_the_report_names_both_environments_and_the_worst_five():
    got = copy.deepcopy(RUN)
    for i in range(7):
        got["sites"]["/Relu"]["metrics"]["affinity"]["values"] = [0.79 + (i + 1) * 1e-3, 0.81]
    got["sites"]["/Relu"]["metrics"]["affinity"]["mean"] += 0.1
    found = differences({"m": got}, {"m": RUN}, TOL)
    text = report("m", found, {"threads": 1})
    assert "frozen on: onnxruntime" in text and "this run:  onnxruntime" in text and "threads" in text
    assert text.splitlines()[4].strip().startswith("m:/Relu.affinity.mean")  # the worst first


def test_runtime_options_from_the_environment_variable():
    assert runtime_options("threads=1,graph_optimization=disable,reduce_in=numpy") == {
        "threads": 1, "graph_optimization": "disable", "reduce_in": "numpy"}
    assert runtime_options(None) == runtime_options("") == {}

"""The last step of a run (onnxaff/analysis/assemble.py): finished collectors and the sites' records into a signature.

The collectors are built through SiteState's public calls (add, finish), as a run feeds them; what is checked is
what a reader of the signature sees: statuses, warnings, and the refusal of a run that got no number at all.
"""

from __future__ import annotations

import numpy as np
import pytest

from onnxaff.analysis.assemble import assemble, check_some_number, site_entries, stage_results
from onnxaff.analysis.records import SiteRecord, StageRecord
from onnxaff.collection.scoring import MetricScorer
from onnxaff.collection.site_state import SiteState
from onnxaff.errors import OnnxaffError
from onnxaff.format.siteentry import ScoreEntry, SiteEntry, StageEntry
from onnxaff.graph.site import Site
from onnxaff.metrics import Metric, resolve

CHUNK = 32


def _collected(x, y, metrics, tracks=None) -> SiteState:
    st = SiteState.open(CHUNK, label="site act", tracks=tracks)
    with MetricScorer(0) as scorer:
        for i in range(0, len(x), 16):  # batches of 16 rows
            st.add(x[i:i + 16], y[i:i + 16], metrics, scorer)
        st.finish(metrics, scorer)
    return st


def _base(index, status="ok", reason=""):
    return SiteRecord(Site(index=index, id=f"act{index}", kind="tanh", input="x", output="y", op_types=["Tanh"],
                           nodes=[f"act{index}"], status=status, reason=reason))


def _header(examples, **data):
    return {"model": {"name": "m"}, "data": {"examples": examples, **data}, "runtime": {},
            "options": {"batch_size": 16, "chunk_size": CHUNK}, "metrics": {"affinity": {}}, "warnings": ["given"]}


@pytest.fixture
def metrics():
    return resolve(["affinity"])


def test_a_site_with_nonfinite_rows_is_flagged_and_warned_about(rng, metrics):
    x = rng.standard_normal((64, 3))
    bad = x.copy()
    bad[[3, 40]] = np.nan
    states = {0: _collected(x, np.tanh(x), metrics), 1: _collected(bad, np.tanh(bad), metrics)}
    sites, warnings = site_entries([_base(0), _base(1)], states, metrics)
    assert sites[0].status == "ok" and sites[0].metrics["affinity"].status == "ok"
    assert (sites[0].dim, sites[0].rows, sites[0].chunks) == (3, 64, 2)
    assert sites[1].status == "flagged" and sites[1].metrics["affinity"].status == "nonfinite"
    assert sites[1].reason == "NaN/Inf in the features of 2 of 64 rows"
    assert "site 1 (act1): NaN/Inf in the features of 2 of 64 rows" in warnings


def test_skipped_sites_are_one_warning_with_each_reason_once(rng, metrics):
    x = rng.standard_normal((64, 3))
    bases = [_base(0), _base(1, "skipped", "scalar tensor"), _base(2, "skipped", "input and output ranks differ"),
             _base(3, "skipped", "scalar tensor")]
    sites, warnings = site_entries(bases, {0: _collected(x, np.tanh(x), metrics)}, metrics)
    assert [s.metrics == {} for s in sites] == [False, True, True, True]
    assert warnings == ["3 site(s) skipped: input and output ranks differ; scalar tensor"]


def test_a_failing_metric_is_a_warning_and_an_error_entry(rng):
    class Broken(Metric):
        name = "broken"

        def compute(self, chunk):
            raise ValueError("no luck")

    x = rng.standard_normal((64, 3))
    metrics = [Broken()]
    sites, warnings = site_entries([_base(0)], {0: _collected(x, np.tanh(x), metrics)}, metrics)
    entry = sites[0].metrics["broken"]
    assert entry.status == "error" and "no luck" in entry.error
    assert len(warnings) == 1 and warnings[0].startswith("site 0 (act0): metric broken failed: ")
    assert "no luck" in warnings[0]


def test_assembly_builds_the_typed_entries_once(rng, metrics):
    """Assembly hands on typed entries, each field in the file's order (a scored site every declared field, an
    unscored one its record's and `metrics`), and the Signature holds those same objects."""
    x = rng.standard_normal((64, 3))
    records = [_base(0), _base(1, "skipped", "scalar tensor")]
    states = {0: _collected(x, np.tanh(x), metrics)}
    (scored, unscored), _ = site_entries(records, states, metrics)
    assert isinstance(scored, SiteEntry) and isinstance(scored.metrics["affinity"], ScoreEntry)
    assert list(scored.to_json()) == [f.name for f in SiteEntry.json_fields()]
    assert list(unscored.to_json()) == [*records[1].to_dict(), "metrics"]
    sig = assemble(_header(64), records, states, metrics, network={})
    assert sig.sites[0].to_json() == scored.to_json()
    stored = SiteEntry.from_json(scored.to_json())
    assert list(sig.sites[0].metrics["affinity"]) == list(stored.metrics["affinity"])  # the collection's key order


def test_the_signature_says_what_the_data_lost(rng, metrics):
    x = rng.standard_normal((64, 3))
    skipped = [{"file": f"img{k}.png", "reason": "truncated"} for k in range(12)]
    sig = assemble(_header(64, dropped=5, skipped=skipped), [_base(0), _base(1, "skipped", "scalar tensor")],
                   {0: _collected(x, np.tanh(x), metrics)}, metrics, network={})
    assert sig.warnings[:2] == ["given", "5 trailing examples dropped: the model's batch size is fixed at 16"]
    assert sig.warnings[2] == "1 site(s) skipped: scalar tensor"
    assert sig.warnings[3] == "12 unreadable file(s) skipped: " + ", ".join(f"img{k}.png" for k in range(10))
    assert len(sig.warnings) == 4 and sig.scores("affinity") == [sig.sites[0]["metrics"]["affinity"]["mean"]]


def test_no_number_anywhere_is_an_error_not_an_empty_signature(rng, metrics):
    one = rng.standard_normal((1, 3))  # one row: no chunk, and a partial chunk needs two
    sig = assemble(_header(1), [_base(0)], {0: _collected(one, np.tanh(one), metrics)}, metrics, network={})
    assert sig.sites[0]["metrics"]["affinity"]["status"] == "no_data"
    with pytest.raises(OnnxaffError, match=r"no site got a number from 1 example\(s\): .*\(chunk size 32\)"):
        check_some_number(sig, 1)
    x = rng.standard_normal((64, 3))
    fine = assemble(_header(65), [_base(0), _base(1)], {0: _collected(one, np.tanh(one), metrics),
                                                       1: _collected(x, np.tanh(x), metrics)}, metrics, network={})
    check_some_number(fine, 65)  # one number is enough
    nan = np.full((64, 3), np.nan)
    flagged = assemble(_header(64), [_base(0)], {0: _collected(nan, nan, metrics)}, metrics, network={})
    check_some_number(flagged, 64)  # NaN/Inf is flagged and warned about, not an error


def test_stage_results_consume_states_only_for_ok_stages(rng):
    tracks = resolve(["lss"])
    h = rng.standard_normal((64, 4))
    stacked = np.hstack([h, np.tanh(h), np.tanh(np.tanh(h))])  # h⁰ h¹ h² side by side, Y empty
    st = _collected(stacked, stacked[:, :0], tracks, tracks=3)
    stages = [StageRecord(0, "stage:a..b", ["a", "b"], ["t0", "t1", "t2"], "ok", ""),
              StageRecord(1, "stage:c..c", ["c"], [], "skipped", "t: unknown rank")]
    ok, skipped = stage_results(stages, [st], tracks)
    assert (ok.length, ok.dim, ok.rows, ok.chunks) == (2, 4, 64, 2)
    assert ok.metrics["lss"].status == "ok"
    assert skipped.metrics == {} and skipped.length == 1 and skipped.reason == "t: unknown rank"
    assert list(ok.to_json()) == [f.name for f in StageEntry.json_fields()]  # the file's order, every field
    assert list(skipped.to_json()) == [*stages[1].to_dict(), "length", "metrics"]


def test_records_round_trip_through_the_saved_state():
    """A run's saved state holds the records as dicts: restored, they are the records again (a resumed run's
    signature reads the same fields)."""
    from onnxaff.analysis.records import site_from_dict

    site = Site(index=3, id="g", kind="gelu", input="a", output="b", op_types=["Erf", "Mul"], nodes=["n1", "n2"],
                input_shape=[2, 8], output_shape=[2, 8], rank=2, feature_axis=1, layout="channels_first",
                params={"approximate": "none"}, node_indices=[4, 5])
    record = SiteRecord(site, {"nodes": [], "edges": [], "omitted": 0})
    again = SiteRecord.from_dict(record.to_dict())
    assert again.to_dict() == record.to_dict() and again.site.node_indices == []  # graph positions are not saved
    assert site_from_dict(site.to_dict()).to_dict() == site.to_dict()
    stage = StageRecord(0, "stage:a..b", ["a", "b"], ["t0", "t1"], "ok", "")
    assert StageRecord.from_dict(stage.to_dict()) == stage

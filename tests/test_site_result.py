"""A signature's sites, stages and scores are typed entries (onnxaff.format.siteentry) from assembly to every reader;
the JSON stays the file's, byte for byte, and the schema checks read the same declarations (issue 48)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from onnxaff.errors import OnnxaffError
from onnxaff.format.signature import Signature, drop_flagged, read_signature
from onnxaff.format.siteentry import ScoreEntry, SiteEntry, StageEntry

ROOT = Path(__file__).resolve().parents[1]
STORED = sorted((ROOT / "examples" / "output" / "04_pretrained" / "signatures").glob("*.json"))


def _file(tmp_path: Path, sites: list[dict], name: str = "s.json", summarised: bool = False) -> Path:
    """A signature file holding `sites` as given (its summary theirs where `summarised`, else empty)."""
    d = Signature(model={"name": "m"}, data={}, options={}, runtime={}, metrics={"affinity": {"range": [0, 1]}},
                  sites=sites if summarised else []).to_dict()
    d["sites"] = sites
    path = tmp_path / name
    path.write_text(json.dumps(d, indent=1) + "\n")
    return path


def _site(index: int = 0, **extra) -> dict:
    return {"index": index, "id": f"s{index}", "kind": "relu", "status": "ok",
            "metrics": {"affinity": {"mean": 0.9, "std": 0.01, "chunks": 2, "status": "ok", "flags": []}}, **extra}


@pytest.mark.parametrize("path", STORED, ids=lambda p: p.name)
def test_a_stored_signature_is_written_back_byte_for_byte(path, tmp_path):
    sig = read_signature(path)
    assert all(isinstance(s, SiteEntry) for s in sig.sites)
    assert all(isinstance(e, ScoreEntry) for s in sig.sites for e in s.metrics.values())
    assert sig.write(tmp_path / "back.json").read_bytes() == path.read_bytes()


def test_a_fresh_signature_round_trips_with_its_stages(tmp_path):
    import onnxaff

    sig = onnxaff.analyze(str(ROOT / "tests" / "fixtures" / "res_cnn_op17.onnx"), "synthetic:gaussian", limit=16,
                          chunk_size=64, blocks="residual", progress=False)
    assert sig.stages and all(isinstance(st, StageEntry) for st in sig.stages)
    first = sig.write(tmp_path / "a.json")
    again = read_signature(first).write(tmp_path / "b.json")
    assert again.read_bytes() == first.read_bytes()


def test_an_old_or_newer_entry_keeps_its_keys_their_order_and_what_this_version_does_not_know(tmp_path):
    """A file written before `neighbourhood` (absent, not null), keys in another order, a field from a later
    version: all written back as they came."""
    odd = {"metrics": {"affinity": {"status": "ok", "mean": 0.5, "later": [1]}}, "status": "ok", "kind": "gelu",
           "id": "x", "index": 0, "future": {"a": 1}}
    path = _file(tmp_path, [odd, _site(1, neighbourhood=None)], summarised=True)
    sig = read_signature(path)
    assert [list(s.to_json()) for s in sig.sites] == [list(odd), list(_site(1, neighbourhood=None))]
    assert sig.sites[0].to_json() == odd and "neighbourhood" not in sig.sites[0] and "neighbourhood" in sig.sites[1]
    assert sig.write(tmp_path / "back.json").read_bytes() == path.read_bytes()


def test_readers_get_typed_attributes_and_defaults_for_what_a_file_leaves_out(tmp_path):
    sig = read_signature(_file(tmp_path, [_site(0, group="pair", dim=8), _site(1)]))
    pair, site = sig.sites
    assert (pair.group, pair.dim, pair.in_signature) == ("pair", 8, False)
    assert (site.group, site.dim, site.op_types, site.in_signature) == ("activation", None, (), True)
    e = site.metrics["affinity"]
    assert (e.mean, e.chunks, e.flags, e.partial, e.ci95) == (0.9, 2, [], False, None)
    assert site["metrics"]["affinity"]["mean"] == 0.9 and dict(site) == _site(1)  # the read-only mapping view
    with pytest.raises(dataclasses.FrozenInstanceError):
        site.kind = "gelu"
    with pytest.raises(TypeError):
        site["kind"] = "gelu"


def test_updated_adds_a_field_as_dict_update_does_and_without_leaves_one_out():
    e = ScoreEntry.from_json({"mean": 0.5})
    assert e.updated(flags=["few_rows"]).to_json() == {"mean": 0.5, "flags": ["few_rows"]}
    assert e.updated(mean=None).to_json() == {"mean": None}
    site = SiteEntry.from_json(_site(0, neighbourhood={"nodes": [], "edges": []}))
    assert "neighbourhood" not in site.without("neighbourhood").to_json()
    assert site.without("neighbourhood").neighbourhood is None


@pytest.mark.parametrize(("change", "message"), [
    ({"rank": "4"}, "sites[0].rank: expected a whole number or null"),
    ({"layout": 3}, "sites[0].layout: expected text or null"),
    ({"nodes": ["a", 2]}, "sites[0].nodes[1]: expected text"),
    ({"kind": None}, "sites[0].kind: expected text"),
    ({"metrics": {"affinity": {"mean": 0.5, "pooled_rows": 1.5}}}, "sites[0].metrics.affinity.pooled_rows: "
                                                                     "expected a whole number"),
    ({"metrics": {"affinity": {"mean": 1.5}}}, "sites[0].metrics.affinity.mean: 1.5 is outside the metric's range"),
])
def test_a_damaged_field_is_one_line_naming_it(tmp_path, change, message):
    path = _file(tmp_path, [_site(0) | change])
    with pytest.raises(OnnxaffError) as err:
        read_signature(path)
    assert str(err.value).startswith(f"{path}: {message}") and "\n" not in str(err.value)


def test_a_field_without_a_default_is_required(tmp_path):
    site = _site(0)
    del site["status"]
    with pytest.raises(OnnxaffError, match=r"sites\[0\]\.status: missing$"):
        read_signature(_file(tmp_path, [site]))
    required = {f.name for f in SiteEntry.json_fields() if SiteEntry.required(f)}
    assert required == {"index", "id", "kind", "status", "metrics"}
    assert {f.name for f in StageEntry.json_fields() if StageEntry.required(f)} == {"index", "id", "status",
                                                                                     "length", "metrics"}


def test_the_entries_declare_what_assembly_writes():
    """The typed entries are the one declaration of a signature's fields: the discovery records assembly starts from
    (onnxaff.analysis.records) give their leading fields, in order, and what a run measures follows, declared only
    there (tests/test_assemble.py holds an assembled site's and stage's keys to them); a score's fields are
    ScoreEntry's alone, and a key the collection writes that it does not declare fails assembly."""
    from onnxaff.analysis.records import SiteRecord, StageRecord, scores
    from onnxaff.graph.site import Site

    record = SiteRecord(Site(0, "s", "relu", "x", "y", ["Relu"], ["n"]))
    declared = [f.name for f in SiteEntry.json_fields()]
    assert declared[:len(record.to_dict())] == list(record.to_dict())
    unscored = record.entry(metrics={})
    assert isinstance(unscored, SiteEntry) and list(unscored.to_json()) == [*record.to_dict(), "metrics"]
    stage = StageRecord(0, "stage:a..b", ["a", "b"], ["t0", "t1"], "ok", "")
    assert [f.name for f in StageEntry.json_fields()][:len(stage.to_dict())] == list(stage.to_dict())
    assert list(stage.entry(length=2, metrics={}).to_json()) == [*stage.to_dict(), "length", "metrics"]
    collected = {"mean": 0.5, "std": 0.1, "chunks": 2, "status": "ok", "masked_rows": 3, "flags": []}
    (score,) = scores({"affinity": collected}).values()
    assert isinstance(score, ScoreEntry) and score.to_json() == collected and list(score) == list(collected)
    assert score.flags is not collected["flags"]  # a copy: the finished state keeps its own lists
    with pytest.raises(TypeError, match="undeclared"):
        scores({"affinity": collected | {"undeclared": 1}})
    assert ScoreEntry.from_json(collected | {"undeclared": 1}).unknown == {"undeclared": 1}  # a file's: carried


def test_drop_flagged_replaces_entries_and_leaves_the_given_signature_alone(tmp_path):
    from onnxaff.api.results import signatures_of

    flagged = _site(0)
    flagged["metrics"]["affinity"]["flags"] = ["few_rows"]
    sig = read_signature(_file(tmp_path, [flagged, _site(1)]))
    (copy,), _ = signatures_of([sig], exclude_flagged=True)
    assert copy.scores("affinity") == [None, 0.9] and sig.scores("affinity") == [0.9, 0.9]
    assert drop_flagged([sig]) == (1, 2) and sig.sites[0].to_json()["metrics"]["affinity"]["mean"] is None

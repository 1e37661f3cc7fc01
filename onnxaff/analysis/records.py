"""The typed records a site and a stage travel as, from discovery through a run's saved state to the signature.

A site is discovery's `Site` the whole way: the plan places it in the graph (`SiteRecord`, its neighbourhood for
the report's drawing), the run state saves and restores that record, and at assembly the record's `entry` joins its
fields and what the run measured into the signature's SiteEntry (onnxaff.format.siteentry), once. A stage likewise:
`StageRecord` (the discovery fields), `Stage` (with its probe sites, while a plan runs) and its StageEntry. The
entries declare every field the signature holds, the measured ones and each metric's ScoreEntry included; nothing
here declares them again (tests/test_site_result.py holds the records' fields to the entries', tests/test_docs.py
the entries' to docs/signature.md).
"""

from __future__ import annotations

from copy import deepcopy
from dataclasses import dataclass, field, fields

from onnxaff.collection.entries import MetricEntry
from onnxaff.format.siteentry import ScoreEntry, SiteEntry, StageEntry
from onnxaff.graph.site import Site


def site_from_dict(d: dict) -> Site:
    """The Site a saved record describes (the fields Site.to_dict writes; graph positions are not saved)."""
    known = {f.name for f in fields(Site)}
    return Site(**{k: v for k, v in d.items() if k in known})


@dataclass(frozen=True)
class SiteRecord:
    """A site as the signature records it before any metric: discovery's Site and where it sits in the graph
    (onnxaff.graph.neighbourhood; None where it has no node to start from)."""

    site: Site
    neighbourhood: dict | None = None

    def to_dict(self) -> dict:
        return self.site.to_dict() | {"neighbourhood": self.neighbourhood}

    @classmethod
    def from_dict(cls, d: dict) -> SiteRecord:
        return cls(site_from_dict(d), d.get("neighbourhood"))

    def entry(self, **measured) -> SiteEntry:
        """The signature's entry of this site: the record's fields, then `measured`, what the run measured of it
        (SiteEntry's fields after the record's; `metrics` alone for a site it did not score)."""
        return SiteEntry.of(self.to_dict() | measured)


@dataclass(frozen=True)
class StageRecord:
    """A residual stage as discovery found it: its blocks and its track tensors h⁰ … h^L."""

    index: int
    id: str
    blocks: list[str]
    tensors: list[str]
    status: str
    reason: str

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def to_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(StageRecord)}

    @classmethod
    def from_dict(cls, d: dict) -> StageRecord:
        return cls(**{f.name: d[f.name] for f in fields(StageRecord)})

    def entry(self, **measured) -> StageEntry:
        """The signature's entry of this stage: the record's fields, then `measured` (StageEntry's fields after the
        record's; `length` and `metrics` alone for a stage the run did not score)."""
        return StageEntry.of(self.to_dict() | measured)


@dataclass(frozen=True)
class Stage(StageRecord):
    """A stage while a plan runs: the record and a probe site per track tensor."""

    probes: list[Site] = field(default_factory=list)

    def record(self) -> StageRecord:
        return StageRecord.from_dict(self.to_dict())


def scores(entries: dict[str, MetricEntry]) -> dict[str, ScoreEntry]:
    """The collection's entries of one site or stage (onnxaff.collection.entries) as the signature's ScoreEntry
    records, built here once from copies (the finished state keeps its own lists); a key ScoreEntry does not
    declare is an error."""
    return {name: ScoreEntry.of(deepcopy(e)) for name, e in entries.items()}

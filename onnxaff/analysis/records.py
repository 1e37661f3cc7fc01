"""The typed records a site and a stage travel as, from discovery through a run's saved state to the signature.

A site is discovery's `Site` the whole way: the plan places it in the graph (`SiteRecord`, its neighbourhood for
the report's drawing), the run state saves and restores that record, and the signature's entry is the record's
fields and what the run measured (`SiteResult`), joined once, at assembly. A stage likewise: `StageRecord` (the
discovery fields, declared here only), `Stage` (with its probe sites, while a plan runs) and `StageResult`.
docs/signature.md describes exactly these fields (tests/test_docs.py).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields

from onnxaff.collection.entries import MetricEntry
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


@dataclass(frozen=True)
class SiteResult:
    """What a run measured of one site: D of X's and Y's features, its rows and chunks, an entry per metric."""

    dim: int | None
    dim_y: int | None
    rows: int
    chunks: int
    partial_chunk: bool
    metrics: dict[str, MetricEntry]


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


@dataclass(frozen=True)
class Stage(StageRecord):
    """A stage while a plan runs: the record and a probe site per track tensor."""

    probes: list[Site] = field(default_factory=list)

    def record(self) -> StageRecord:
        return StageRecord.from_dict(self.to_dict())


@dataclass(frozen=True)
class StageResult:
    """What a run measured of one stage: its length (blocks), rows and chunks, D of a track, an entry per
    trajectory metric."""

    length: int
    rows: int
    chunks: int
    partial_chunk: bool
    dim: int | None
    metrics: dict[str, MetricEntry]


def entry(record: SiteRecord | StageRecord, result: SiteResult | StageResult | None, **unmeasured) -> dict:
    """The signature's dict of one site or stage: the record's fields, then the result's (`unmeasured` in their
    place for one the run did not score)."""
    return record.to_dict() | (asdict(result) if result is not None else unmeasured)

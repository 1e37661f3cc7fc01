"""A signature's per-site and per-stage entries as typed records: the fields a file holds, declared once.

Assembly builds them once (onnxaff.analysis.records, `of`: a discovery record's fields and what the run measured,
each metric's ScoreEntry from the collection's dict) and hands them on: to the warnings, to the `Signature`, to every
reader, which use their attributes; a file's dicts become them when it is read (`from_json`). `to_json()` gives back
the dict exactly: the keys the entry came with, in their order (a file written before a field was added stays as it
was), fields this version does not know carried along untouched. onnxaff.format.schema checks a file against the
same declarations: a field's JSON kind is its metadata, and a field without a default must be there. A record is
also a read-only mapping of that dict, for code written against it (``sig.sites[0]["kind"]``, the form the Python
API showed first).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import MISSING, Field, dataclass, field, fields, replace
from typing import Any


def declared(kind: str, *, items: str | None = None, default=MISSING, factory=MISSING) -> Any:
    """A JSON field: its kind (onnxaff.format.schema's names: "text", "whole?", ...), its items' kind for a list;
    without a default or factory a file must have it."""
    return field(default=default, default_factory=factory, metadata={"kind": kind, "items": items})


def _plain(value):
    if isinstance(value, JsonRecord):
        return value.to_json()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


class JsonRecord(Mapping):
    """What the entry records share: the JSON round trip and the mapping view. Subclasses are frozen, keyword-only
    dataclasses whose `declared` fields are the JSON's."""

    present: tuple[str, ...] | None  # the keys the entry came with, in order; None: every declared field
    unknown: dict  # keys this version does not declare, carried along

    @classmethod
    def json_fields(cls) -> list[Field]:
        return [f for f in fields(cls) if "kind" in f.metadata]

    @staticmethod
    def required(f: Field) -> bool:
        return f.default is MISSING and f.default_factory is MISSING

    @classmethod
    def decode(cls, name: str, value):
        """A field's value as the record holds it (nested records are built here)."""
        return value

    @classmethod
    def of(cls, d: Mapping):
        """The entry of exactly these fields, in this order, as assembly builds it: unlike `from_json` (a file's
        entry), a field not declared here is an error (TypeError), not carried along."""
        return cls(**{k: cls.decode(k, v) for k, v in d.items()}, present=tuple(d))

    @classmethod
    def from_json(cls, d: Mapping):
        if isinstance(d, cls):
            return d
        known = {f.name for f in cls.json_fields()}
        return cls(**{k: cls.decode(k, v) for k, v in d.items() if k in known}, present=tuple(d),
                   unknown={k: v for k, v in d.items() if k not in known})

    def to_json(self) -> dict:
        """The entry's dict, exactly as it came (or as assembly writes it)."""
        return {k: _plain(self[k]) for k in self}

    def updated(self, **changes):
        """A copy with `changes`, as dict.update makes it: a field the entry did not have is added at the end."""
        keys = self._keys()
        return replace(self, **changes, present=keys + tuple(k for k in changes if k not in keys))

    def without(self, *names: str):
        """A copy without these fields, as a file written before them has it (the attributes keep their defaults)."""
        reset = {f.name: f.default if f.default is not MISSING else f.default_factory() for f in self.json_fields()
                 if f.name in names and not self.required(f)}
        return replace(self, **reset, present=tuple(k for k in self._keys() if k not in names))

    def _keys(self) -> tuple[str, ...]:
        return self.present if self.present is not None else tuple(f.name for f in self.json_fields())

    def __getitem__(self, key: str):
        if key in self.unknown:
            return self.unknown[key]
        if key in self._keys():
            return getattr(self, key)
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys())

    def __len__(self) -> int:
        return len(self._keys())


_ENTRY = {"frozen": True, "kw_only": True, "eq": False}  # eq: the mapping's, so an entry equals its dict


@dataclass(**_ENTRY)
class ScoreEntry(JsonRecord):
    """One metric at one site or stage (docs/signature.md, `metrics.<name>`). Its fields are declared here alone:
    the collection, which cannot import this layer, writes a dict of these keys (onnxaff.collection.entries), and
    assembly builds the entry from it with `of`, so a key not declared here fails the first run that writes it."""

    mean: float | None = declared("number?", default=None)
    std: float | None = declared("spread?", default=None)
    chunks: int | None = declared("count?", default=None)
    status: str | None = declared("text", default=None)  # ok, error, not_applicable, no_data, nonfinite
    values: list[float | None] = declared("list", items="number?", default=())
    reason: str | None = declared("text", default=None)
    error: str | None = declared("text", default=None)
    partial: bool = declared("bool", default=False)
    pooled_rows: int | None = declared("whole", default=None)
    caveat: str | None = declared("text", default=None)
    flags: list[str] = declared("list", items="text", default=())
    ci95: list[float] | None = declared("list?", items="number", default=None)
    masked_rows: int | None = declared("whole", default=None)
    dead: list[int] | None = declared("list", items="whole", default=None)
    present: tuple[str, ...] | None = field(default=None, repr=False)
    unknown: dict = field(default_factory=dict, repr=False)


class _Scored(JsonRecord):
    metrics: dict[str, ScoreEntry]

    @classmethod
    def decode(cls, name: str, value):
        return {k: ScoreEntry.from_json(e) for k, e in value.items()} if name == "metrics" else value


@dataclass(**_ENTRY)
class SiteEntry(_Scored):
    """One site of a signature (docs/signature.md, "A site"): discovery's fields (onnxaff.graph.Site), where it sits
    in the graph, what the run measured, a ScoreEntry per metric."""

    index: int = declared("whole")
    id: str = declared("text")
    kind: str = declared("text")
    input: str | None = declared("text", default=None)
    output: str | None = declared("text", default=None)
    op_types: list[str] = declared("list", items="text", default=())
    nodes: list[str] = declared("list", items="text", default=())
    status: str = declared("text")
    reason: str = declared("text", default="")
    input_shape: list | None = declared("list?", default=None)
    output_shape: list | None = declared("list?", default=None)
    rank: int | None = declared("whole?", default=None)
    feature_axis: int | None = declared("whole?", default=None)
    layout: str | None = declared("text?", default=None)
    elementwise: bool = declared("bool", default=True)
    params: dict = declared("object", factory=dict)
    group: str = declared("text", default="activation")
    output_rank: int | None = declared("whole?", default=None)
    output_feature_axis: int | None = declared("whole?", default=None)
    output_layout: str | None = declared("text?", default=None)
    neighbourhood: dict | None = declared("object?", default=None)
    dim: int | None = declared("whole?", default=None)
    dim_y: int | None = declared("whole?", default=None)
    rows: int | None = declared("whole", default=None)
    chunks: int | None = declared("whole", default=None)
    partial_chunk: bool = declared("bool", default=False)
    metrics: dict[str, ScoreEntry] = declared("object")
    present: tuple[str, ...] | None = field(default=None, repr=False)
    unknown: dict = field(default_factory=dict, repr=False)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def in_signature(self) -> bool:
        """An ok activation site: one of those the signature's scores are read from (pairs and blocks are not)."""
        return self.status == "ok" and self.group == "activation"


@dataclass(**_ENTRY)
class StageEntry(_Scored):
    """One residual stage (docs/signature.md, "A stage"): its blocks and track tensors, what the run measured, a
    ScoreEntry per trajectory metric."""

    index: int = declared("whole")
    id: str = declared("text")
    blocks: list[str] = declared("list", items="text", default=())
    tensors: list[str] = declared("list", items="text", default=())
    status: str = declared("text")
    reason: str = declared("text", default="")
    length: int = declared("whole")
    rows: int | None = declared("whole", default=None)
    chunks: int | None = declared("whole", default=None)
    partial_chunk: bool = declared("bool", default=False)
    dim: int | None = declared("whole?", default=None)
    metrics: dict[str, ScoreEntry] = declared("object")
    present: tuple[str, ...] | None = field(default=None, repr=False)
    unknown: dict = field(default_factory=dict, repr=False)

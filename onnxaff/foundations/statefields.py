"""A collector's saved state derived from its dataclass fields: declaring a field saves, restores and copies it.

A plain field (numbers, text, lists and dicts of them, numpy arrays) is saved as it is; a field of another type
declares how (`saved(encode=..., decode=...)`); a field that lives only while a run goes (futures) is
`transient`; a `part` is another collector saved in the same flat dict. `to_state` / `from_state` then need no
edit when a field is added.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any


def saved(default: Any = dataclasses.MISSING, *, factory: Callable | Any = dataclasses.MISSING,
          encode: Callable | None = None, decode: Callable | None = None):
    """A saved field; `encode`/`decode` convert a value that is not None to and from the plain form."""
    return dataclasses.field(default=default, default_factory=factory,
                             metadata={"encode": encode, "decode": decode})


def transient(default: Any = None, *, factory: Callable | Any = dataclasses.MISSING):
    """A field not saved: it lives while a run goes (futures), or the run gives it again (a site's label)."""
    if factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=factory, metadata={"transient": True})
    return dataclasses.field(default=default, metadata={"transient": True})


def part(cls):
    """A field holding another collector whose fields are saved beside this one's (one flat dict)."""
    return dataclasses.field(default_factory=cls, metadata={"part": cls})


def _plain(value):
    """A copy of a plain value: the state saved before a finish must not change with it."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, set):
        return set(value)
    return value


def to_state(obj) -> dict:
    out = {}
    for f in dataclasses.fields(obj):
        if f.metadata.get("transient"):
            continue
        if f.metadata.get("part") is not None:
            inner = to_state(getattr(obj, f.name))
            if clash := set(inner) & set(out):
                raise TypeError(f"{type(obj).__name__}.{f.name} saves {sorted(clash)} twice in one flat state")
            out.update(inner)
            continue
        value, encode = getattr(obj, f.name), f.metadata.get("encode")
        if f.name in out:
            raise TypeError(f"{type(obj).__name__}.{f.name} is saved twice in one flat state")
        out[f.name] = encode(value) if encode is not None and value is not None else _plain(value)
    return out


def from_state(cls, d: dict, **given):
    """An instance of `cls` from a state dict (a key missing from `d` takes the field's default)."""
    kwargs = dict(given)
    for f in dataclasses.fields(cls):
        if f.metadata.get("transient") or f.name in kwargs:
            continue
        if (cls_ := f.metadata.get("part")) is not None:
            kwargs[f.name] = from_state(cls_, d)
            continue
        if f.name not in d:
            continue
        value, decode = d[f.name], f.metadata.get("decode")
        kwargs[f.name] = decode(value) if decode is not None and value is not None else _plain(value)
    return cls(**kwargs)

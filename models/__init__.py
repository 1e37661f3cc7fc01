"""The reference networks onnxaff ships (installed as `onnxaff_models`), read from their manifest.

`models/build.py` trains and exports them; this module only finds them, so analysing them needs no
training framework.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
MANIFEST = HERE / "manifest.json"


@dataclass(frozen=True)
class ShippedModel:
    """One manifest entry, with the paths of its model file and its held-out data."""

    name: str
    path: Path
    data: Path
    entry: dict

    @property
    def accuracy(self) -> float:
        return self.entry["test_accuracy"]

    @property
    def framework(self) -> str:
        return self.entry["framework"]

    @property
    def sites(self) -> list[str]:
        return self.entry["sites"]


def manifest() -> dict:
    return json.loads(MANIFEST.read_text())


def shipped_models() -> list[ShippedModel]:
    """Every shipped network, in manifest order."""
    return [ShippedModel(name, HERE / e["file"], HERE / e["data"], e) for name, e in manifest()["models"].items()]


def shipped_model(name: str) -> ShippedModel:
    """One shipped network by name (`shipped_models()` lists them): its `.path` and its held-out `.data`."""
    found = {m.name: m for m in shipped_models()}
    if name not in found:
        raise KeyError(f"no shipped model {name!r}; shipped: {', '.join(found)}")
    return found[name]

"""The signature file: a versioned JSON schema, written atomically, read back with checks."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from onnxaff.files import write_text_atomic
from onnxaff.schema import SCHEMA, SCHEMA_VERSION, load_json, validate
from onnxaff.text import json_safe

NEAR_LINEAR = 0.95


def signature_stats(values: list[float]) -> dict:
    """A signature's statistics over one metric's per-site scores (non-finite and missing scores left out)."""
    v = np.array([x for x in values if x is not None and math.isfinite(x)], dtype=np.float64)
    if v.size == 0:
        return {"sites": 0}
    mean = float(v.mean())
    return {
        "sites": int(v.size), "min": float(v.min()), "max": float(v.max()), "mean": mean,
        "median": float(np.median(v)), "std": float(v.std()),
        "max_over_mean": float(v.max() / mean) if mean != 0 else None,
        "share_above_0.95": float(np.mean(v > NEAR_LINEAR)),
    }


@dataclass
class Signature:
    """A network's non-linearity signature: per site, in forward order, every metric's score."""

    model: dict
    data: dict
    options: dict
    runtime: dict
    metrics: dict
    sites: list[dict]
    network: dict = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    stages: list[dict] = field(default_factory=list)  # residual stages' trajectory metrics (--blocks)
    onnxaff_version: str = ""
    created: str = ""

    def scores(self, metric: str = "affinity") -> list[float | None]:
        """The signature: one value per ok activation site, in order (pairs and blocks are not part of it)."""
        return [s["metrics"][metric]["mean"] for s in self.sites
                if s["status"] == "ok" and metric in s["metrics"] and s.get("group", "activation") == "activation"]

    def summary(self) -> dict:
        return {name: signature_stats(self.scores(name)) for name in self.metrics}

    def to_dict(self) -> dict:
        return {
            "schema": SCHEMA, "schema_version": SCHEMA_VERSION, "onnxaff_version": self.onnxaff_version,
            "created": self.created, "model": self.model, "data": self.data, "options": self.options,
            "runtime": self.runtime, "metrics": self.metrics, "network": self.network, "summary": self.summary(),
            "warnings": self.warnings, "sites": self.sites, "stages": self.stages,
        }

    @classmethod
    def from_dict(cls, d: dict, where: str = "signature") -> Signature:
        """Checked against what every reader uses (onnxaff.schema): a damaged file fails here, naming the field."""
        validate(d, where)
        return cls(model=d["model"], data=d["data"], options=d["options"], runtime=d["runtime"],
                   metrics=d["metrics"], sites=d["sites"], network=d.get("network", {}),
                   warnings=d.get("warnings", []), stages=d.get("stages", []),
                   onnxaff_version=d.get("onnxaff_version", ""), created=d.get("created", ""))

    def write(self, path: str | Path) -> Path:
        return write_json_atomic(path, self.to_dict())


def _clean(obj):
    """JSON without NaN: non-finite numbers become null (their status says why); text a UTF-8 reader takes (a
    file name that is not UTF-8 keeps its bytes as `\\xff` escapes instead of lone surrogates)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, str):
        return json_safe(obj)
    if isinstance(obj, dict):
        return {json_safe(k) if isinstance(k, str) else k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    if isinstance(obj, np.generic):
        return _clean(obj.item())
    return obj


def write_json_atomic(path: str | Path, payload: dict) -> Path:
    return write_text_atomic(path, json.dumps(_clean(payload), indent=1, allow_nan=False) + "\n")


def read_signature(path: str | Path) -> Signature:
    return Signature.from_dict(load_json(path), str(path))

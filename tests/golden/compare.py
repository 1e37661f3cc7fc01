"""Frozen numbers against new ones, each metric at its measured tolerance.

A number x of metric m matches its frozen value w when |x − w| ≤ tol[m] · max(1, |w|): absolute for scores in
[0, 1], relative for larger ones (NLC, LSS). tol[m] comes from tests/golden/tolerances.json, which
tests/golden/perturb.py wrote from the spread it measured under what another machine changes. An entry flagged
with one of UNSTABLE_FLAGS is a decision at the edge of float32 rounding: it is compared at the tolerance
measured for that metric and flag. Keys, statuses, kinds and flags compare exactly.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
# Flags that say a number rests on a decision float32 rounding can tip (its own tolerance key, "metric|flag").
UNSTABLE_FLAGS = ("rank_ambiguous",)


@dataclass(frozen=True)
class Difference:
    path: str
    key: str  # the tolerance key: the metric (or "metric|flag", "network.nlc")
    got: object
    want: object
    excess: float  # |got − want| / (tol · max(1, |want|)); inf for a structural difference

    def __str__(self) -> str:
        if math.isinf(self.excess):
            return f"{self.path}: {self.got!r} != {self.want!r}"
        return f"{self.path}: {self.got!r} != {self.want!r} ({self.excess:.3g}x the {self.key} tolerance)"


def scaled(got: float, want: float) -> float:
    return abs(got - want) / max(1.0, abs(want))


def entry_key(metric: str, entry) -> str:
    flags = entry.get("flags") or []
    unstable = [f for f in UNSTABLE_FLAGS if f in flags]
    return f"{metric}|{unstable[0]}" if unstable else metric


def _flat(value, path: str, key: str | None):
    if isinstance(value, dict):
        for k in sorted(value):
            yield from _flat(value[k], f"{path}.{k}", key)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _flat(v, f"{path}[{i}]", key)
    else:
        yield path, key, value


def leaves(numbers: dict, run: str = ""):
    """(path, tolerance key, value) of every number and label of one run's numbers (freeze.numbers)."""
    for site_id, site in sorted(numbers["sites"].items()):
        at = f"{run}:{site_id}"
        yield f"{at}.kind", None, site["kind"]
        yield f"{at}.status", None, site["status"]
        for metric, entry in sorted(site["metrics"].items()):
            yield from _flat(entry, f"{at}.{metric}", entry_key(metric, entry))
    yield f"{run}:stages", None, len(numbers["stages"])
    for i, stage in enumerate(numbers["stages"]):
        for metric, entry in sorted(stage.items()):
            yield from _flat(entry, f"{run}:stage{i}.{metric}", entry_key(metric, entry))
    for metric, entry in sorted(numbers["network"].items()):
        yield from _flat(entry, f"{run}:network.{metric}", f"network.{metric}")


def _is_number(v) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def differences(got: dict, want: dict, tolerances: dict[str, float]) -> list[Difference]:
    """Every way `got` differs from `want` ({run: numbers}), worst first."""
    def flat(runs):
        return {p: (k, v) for run, numbers in runs.items() for p, k, v in leaves(numbers, run)}

    g, w = flat(got), flat(want)
    out = [Difference(p, "", g[p][1] if p in g else "(missing)", w[p][1] if p in w else "(missing)", math.inf)
           for p in sorted(set(g) ^ set(w))]
    for path in sorted(set(g) & set(w)):
        (key, x), (_, y) = g[path], w[path]
        if _is_number(x) and _is_number(y) and isinstance(y, float) and key is not None:
            tol = tolerances.get(key, 0.0)  # a key the study never saw: exact only
            excess = scaled(x, y) / tol if tol > 0 else (0.0 if x == y else math.inf)
            if excess > 1:
                out.append(Difference(path, key, x, y, excess))
        elif x != y:
            out.append(Difference(path, key or "", x, y, math.inf))
    return sorted(out, key=lambda d: -d.excess)


def load(name: str) -> dict:
    return json.loads((HERE / name).read_text())


def tolerances() -> dict[str, float]:
    return load("tolerances.json")["tolerance"]

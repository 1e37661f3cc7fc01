"""The signature file: a versioned JSON schema, written atomically, read back with checks."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from onnxaff.errors import Message
from onnxaff.format.schema import SCHEMA, SCHEMA_VERSION, load_json, validate
from onnxaff.format.siteentry import SiteEntry, StageEntry
from onnxaff.foundations.files import write_text_atomic
from onnxaff.foundations.text import json_safe

NEAR_LINEAR = 0.95
MOSTLY_FLAGGED = 0.5  # a statistic more than this share of whose scores carry flags is marked (DAGGER)
DAGGER = "†"
DAGGER_NOTE = f"{DAGGER}: more than half of the scores behind the statistic carry flags (docs/statistics.md)"


def near_linear_rule(info: dict | None) -> tuple[str, float] | None:
    """('>', t) or ('<', t): a score counts as near-linear within 5 % of the range from the metric's linear
    end (> 0.95 for [0, 1] scores). None for descriptive metrics and where the range gives no scale at
    that end (nlc, lss: lower = more linear, unbounded above). info: the metric's declared info
    (direction, range; an infinite bound is null in JSON); None keeps the plain > 0.95 rule."""
    if info is None:
        return (">", NEAR_LINEAR)
    lo, hi = (list(info.get("range") or []) + [None, None])[:2]

    def finite(v):
        return v is not None and math.isfinite(v)

    direction = info.get("direction", "")
    if direction.startswith("higher") and finite(hi):
        return (">", hi - 0.05 * (hi - lo) if finite(lo) else hi - 0.05)
    if direction.startswith("lower") and finite(lo) and finite(hi):
        return ("<", lo + 0.05 * (hi - lo))
    return None


def signature_stats(values: list[float], info: dict | None = None) -> dict:
    """A signature's statistics over one metric's per-site scores (non-finite and missing scores left out); the
    near-linear share by the metric's declared direction and range (see near_linear_rule), `share_above_0.95`
    where that is the rule."""
    v = np.array([x for x in values if x is not None and math.isfinite(x)], dtype=np.float64)
    if v.size == 0:
        return {"sites": 0}
    mean = float(v.mean())
    stats = {
        "sites": int(v.size), "min": float(v.min()), "max": float(v.max()), "mean": mean,
        "median": float(np.median(v)), "std": float(v.std()),
        "max_over_mean": float(v.max() / mean) if mean != 0 else None,
    }
    rule = near_linear_rule(info)
    if rule is not None:
        op, t = rule
        share = float(np.mean(v > t) if op == ">" else np.mean(v < t))
        stats["near_linear"] = {"share": share, "rule": f"{op} {t:.4g}"}
        if rule == (">", NEAR_LINEAR):
            stats["share_above_0.95"] = share
    return stats


@dataclass
class Signature:
    """A network's non-linearity signature: per site, in forward order, every metric's score.

    `scores(metric)` is the signature (one value per ok activation site), `summary()` its statistics,
    `to_pandas()` the per-site table (a notebook shows it without pandas), `write(path)` the JSON file
    (docs/signature.md; `read_signature` reads it back). `sites` and `stages` are typed entries
    (onnxaff.format.siteentry): as assembly built them, or built here once from a file's or a caller's dicts.
    """

    model: dict
    data: dict
    options: dict
    runtime: dict
    metrics: dict
    sites: list[SiteEntry]
    network: dict = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    stages: list[StageEntry] = field(default_factory=list)  # residual stages' trajectory metrics (--blocks)
    onnxaff_version: str = ""
    created: str = ""

    def __post_init__(self):
        # A warning naming an option (errors.option) reads as the configuration field here and in the JSON file;
        # the CLI prints it with the flag (Message.render).
        self.warnings = [Message(w) for w in self.warnings]

    def __setattr__(self, name: str, value) -> None:
        # Sites and stages are typed entries however they are given: assembly's and a reader's entries as they
        # are, a file's (or a caller's) dicts built into entries here, once, when the signature is made or they
        # are replaced.
        if name in ("sites", "stages"):
            value = [(SiteEntry if name == "sites" else StageEntry).from_json(s) for s in value]
        super().__setattr__(name, value)

    def scores(self, metric: str | None = None) -> list[float | None]:
        """The signature: one value per ok activation site, in order (pairs and blocks are not part of it); None
        where the site's entry has no mean (a file may leave it out). metric: the primary metric by default
        (onnxaff.metrics.primary_metric)."""
        if metric is None:
            from onnxaff.metrics import primary_metric

            metric = primary_metric()
        return [s.metrics[metric].mean for s in self.sites if s.in_signature and metric in s.metrics]

    def flag_summary(self, metric: str) -> dict:
        """Among the scores `scores(metric)` reads that have a number: `flagged` (with any flag), `scored`, and
        `kinds`, each flag's count (a score may carry several)."""
        entries = [s.metrics[metric] for s in self.sites if s.in_signature and metric in s.metrics
                   and s.metrics[metric].mean is not None]
        kinds: dict[str, int] = {}
        for e in entries:
            for f in e.flags or ():
                kinds[f] = kinds.get(f, 0) + 1
        return {"flagged": sum(bool(e.flags) for e in entries), "scored": len(entries), "kinds": kinds}

    def mostly_flagged(self, metric: str) -> bool:
        """Whether the signature statistics of `metric` (mean, share near linear, ...) come mostly from flagged
        scores: more than MOSTLY_FLAGGED of them."""
        f = self.flag_summary(metric)
        return f["scored"] > 0 and f["flagged"] > MOSTLY_FLAGGED * f["scored"]

    def protocol(self) -> dict:
        """How the rows were made and scored (onnxaff.format.protocol), read off the recorded options and metrics: a
        file written before the `protocol` field gets the same record, and a stored one is never a second source."""
        from onnxaff.format.protocol import protocol_of

        return protocol_of(self.options, self.metrics)

    def summary(self) -> dict:
        return {name: signature_stats(self.scores(name), info if isinstance(info, dict) else None)
                for name, info in self.metrics.items()}

    def to_dict(self) -> dict:
        return {
            "schema": SCHEMA, "schema_version": SCHEMA_VERSION, "onnxaff_version": self.onnxaff_version,
            "created": self.created, "model": self.model, "data": self.data, "options": self.options,
            "protocol": self.protocol(), "runtime": self.runtime, "metrics": self.metrics, "network": self.network,
            "summary": self.summary(),
            "warnings": self.warnings, "sites": [s.to_json() for s in self.sites],
            "stages": [s.to_json() for s in self.stages],
        }

    @classmethod
    def from_dict(cls, d: dict, where: str = "signature") -> Signature:
        """Checked against what every reader uses (onnxaff.format.schema): a damaged file fails here, naming the
        field."""
        validate(d, where)
        return cls(model=d["model"], data=d["data"], options=d["options"], runtime=d["runtime"],
                   metrics=d["metrics"], sites=d["sites"], network=d.get("network", {}),
                   warnings=d.get("warnings", []), stages=d.get("stages", []),
                   onnxaff_version=d.get("onnxaff_version", ""), created=d.get("created", ""))

    def write(self, path: str | Path) -> Path:
        return write_json_atomic(path, self.to_dict())

    def to_pandas(self):
        """One row per site (indexed by site index), one column per metric statistic (`affinity.mean`, ...)."""
        from onnxaff.format.tables import to_pandas

        return to_pandas(self)

    def _repr_html_(self) -> str:  # a notebook shows a signature as its per-site table
        from onnxaff.format.tables import to_html

        return to_html(self)


def drop_flagged(sigs: list[Signature]) -> tuple[int, int]:
    """Leave out every flagged score of activation sites (in memory, for compare and correlate: its mean becomes
    None): (left out, total)."""
    dropped = total = 0
    for sig in sigs:
        sites = []
        for s in sig.sites:
            scored = {name: e for name, e in s.metrics.items() if s.in_signature and e.mean is not None}
            total += len(scored)
            flagged = {name: e.updated(mean=None) for name, e in scored.items() if e.flags}
            dropped += len(flagged)
            sites.append(s.updated(metrics=s.metrics | flagged) if flagged else s)
        sig.sites = sites
    return dropped, total


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
    """A signature file read back (what ``onnxaff analyze --out`` and ``Signature.write`` write).

    Parameters
    ----------
    path : str or pathlib.Path
        The signature's JSON file.

    Returns
    -------
    Signature
        Checked against the schema every reader relies on (docs/signature.md), as the commands read it.

    Raises
    ------
    onnxaff.errors.OnnxaffError
        No such file, not JSON, or a field missing or of the wrong type (named by its path in the file,
        e.g. ``sites[3].metrics.affinity.mean``).
    """
    return Signature.from_dict(load_json(path), str(path))

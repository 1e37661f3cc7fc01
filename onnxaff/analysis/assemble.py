"""The signature from a run's header, the sites' discovery dicts and their finished collectors."""

from __future__ import annotations

import datetime
from typing import TypedDict

from onnxaff import __version__
from onnxaff.entries import MetricEntry
from onnxaff.errors import Message, OnnxaffError, option
from onnxaff.metrics import Metric
from onnxaff.signature import Signature
from onnxaff.site_state import SiteState
from onnxaff.stats import flag_warnings


class StageEntry(TypedDict, total=False):
    """A residual stage in the signature (docs/signature.md, "A stage"; tests/test_docs.py holds them equal)."""

    index: int
    id: str
    blocks: list[str]
    tensors: list[str]
    status: str
    reason: str
    length: int
    rows: int
    chunks: int
    partial_chunk: bool
    dim: int | None
    metrics: dict[str, MetricEntry]


def stage_results(stages: list[dict], states: list[SiteState], metrics: list[Metric]) -> list[StageEntry]:
    """The signature's `stages`: each residual stage's trajectory metrics (see onnxaff_plugins.trajectory);
    `stages` are their saved discovery entries (Stage.base)."""
    out, ok = [], iter(states)
    for stage in stages:
        d = StageEntry(**stage)
        d["length"] = len(stage["blocks"])
        if stage["status"] == "ok":
            st = next(ok)
            observed = st.observed
            d.update(rows=observed.rows, chunks=st.chunks, partial_chunk=st.schedule.partial,
                     dim=observed.dims[0] // st.tracks if observed.dims else None)
            d["metrics"] = {m.spec: st.entry(m) for m in metrics}
        else:
            d["metrics"] = {}
        out.append(d)
    return out


def site_entries(bases: list[dict], states: dict[int, SiteState],
                 metrics: list[Metric]) -> tuple[list[dict], list[str]]:
    """The signature's per-site dicts and the warnings they raise, from discovery dicts and collectors."""
    out, warnings = [], []
    for base in bases:
        d = dict(base)
        st = states.get(d["index"])
        if st is None:
            d["metrics"] = {}
            out.append(d)
            continue
        label = f"site {d['index']} ({d['id']})"
        observed = st.observed
        d.update(dim=observed.dims[0] if observed.dims else None, dim_y=observed.dims[1] if observed.dims else None,
                 rows=observed.rows, chunks=st.chunks, partial_chunk=st.schedule.partial)
        if not observed.rows and d.get("params", {}).get("inside", {}).get("op") == "If":
            d["status"] = "skipped"
            d["reason"] = "no batch took its If branch (an If takes one branch per batch)"
            warnings.append(f"{label}: {d['reason']}")
        if observed.masked_rows:
            warnings.append(Message(f"{label}: masks left out {observed.masked_rows} of "
                                    f"{observed.masked_rows + observed.rows} rows ({MASKED_ROWS})"))
        if observed.nonfinite_rows:
            d["status"] = "flagged"
            d["reason"] = f"NaN/Inf in the features of {observed.nonfinite_rows} of {observed.rows} rows"
            warnings.append(f"{label}: {d['reason']}")
        d["metrics"] = {m.spec: st.entry(m) for m in metrics}
        for name, err in st.scores.errors.items():
            warnings.append(f"{label}: metric {name} failed: {err}")
        out.append(d)
    warnings += flag_warnings(out, metrics)  # one line per flag kind (partial chunks included), not one per site
    skipped = [b for b in bases if b["status"] != "ok"]
    if skipped:
        warnings.append(f"{len(skipped)} site(s) skipped: " + "; ".join(sorted({b['reason'] for b in skipped})))
    return out, warnings


MASKED_ROWS = ("a row with a feature no unmasked position reaches, as a key padding hides from every query: "
               "docs/metrics.md#masked-positions; text data packed with " + option("pack") + " have no padding")


def assemble(header: dict, bases: list[dict], states: dict[int, SiteState], metrics: list[Metric],
             network: dict) -> Signature:
    """A Signature from the run header, the discovery dicts and the finished collectors."""
    sites, site_warnings = site_entries(bases, states, metrics)
    data = header["data"]
    warnings = list(header["warnings"])
    if data.get("dropped"):
        warnings.append(f"{data['dropped']} trailing examples dropped: the model's batch size is fixed at "
                        f"{header['options']['batch_size']}")
    warnings += site_warnings
    if data.get("skipped"):
        warnings.append(f"{len(data['skipped'])} unreadable file(s) skipped: "
                        + ", ".join(s["file"] for s in data["skipped"][:10]))
    return Signature(
        model=header["model"], network=network, data=data, options=header["options"], runtime=header["runtime"],
        metrics=header["metrics"], sites=sites, warnings=warnings, onnxaff_version=__version__,
        created=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    )


def check_some_number(sig: Signature, used: int) -> None:
    """Data too small for every metric (one example, one partial chunk for a chunk-pair metric) is an error,
    not a signature of empty entries that exits 0."""
    entries = [e for s in sig.sites for e in s.get("metrics", {}).values()]
    if any(e["status"] == "ok" for e in entries) or not any(e["status"] == "no_data" for e in entries):
        return  # a number somewhere, or nothing for want of data (NaN/Inf sites are flagged and warned about)
    reasons = sorted({e.get("reason", "needs at least 2 rows in a chunk") for e in entries
                      if e["status"] == "no_data"})
    raise OnnxaffError(f"no site got a number from {used} example(s): {'; '.join(reasons)} "
                       f"(chunk size {sig.options['chunk_size']}); give more data")


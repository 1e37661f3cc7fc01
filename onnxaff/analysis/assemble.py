"""The signature from a run's header, the sites' and stages' records and their finished collectors.

The typed entries (onnxaff.format.siteentry) are built here, once: each record's fields and what its collector
measured (onnxaff.analysis.records), and they are what the warnings read and the Signature holds.
"""

from __future__ import annotations

import datetime
from dataclasses import replace

from onnxaff import __version__
from onnxaff.analysis.flagwarnings import flag_warnings
from onnxaff.analysis.records import SiteRecord, StageRecord, scores
from onnxaff.collection.entries import site_metrics
from onnxaff.collection.site_state import SiteState
from onnxaff.errors import Message, OnnxaffError, option
from onnxaff.format.signature import Signature
from onnxaff.format.siteentry import SiteEntry, StageEntry
from onnxaff.metrics import Metric


def stage_results(records: list[StageRecord], states: list[SiteState], metrics: list[Metric]) -> list[StageEntry]:
    """The signature's `stages`: each residual stage's trajectory metrics (see onnxaff_plugins.trajectory);
    `states` are the collectors of the stages that are ok, in order."""
    out, ok = [], iter(states)
    for record in records:
        if not record.ok:
            out.append(record.entry(length=len(record.blocks), metrics={}))
            continue
        st = next(ok)
        observed = st.observed
        out.append(record.entry(length=len(record.blocks), rows=observed.rows, chunks=st.chunks,
                                partial_chunk=st.schedule.partial,
                                dim=observed.dims[0] // st.tracks if observed.dims else None,
                                metrics=scores(site_metrics(st, metrics))))
    return out


def site_entries(records: list[SiteRecord], states: dict[int, SiteState],
                 metrics: list[Metric]) -> tuple[list[SiteEntry], list[str]]:
    """The signature's per-site entries and the warnings they raise, from the sites' records and collectors."""
    out, warnings = [], []
    for record in records:
        site = record.site
        st = states.get(site.index)
        if st is None:
            out.append(record.entry(metrics={}))
            continue
        label = f"site {site.index} ({site.id})"
        observed = st.observed
        if not observed.rows and site.params.get("inside", {}).get("op") == "If":
            site = replace(site, status="skipped", reason="no batch took its If branch (an If takes one branch "
                                                          "per batch)")
            warnings.append(f"{label}: {site.reason}")
        if observed.masked_rows:
            warnings.append(Message(f"{label}: masks left out {observed.masked_rows} of "
                                    f"{observed.masked_rows + observed.rows} rows ({MASKED_ROWS})"))
        if observed.nonfinite_rows:
            site = replace(site, status="flagged",
                           reason=f"NaN/Inf in the features of {observed.nonfinite_rows} of {observed.rows} rows")
            warnings.append(f"{label}: {site.reason}")
        dims = observed.dims or (None, None)
        out.append(replace(record, site=site).entry(dim=dims[0], dim_y=dims[1], rows=observed.rows, chunks=st.chunks,
                                                    partial_chunk=st.schedule.partial,
                                                    metrics=scores(site_metrics(st, metrics))))
        for name, err in st.scores.errors.items():
            warnings.append(f"{label}: metric {name} failed: {err}")
    warnings += flag_warnings(out, metrics)  # one line per flag kind (partial chunks included), not one per site
    skipped = [r.site for r in records if not r.site.ok]
    if skipped:
        warnings.append(f"{len(skipped)} site(s) skipped: " + "; ".join(sorted({s.reason for s in skipped})))
    return out, warnings


MASKED_ROWS = ("rows of positions a mask hides, as padded tokens, or with a feature no unmasked position reaches, as "
               "a key padding hides from every query: docs/metrics.md#masked-positions; text data packed with "
               + option("pack") + " have no padding")


def assemble(header: dict, records: list[SiteRecord], states: dict[int, SiteState], metrics: list[Metric],
             network: dict) -> Signature:
    """A Signature from the run header, the sites' records and the finished collectors."""
    sites, site_warnings = site_entries(records, states, metrics)
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
    entries = [e for s in sig.sites for e in s.metrics.values()]
    if any(e.status == "ok" for e in entries) or not any(e.status == "no_data" for e in entries):
        return  # a number somewhere, or nothing for want of data (NaN/Inf sites are flagged and warned about)
    reasons = sorted({e.reason or "needs at least 2 rows in a chunk" for e in entries if e.status == "no_data"})
    raise OnnxaffError(f"no site got a number from {used} example(s): {'; '.join(reasons)} "
                       f"(chunk size {sig.options['chunk_size']}); give more data")


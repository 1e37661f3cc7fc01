"""A study's outcome, as a notebook shows it (its table) and pandas reads it."""

from __future__ import annotations

import html
from dataclasses import dataclass
from pathlib import Path

from onnxaff.format.signature import Signature
from onnxaff.foundations.text import printable


@dataclass
class Study:
    """A study's outcome: where it wrote (`folder`, its `report`), each model's signature by label, the summary
    `rows` of `metric`, the models `failed` (label -> reason) and those `skipped` as up to date."""

    folder: Path
    signatures: dict[str, Signature]
    rows: list[dict]
    failed: dict[str, str]
    skipped: list[str]
    report: Path | None = None
    metric: str = ""  # the metric heading the tables (the first one asked for, or the first default)

    @property
    def ok(self) -> bool:
        return not self.failed

    def table(self) -> list[dict]:
        """One plain row per model: its statistics of `metric` (failed models: `failed`, their reason)."""
        rows = [{k: v for k, v in r.items() if k != "flags"} | {"status": "up to date" if r["model"] in self.skipped
                                                                else "analysed"} for r in self.rows]
        return rows + [{"model": label, "status": "failed", "reason": why} for label, why in self.failed.items()]

    def to_pandas(self):
        """`table()` as a DataFrame indexed by model (needs pandas)."""
        from onnxaff.format.tables import frame

        return frame(self.table(), "model", "Study")

    def _repr_html_(self) -> str:  # a notebook shows the models' table and where the report is
        from onnxaff.format.tables import html_table

        rows = self.table()
        keys = [k for k in dict.fromkeys(k for r in rows for k in r) if k != "mostly_flagged"]
        head = f"<p><b>Study</b> in {html.escape(printable(self.folder))}: {len(self.signatures)} models"
        head += (f", {len(self.failed)} failed" if self.failed else "") + f"; {self.metric} statistics; report "
        return (head + f"{html.escape(printable(self.report))}</p>"
                + html_table(keys, [[r.get(k) for k in keys] for r in rows]))


StudyResult = Study  # its name before onnxaff.study returned it

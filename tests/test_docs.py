"""The documentation names real things: every test docs/reliability.md cites exists; the tolerance table of
docs/reproducibility.md is the one the study wrote."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def cited_tests() -> list[tuple[str, str]]:
    """(file, test) pairs of the last column of every reliability row ("test_a::x, y, test_b::z")."""
    out = []
    for line in (ROOT / "docs" / "reliability.md").read_text(encoding="utf-8").splitlines():
        if not line.startswith("| ") or line.startswith("| bad input"):
            continue
        cell, current = line.rstrip(" |").rsplit("|", 1)[1], None
        for item in (i.strip() for i in cell.split(",")):
            if "::" in item:
                current, item = item.split("::", 1)
            name = re.match(r"test_\w+", item)
            if current and name:
                out.append((current, name.group(0)))
    return out


def test_every_cited_test_exists():
    cited = cited_tests()
    assert len(cited) > 80
    missing = [f"{f}::{t}" for f, t in cited
               if not (ROOT / "tests" / f"{f}.py").exists()
               or not re.search(rf"def {t}\b", (ROOT / "tests" / f"{f}.py").read_text(encoding="utf-8"))]
    assert not missing, missing


def test_the_reproducibility_table_is_the_studys():
    """Each figure of docs/reproducibility.md's table is traceable to tests/golden/tolerances.json."""
    from tests.golden.compare import load
    from tests.golden.perturb import BEGIN, DOC, END, table

    text = DOC.read_text(encoding="utf-8")
    assert BEGIN in text and END in text
    assert text.split(BEGIN, 1)[1].split(END, 1)[0].strip() == table(load("tolerances.json"))


def test_signature_page_names_every_entry_field():
    """The entry types the core builds (onnxaff.entries.MetricEntry, onnxaff.analysis.assemble.StageEntry) are the
    fields docs/signature.md describes: a field added to one is documented, or this fails."""
    import re
    import typing

    from onnxaff.analysis.assemble import StageEntry
    from onnxaff.entries import MetricEntry

    page = (ROOT / "docs" / "signature.md").read_text(encoding="utf-8")
    metric_rows = " ".join(line for line in page.splitlines() if line.startswith("| `metrics.<name>")
                           or line.startswith("Metric statuses") or "`reason`" in line)
    named = set(re.findall(r"`([a-z_0-9]+)`", metric_rows)) | {"flags", "ci95"}
    assert set(typing.get_type_hints(MetricEntry)) <= named, set(typing.get_type_hints(MetricEntry)) - named
    stage = page[page.index("## A stage"):]
    stage = stage[stage.index("`index`"):].split("\n\n")[0]
    documented = {name.split(".")[0] for name in re.findall(r"`([a-z_0-9.]+)`", stage)}
    assert set(typing.get_type_hints(StageEntry)) == documented


def test_the_paper_is_cited_under_its_title():
    """docs/metrics.md named the paper 'Tracing the non-linearity of neural networks' (issue 30)."""
    text = " ".join((ROOT / "docs" / "metrics.md").read_text(encoding="utf-8").split())
    assert ("From Alexnet to Transformers: Measuring the Non-linearity of Deep Neural Networks with Affine Optimal "
            "Transport" in text and "2310.11439" in text and "Tracing" not in text)

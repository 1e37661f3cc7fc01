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
    """The typed entries assembly builds a signature from and every reader reads (onnxaff.format.siteentry: a
    site's SiteEntry, a stage's StageEntry, a score's ScoreEntry) are the fields docs/signature.md describes: a field
    added to one is documented, or this fails."""
    from onnxaff.analysis.records import SiteRecord
    from onnxaff.format.siteentry import ScoreEntry, SiteEntry, StageEntry
    from onnxaff.graph.site import Site

    def names(entry) -> set[str]:
        return {f.name for f in entry.json_fields()}

    page = (ROOT / "docs" / "signature.md").read_text(encoding="utf-8")
    metric_rows = " ".join(line for line in page.splitlines() if line.startswith("| `metrics.<name>")
                           or line.startswith("Metric statuses") or "`reason`" in line)
    named = set(re.findall(r"`([a-z_0-9]+)`", metric_rows)) | {"flags", "ci95"}
    score = names(ScoreEntry)
    assert score <= named, score - named

    site = page[page.index("## A site"):page.index("Metric statuses")]
    rows = {name for line in site.splitlines() if line.startswith("| `")
            for name in re.findall(r"`([a-z_0-9*]+)", line.split(" | ")[0])}
    written = names(SiteEntry)
    covered = {n for n in written if n in rows or any(r.endswith("*") and n.startswith(r[:-1]) for r in rows)}
    assert covered == written, written - covered
    assert {r for r in rows if not r.endswith("*")} <= written, {r for r in rows if not r.endswith("*")} - written
    written_site = set(SiteRecord(Site(0, "s", "relu", "x", "y", ["Relu"], ["n"])).to_dict())
    assert written_site <= written, written_site - written  # discovery's fields (tests/test_site_result.py: in order)

    stage = page[page.index("## A stage"):]
    stage = stage[stage.index("`index`"):].split("\n\n")[0]
    documented = {name.split(".")[0] for name in re.findall(r"`([a-z_0-9.]+)`", stage)}
    assert names(StageEntry) == documented


def test_the_paper_is_cited_under_its_title():
    """docs/metrics.md named the paper 'Tracing the non-linearity of neural networks' (issue 30)."""
    text = " ".join((ROOT / "docs" / "metrics.md").read_text(encoding="utf-8").split())
    assert ("From Alexnet to Transformers: Measuring the Non-linearity of Deep Neural Networks with Affine Optimal "
            "Transport" in text and "2310.11439" in text and "Tracing" not in text)


def test_the_tests_readme_maps_every_module():
    """tests/README.md's table "What covers what" has a row for every module of onnxaff/ (a graph sub-package's
    modules may share their folder's row), each naming the tests that exercise it."""
    from tests.test_layers import named_modules, names

    text = (ROOT / "tests" / "README.md").read_text(encoding="utf-8")
    table = text[text.index("| module or package | tests |"):].split("\n\n")[0]
    first = "\n".join(line.split(" | ")[0] for line in table.splitlines()[2:])
    unmapped = [rel for rel, candidates in named_modules() if not any(names(first, n) for n in candidates)]
    assert not unmapped, unmapped
    empty = [line for line in table.splitlines()[2:] if "`test_" not in line.split(" | ", 1)[1]]
    assert not empty, empty

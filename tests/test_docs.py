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

"""A signature as a table: `to_pandas()` (pandas optional) and the notebook's `_repr_html_`."""

import math

import pytest

import onnxaff
from onnxaff.errors import OnnxaffError
from onnxaff.format.signature import Signature
from onnxaff_models import shipped_models


@pytest.fixture(scope="module")
def sig():
    m = next(m for m in shipped_models() if m.name == "sk_mlp_relu")
    return onnxaff.analyze(str(m.path), str(m.data), metrics=["affinity", "r2_pooled"], chunk_size=128, limit=512,
                           progress=False, chunk_workers=0)


def test_to_pandas_one_row_per_site_one_column_per_statistic(sig):
    pd = pytest.importorskip("pandas")
    df = sig.to_pandas()
    assert isinstance(df, pd.DataFrame) and len(df) == len(sig.sites)
    assert list(df.index) == [s["index"] for s in sig.sites]
    for s in sig.sites:
        for metric, entry in s["metrics"].items():
            for stat in ("mean", "std", "chunks"):
                if entry.get(stat) is not None:
                    assert df.loc[s["index"], f"{metric}.{stat}"] == entry[stat]
    assert df["kind"].tolist() == [s["kind"] for s in sig.sites]
    pooled = df["r2_pooled.std"]  # pooled metrics have no spread: missing, not 0
    assert all(v is None or (isinstance(v, float) and math.isnan(v)) for v in pooled)


def test_to_pandas_without_pandas_is_one_line(sig, monkeypatch):
    import builtins

    real = builtins.__import__

    def no_pandas(name, *args, **kwargs):
        if name == "pandas":
            raise ImportError("no pandas here")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_pandas)
    with pytest.raises(OnnxaffError, match="needs pandas: pip install pandas"):
        sig.to_pandas()
    assert "<table>" in sig._repr_html_()  # the notebook view needs no pandas


def test_repr_html_is_an_escaped_table(sig):
    page = sig._repr_html_()
    assert page.count("<tr>") == len(sig.sites) + 1
    first = sig.sites[0]["metrics"]["affinity"]
    lo, hi = first["ci95"]
    assert f"{first['mean']:.4f}±{max(hi - first['mean'], first['mean'] - lo):.4f}" in page
    d = sig.to_dict()
    d["sites"][0]["id"] = "<script>alert(1)</script>"
    assert "<script>" not in Signature.from_dict(d)._repr_html_()


def test_intervals_and_flags_per_metric_in_pandas_and_the_notebook_view(sig):
    """Issue 29: `0.6747±0.0000` with no flag and no interval hid an ε-dominated score."""
    from onnxaff.format.tables import site_rows

    rows = site_rows(sig)
    for s, row in zip(sig.sites, rows, strict=True):
        entry = s["metrics"]["affinity"]
        assert [row["affinity.ci95_low"], row["affinity.ci95_high"]] == entry["ci95"]
        assert row["affinity.flags"] == ", ".join(entry["flags"])
        assert row["r2_pooled.ci95_low"] is None  # pooled: no interval
    flagged = [r for r in rows if r["affinity.flags"]]
    assert flagged, "sk_mlp_relu at 128-row chunks has few_rows sites (D = 64)"
    pytest.importorskip("pandas")
    df = sig.to_pandas()
    assert {"affinity.ci95_low", "affinity.ci95_high", "affinity.flags", "r2_pooled.flags"} <= set(df.columns)
    page = sig._repr_html_()
    assert page.count("affinity flags") == 1 and page.count("r2_pooled flags") == 1
    assert flagged[0]["affinity.flags"] in page
    assert ("Most scores carry flags" in page) == (sig.mostly_flagged("affinity") or sig.mostly_flagged("r2_pooled"))

"""The terminal summary: 120 columns whatever the metric count, and a near-linear share only where a
metric's declared direction and range define one."""

import pytest

import onnxaff
from onnxaff.cli import print_summary
from onnxaff.format.signature import near_linear_rule, signature_stats
from onnxaff.foundations.terminal import wrapped
from onnxaff_models import shipped_models

NINE = ["affinity", "affinity_lw", "cka", "cka_pooled", "r2", "r2_pooled", "nlc", "sparsity_change", "entropy_change"]


@pytest.fixture(scope="module")
def sig():
    m = next(m for m in shipped_models() if m.name == "sk_mlp_relu")
    return onnxaff.analyze(str(m.path), str(m.data), metrics=NINE, chunk_size=128, limit=256, progress=False,
                           chunk_workers=0)


def test_nine_metrics_fit_120_columns(sig, capsys):
    print_summary(sig)
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 120
    for s in sig.sites:
        for name in NINE:
            e = s["metrics"][name]
            assert f"{e['mean']:.4f}" in out, (s["id"], name)  # every score still printed
    assert all(name in out for name in NINE)


def test_wrapped_repeats_the_site_columns():
    rows = [[k, f"site{k}", *[f"{k}.{j:011d}" for j in range(12)]] for k in range(3)]
    text = wrapped(rows, ["#", "site", *[f"metric_{j}" for j in range(12)]], fixed=2, repeat=2, width=60)
    blocks = text.split("\n\n")
    assert len(blocks) > 1 and all(b.startswith("#  site") for b in blocks)
    assert all(len(line) <= 60 for line in text.splitlines())
    assert all(f"2.{j:011d}" in text for j in range(12))


def test_near_linear_share_follows_direction_and_range(sig):
    assert near_linear_rule({"direction": "higher = more linear", "range": [0.0, 1.0]}) == (">", 0.95)
    assert near_linear_rule({"direction": "higher = more linear", "range": [None, 1.0]}) == (">", 0.95)
    assert near_linear_rule({"direction": "lower = more linear", "range": [0.0, 2.0]}) == ("<", 0.1)
    assert near_linear_rule({"direction": "lower = more linear", "range": [0.0, None]}) is None  # nlc: no scale
    assert near_linear_rule({"direction": "descriptive", "range": [-1.0, 1.0]}) is None
    summary = sig.summary()
    for name in ("nlc", "sparsity_change", "entropy_change"):
        assert "near_linear" not in summary[name] and "share_above_0.95" not in summary[name]
    aff = summary["affinity"]
    scores = sig.scores("affinity")
    assert aff["share_above_0.95"] == aff["near_linear"]["share"] == sum(v > 0.95 for v in scores) / len(scores)
    low = signature_stats([0.05, 0.5, 1.5], {"direction": "lower = more linear", "range": [0.0, 2.0]})
    assert low["near_linear"] == {"share": 1 / 3, "rule": "< 0.1"}

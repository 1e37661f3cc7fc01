"""Issue 29: comparisons that say what they compare (options that change the numbers), flags wherever a number is
shown, and a correlation with its p-value and interval."""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.stats

import onnxaff
from onnxaff.errors import OnnxaffError
from onnxaff.reports.console import models_table
from onnxaff.reports.html import comparison_page, correlation_page
from onnxaff.reports.markdown import comparison_markdown, correlation_markdown
from onnxaff.results.comparison import compare, correlate
from onnxaff.results.differences import differences, differences_line
from onnxaff.results.significance import DRAWS, bootstrap_ci, permutation_p
from tests.conftest import parse, run_cli
from tests.test_compare import fake_signature, mlp
from tests.test_study import FAST, write_models


def _abs_r(x):
    """|Pearson r| of x against each permuted y (vectorized along `axis`, as permutation_test calls it)."""
    def statistic(y, axis=-1):
        return np.abs(scipy.stats.pearsonr(np.broadcast_to(x, np.shape(y)), y, axis=axis)[0])
    return statistic


@pytest.mark.parametrize("n", [3, 5, 8])
def test_exact_permutation_p_is_scipys(n):
    rng = np.random.default_rng(n)
    x = rng.normal(size=n)
    y = 0.7 * x + rng.normal(size=n)
    p, method, orderings = permutation_p(x, y)
    ref = scipy.stats.permutation_test((y,), _abs_r(x), permutation_type="pairings", n_resamples=np.inf,
                                       alternative="greater", vectorized=True)
    assert method == "exact" and orderings == int(np.prod(range(1, n + 1)))
    assert p == pytest.approx(ref.pvalue, abs=1e-12)


def test_monte_carlo_permutation_p_past_eight_models_is_seeded_and_near_scipys():
    rng = np.random.default_rng(12)
    x = rng.normal(size=12)
    y = 0.5 * x + rng.normal(size=12)
    p, method, draws = permutation_p(x, y)
    assert method == "monte_carlo" and draws == DRAWS >= 10_000
    assert permutation_p(x, y) == (p, method, draws)  # seeded
    ref = scipy.stats.permutation_test((y,), _abs_r(x), permutation_type="pairings", n_resamples=50_000,
                                       alternative="greater", vectorized=True, rng=1)
    assert p == pytest.approx(ref.pvalue, abs=0.015)  # two Monte Carlo estimates: sd ~ 0.005 each
    # and the parametric p-value of pearsonr, which the permutation test approaches for normal data
    assert p == pytest.approx(scipy.stats.pearsonr(x, y).pvalue, abs=0.03)


def test_bootstrap_interval_is_seeded_percentile_and_near_scipys():
    rng = np.random.default_rng(7)
    x = rng.normal(size=15)
    y = 0.6 * x + rng.normal(size=15)
    ci, used = bootstrap_ci(x, y)
    assert used >= 2000 and bootstrap_ci(x, y) == (ci, used)
    ref = scipy.stats.bootstrap((x, y), lambda a, b: scipy.stats.pearsonr(a, b)[0], paired=True,
                                vectorized=False, method="percentile", n_resamples=4000, rng=3)
    r = scipy.stats.pearsonr(x, y)[0]
    assert ci[0] < r < ci[1]
    assert ci == pytest.approx([ref.confidence_interval.low, ref.confidence_interval.high], abs=0.06)


def _with_options(sig, **options):
    sig.options = {"metrics": ["affinity"], "chunk_size": 512, "reduce": "mean", **options}
    sig.data = {"source": "val.npz", "kind": "arrays"}
    return sig


def test_correlate_gives_p_values_intervals_and_warns_under_ten_models(capfd, tmp_path):
    accuracy = {n: 0.6 + 0.03 * k for k, n in enumerate("abcdefghijk")}

    def sigs(names):
        return [_with_options(fake_signature(n, [2 * accuracy[n] - 1 + 0.01 * (k % 3), 0.5], params=100 * (k + 1)))
                for k, n in enumerate(names)]

    few = correlate(sigs("abcde"), {k: str(v) for k, v in accuracy.items()})
    entry = few["table"]["all"]["affinity mean"]
    x = [r["features"]["affinity mean"] for r in few["rows"]]
    y = [r["accuracy"] for r in few["rows"]]
    assert entry["pearson_r"] == pytest.approx(scipy.stats.pearsonr(x, y)[0], abs=1e-12)
    assert entry["p_method"] == "exact" and entry["p_value"] == pytest.approx(permutation_p(x, y)[0])
    assert entry["r_ci95"][0] <= entry["pearson_r"] <= entry["r_ci95"][1]
    assert few["warnings"] == ["only 5 models: a correlation over fewer than 10 is weak evidence; read its p-value "
                               "and interval, not R² alone"]
    assert "exact permutation test over all 120 orderings" in few["p_method"]
    many = correlate(sigs("abcdefghijk"), {k: str(v) for k, v in accuracy.items()})
    assert many["warnings"] == [] and many["table"]["all"]["affinity mean"]["p_method"] == "monte_carlo"
    assert "10,000 seeded random orderings" in many["p_method"]
    for text in (correlation_markdown(few), correlation_page(few)):
        assert "only 5 models" in text and "exact permutation test" in text and "bootstrap" in text


def test_compare_says_when_chunk_sizes_differ_and_strict_refuses(capfd, tmp_path):
    """The acceptance: `compare` of two runs with different chunk sizes says so; --strict refuses."""
    model = mlp(3, False, 0)
    paths = []
    for chunk in (64, 32):
        sig = onnxaff.analyze(model, "synthetic:gaussian", limit=128, chunk_size=chunk, reduce="mean",
                              progress=False, chunk_workers=0, metrics=["affinity"])
        paths.append(sig.write(tmp_path / f"c{chunk}.json"))
    labelled = [f"a={paths[0]}", f"b={paths[1]}"]
    for fmt in ("html", "md", "json"):
        out = tmp_path / f"cmp.{fmt}"
        code, stdout, err = run_cli(capfd, "compare", *labelled, "--out", out)
        assert code == 0, err
        assert err.strip().splitlines() == ["warning: signatures made with different options: protocol differs: "
                                            "a=custom (64 rows per chunk, reduce=mean), b=custom (32 rows per chunk, "
                                            "reduce=mean); --chunk-size differs: a=64, b=32"], err
        text = out.read_text()
        if fmt == "json":
            assert json.loads(text)["differences"][1:] == [{"field": "chunk_size", "option": True,
                                                            "values": {"a": "64", "b": "32"}}]
            assert json.loads(text)["differences"][0]["field"] == "protocol"
        else:
            assert "chunk_size differs: a=64, b=32" in text
    code, stdout, err = run_cli(capfd, "compare", *labelled, "--strict", "--out", tmp_path / "strict.html")
    assert code != 0 and len(err.strip().splitlines()) == 1 and "--chunk-size differs: a=64, b=32" in err, err
    assert not (tmp_path / "strict.html").exists()
    from onnxaff.format.signature import read_signature

    sigs = [read_signature(p) for p in paths]
    with pytest.raises(OnnxaffError, match="chunk_size differs"):  # the library names the field, not the flag
        compare(sigs, metric="affinity", strict=True)
    assert [d.field for d in compare(sigs, metric="affinity").differences] == ["protocol", "chunk_size"]
    assert compare([sigs[0], read_signature(paths[0])], metric="affinity", strict=True).differences == []


def test_what_differences_cover():
    base = [_with_options(fake_signature(n, [0.5, 0.6], params=1)) for n in "ab"]
    assert differences(base) == []
    base[1].options.update(reduce="max", pack=True, mask="none", intervals="chunks")
    base[1].data = {"source": "other/val2.npz", "kind": "arrays", "preprocessing": {"preset": "imagenet"}}
    base[1].metrics = {"affinity": {"params": {"eps": 1e-8}}}
    base[0].metrics = {"affinity": {"params": {"eps": 1e-6}}}
    found = {d.field: d.values for d in differences(base)}
    assert found == {"protocol": ("paper (512 rows per chunk, reduce=mean)",
                                  "custom (512 rows per chunk, reduce=max, intervals=chunks)"),
                     "reduce": ("mean", "max"), "intervals": ("auto", "chunks"), "pack": ("False", "True"),
                     "mask": ("auto", "none"), "metrics": ("affinity:eps=1e-06", "affinity:eps=1e-08"),
                     "data": ("val.npz", "val2.npz"), "preprocessing.preset": ("-", "imagenet")}
    line = differences_line(differences(base), ["a", "b"])
    assert str(line).startswith("signatures made with different options: protocol differs: a=paper (512 rows per "
                                "chunk, reduce=mean), b=custom (512 rows per chunk, reduce=max, intervals=chunks); "
                                "reduce differs: a=mean, b=max; ")


def eps_dominated(name: str, sites: int, flagged: int) -> object:
    sig = _with_options(fake_signature(name, list(np.linspace(0.95, 0.99, sites)), params=1))
    sig.sites = [s.updated(metrics={"affinity": s.metrics["affinity"].updated(
        flags=["eps_dominated"] if s.index < flagged else [], ci95=[0.9, 0.99])}) for s in sig.sites]
    sig.metrics = {"affinity": {"direction": "higher = more linear", "range": [0.0, 1.0]}}
    return sig


def test_mostly_flagged_statistics_are_marked_in_every_table():
    sigs = [eps_dominated("rnd", 35, 34), eps_dominated("ok", 30, 2), eps_dominated("clean", 20, 0)]
    assert [s.mostly_flagged("affinity") for s in sigs] == [True, False, False]
    comps = [compare(sigs, metric="affinity")]
    page = comparison_page(sigs, comps)
    assert "34 of 35 (97 %)" in page and "2 of 30 (7 %)" in page and "0 of 20 (0 %)" in page
    assert page.count("†") >= 3 and "more than half of the scores behind the statistic carry flags" in page
    md = comparison_markdown(comps, sigs)
    rnd = next(line for line in md.splitlines() if line.startswith("| rnd |") and " of " in line)
    ok = next(line for line in md.splitlines() if line.startswith("| ok |") and " of " in line)
    assert "†" in rnd and "34 of 35 (97 %)" in rnd and "†" not in ok
    rows = [{"model": s.model["name"], "sites": len(s.sites), "accuracy": None, "mean": 0.97, "min": 0.95,
             "share_above_0.95": 0.8, "flags": {"affinity": s.flag_summary("affinity")},
             "mostly_flagged": s.mostly_flagged("affinity")} for s in sigs]
    text = models_table(rows, "affinity")
    assert "rnd: flagged sites: affinity 34 of 35 (eps_dominated 34)" in text
    assert "ok: flagged sites: affinity 2 of 30 (eps_dominated 2)" in text and "clean:" not in text
    assert "0.9700†" in text and text.count("†") == 4  # rnd's mean, min, share; the legend


TINY = "h = MatMul(x, w)  s = Mul(h, k)  y = Relu(s)"


def test_a_study_with_an_eps_dominated_model_prints_its_flags_and_marks_it_on_the_page(tmp_path, capfd):
    """The acceptance: a three-model study where one model's activations are so small that ε = 1e-6 dominates."""
    paths = write_models(tmp_path / "m", ("a", "b"))
    tiny = parse(f"""<ir_version: 8, opset_import: ["" : 17]>
        g (float[N, 6] x) => (float[N, 6] y) <float[6, 6] w = {{{", ".join(["0.5", "-0.3", "0.2"] * 12)}}},
        float k = {{0.0001}}> {{ {TINY} }}""")
    import onnx

    onnx.save(tiny, tmp_path / "m" / "tiny.onnx")
    out = tmp_path / "study"
    code, stdout, err = run_cli(capfd, "study", *paths, tmp_path / "m" / "tiny.onnx", "--data",
                                "synthetic:gaussian:n=600", "--out", out, *FAST)
    assert code == 0, err
    assert "tiny: flagged sites: affinity 1 of 1 (eps_dominated 1)" in stdout, stdout
    assert "a: flagged" not in stdout and "†" in stdout
    page = (out / "report.html").read_text()
    assert "eps_dominated" in page and "1 of 1 (100 %)" in page and "†" in page
    assert "differs" not in err  # one data set, one set of options


def test_a_study_of_models_on_other_data_says_so_and_strict_refuses(tmp_path):
    from onnxaff.studies import StudyModel, run_study

    paths = write_models(tmp_path / "m", ("a", "b"))
    models = [StudyModel("a", paths[0]), StudyModel("b", paths[1], data="synthetic:uniform:n=600")]
    lines = []
    options = dict(metrics=["affinity"], chunk_size=128, batch_size=32, chunk_workers=0, progress=False)
    run_study(models, "synthetic:gaussian:n=600", tmp_path / "s", options=options, echo=lines.append)
    said = [str(x) for x in lines if "differs" in str(x)]
    assert said == ["signatures made with different options: data differs: a=synthetic:gaussian:n=600, "
                    "b=synthetic:uniform:n=600"], lines
    compared = json.loads((tmp_path / "s" / "compare.json").read_text())
    assert compared["differences"][0]["field"] == "data"
    with pytest.raises(OnnxaffError, match="refusing to compare a, b: data differs"):
        run_study(models, "synthetic:gaussian:n=600", tmp_path / "s", options=options, strict=True)


def test_groups_name_their_own_p_method_and_small_groups_warn():
    """Groups of 4 and 7 models inside 11: their p-values are exact, the whole table's drawn; the report said
    'Monte Carlo' for every table and warned for none of the groups (a hostile review)."""
    from onnxaff.results.comparison import correlate
    from tests.test_compare import fake_signature

    names = [f"m{k:02d}" for k in range(11)]
    sigs = [fake_signature(n, [0.5 + 0.01 * k, 0.6 + 0.02 * (k % 3)], params=1000 + k) for k, n in enumerate(names)]
    accuracy = {n: str(0.7 + 0.01 * k) for k, n in enumerate(names)}
    groups = {n: "g1" if k < 4 else "g2" for k, n in enumerate(names)}
    result = correlate(sigs, accuracy, groups=groups)
    assert result["table"]["g1"]["affinity mean"]["p_method"] == "exact"
    assert result["table"]["all"]["affinity mean"]["p_method"] == "monte_carlo"
    assert result["p_method"].startswith("exact permutation test over all n! orderings where a table has n ≤ 8")
    assert "else Monte Carlo" in result["p_method"]
    assert any(w.startswith("group g1: only 4 models") for w in result["warnings"])
    assert any(w.startswith("group g2: only 7 models") for w in result["warnings"])
    assert not any(w.startswith("only 11") for w in result["warnings"])

"""Flags and confidence intervals on metric entries: each flag fires exactly where its rule says."""

from __future__ import annotations

import numpy as np
import pytest

from onnxaff.collection.entries import metric_entry
from onnxaff.collection.scoring import MetricScorer
from onnxaff.collection.site_state import SiteState
from onnxaff.collection.stats import entry_ci, half_sample_ci, mean_ci, rows_needed
from onnxaff.metrics import resolve
from onnxaff_plugins.affinity import Affinity
from onnxaff_plugins.cka import CKA

METRICS = ["affinity", "affinity_lw", "affinity_rel", "cka", "r2"]


def entries(x, y, chunk, metrics=METRICS, intervals="auto"):
    """Score rows x → y as one run would (chunks of `chunk` rows) and return the metric entries."""
    ms = resolve(metrics)
    st = SiteState.open(chunk, intervals=intervals)
    with MetricScorer(0) as scorer:
        for i in range(0, len(x), 100):
            st.add(x[i:i + 100], y[i:i + 100], ms, scorer)
        st.finish(ms, scorer)
    return {m.name: metric_entry(st, m) for m in ms}


def gaussian(rng, n, d):
    return rng.standard_normal((n, d)) @ (np.eye(d) + 0.3 * rng.standard_normal((d, d)))


def test_well_posed_site_has_no_flags(rng):
    x = gaussian(rng, 3 * 256, 4)
    for name, e in entries(x, np.tanh(x), 256).items():
        assert e["status"] == "ok" and e["flags"] == [], (name, e["flags"])
        lo, hi = e["ci95"]
        assert lo < e["mean"] < hi


def test_d_at_least_n_is_always_few_rows(rng):
    x = gaussian(rng, 64, 40)
    for name, e in entries(x, np.tanh(x), 32).items():
        assert "few_rows" in e["flags"], name
    assert rows_needed(None, 40) == 41
    assert rows_needed(CKA.rows_per_dim, 40) > 41  # a studied metric asks for more than n > d


def test_few_rows_follows_each_metrics_rule(rng):
    d = 8
    n = rows_needed(Affinity.rows_per_dim, d)
    x = gaussian(rng, 2 * n, d)
    e = entries(x, np.tanh(x), n)
    assert "few_rows" not in e["affinity"]["flags"]
    assert ("few_rows" in e["cka"]["flags"]) == (n < rows_needed(CKA.rows_per_dim, d))


def test_small_scale_relu_is_eps_dominated_for_the_absolute_eps_only(rng):
    x = 1e-4 * gaussian(rng, 512, 6)
    e = entries(x, np.maximum(x, 0), 256)
    assert "eps_dominated" in e["affinity"]["flags"] and "eps_dominated" in e["affinity_lw"]["flags"]
    for name in ("affinity_rel", "cka", "r2"):
        assert "eps_dominated" not in e[name]["flags"], name
    x = gaussian(rng, 512, 6)  # the same site at unit scale
    assert "eps_dominated" not in entries(x, np.maximum(x, 0), 256)["affinity"]["flags"]


def test_eps_dominated_judges_each_metrics_own_eps(rng):
    """`affinity:eps=...` is flagged by its own ε against the site's smallest chunk variance, not the default's."""
    x = 1e-2 * gaussian(rng, 512, 6)  # smallest chunk variance ~6e-5: 1e-3 of it is ~6e-8
    e = entries(x, np.maximum(x, 0), 256, metrics=["affinity", "affinity:eps=0.0", "affinity:eps=1e-09"])
    assert "eps_dominated" in e["affinity"]["flags"]  # the default ε = 1e-6 is above that
    assert "eps_dominated" not in e["affinity:eps=0.0"]["flags"]
    assert "eps_dominated" not in e["affinity:eps=1e-09"]["flags"]
    x = gaussian(rng, 512, 6)  # unit scale: only a large ε bites
    e = entries(x, np.maximum(x, 0), 256, metrics=["affinity", "affinity:eps=0.01"])
    assert "eps_dominated" not in e["affinity"]["flags"] and "eps_dominated" in e["affinity:eps=0.01"]["flags"]


def test_rank_deficient_x_is_flagged_for_r2(rng):
    base = rng.standard_normal((512, 3))
    x = (base @ rng.standard_normal((3, 12))).astype(np.float32).astype(np.float64)  # rank 3 + rounding
    e = entries(x, np.tanh(x), 256, ["r2", "cka"])
    assert e["r2"]["flags"] == ["rank_deficient"]
    assert e["cka"]["flags"] == []
    x = gaussian(rng, 512, 12)
    assert entries(x, np.tanh(x), 256, ["r2"])["r2"]["flags"] == []


def test_dead_output_columns_are_flagged(rng):
    """Without an interval the move cannot be weighed: flagged (the rule with one: tests/test_data_need.py)."""
    x = gaussian(rng, 512, 6)
    y = np.maximum(x, 0)
    y[:, 2] = 0.0
    for name, e in entries(x, y, 256, intervals="none").items():
        assert "constant_output" in e["flags"], name
        assert e["dead"] == [1, 6]


def test_partial_chunk_is_flagged(rng):
    x = gaussian(rng, 150, 3)
    e = entries(x, np.tanh(x), 256)
    for name, entry in e.items():
        assert "partial" in entry["flags"], name


def test_ci95_brackets_the_mean_and_narrows_with_chunks(rng):
    x = gaussian(rng, 16 * 64, 4)
    y = np.tanh(x)
    few, many = entries(x[:2 * 64], y[:2 * 64], 64), entries(x, y, 64)
    for name in METRICS:
        for e in (few, many):
            assert e[name]["ci95"][0] <= e[name]["mean"] <= e[name]["ci95"][1]
        assert np.diff(many[name]["ci95"])[0] < np.diff(few[name]["ci95"])[0], name


def test_one_chunk_gets_a_half_sampling_interval(rng):
    x = gaussian(rng, 256, 4)
    e = entries(x, np.tanh(x), 256)
    for name, entry in e.items():
        lo, hi = entry["ci95"]
        assert lo < entry["mean"] < hi and hi - lo > 1e-4, name


def test_ci95_is_clipped_to_the_metrics_declared_range(rng):
    """A t interval is symmetric: around an R² of 0.999 from two chunks it reached past 1 ([0.99871, 1.00110] on
    one site), where no R² lies. Every ci95 stays in the metric's range; the other side is left as it was."""
    from onnxaff.reports.console import fmt_score

    x = gaussian(rng, 4 * 64, 3)
    y = x @ rng.standard_normal((3, 3))
    y[64:128] += 0.05 * rng.standard_normal((64, 3))  # one chunk a little off linear: a wide interval near 1
    e = entries(x, y, 64, ["r2", "r2_heldout", "cka"])
    for name, entry in e.items():
        lo, hi = entry["ci95"]
        assert lo <= entry["mean"] <= hi <= 1.0, name
        free = mean_ci(entry["values"])
        assert lo == pytest.approx(max(free[0], 0.0 if name != "r2_heldout" else -np.inf)), name
    assert e["r2"]["ci95"][1] == 1.0 and mean_ci(e["r2"]["values"])[1] > 1.0  # the case the clip is for
    half = mean_ci(e["r2"]["values"])[1] - e["r2"]["mean"]
    assert fmt_score(e["r2"], chunks=False, ci=True) == f"{e['r2']['mean']:.4f}±{half:.4f}"  # the unclipped side
    assert entry_ci([0.999], [0.9995, 1.0, 0.998], (0.0, 1.0))[1] == 1.0  # one chunk: half-samples, clipped too
    assert entry_ci([2.0, 2.001], None, (0.0, 1.0)) == [1.0, 1.0]  # past a bound altogether: still lo ≤ hi
    assert entry_ci([0.2, 0.3], None) == list(mean_ci([0.2, 0.3]))  # no declared range: as before


def test_mean_ci_is_the_student_t_interval():
    lo, hi = mean_ci([1.0, 2.0, 3.0])
    assert (lo + hi) / 2 == pytest.approx(2.0)
    assert (hi - lo) / 2 == pytest.approx(4.302652729911275 * 1.0 / np.sqrt(3))  # t_{2, 0.975}·sd/√k
    with pytest.raises(ValueError):
        mean_ci([1.0])


def test_half_sampling_estimates_the_sd_of_a_mean(rng):
    """For a mean, a random half's spread is the whole chunk's sd: σ/√n (the method's justification)."""
    widths = []
    for k in range(20):
        x = rng.standard_normal((400, 1))
        widths.append(np.diff(half_sample_ci(lambda a, b: float(a.mean()), x, x, halves=64, seed=k)[1:])[0] / 2)
    assert np.mean(widths) / (1.998 / np.sqrt(400)) == pytest.approx(1.0, abs=0.1)


def test_a_small_run_prints_one_warning_line_per_flag_kind(capfd, tmp_path):
    """26 examples through a shipped 10-site CNN: every site is partial and short of rows, in two lines, not 20 (the
    paper's rows, one an example in 512-row chunks, and two metrics: under the defaults' 16 positions an example the
    sites fill their chunks)."""
    import json

    from onnxaff.analysis.flagwarnings import _FLAG_TEXT
    from onnxaff_models import shipped_models
    from tests.conftest import run_cli

    model = next(m for m in shipped_models() if m.name == "torch_cnn_relu")
    code, out, err = run_cli(capfd, "analyze", model.path, "--data", model.data, "--limit", "26",
                             "--chunk-size", 512, "--reduce", "mean", "--metrics", "affinity,affinity_lw",
                             "--out", tmp_path / "s.json")
    assert code == 0, err
    warnings = [line for line in err.splitlines() if line.startswith("warning:")]
    for what, _ in _FLAG_TEXT.values():
        assert sum(what in line for line in warnings) <= 1, warnings
    assert any("few_rows" not in line and "have fewer rows per chunk" in line for line in warnings)
    assert len(warnings) <= len(_FLAG_TEXT)
    sig = json.loads((tmp_path / "s.json").read_text())
    flags = [e["flags"] for s in sig["sites"] for e in s["metrics"].values()]
    assert flags and all("partial" in f and "few_rows" in f for f in flags)
    assert "flags" in out  # the terminal table's flags column
    code, _, err = run_cli(capfd, "report", tmp_path / "s.json", "--out", tmp_path / "r.html")
    page = (tmp_path / "r.html").read_text()
    assert code == 0 and "flags per metric (docs/statistics.md)" in page and "few_rows, partial" in page, err
    assert "<th class=\"l\">affinity flags</th>" in page and "<th class=\"l\">affinity_lw flags</th>" in page


def test_compare_can_leave_flagged_scores_out_and_says_how_many(capfd, tmp_path):
    import json

    from onnxaff_models import shipped_models
    from tests.conftest import run_cli

    model = next(m for m in shipped_models() if m.name == "sk_mlp_relu")
    for name, chunk in (("small", 128), ("big", 512)):  # 64-d ReLU sites need 256 rows per chunk; Softmax (10) 40
        code, _, err = run_cli(capfd, "analyze", model.path, "--data", model.data, "--limit", 1024,
                               "--chunk-size", chunk, "--metrics", "affinity", "--out", tmp_path / f"{name}.json")
        assert code == 0, err
    flags = {name: [s["metrics"]["affinity"]["flags"]
                    for s in json.loads((tmp_path / f"{name}.json").read_text())["sites"]] for name in ("small", "big")}
    assert [f.count("few_rows") for f in flags["small"]] == [1, 1, 1, 0]
    assert not any("few_rows" in f for f in flags["big"])
    flagged = sum(bool(f) for fs in flags.values() for f in fs)
    code, _, err = run_cli(capfd, "compare", tmp_path / "small.json", tmp_path / "big.json", "--exclude-flagged",
                           "--out", tmp_path / "c.json")
    assert code == 0, err
    assert f"left out {flagged} flagged of 8 site scores" in err


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
@pytest.mark.parametrize("batch_size", [64, 4])
def test_network_nlc_lands_within_half_a_percent_of_the_exact_jacobian(seed, batch_size, tmp_path):
    """y = tanh(xW): exact NLC² = mean_i Tr(J_i Σ_X J_iᵀ)/Tr Σ_Y with J_i = diag(sech²(x_i W)) Wᵀ.

    Batches of 64 take the eigen-direction path (D = 6 < 63); batches of 4 the rolls, exact for the affine
    output only (with 3 partners per example the within-batch estimate itself is 4–8 % off: batches of 64 are
    the default). One direction per example was 0.2–5.4 % off on these four seeds."""
    from onnx.parser import parse_model as parse

    import onnxaff
    from tests.test_baselines import NLC_MODEL

    rng = np.random.default_rng(seed)
    w = rng.standard_normal((6, 6)).astype(np.float32)
    model = parse(NLC_MODEL % ", ".join(f"{v:.6f}" for v in w.ravel()))
    x = (rng.standard_normal((1024, 6)) @ (np.eye(6) + 0.5 * rng.standard_normal((6, 6)))).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    x64, w64 = x.astype(np.float64), np.asarray([float(f"{v:.6f}") for v in w.ravel()]).reshape(6, 6)
    h = x64 @ w64
    g = (1 / np.cosh(h) ** 2)[:, :, None] * w64.T  # J_i
    num = np.mean(np.einsum("nij,jk,nik->n", g, np.cov(x64, rowvar=False), g))
    exact = np.sqrt(num / np.trace(np.cov(np.tanh(h), rowvar=False)))
    sig = onnxaff.analyze(model, str(tmp_path / "x.npy"), metrics=["nlc"], batch_size=batch_size, progress=False)
    if batch_size == 64:
        assert sig.network["nlc"]["values"]["y"] == pytest.approx(exact, rel=0.005)
    assert sig.network["nlc"]["values"]["lin"] == pytest.approx(1.0, abs=1e-3)


def _conv_model(rng):
    """x (N, 3, 32, 32) → Relu(Conv 3→32) → Relu(Conv 32→8) → mean: a 32-channel site, more than 26 rows can fill."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    def init(name, shape):
        return numpy_helper.from_array((0.2 * rng.standard_normal(shape)).astype(np.float32), name)

    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], strides=[2, 2]),
             helper.make_node("Relu", ["c2"], ["r2"]),
             helper.make_node("GlobalAveragePool", ["r2"], ["y"])]
    graph = helper.make_graph(nodes, "photo_cnn",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 32, 32])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8, 1, 1])],
                              [init("w1", (32, 3, 3, 3)), init("b1", (32,)), init("w2", (8, 32, 3, 3)),
                               init("b2", (8,))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model


def test_a_26_photo_folder_prints_one_warning_line_per_flag_kind(capfd, tmp_path, rng):
    """Real photos (seeded crops and flips of those matplotlib and scikit-learn ship), one row a photo (reduce mean)
    in 512-row chunks: a 32-channel site is short of rows in its one partial chunk."""
    import json

    from PIL import Image

    from onnxaff.analysis.flagwarnings import _FLAG_TEXT
    from tests.conftest import run_cli
    from tests.test_images import sample_photos

    photos = [Image.open(p).convert("RGB") for p in sample_photos()]
    folder = tmp_path / "photos"
    folder.mkdir()
    for k in range(26):
        img = photos[k % len(photos)]
        w, h = img.size
        side = int(rng.integers(min(w, h) // 3, min(w, h)))
        left, top = int(rng.integers(0, w - side + 1)), int(rng.integers(0, h - side + 1))
        crop = img.crop((left, top, left + side, top + side))
        if rng.random() < 0.5:
            crop = crop.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        crop.save(folder / f"photo{k:02d}.jpg")
    model = tmp_path / "cnn.onnx"
    model.write_bytes(_conv_model(rng).SerializeToString())
    code, out, err = run_cli(capfd, "analyze", model, "--data", folder, "--crop", 32, "--resize", 36,
                             "--metrics", "affinity,affinity_lw,cka,r2", "--chunk-size", 512, "--reduce", "mean",
                             "--out", tmp_path / "s.json")
    assert code == 0, err
    warnings = [line for line in err.splitlines() if line.startswith("warning:")]
    for what, _ in _FLAG_TEXT.values():
        assert sum(what in line for line in warnings) <= 1, warnings
    assert len(warnings) <= len(_FLAG_TEXT), warnings
    sites = json.loads((tmp_path / "s.json").read_text())["sites"]
    assert len(sites) == 2 and all(s["status"] == "ok" for s in sites)
    wide = next(s for s in sites if s["dim"] == 32)  # 32 channels ≥ 26 rows: always few_rows, for every metric
    assert all("few_rows" in e["flags"] and "partial" in e["flags"] for e in wide["metrics"].values()), wide
    assert any("have fewer rows per chunk" in line for line in warnings), warnings


def test_nlc_directions_all_gives_the_exact_jacobian_value_on_784_inputs(capfd, tmp_path):
    """784 inputs take the rolls: one (the default, unchanged) was 2.8 % off here, all partners 0.002 %."""
    import json

    import onnxaff
    from onnxaff_models import shipped_models
    from tests.conftest import run_cli

    model = next(m for m in shipped_models() if m.name == "sk_mlp_tanh")
    # Jacobians written out from the weights (float64, no finite differences): the benchmark's reference
    from benchmarks.nlc_directions import exact_nlc, mlp_jacobians

    exact = exact_nlc(lambda xb: mlp_jacobians(model.path, xb), np.load(model.data)["image"].astype(np.float64))
    default = onnxaff.analyze(model.path, str(model.data), metrics=["nlc"], progress=False)
    assert "directions" not in default.network["nlc"] and "nlc_directions" not in default.options
    assert abs(default.network["nlc"]["values"]["probabilities"] / exact - 1) > 0.01  # why the option exists
    code, _, err = run_cli(capfd, "analyze", model.path, "--data", model.data, "--metrics", "nlc", "--quiet",
                           "--nlc-directions", "all", "--out", tmp_path / "all.json")
    assert code == 0, err
    sig = json.loads((tmp_path / "all.json").read_text())
    assert sig["network"]["nlc"]["values"]["probabilities"] == pytest.approx(exact, rel=5e-4)
    assert sig["network"]["nlc"]["directions"] == "all" and sig["options"]["nlc_directions"] == "all"
    for bad in ("0", "-2", "some", "1.5"):
        code, _, err = run_cli(capfd, "analyze", model.path, "--data", model.data, "--metrics", "nlc", "--quiet",
                               "--nlc-directions", bad, "--out", tmp_path / f"bad{bad}.json")
        assert code != 0 and "--nlc-directions must be" in err and len(err.strip().splitlines()) == 1, err


def test_terminal_table_shows_each_scores_ci95(capfd, tmp_path):
    """The per-site table's ± is the ci95's half-width (the std stays in the signature), at the same width."""
    import json
    import re

    from onnxaff_models import shipped_models
    from tests.conftest import run_cli

    model = next(m for m in shipped_models() if m.name == "sk_mlp_relu")
    code, out, err = run_cli(capfd, "analyze", model.path, "--data", model.data, "--chunk-size", 256,
                             "--metrics", "affinity,affinity_lw", "--out", tmp_path / "s.json")  # a cell each
    assert code == 0, err
    assert "scores: mean±half-width of the 95 % interval over the chunks" in out
    sites = json.loads((tmp_path / "s.json").read_text())["sites"]
    rows = [line for line in out.splitlines() if re.match(r"\d+ ", line)][:len(sites)]
    for line, s in zip(rows, sites, strict=True):
        cells = re.findall(r"(\d\.\d{4})±(\d\.\d{4})", line)
        assert len(cells) == 2 and re.search(r" 4 ", line), line  # the chunks column
        for (mean, half), e in zip(cells, (s["metrics"]["affinity"], s["metrics"]["affinity_lw"]), strict=True):
            assert float(mean) == pytest.approx(e["mean"], abs=5e-5) and e["chunks"] == 4
            assert float(half) == pytest.approx((e["ci95"][1] - e["ci95"][0]) / 2, abs=5e-5)
            assert abs(float(half) - e["std"]) > 5e-5  # not the std


@pytest.mark.parametrize("scale", [1e-3, 1e-6, 1e3])
def test_site_nlc_of_relu_does_not_depend_on_the_input_scale(scale, tmp_path):
    """ReLU's NLC is scale-free; an absolute finite-difference step smoothed the kink at small scales
    (1.058 at std 1e-3, 0.853 at 1e-6 against 1.212)."""
    import onnx

    import onnxaff
    from tests.builders import chain

    onnx.save(chain("Relu", width=64), tmp_path / "relu.onnx")
    x = np.random.default_rng(0).standard_normal((2048, 64)).astype(np.float32)
    values = []
    for s in (1.0, scale):
        np.save(tmp_path / "x.npy", x * np.float32(s))
        sig = onnxaff.analyze(str(tmp_path / "relu.onnx"), str(tmp_path / "x.npy"), metrics=["nlc"], progress=False)
        values.append(sig.sites[0]["metrics"]["nlc"]["mean"])
    assert values[1] == pytest.approx(values[0], rel=2e-3)


def test_site_nlc_does_not_depend_on_the_batch_size(tmp_path):
    """The step's scale is each example's own RMS: a batch-wide RMS made the NLC move with the batching."""
    import onnx

    import onnxaff
    from tests.builders import chain

    onnx.save(chain("Relu", width=16), tmp_path / "relu.onnx")
    x = np.random.default_rng(1).standard_normal((512, 16)).astype(np.float32)
    x[:256] *= np.float32(1e-3)  # small examples first: a batch of 512 mixes them with the large, one of 64 does not
    np.save(tmp_path / "x.npy", x)
    values = [onnxaff.analyze(str(tmp_path / "relu.onnx"), str(tmp_path / "x.npy"), metrics=["nlc"], progress=False,
                              batch_size=b).sites[0]["metrics"]["nlc"]["mean"] for b in (7, 64, 512)]
    # float64 sums grouped by batch: equal to the last digits (1e-6 covers float32 tail kernels)
    assert values[0] == pytest.approx(values[1], rel=1e-6) and values[1] == pytest.approx(values[2], rel=1e-6)


@pytest.mark.parametrize("op", ["Sigmoid", "Softplus"])
def test_site_nlc_of_a_smooth_activation_with_an_offset_at_small_scale(op, tmp_path):
    """A step relative to x alone fell below float32's resolution of σ(x) ≈ σ(0) ≠ 0: at std 1e-4 a sigmoid read
    an NLC of 1.026 and a softplus 1.022 instead of 1.000 (7.4 at 1e-6). The step is also at least δ|σ(x)|."""
    import onnx

    import onnxaff
    from tests.builders import chain

    onnx.save(chain(op, width=64), tmp_path / "m.onnx")
    np.save(tmp_path / "x.npy", np.random.default_rng(0).standard_normal((2048, 64)).astype(np.float32) * 1e-4)
    sig = onnxaff.analyze(str(tmp_path / "m.onnx"), str(tmp_path / "x.npy"), metrics=["nlc"], progress=False)
    # nearly linear at this scale: 1 to within Y's own float32 rounding (σ(0)·eps32 against a spread of 1e-4/4)
    assert sig.sites[0]["metrics"]["nlc"]["mean"] == pytest.approx(1.0, abs=5e-3)


def test_eps_dominated_warning_names_the_eps_the_user_set(rng):
    """The warning said "the paper's 1e-6" for `affinity:eps=0.01` too."""
    from onnxaff.analysis.flagwarnings import flag_warnings
    from onnxaff.format.siteentry import SiteEntry

    def site(e: dict) -> SiteEntry:
        return SiteEntry.of({"index": 0, "id": "s", "kind": "relu", "status": "ok", "dim": 6, "metrics": e})

    x = gaussian(rng, 512, 6)
    names = ["affinity", "affinity:eps=0.01"]
    e = entries(x, np.maximum(x, 0), 256, metrics=names)
    (line,) = [w for w in flag_warnings([site(e)], resolve(names)) if "absolute ε" in w]
    assert "ε (0.01)" in line and "paper" not in line, line
    small = 1e-2 * gaussian(rng, 512, 6)
    e = entries(small, np.maximum(small, 0), 256, metrics=["affinity"])
    (line,) = [w for w in flag_warnings([site(e)], resolve(["affinity"])) if "absolute ε" in w]
    assert "(1e-06, its default)" in line, line

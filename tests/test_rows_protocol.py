"""Rows per example and per chunk as protocol options (issue 49): `reduce="sample:K"` (K positions of each example,
seeded by its index in the data, the activation's own X/Y pairs at the same positions) and `chunk_size="Kd"` (K·D
rows per chunk at a site of D features, at least ROWS_FLOOR).

Every score is checked against a brute force: the raw activation fetched from onnxruntime, the positions picked
by hand from the full feature map, scored by the independent affinity of tests/test_affinity.py.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest

import onnxaff
from onnxaff.analysis.config import AnalysisConfig
from onnxaff.collection.chunks import ROWS_FLOOR, site_chunk_rows
from onnxaff.errors import ConfigError
from onnxaff.graph.reduction import graph_mode, sample_positions, sample_rows, sampled
from tests.builders import HEADER, mlp, save, with_weights
from tests.conftest import one_line_error, run_cli
from tests.test_affinity import brute_force_affinity
from tests.test_masks import padded_model, padding, raw

N, CIN, C, S = 64, 3, 6, 5  # examples, input channels, channels, side: P = 25 positions per example
SEED = 3

CONV = HEADER + f""" g (float[N, {CIN}, {S}, {S}] x) => (float[N, {C}, {S}, {S}] y) {{
    h = Conv<pads=[1, 1, 1, 1]>(x, w1, b1)
    r = Relu(h)
    h2 = Conv<pads=[1, 1, 1, 1]>(r, w2, b2)
    y = Tanh(h2)
}}"""


def conv_model(rng) -> onnx.ModelProto:
    return with_weights(CONV, w1=rng.standard_normal((C, CIN, 3, 3)).astype(np.float32) / 3,
                        b1=rng.standard_normal(C).astype(np.float32) / 4,
                        w2=rng.standard_normal((C, C, 3, 3)).astype(np.float32) / 4,
                        b2=rng.standard_normal(C).astype(np.float32) / 4)


def analyse(model, feeds: dict, tmp_path, **options):
    data = tmp_path / "data.npz"
    np.savez(data, **feeds)
    return onnxaff.analyze(save(model, tmp_path / "m.onnx"), str(data), metrics=["affinity"], progress=False,
                           seed=SEED, **options)


def picked(a: np.ndarray, k: int, gone: np.ndarray | None = None) -> np.ndarray:
    """K positions of each example of a channels-first map [N, C, ...], picked by hand: [rows, C] float64."""
    rows = np.moveaxis(a, 1, -1).reshape(a.shape[0], -1, a.shape[1])
    chosen = sample_positions(SEED, np.arange(a.shape[0]), rows.shape[1], k, gone)
    out = [rows[n, chosen[n]] for n in range(a.shape[0])]
    if gone is not None:
        out = [r[~gone[n, chosen[n]]] for n, r in enumerate(out)]
    return np.concatenate(out).astype(np.float64)


def site(sig, kind: str) -> dict:
    return next(s for s in sig.sites if s["kind"] == kind)


def test_sample_option_is_parsed_and_refused_when_malformed():
    assert sampled("sample:16") == 16 and graph_mode("sample:16") == "positions"
    assert sampled("mean") is None and graph_mode("mean") == "mean"
    assert AnalysisConfig(reduce="sample:16").signature_options(32, ["affinity"])["reduce"] == "sample:16"
    for bad in ("sample:0", "sample:", "sample:K", "sample:-2", "sample:1.5", "samples:4"):
        with pytest.raises(ConfigError, match="reduce"):
            AnalysisConfig(reduce=bad)


def test_sampled_positions_are_distinct_seeded_and_the_same_in_any_batch():
    whole = sample_rows(SEED, 0, 64, 64 * 25, 16)
    per = whole.reshape(64, 16) - 25 * np.arange(64)[:, None]
    assert ((per >= 0) & (per < 25)).all() and all(len(set(p)) == 16 for p in per)
    assert len({tuple(p) for p in per}) == 64  # every example its own positions
    # batches of 8: the example at index i gets the positions it gets in one batch of 64
    eights = np.concatenate([sample_rows(SEED, b, 8, 8 * 25, 16) + 25 * b for b in range(0, 64, 8)])
    assert (eights == whole).all()
    assert not (sample_rows(SEED + 1, 0, 64, 64 * 25, 16) == whole).all()  # the seed draws them
    assert (sample_rows(SEED, 0, 4, 4 * 3, 16) == np.arange(12)).all()  # K ≥ P: every position


@pytest.mark.parametrize("reduce_in", ["graph", "numpy"])
def test_sampled_rows_are_the_brute_force_positions(reduce_in, rng, tmp_path):
    model = conv_model(rng)
    x = rng.standard_normal((N, CIN, S, S)).astype(np.float32)
    k = 4
    sig = analyse(model, {"x": x}, tmp_path, reduce=f"sample:{k}", reduce_in=reduce_in, chunk_size=N * k)
    assert sig.options["reduce"] == f"sample:{k}"
    h, r, h2, y = raw(model, {"x": x}, "h", "r", "h2", "y")
    for kind, (a, b) in (("relu", (h, r)), ("tanh", (h2, y))):
        s = site(sig, kind)
        entry = s["metrics"]["affinity"]
        assert s["rows"] == N * k and s["chunks"] == 1 and entry["status"] == "ok", s
        assert entry["mean"] == pytest.approx(brute_force_affinity(picked(a, k), picked(b, k)), rel=1e-6)


def test_graph_and_numpy_sample_the_same_rows(rng, tmp_path):
    model = conv_model(rng)
    x = rng.standard_normal((N, CIN, S, S)).astype(np.float32)
    got = [analyse(model, {"x": x}, tmp_path, reduce="sample:8", reduce_in=where, chunk_size=128)
           for where in ("graph", "numpy")]
    for kind in ("relu", "tanh"):
        a, b = (site(g, kind) for g in got)
        assert a["rows"] == b["rows"] == N * 8 and a["chunks"] == b["chunks"] == 4
        # the same positions; features reduced by the same copy (no averaging), so the same numbers
        assert a["metrics"]["affinity"]["mean"] == pytest.approx(b["metrics"]["affinity"]["mean"], rel=1e-12)


def test_an_example_gives_the_same_rows_at_batch_size_8_and_64(rng, tmp_path):
    model = conv_model(rng)
    x = rng.standard_normal((N, CIN, S, S)).astype(np.float32)
    got = [analyse(model, {"x": x}, tmp_path, reduce="sample:4", batch_size=b, chunk_size=N * 4) for b in (8, 64)]
    h, r = raw(model, {"x": x}, "h", "r")
    want = brute_force_affinity(picked(h, 4), picked(r, 4))
    for g in got:
        assert site(g, "relu")["metrics"]["affinity"]["mean"] == pytest.approx(want, rel=1e-6)


@pytest.mark.parametrize("reduce_in", ["graph", "numpy"])
def test_masked_positions_are_never_sampled(reduce_in, rng, tmp_path):
    model = padded_model(rng)
    n, t, c = 40, 6, 4  # tests/test_masks.py's padded encoder: every third example padded (1 or 2 tokens)
    x = rng.standard_normal((n, t, c)).astype(np.float32)
    mask = padding(rng)
    k = 5  # an example padded by 2 tokens has 4 left: its 5th pick is a masked token, dropped and counted
    sig = analyse(model, {"x": x, "attention_mask": mask}, tmp_path, reduce=f"sample:{k}", reduce_in=reduce_in,
                  chunk_size=2)
    (h, y) = raw(model, {"x": x, "attention_mask": mask}, "h", "y")
    gone = mask == 0
    short = int(((~gone).sum(axis=1) < k).sum())
    assert short > 0
    tanh = site(sig, "tanh")
    entry = tanh["metrics"]["affinity"]
    assert entry["masked_rows"] == short and tanh["rows"] == n * k - short
    hx, hy = (picked(np.moveaxis(a, -1, 1), k, gone) for a in (h, y))
    assert len(hx) == tanh["rows"]
    sig = analyse(model, {"x": x, "attention_mask": mask}, tmp_path, reduce=f"sample:{k}", reduce_in=reduce_in,
                  chunk_size=len(hx))
    assert site(sig, "tanh")["metrics"]["affinity"]["mean"] == pytest.approx(brute_force_affinity(hx, hy), rel=1e-6)


# --- chunk_size="Kd": K·D rows per chunk at a site of D features (at least ROWS_FLOOR) ---

def test_width_chunks_are_k_times_the_widest_side_with_a_floor():
    assert site_chunk_rows("4d", (40, 12)) == 160 and site_chunk_rows("4d", (12, 12)) == ROWS_FLOOR == 64
    assert site_chunk_rows("32d", (3, 5)) == 160 and site_chunk_rows(512, (4000, 4000)) == 512
    assert site_chunk_rows("4d", (None, 12)) is None  # a symbolic D: the first batch's features give it
    assert AnalysisConfig(chunk_size="4d").chunk_size == "4d" and AnalysisConfig(chunk_size="256").chunk_size == 256
    for bad in ("0d", "d", "4x", "-4d", "1.5d", "4D"):
        with pytest.raises(ConfigError, match="chunk_size"):
            AnalysisConfig(chunk_size=bad)


def _mlp_run(rng, tmp_path, n: int, **options):
    model = mlp(rng, d_in=8, hidden=40, d_out=12)  # sites: relu at D = 40, tanh at D = 12
    x = rng.standard_normal((n, 8)).astype(np.float32)
    return model, x, analyse(model, {"x": x}, tmp_path, **options)


def test_each_site_is_cut_into_chunks_of_k_times_its_width(rng, tmp_path):
    n = 400
    model, x, sig = _mlp_run(rng, tmp_path, n, chunk_size="4d", batch_size=32)
    assert sig.options["chunk_size"] == "4d"
    a, r, o, y = raw(model, {"x": x}, "a", "r", "o", "y")
    for kind, (fx, fy), rows in (("relu", (a, r), 160), ("tanh", (o, y), 64)):
        s = site(sig, kind)
        entry = s["metrics"]["affinity"]
        assert s["rows"] == n and s["chunks"] == n // rows, s  # the trailing partial chunk (400 mod rows) dropped
        assert "few_rows" not in entry.get("flags", []), entry  # affinity declares 4 rows per dimension
        want = [brute_force_affinity(fx[i:i + rows], fy[i:i + rows]) for i in range(0, n - rows + 1, rows)]
        assert entry["mean"] == pytest.approx(np.mean(want), rel=1e-6)


def test_a_fixed_chunk_below_k_times_the_width_is_flagged_few_rows(rng, tmp_path):
    _, _, sig = _mlp_run(rng, tmp_path, 400, chunk_size=64)
    assert "few_rows" in site(sig, "relu")["metrics"]["affinity"]["flags"]  # 64 rows at D = 40 < 4·40
    assert "few_rows" not in site(sig, "tanh")["metrics"]["affinity"].get("flags", [])


def test_a_site_short_of_one_width_chunk_scores_its_partial_chunk(rng, tmp_path):
    model, x, sig = _mlp_run(rng, tmp_path, 100, chunk_size="4d")
    relu, tanh = site(sig, "relu"), site(sig, "tanh")
    assert relu["chunks"] == 1 and relu["metrics"]["affinity"]["partial"] is True  # 100 rows < 160
    assert tanh["chunks"] == 1 and not tanh["metrics"]["affinity"].get("partial")  # 64 of 100 rows
    a, r = raw(model, {"x": x}, "a", "r")
    assert relu["metrics"]["affinity"]["mean"] == pytest.approx(brute_force_affinity(a, r), rel=1e-6)


@pytest.mark.parametrize(("flag", "value", "fragment"), [("--chunk-size", "4x", "--chunk-size must be"),
                                                         ("--chunk-size", "0d", "Kd"),
                                                         ("--reduce", "sample:0", "sample:K"),
                                                         ("--reduce", "sample", "unknown reduction")])
def test_a_malformed_value_is_one_line(flag, value, fragment, rng, capfd, tmp_path):
    path = save(mlp(rng), tmp_path / "m.onnx")
    one_line_error(run_cli(capfd, "analyze", path, "--data", "synthetic:gaussian", "--limit", "64", "--quiet", "--out",
                           tmp_path / "s.json", flag, value), fragment)


def test_the_cli_takes_width_chunks_and_sampled_positions(rng, capfd, tmp_path):
    path = save(conv_model(rng), tmp_path / "m.onnx")
    code, _, err = run_cli(capfd, "analyze", path, "--data", "synthetic:gaussian", "--limit", "64", "--quiet",
                           "--out", tmp_path / "s.json", "--chunk-size", "4d", "--reduce", "sample:4",
                           "--metrics", "affinity")
    assert code == 0, err
    sig = onnxaff.Signature.from_dict(json.loads((tmp_path / "s.json").read_text()))
    assert sig.options["chunk_size"] == "4d" and sig.options["reduce"] == "sample:4"
    assert {s["rows"] for s in sig.sites} == {64 * 4} and {s["chunks"] for s in sig.sites} == {4}  # 64 rows (C = 6)


def test_the_dry_run_gives_each_site_its_width_chunk(rng, capfd, tmp_path):
    """The preview cuts each site's predicted rows by its own K·D chunk and says so; "4d" meets affinity's 4·D."""
    from onnxaff.analysis.cost import estimate

    path = save(mlp(rng, d_in=8, hidden=40, d_out=12), tmp_path / "m.onnx")
    est = estimate(path, "synthetic:gaussian:n=400", metrics=["affinity"], chunk_size="4d", batch_size=32,
                   chunk_workers=0, progress=False)
    assert [(s.dim, s.rows, s.chunks, s.few_rows) for s in est.sites] == [(40, 160, 2, []), (12, 64, 6, [])]
    assert est.examples_needed is None
    est = estimate(path, "synthetic:gaussian:n=100", metrics=["affinity"], chunk_size="4d", batch_size=32,
                   chunk_workers=0, progress=False)
    assert est.sites[0].partial and est.examples_needed == 160  # 100 rows short of the relu's 160-row chunk
    code, out, err = run_cli(capfd, "analyze", path, "--data", "synthetic:gaussian:n=400", "--dry-run",
                             "--metrics", "affinity", "--chunk-size", "4d", "--chunk-workers", "0")
    assert code == 0, err
    assert "chunks of 4d" in out and "no site flagged few_rows" in out


SYMBOLIC = HEADER + """ g (float[N, F] x) => (float[N, F] y) {
    y = Relu(x)
}"""


def test_a_symbolic_width_takes_its_chunk_from_the_first_batch(rng, tmp_path):
    model = onnx.parser.parse_model(SYMBOLIC)
    x = rng.standard_normal((300, 40)).astype(np.float32)
    sig = analyse(model, {"x": x}, tmp_path, chunk_size="4d", batch_size=32)
    (s,) = sig.sites
    assert s["dim"] == 40 and s["rows"] == 300 and s["chunks"] == 1  # one chunk of 160 rows, 140 left over
    want = brute_force_affinity(x[:160].astype(np.float64), np.maximum(x[:160], 0).astype(np.float64))
    assert s["metrics"]["affinity"]["mean"] == pytest.approx(want, rel=1e-6)


def test_shards_of_a_width_chunked_sampled_run_merge_into_the_one_run(rng, tmp_path):
    """Shard boundaries fall on every site's own K·D chunk (the unit is the lcm of the sizes and the batch) and a
    sampled example keeps its positions in its shard: the merged parts give the one run's chunk scores exactly."""
    from onnxaff.analysis.runstate import RunState
    from onnxaff.collection.scoring import MetricScorer
    from onnxaff.results.executors import shard_state

    path = save(conv_model(rng), tmp_path / "m.onnx")
    data = tmp_path / "d.npz"
    np.savez(data, x=rng.standard_normal((N * 4, CIN, S, S)).astype(np.float32))  # 256 examples
    config = AnalysisConfig(metrics=("affinity",), chunk_size="4d", reduce="sample:2", batch_size=16, seed=SEED,
                            progress=False)
    parts = [RunState.from_state(shard_state(path, str(data), (i, 2), config)) for i in range(2)]
    total = parts[0]
    metrics, track_metrics = total.metrics()
    with MetricScorer(0) as scorer:
        total.merge(parts[1], metrics, track_metrics, scorer)
    merged = total.to_signature(metrics, track_metrics)
    one = onnxaff.analyze(path, str(data), config=config)
    assert [s["chunks"] for s in one.sites] == [8, 8]  # 512 rows in 64-row chunks (4·6 < 64)
    assert all(len(s["metrics"]["affinity"]["values"]) == 8 for s in one.sites)
    assert [s["metrics"]["affinity"]["values"] for s in merged.sites] == [s["metrics"]["affinity"]["values"]
                                                                          for s in one.sites]


def test_a_symbolic_width_run_resumes_from_its_checkpoint(rng, tmp_path):
    """The checkpoint holds the chunk size the first batch set (160 rows at D = 40); the resumed run's collectors,
    opened before any batch, take it from there: the one run's chunk scores."""
    from onnxaff.analysis import analyze as analyse_run
    from onnxaff.analysis import open_run
    from onnxaff.errors import Interrupted
    from tests.test_scale import interrupt_after

    model = onnx.parser.parse_model(SYMBOLIC)
    data = tmp_path / "d.npz"
    np.savez(data, x=rng.standard_normal((512, 40)).astype(np.float32))
    options = dict(metrics=["affinity"], chunk_size="4d", batch_size=32, progress=False, chunk_workers=0)
    ckpt = tmp_path / "c.npz"
    with open_run(model, str(data), checkpoint=ckpt, **options) as run:
        interrupt_after(run, 7)  # 224 rows: one chunk of 160 scored, 64 held
        with pytest.raises(Interrupted):
            run.execute()
    with open_run(model, str(data), checkpoint=ckpt, resume="always", **options) as run:
        assert run.state.cursor == 224
        run.execute()
        again = run.signature()
    one = analyse_run(model, str(data), **options)
    assert [s["chunks"] for s in again.sites] == [3]
    assert again.scores("affinity") == one.scores("affinity")


def test_a_residual_stage_samples_its_positions_as_the_sites_do():
    """A stage's tracks (4 tensors of 8 channels) get K positions an example too, and chunks of 4 × 32 rows."""
    from tests.conftest import FIXTURES

    sig = onnxaff.analyze(str(FIXTURES / "res_cnn_op17.onnx"), "synthetic:gaussian:n=128", blocks=["residual"],
                          metrics=["affinity"], chunk_size="4d", reduce="sample:4", batch_size=32, progress=False)
    assert {(s["rows"], s["chunks"]) for s in sig.sites} == {(128 * 4, 8)}  # D = 8: 64-row chunks (the floor)
    (stage,) = sig.stages
    assert (stage["rows"], stage["chunks"]) == (128 * 4, 4)  # D = 4 × 8 tracks: 128-row chunks

"""Tensor pairs and blocks as sites, and residual stages' trajectory metrics, through the analysis."""

import json

import numpy as np
import onnx
import pytest

from onnxaff.analysis import analyze
from onnxaff.errors import OnnxaffError
from onnxaff.graph.pairs import parse_block_kinds, parse_pairs
from onnxaff.results.executors import shard_state
from onnxaff.results.shards import merge_states
from tests.builders import chain, save
from tests.conftest import FIXTURES, TORCH_FIXTURES, one_line_error, parse, run_cli

POW = """<ir_version: 8, opset_import: ["" : 17]>
g (float[N, 1] x) => (float[N, 1] y1, float[N, 1] y2, float[N, 3] z) {
    one = Constant<value = float {1.0}>()
    two = Constant<value = float {2.0}>()
    y1 = Pow(x, one)
    y2 = Pow(x, two)
    w = Constant<value = float[1, 3] {1.0, -2.0, 0.5}>()
    z = MatMul(x, w)
}"""


@pytest.fixture
def uniform(tmp_path, rng):
    path = tmp_path / "u.npy"
    np.save(path, rng.uniform(-1, 1, (2048, 1)).astype(np.float32))
    return path


def test_parse_pairs_and_block_kinds():
    assert parse_pairs("a:b, c/d:e") == [("a", "b"), ("c/d", "e")]
    assert parse_pairs("x::y:z") == [("x", "y:z")]
    assert parse_block_kinds("all") == ["residual", "attention", "mlp"]
    assert parse_block_kinds("mlp,residual,mlp") == ["mlp", "residual"]
    with pytest.raises(OnnxaffError, match="IN:OUT"):
        parse_pairs("justone")
    with pytest.raises(OnnxaffError, match="'conv' is not one of"):
        parse_block_kinds("conv")


def test_pairs_score_any_two_tensors(uniform):
    """x¹ is the identity (affinity 1, NLC 1); x² on [−1, 1] is not; X→Z has D 1 vs 3."""
    sig = analyze(parse(POW), str(uniform), pairs=[("x", "y1"), ("x", "y2"), ("x", "z")],
                  metrics=["affinity", "cka", "nlc"], chunk_size=512, progress=False)
    by = {s["output"]: s for s in sig.sites if s["group"] == "pair"}
    # x² of data is an activation of its own (a polynomial: docs/sites.md), x¹ is the identity
    assert [(s["group"], s["kind"], s["output"]) for s in sig.sites] == [("activation", "elementwise", "y2")] + [
        ("pair", "pair", t) for t in ("y1", "y2", "z")]
    assert by["y1"]["metrics"]["affinity"]["mean"] == pytest.approx(1.0, abs=1e-9)
    assert by["y1"]["metrics"]["nlc"]["mean"] == pytest.approx(1.0, abs=1e-5)
    assert by["y1"]["op_types"] == ["Pow"]
    assert by["y2"]["metrics"]["affinity"]["mean"] < 0.9 and by["y2"]["metrics"]["nlc"]["mean"] > 1.5
    z = by["z"]["metrics"]
    assert (by["z"]["dim"], by["z"]["dim_y"]) == (1, 3)
    assert z["affinity"]["status"] == "not_applicable" and "equal feature dimensions" in z["affinity"]["reason"]
    assert z["cka"]["mean"] == pytest.approx(1.0, abs=1e-9)  # a linear map, and CKA allows D_X ≠ D_Y
    assert sig.scores("affinity") == [sig.sites[0]["metrics"]["affinity"]["mean"]]  # pairs are scored beside it


def test_pairs_beside_activations_and_errors(tmp_path, capfd):
    model = chain("Relu", "Tanh")
    sig = analyze(model, "synthetic:gaussian:n=1024", pairs=[("x", "y"), ("x", "y")], metrics=["affinity"],
                  progress=False)
    assert [(s["kind"], s["group"]) for s in sig.sites] == [("relu", "activation"), ("tanh", "activation"),
                                                          ("pair", "pair")]
    assert sig.sites[2]["op_types"] == ["Relu", "Tanh"] and len(sig.scores("affinity")) == 2
    with pytest.raises(OnnxaffError, match="tensor 'hh' is not in the model; did you mean h"):
        analyze(model, "synthetic:gaussian:n=64", pairs=[("x", "hh")], progress=False)
    path = save(model, tmp_path / "m.onnx")
    one_line_error(run_cli(capfd, "analyze", path, "--data", "synthetic:gaussian:n=64", "--pairs", "x:nope", "--out",
                           tmp_path / "s.json"), "tensor 'nope' is not in the model")


def residual_stage(increments: list[list[float]]) -> onnx.ModelProto:
    """x [N, 2] through one residual block per increment c: h ← h + (0·h W + c), a constant step."""
    lines, h = [], "x"
    for k, c in enumerate(increments):
        lines.append(f"w{k} = Constant<value = float[2, 2] {{0.0, 0.0, 0.0, 0.0}}>()")
        lines.append(f"c{k} = Constant<value = float[2] {{{c[0]}, {c[1]}}}>()")
        lines.append(f"m{k} = MatMul({h}, w{k})")
        lines.append(f"b{k} = Add(m{k}, c{k})")
        lines.append(f"h{k} = Add({h}, b{k})")
        h = f"h{k}"
    lines.append(f"y = Relu({h})")
    body = "\n    ".join(lines)
    return parse(f"""<ir_version: 8, opset_import: ["" : 17]>
g (float[N, 2] x) => (float[N, 2] y) {{
    {body}
}}""")


def stage_of(sig):
    assert len(sig.stages) == 1
    return sig.stages[0]


def test_straight_stage_scores_exactly_one():
    sig = analyze(residual_stage([[0.5, 0.25]] * 3), "synthetic:gaussian:n=1024", blocks=["residual"],
                  metrics=["affinity"], chunk_size=512, progress=False)
    blocks = [s for s in sig.sites if s["group"] == "block"]
    assert [s["kind"] for s in blocks] == ["residual_block"] * 3
    stage = stage_of(sig)
    assert stage["length"] == 3 and stage["tensors"] == ["x", "h0", "h1", "h2"] and stage["chunks"] == 2
    assert stage["metrics"]["lss"]["mean"] == pytest.approx(1.0, abs=1e-9)
    assert stage["metrics"]["ots"]["mean"] == pytest.approx(1.0, abs=1e-9)
    # a translation is affine: each block's affinity is 1, beside the ReLU's
    for s in blocks:
        assert s["metrics"]["affinity"]["mean"] == pytest.approx(1.0, abs=1e-6)
    assert sig.sites[0]["kind"] == "relu" and sig.sites[0]["metrics"]["affinity"]["mean"] < 1


def test_zigzag_stage_scores_its_closed_form():
    a, b = np.array([1.0, 0.0]), np.array([0.0, 2.0])
    sig = analyze(residual_stage([a.tolist(), b.tolist(), a.tolist(), b.tolist()]), "synthetic:gaussian:n=512",
                  blocks=["residual"], metrics=["affinity"], chunk_size=512, progress=False)
    lss = stage_of(sig)["metrics"]["lss"]["mean"]
    expected = 2 * (np.linalg.norm(a) + np.linalg.norm(b)) / np.linalg.norm(2 * (a + b))
    assert lss == pytest.approx(expected, abs=1e-6) and lss > 1.3
    assert stage_of(sig)["metrics"]["ots"]["mean"] == pytest.approx(1.0, abs=1e-9)  # still a translation overall


def test_residual_fixture_blocks_beside_activations():
    """The PyTorch residual CNN: each residual block scored beside its activations; stages tracked."""
    expected = TORCH_FIXTURES["res_cnn_op17"]
    sig = analyze(str(FIXTURES / "res_cnn_op17.onnx"), "synthetic:gaussian:n=256", blocks=["residual"],
                  metrics=["affinity", "cka"], chunk_size=128, batch_size=32, progress=False)
    acts = [s for s in sig.sites if s["group"] == "activation"]
    blocks = [s for s in sig.sites if s["group"] == "block"]
    assert len(blocks) == expected["blocks"]["residual"] > 0 and acts
    for s in acts + blocks:
        assert s["status"] == "ok" and 0 <= s["metrics"]["affinity"]["mean"] <= 1
    assert sig.model["extra_sites"] == {"pair": 0, "block": len(blocks)}
    assert len(sig.scores("affinity")) == len(acts)
    for stage in sig.stages:
        assert stage["metrics"]["lss"]["mean"] >= 1 - 1e-12 and 0 < stage["metrics"]["ots"]["mean"] <= 1


@pytest.mark.parametrize("fixture", ["tiny_vit_op17", "tiny_vit_op20"])
def test_attention_and_mlp_blocks_are_scored(fixture):
    expected = TORCH_FIXTURES[fixture]["blocks"]
    sig = analyze(str(FIXTURES / f"{fixture}.onnx"), "synthetic:gaussian:n=128", blocks=["attention", "mlp"],
                  metrics=["affinity"], chunk_size=64, batch_size=32, progress=False)
    kinds = [s["kind"] for s in sig.sites if s["group"] == "block"]
    assert kinds.count("attention_block") == expected["attention"] > 0
    assert kinds.count("mlp_block") == expected["mlp"] > 0
    assert all(s["metrics"]["affinity"]["status"] == "ok" for s in sig.sites if s["group"] == "block")
    assert sig.stages == []  # no residual kind asked


def test_stages_merge_across_shards_and_cli(tmp_path, capfd):
    model = residual_stage([[0.5, 0.0], [0.0, 0.5], [0.25, 0.25]])
    path = tmp_path / "stage.onnx"
    onnx.save(model, path)
    opts = dict(metrics=["affinity"], chunk_size=64, batch_size=16, blocks=["residual"])
    data = "synthetic:gaussian:n=640"
    one = analyze(str(path), data, progress=False, **opts)
    merged = merge_states([shard_state(str(path), data, (i, 3), opts) for i in range(3)])
    assert stage_of(merged)["metrics"]["lss"]["values"] == stage_of(one)["metrics"]["lss"]["values"]
    assert stage_of(merged)["metrics"]["ots"]["values"] == stage_of(one)["metrics"]["ots"]["values"]
    out = tmp_path / "s.json"
    code, stdout, err = run_cli(capfd, "analyze", path, "--data", data, "--blocks", "residual", "--chunk-size", 64,
                                "--out", out)
    assert code == 0, err
    assert "residual stage" in stdout and "lss mean±std" in stdout
    assert json.loads(out.read_text())["stages"][0]["metrics"]["lss"]["chunks"] == 10


def test_one_graph_view_per_run(monkeypatch):
    """Sites, pairs, blocks, stages, model statistics and the augmented model all read the loaded model's one
    index of its graph: a run builds it once."""
    from onnxaff.graph.view import GraphView

    built = []
    init = GraphView.__init__

    def counting_init(self, *args, **kwargs):
        built.append(1)
        init(self, *args, **kwargs)

    monkeypatch.setattr(GraphView, "__init__", counting_init)
    sig = analyze(residual_stage([[0.5, 0.25]] * 2), "synthetic:gaussian:n=64", blocks=["residual", "attention", "mlp"],
                  pairs=[("x", "h1")], metrics=["affinity", "nlc"], chunk_size=32, progress=False)
    assert len(sig.stages) == 1 and [s["group"] for s in sig.sites].count("pair") == 1
    assert len(built) == 1

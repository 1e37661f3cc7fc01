"""A BERT as onnxruntime's transformer optimiser fuses it (EmbedLayerNormalization → Attention): the attention
softmaxes are sites scored as the plain model's, whichever mask form the fused Attention gets, and the probe run
and synthetic data keep the fused embeddings' ids in range.

The fixtures are tests/fixtures/build_bert_optimized.py's `bert_embed_*`: the plain export, and it optimised with
the mask as EmbedLayerNormalization's mask index (1-D lengths, the "bert" default) or as the raw 2-D mask.
"""

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

import onnxaff
from onnxaff.analysis.sitelist import list_sites, sites_of
from onnxaff.graph.expand import attention
from onnxaff.graph.inputs import input_hints
from onnxaff.graph.load import from_proto, load_model
from tests.conftest import run_cli
from tests.test_affinity import brute_force_affinity

ORT = Path(__file__).parent / "fixtures" / "ort"
PLAIN = ORT / "bert_embed_plain.onnx"
FUSED = {"mask_index": ORT / "bert_embed_ort_mask_index.onnx", "raw_mask": ORT / "bert_embed_ort_raw_mask.onnx"}
ROWS, SEQ = 96, 8


def tokens(tmp_path) -> tuple[Path, dict]:
    """Right-padded examples (what a 1-D mask index can say) of 3 to 8 tokens, segments 0 and 1."""
    rng = np.random.default_rng(5)
    feeds = {"input_ids": rng.integers(0, 32, (ROWS, SEQ)), "token_type_ids": rng.integers(0, 2, (ROWS, SEQ)),
             "attention_mask": (np.arange(SEQ)[None] < rng.integers(3, SEQ + 1, (ROWS, 1))).astype(np.int64)}
    np.savez(tmp_path / "tokens.npz", **feeds)
    return tmp_path / "tokens.npz", feeds


def softmax_scores(path: Path, data: Path, chunk_size: int = 48, **options) -> list[tuple]:
    sig = onnxaff.analyze(path, str(data), chunk_size=chunk_size, metrics=["affinity"], progress=False, chunk_workers=0,
                          **options)
    return [(s["status"], s["rows"], s["metrics"]["affinity"]) for s in sig.sites if s["kind"] == "softmax"]


@pytest.mark.parametrize("form", sorted(FUSED))
def test_the_optimiser_fused_embeddings_and_attention(form):
    graph = onnx.load(FUSED[form]).graph
    ops = [n.op_type for n in graph.node]
    assert ops.count("EmbedLayerNormalization") == 1 and ops.count("Attention") == 2 and "Softmax" not in ops
    embed = next(n for n in graph.node if n.op_type == "EmbedLayerNormalization")
    masks = {n.input[3] for n in graph.node if n.op_type == "Attention"}
    assert masks == ({embed.output[1]} if form == "mask_index" else {"attention_mask_int32"})


@pytest.mark.parametrize("form", sorted(FUSED))
def test_sites_lists_the_softmaxes_ok_with_no_data_options(form, capfd):
    code, out, err = run_cli(capfd, "sites", FUSED[form])
    assert code == 0, err
    assert "4 sites in" in out and "(4 ok, 0 skipped)" in out, out
    sites = sites_of(FUSED[form]).sites  # the ranks behind the contrib ops from a synthetic probe run
    assert [(s.id, s.status) for s in sites if s.kind == "softmax"] == [("Attention_0/softmax", "ok"),
                                                                         ("Attention_1/softmax", "ok")]


@pytest.mark.parametrize("reduce", ["mean", "sample:16"])
def test_softmax_affinity_is_the_plain_models(tmp_path, reduce):
    """The same function on the same padded data: the fused kernels change the float32 rounding only (measured:
    the two softmax affinities within 1.1e-8 of the plain model's), far inside 1e-6. Both add −10000 to a padded
    key's score, a mask by its effect (graph/masks.py): a padded example is left out of the means, counted; under
    the default sample:16 each example's map has 2 heads × 8 queries = 16 positions, all drawn, and every row of a
    padded example holds a masked key, so each such example loses its 16 rows, counted."""
    data, feeds = tokens(tmp_path)
    padded = int((feeds["attention_mask"] == 0).any(axis=1).sum())
    per = 16 if reduce == "sample:16" else 1  # rows per example
    plain = softmax_scores(PLAIN, data, reduce=reduce)
    assert len(plain) == 2 and 0 < padded < ROWS
    assert all(status == "ok" and rows == per * (ROWS - padded) and entry["masked_rows"] == per * padded
               for status, rows, entry in plain)
    for form, path in FUSED.items():
        fused = softmax_scores(path, data, reduce=reduce)
        assert [r[:2] for r in fused] == [r[:2] for r in plain], form
        got, want = [r[2]["mean"] for r in fused], [r[2]["mean"] for r in plain]
        assert got == pytest.approx(want, abs=1e-6), form


def fetch(model: onnx.ModelProto, feeds: dict, *names: str) -> list[np.ndarray]:
    exposed = onnx.ModelProto.FromString(model.SerializeToString())
    exposed.graph.output.extend(h.make_tensor_value_info(n, T.FLOAT, None) for n in names)
    session = ort.InferenceSession(exposed.SerializeToString(), providers=["CPUExecutionProvider"])
    return [a.astype(np.float64) for a in session.run(list(names), feeds)]


def test_mask_index_softmax_against_the_brute_force(tmp_path):
    """The rewritten softmax's raw input and output, the padded queries and the masked keys (the kernel's −10000,
    a mask by its effect) dropped by hand in float64; an example with a padded key has a feature of no positions
    left and is left out, counted. The rows left hold no masked key: the features are well conditioned and the
    two routes agree to 5e-16 (measured), held to test_masks.py's 1e-9."""
    data, feeds = tokens(tmp_path)
    loaded = load_model(FUSED["mask_index"])
    sites = [s for s in sites_of(FUSED["mask_index"]).sites if s.kind == "softmax"]
    scores = softmax_scores(FUSED["mask_index"], data, chunk_size=512, reduce="mean")  # one affinity of all rows
    query = (feeds["attention_mask"] != 0)[:, None, :, None]
    for site, (_, rows, entry) in zip(sites, scores, strict=True):
        z, p = fetch(loaded.model, feeds, site.input, site.output)
        assert (z < -5000).any() and (z > np.finfo(np.float32).min / 2).all()  # −10000, no lowest float
        keep = np.broadcast_to(query, z.shape) & (z > -5000)
        count = keep.sum(axis=(1, 2))
        gone = (count == 0).any(axis=1)
        fx, fy = ((a * keep).sum(axis=(1, 2))[~gone] / count[~gone] for a in (z, p))
        assert rows == ROWS - gone.sum() and entry["masked_rows"] == gone.sum() > 0
        assert entry["mean"] == pytest.approx(brute_force_affinity(fx, fy), rel=1e-9)


def test_mask_index_softmax_per_position_rows_against_the_brute_force(tmp_path):
    """The default reduction, sample:16, on the same site: an example's map has 2 heads × 8 queries = 16 positions,
    all drawn (in a seeded order, which the affinity of one chunk of all rows does not see), each a row of its 8
    keys; a row holding a masked key is dropped, so an example with a padded key loses all 16 and the rows left
    are every position of the others, raw (no means)."""
    data, feeds = tokens(tmp_path)
    loaded = load_model(FUSED["mask_index"])
    sites = [s for s in sites_of(FUSED["mask_index"]).sites if s.kind == "softmax"]
    scores = softmax_scores(FUSED["mask_index"], data, chunk_size=512)  # the default reduce; one chunk of all rows
    for site, (_, rows, entry) in zip(sites, scores, strict=True):
        z, p = fetch(loaded.model, feeds, site.input, site.output)
        gone = (z < -5000).any(axis=(1, 2, 3))
        fx, fy = (a[~gone].reshape(-1, SEQ) for a in (z, p))
        assert rows == 16 * (ROWS - gone.sum()) == len(fx) and entry["masked_rows"] == 16 * gone.sum() > 0
        assert entry["mean"] == pytest.approx(brute_force_affinity(fx, fy), rel=1e-9)


# --- each mask form of the contrib ops, against onnxruntime's kernel ---

B, S, D, N = 3, 5, 8, 2
RNG = np.random.default_rng(27)
W = nh.from_array(RNG.standard_normal((D, 3 * D)).astype(np.float32), "w")
MASKS = {  # mask shape: a value for B = 3, S = L = 5 (1-D: a zero length masks every key)
    "lengths": (["B"], np.array([5, 2, 0], np.int32)),
    "end_start": (["B2"], np.array([5, 4, 3, 0, 1, 2], np.int32)),
    "2d": (["B", S], (RNG.random((B, S)) > 0.4).astype(np.int32)),
    "3d": (["B", S, S], (RNG.random((B, S, S)) > 0.4).astype(np.int32)),
}


def fused_attention(op: str, shape: list, **attrs) -> onnx.ModelProto:
    if op == "Attention":
        node = h.make_node(op, ["x", "w", "", "mask"], ["y"], domain="com.microsoft", name="a0", num_heads=N, **attrs)
    else:
        node = h.make_node(op, ["x", "x", "x", "", "mask"], ["y"], domain="com.microsoft", name="a0", num_heads=N,
                           **attrs)
    inputs = [h.make_tensor_value_info("x", T.FLOAT, ["B", S, D]), h.make_tensor_value_info("mask", T.INT32, shape)]
    graph = h.make_graph([node], "g", inputs, [h.make_tensor_value_info("y", T.FLOAT, ["B", S, D])],
                         [W] if op == "Attention" else [])
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17), h.make_opsetid("com.microsoft", 1)])


def run(model: onnx.ModelProto, feeds: dict) -> np.ndarray:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]


CASES = [(op, form, f) for op in ("Attention", "MultiHeadAttention") for form in MASKS for f in (None, -50.0)
         if not (op == "MultiHeadAttention" and form == "end_start")]  # onnxruntime's MHA refuses [2B]


@pytest.mark.parametrize(("op", "form", "filler"), CASES)
def test_mask_form_rewritten_as_the_kernel_computes(op, form, filler):
    shape, value = MASKS[form]
    m = fused_attention(op, shape, **({} if filler is None else {"mask_filter_value": filler}))
    loaded = from_proto(m)
    assert not any(attention.is_fused(n) for n in loaded.model.graph.node), loaded.notes
    feeds = {"x": RNG.standard_normal((B, S, D)).astype(np.float32), "mask": value}
    # a row whose every key is masked (length 0) is the unmasked softmax shifted by −10000: float32 rounding at
    # 1e4 (ulp 1e-3) moves the kernel's and the rewrite's weights alike, by up to ~1e-3
    tol = 2e-3 if form == "lengths" and filler is None else 1e-5
    np.testing.assert_allclose(run(loaded.model, feeds), run(m, feeds), rtol=tol, atol=tol)
    assert [(s.kind, s.status) for s in list_sites(loaded).sites] == [("softmax", "ok")]


@pytest.mark.parametrize(("shape", "why"), [(["B", 1, S, S], "4-D (Megatron) mask"), (None, "mask of unknown rank")])
def test_a_mask_form_not_rewritten_is_a_skipped_site_with_its_reason(shape, why):
    m = fused_attention("Attention", shape or [])
    if shape is None:
        m.graph.input[1].type.tensor_type.ClearField("shape")
    (site,) = list_sites(from_proto(m)).sites
    assert site.kind == "softmax" and site.status == "skipped" and why in site.reason, site.reason


def test_embed_layer_norms_ids_are_drawn_below_their_tables_rows():
    """Word, segment and position ids index the fused node's tables (inputs 2, 4, 3): the hints bound each."""
    tables = {"word": (32, 4), "position": (6, 4), "segment": (2, 4), "gamma": (4,), "beta": (4,)}
    inits = [nh.from_array(RNG.standard_normal(s).astype(np.float32), n) for n, s in tables.items()]
    node = h.make_node("EmbedLayerNormalization", ["ids", "segments", "word", "position", "segment", "gamma", "beta",
                                                   "", "positions"], ["y", "mask_index"], domain="com.microsoft")
    inputs = [h.make_tensor_value_info(n, T.INT32, ["B", 6]) for n in ("ids", "segments", "positions")]
    graph = h.make_graph([node], "g", inputs, [h.make_tensor_value_info("y", T.FLOAT, ["B", 6, 4])], inits)
    m = h.make_model(graph, opset_imports=[h.make_opsetid("", 17), h.make_opsetid("com.microsoft", 1)])
    hints = input_hints(from_proto(m).view)
    assert hints == {"ids": {"range": [0, 32]}, "segments": {"range": [0, 2]}, "positions": {"range": [0, 6]}}

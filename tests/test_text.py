"""Text data (`--data text:FILE --tokenizer tokenizer.json`, or a list of str in Python): the arrays the source
yields against the tokenizer's own encodings, JSONL fields, bad lines counted, end to end, and every bad input
one line."""

from __future__ import annotations

import json
import random
import re
import sys

import numpy as np
import pytest

import onnxaff
from onnxaff.data import model_inputs, open_source
from onnxaff.errors import ConfigError, OnnxaffError
from onnxaff.format.signature import read_signature
from tests.builders import HEADER, chain, save, with_weights
from tests.conftest import FIXTURES, one_line_error, run_cli

tokenizers = pytest.importorskip("tokenizers")

VOCAB, WIDTH, LENGTH = 96, 8, 16
WORDS = ("the a cat dog sat on mat ran fast slow red blue big small house tree bird sings under over quietly "
         "river mountain yesterday").split()
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"]


def sentences(count: int = 48, seed: int = 0) -> list[str]:
    """Sentences of 2 to 20 words: some longer than 16 tokens, so truncation shows."""
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 20))) for _ in range(count)]


def train(path, specials=SPECIALS, vocab: int = 80):
    """A WordPiece tokenizer trained on sentences(), BERT's template ([CLS] A [SEP]), saved to path."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer()
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.train_from_iterator(sentences(), trainers.WordPieceTrainer(vocab_size=vocab, special_tokens=list(specials),
                                                                   limit_alphabet=30))
    cls_, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls_), ("[SEP]", sep)])
    assert tok.get_vocab_size() <= VOCAB  # every id fits the models' embedding tables
    tok.save(str(path))
    return tok


def encoder(length: int | str = LENGTH, seed: int = 0):
    """input_ids, attention_mask, token_type_ids [N, length] int64 → embeddings (masked) → Tanh, Relu."""
    rng = np.random.default_rng(seed)
    dims = f"N, {length}"
    text = HEADER + f""" g (int64[{dims}] input_ids, int64[{dims}] attention_mask, int64[{dims}] token_type_ids)
        => (float[{dims}, {WIDTH}] y) {{
        w = Gather(emb, input_ids)
        t = Gather(typ, token_type_ids)
        e = Add(w, t)
        mf = Cast<to = 1>(attention_mask)
        m = Unsqueeze(mf, axes)
        em = Mul(e, m)
        h = MatMul(em, w1)
        a = Tanh(h)
        o = MatMul(a, w2)
        y = Relu(o)
    }}"""
    f32 = np.float32
    return with_weights(text, emb=rng.standard_normal((VOCAB, WIDTH)).astype(f32),
                        typ=rng.standard_normal((2, WIDTH)).astype(f32), axes=np.array([-1], np.int64),
                        w1=rng.standard_normal((WIDTH, WIDTH)).astype(f32),
                        w2=rng.standard_normal((WIDTH, WIDTH)).astype(f32))


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    root = tmp_path_factory.mktemp("text")
    tok = train(root / "tokenizer.json")
    lines = root / "lines.txt"
    lines.write_text("\n".join(sentences()) + "\n", encoding="utf-8")
    model = save(encoder(), root / "encoder.onnx")
    return root, tok, lines, model


def expected(tok, texts, keep: int, length: int, pad: int = 0):
    """The tokenizer's own encodings, truncated to keep and padded to length with pad."""
    tok.enable_truncation(keep)
    try:
        encs = [tok.encode(t) for t in texts]
    finally:
        tok.no_truncation()
    ids = np.array([e.ids + [pad] * (length - len(e.ids)) for e in encs])
    mask = np.array([[1] * len(e.ids) + [0] * (length - len(e.ids)) for e in encs])
    types = np.array([e.type_ids + [0] * (length - len(e.ids)) for e in encs])
    return ids, mask, types


def batches(source, size: int = 10) -> dict[str, np.ndarray]:
    parts = list(source.batches(size))
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def test_arrays_are_the_tokenizers_encodings(case):
    root, tok, lines, model = case
    inputs = model_inputs(encoder())
    source = open_source(f"text:{lines}", inputs, tokenizer=root / "tokenizer.json")
    got = batches(source)
    ids, mask, types = expected(tok, sentences(), LENGTH, LENGTH)
    assert (mask.sum(1) == LENGTH).any() and (mask.sum(1) < LENGTH).any()  # both truncated and padded rows
    np.testing.assert_array_equal(got["input_ids"], ids)
    np.testing.assert_array_equal(got["attention_mask"], mask)
    np.testing.assert_array_equal(got["token_type_ids"], types)
    assert all(a.dtype == np.int64 and a.flags.c_contiguous for a in got.values())
    assert source.example_shapes() == {n: (LENGTH,) for n in ("input_ids", "attention_mask", "token_type_ids")}
    d = source.describe()
    assert d["kind"] == "text" and d["samples"] == 48 and d["max_length"] == d["padded_to"] == LENGTH
    assert d["pad"]["id"] == 0 and d["pad"]["token"] == "[PAD]" and d["pad"]["from"] == "the [PAD] token"
    assert len(d["tokenizer"]["sha256"]) == 64 and len(d["sha256"]) == 64
    again = batches(source, size=7)  # batches are the same whatever their size and however often drawn
    assert all(np.array_equal(again[k], got[k]) for k in got)
    window = list(source.batches(5, start=10, stop=20))
    np.testing.assert_array_equal(np.concatenate([b["input_ids"] for b in window]), ids[10:20])


def test_max_length_truncates_and_the_model_length_pads(case, tmp_path):
    root, tok, lines, _ = case
    got = batches(open_source(f"text:{lines}", model_inputs(encoder()), tokenizer=str(root / "tokenizer.json"),
                              max_length=8))
    ids, mask, _ = expected(tok, sentences(), 8, LENGTH)  # 8 tokens kept, padded to the model's 16
    np.testing.assert_array_equal(got["input_ids"], ids)
    assert mask.sum(1).max() == 8
    symbolic = model_inputs(encoder(length="S"))
    source = open_source(f"text:{lines}", symbolic, tokenizer=tok)  # a Tokenizer object
    assert source.describe()["padded_to"] == 128 and source.describe()["tokenizer"]["path"] is None
    ids, _, _ = expected(tok, sentences(), 128, 128)
    np.testing.assert_array_equal(batches(source)["input_ids"], ids)
    source = open_source(f"text:{lines}", symbolic, tokenizer=tok, max_length=24, limit=5)
    assert len(source) == 5 and batches(source)["input_ids"].shape == (5, 24)


def test_pad_id_is_the_tokenizers(case, tmp_path):
    _, _, lines, _ = case
    inputs = model_inputs(encoder())
    tok = train(tmp_path / "late_pad.json", specials=["[UNK]", "[CLS]", "[SEP]", "[PAD]"])
    source = open_source(f"text:{lines}", inputs, tokenizer=tmp_path / "late_pad.json")
    got = batches(source)
    assert source.describe()["pad"]["id"] == 3
    np.testing.assert_array_equal(got["input_ids"], expected(tok, sentences(), LENGTH, LENGTH, pad=3)[0])
    tok = train(tmp_path / "no_pad.json", specials=["[UNK]", "[CLS]", "[SEP]"])
    source = open_source(f"text:{lines}", inputs, tokenizer=tmp_path / "no_pad.json")
    assert source.describe()["pad"] == {"id": 0, "token": tok.id_to_token(0), "side": "right",
                                        "from": "id 0 (the tokenizer declares no pad token)"}
    tok.enable_padding(pad_id=5, pad_token=tok.id_to_token(5))  # a padding the file declares is used
    tok.save(str(tmp_path / "declared.json"))
    got = batches(open_source(f"text:{lines}", inputs, tokenizer=tmp_path / "declared.json"))
    tok.no_padding()
    np.testing.assert_array_equal(got["input_ids"], expected(tok, sentences(), LENGTH, LENGTH, pad=5)[0])


def test_jsonl_fields_and_bad_lines_counted(case, tmp_path):
    root, tok, _, _ = case
    texts = sentences()[:6]
    rows = [json.dumps({"text": t, "body": t.upper()}) for t in texts[:3]] + [
        "{not json", "", json.dumps({"other": "x"}), json.dumps(["a list"]), json.dumps({"text": 3}),
        "   ", *[json.dumps({"text": t, "body": t.upper()}) for t in texts[3:]]]
    path = tmp_path / "rows.jsonl"
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    inputs = model_inputs(encoder())
    source = open_source(f"text:{path}", inputs, tokenizer=root / "tokenizer.json")
    np.testing.assert_array_equal(batches(source)["input_ids"], expected(tok, texts, LENGTH, LENGTH)[0])
    d = source.describe()
    assert (d["format"], d["field"], d["lines"], d["empty_lines"], d["samples"]) == ("jsonl", "text", 12, 2, 6)
    assert d["bad_lines"]["count"] == 4
    reasons = {b["line"]: b["reason"] for b in d["bad_lines"]["first"]}
    assert reasons[4].startswith("not JSON") and reasons[6] == "no field 'text'"
    assert reasons[7] == "not a JSON object (a list)" and reasons[8] == "field 'text' is not a string (a int)"
    assert source.warnings == [f"4 line(s) of rows.jsonl skipped (line 4: {reasons[4]}; line 6: no field 'text'; "
                               "line 7: not a JSON object (a list); …)"]
    assert list(source.skipped) == []  # not examples: never counted again on a resume
    body = open_source(f"text:{path}:body", inputs, tokenizer=root / "tokenizer.json")  # another field
    assert body.describe()["field"] == "body" and body.describe()["bad_lines"]["count"] == 4
    upper = [t.upper() for t in texts]
    np.testing.assert_array_equal(batches(body)["input_ids"], expected(tok, upper, LENGTH, LENGTH)[0])


def test_text_lines_skip_empty_and_undecodable_lines(case, tmp_path):
    root, tok, _, _ = case
    path = tmp_path / "mixed.txt"
    path.write_bytes(b"\xef\xbb\xbfthe cat sat\r\n\n  \nbad \xff byte\nthe dog ran")
    source = open_source(f"text:{path}", model_inputs(encoder()), tokenizer=root / "tokenizer.json")
    d = source.describe()
    assert (d["lines"], d["empty_lines"], d["samples"], d["bad_lines"]["count"]) == (5, 2, 2, 1)
    assert d["bad_lines"]["first"] == [{"line": 4, "reason": "not valid UTF-8"}]
    np.testing.assert_array_equal(batches(source)["input_ids"],
                                  expected(tok, ["the cat sat", "the dog ran"], LENGTH, LENGTH)[0])


def test_cli_end_to_end_equals_the_python_api(case, tmp_path, capfd):
    root, _, lines, model = case
    out = tmp_path / "sig.json"
    common = ("--chunk-size", 16, "--batch-size", 8, "--metrics", "affinity")
    code, _, err = run_cli(capfd, "analyze", model, "--data", f"text:{lines}", "--tokenizer",
                           root / "tokenizer.json", "--out", out, "--quiet", *common)
    assert code == 0, err
    sig = read_signature(out)
    ok = [s for s in sig.sites if s["status"] == "ok"]
    assert {s["kind"] for s in ok} == {"tanh", "relu"}
    assert all(s["metrics"]["affinity"]["status"] == "ok" for s in ok)
    assert sig.data["kind"] == "text" and sig.options["tokenizer"] == str(root / "tokenizer.json")
    api = onnxaff.analyze(model, sentences(), tokenizer=root / "tokenizer.json", chunk_size=16, batch_size=8,
                          metrics=["affinity"], progress=False)
    assert api.scores() == sig.scores() and None not in api.scores()
    assert api.data["source"] == "(48 texts given)" and api.data["tokenizer"] == sig.data["tokenizer"]
    spec = onnxaff.analyze(model, f"text:{lines}", tokenizer=root / "tokenizer.json", chunk_size=16, batch_size=8,
                           metrics=["affinity"], progress=False)
    assert spec.scores() == sig.scores()


@pytest.mark.parametrize("pack", [False, True])
def test_bert_fixture_end_to_end(case, tmp_path, capfd, pack):
    """The fixture's sequence length is 16 and most sentences are shorter: padded, each example has keys that
    padding hides from every query, which have no features, so its attention sites leave it out and say so;
    packed, every site is scored. One row per example (the mean over positions): the default's rows below."""
    root, tok, lines, _ = case
    out = tmp_path / "bert.json"
    code, _, err = run_cli(capfd, "analyze", FIXTURES / "text" / "bert_tiny.onnx", "--data", f"text:{lines}",
                           "--tokenizer", root / "tokenizer.json", "--out", out, "--chunk-size", 16,
                           "--reduce", "mean", "--metrics", "affinity", *(["--pack"] if pack else []))
    assert code == 0, err
    sig = read_signature(out)
    kinds = {s["kind"] for s in sig.sites}
    assert kinds == {"softmax", "gelu"} and all(s["status"] == "ok" for s in sig.sites)
    padded = sum(1 for t in sentences() if len(tok.encode(t).ids) < LENGTH)
    for s in sig.sites:
        entry = s["metrics"]["affinity"]
        if pack or s["kind"] == "gelu":
            assert entry["status"] == "ok" and np.isfinite(entry["mean"]) and not entry.get("masked_rows"), s
        else:
            assert entry.get("masked_rows", 0) == padded > 0, entry
            assert f"masks left out {entry['masked_rows']} of 48 rows" in err and "--pack" in err
    if pack:
        assert sig.data["packed"]["window"] == LENGTH and sig.options["pack"] is True


def test_bert_fixture_default_rows_leave_out_padding(case, tmp_path, capfd):
    """The default reduction, sample:16, on the padded fixture: a GELU's map [B, 16 tokens, C] has 16 positions,
    all drawn, and a padded token's row is left out, counted (one per padded token); an attention map [B, 2 heads,
    16 queries, 16 keys] gives 16 of its 32 rows, each holding every key, so an example with a padded key (which
    every query's row holds) loses all 16."""
    root, tok, lines, _ = case
    out = tmp_path / "bert.json"
    code, _, err = run_cli(capfd, "analyze", FIXTURES / "text" / "bert_tiny.onnx", "--data", f"text:{lines}",
                           "--tokenizer", root / "tokenizer.json", "--out", out, "--metrics", "affinity")
    assert code == 0, err
    sig = read_signature(out)
    assert sig.options["reduce"] == "sample:16"
    tokens = [min(len(tok.encode(t).ids), LENGTH) for t in sentences()]
    padded, pad_tokens = sum(n < LENGTH for n in tokens), sum(LENGTH - n for n in tokens)
    assert 0 < padded < len(tokens)
    expected = {"gelu": (sum(tokens), pad_tokens), "softmax": (16 * (len(tokens) - padded), 16 * padded)}
    for s in sig.sites:
        entry = s["metrics"]["affinity"]
        assert s["status"] == entry["status"] == "ok" and np.isfinite(entry["mean"]), s
        assert (s["rows"], entry["masked_rows"]) == expected[s["kind"]], s["id"]
        assert f"masks left out {entry['masked_rows']} of {16 * len(tokens)} rows" in err


def test_packed_windows_are_the_tokens_end_to_end(case):
    root, tok, lines, _ = case
    inputs = model_inputs(encoder())
    source = open_source(f"text:{lines}", inputs, tokenizer=root / "tokenizer.json", pack=True)
    got = batches(source)
    stream = [t for text in sentences() for t in tok.encode(text).ids]
    windows = len(stream) // LENGTH
    assert len(source) == windows and got["input_ids"].shape == (windows, LENGTH)
    assert got["input_ids"].ravel().tolist() == stream[:windows * LENGTH]
    assert got["attention_mask"].all() and not got["token_type_ids"].any()
    assert source.describe()["packed"] == {"windows": windows, "tokens": windows * LENGTH, "window": LENGTH}
    few = root / "few.txt"
    few.write_text("a cat\n", encoding="utf-8")
    with pytest.raises(OnnxaffError, match="fewer than one packed example of 16"):
        open_source(f"text:{few}", inputs, tokenizer=root / "tokenizer.json", pack=True)
    with pytest.raises(ConfigError, match="pack"):
        open_source("synthetic:gaussian", inputs, pack=True)


def test_bad_tokenizer_files_are_one_line(case, tmp_path, capfd):
    _, _, lines, model = case
    (tmp_path / "notjson.json").write_text("this is not json")
    (tmp_path / "other.json").write_text(json.dumps({"name": "a config, not a tokenizer"}))
    (tmp_path / "broken.json").write_text(json.dumps({"model": {"type": "NoSuchModel"}}))
    for path, fragment in ((tmp_path / "notjson.json", "is not a Hugging Face tokenizer.json (not JSON"),
                           (tmp_path / "other.json", "tokenizer.json (JSON without a tokenizer's \"model\")"),
                           (tmp_path / "broken.json", "is not a Hugging Face tokenizer.json ("),
                           (tmp_path / "missing.json", "tokenizer file not found")):
        line = one_line_error(run_cli(capfd, "analyze", model, "--data", f"text:{lines}", "--tokenizer", path,
                                      "--out", tmp_path / "x.json"), fragment)
        assert "--tokenizer" in line
        with pytest.raises(ConfigError, match=re.escape(fragment)) as info:
            onnxaff.analyze(model, f"text:{lines}", tokenizer=path, progress=False)
        assert info.value.field == "tokenizer" and "\n" not in str(info.value)


def test_tokenizers_not_installed_says_which_extra(case, monkeypatch, capfd, tmp_path):
    root, _, lines, model = case
    monkeypatch.setitem(sys.modules, "tokenizers", None)  # `import tokenizers` raises ImportError
    one_line_error(run_cli(capfd, "analyze", model, "--data", f"text:{lines}", "--tokenizer",
                           root / "tokenizer.json", "--out", tmp_path / "x.json"), "pip install 'onnxaff[text]'")


def test_bad_text_data_are_one_line(case, tmp_path, capfd):
    root, tok, lines, model = case
    tokenizer = root / "tokenizer.json"
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "blank.txt").write_text("\n  \n\n")
    (tmp_path / "bad.jsonl").write_text('{"x": 1}\nnope\n')
    floats = save(chain("Relu", "Tanh"), tmp_path / "floats.onnx")
    cases = [
        (model, f"text:{tmp_path / 'empty.txt'}", ("--tokenizer", tokenizer), "no text in"),
        (model, f"text:{tmp_path / 'blank.txt'}", ("--tokenizer", tokenizer), "its 3 line(s) are empty"),
        (model, f"text:{tmp_path / 'bad.jsonl'}", ("--tokenizer", tokenizer),
         "2 line(s) skipped, the first (line 1) because no field 'text'"),
        (model, f"text:{tmp_path / 'missing.txt'}", ("--tokenizer", tokenizer), "text file not found"),
        (floats, f"text:{lines}", ("--tokenizer", tokenizer), "integer input named input_ids"),
        (model, "synthetic:gaussian", ("--tokenizer", tokenizer), "--tokenizer applies to text data"),
        (model, "synthetic:gaussian", ("--max-length", 8), "--max-length applies to text data"),
        (model, f"text:{lines}", (), "text data need a tokenizer: give --tokenizer"),
        (model, f"text:{lines}", ("--tokenizer", tokenizer, "--max-length", 32),
         "--max-length 32 is longer than model input input_ids"),
        (model, f"text:{lines}", ("--tokenizer", tokenizer, "--max-length", 2), "--max-length 2 leaves no token"),
        (model, f"text:{lines}", ("--tokenizer", tokenizer, "--max-length", 0), "--max-length must be a positive"),
    ]
    for model_, data, flags, fragment in cases:
        one_line_error(run_cli(capfd, "analyze", model_, "--data", data, *flags, "--out", tmp_path / "x.json"),
                       fragment)


def test_python_api_refusals_name_fields(case):
    root, tok, _, model = case
    with pytest.raises(ConfigError, match="text data need a tokenizer: give tokenizer") as info:
        onnxaff.analyze(model, ["a cat", "a dog"], progress=False)
    assert info.value.field == "tokenizer"
    with pytest.raises(OnnxaffError, match="no text given"):
        onnxaff.analyze(model, [], tokenizer=tok, progress=False)
    with pytest.raises(OnnxaffError, match="list of str"):
        onnxaff.analyze(model, ["a cat", 3], tokenizer=tok, progress=False)
    with pytest.raises(ConfigError, match="must be a tokenizer.json path or a tokenizers.Tokenizer"):
        onnxaff.analyze(model, ["a cat"], tokenizer=42, progress=False)


def test_no_output_replaces_the_text_or_the_tokenizer(case, tmp_path, capfd):
    root, _, lines, model = case
    for out, what in ((lines, "the text file"), (root / "tokenizer.json", "the tokenizer")):
        one_line_error(run_cli(capfd, "analyze", model, "--data", f"text:{lines}", "--tokenizer",
                               root / "tokenizer.json", "--out", out), what)


def test_a_checkpoint_refuses_another_tokenizer_or_text(case, tmp_path):
    from onnxaff.analysis import open_run

    root, _, lines, model = case
    tokenizer, text = tmp_path / "tokenizer.json", tmp_path / "lines.txt"
    tokenizer.write_bytes((root / "tokenizer.json").read_bytes())
    text.write_bytes(lines.read_bytes())
    opts = dict(chunk_size=16, batch_size=8, metrics=["affinity"], progress=False, tokenizer=tokenizer)
    ckpt = tmp_path / "c.npz"
    with open_run(model, f"text:{text}", checkpoint=ckpt, **opts) as run:
        run.save()
    with open_run(model, f"text:{text}", checkpoint=ckpt, resume="always", **opts) as run:
        assert run.plan.source.describe()["tokenizer"]["path"] == str(tokenizer)  # the same: continued
    train(tokenizer, vocab=70)  # another tokenizer at the same path
    with pytest.raises(OnnxaffError, match="another data set"):
        open_run(model, f"text:{text}", checkpoint=ckpt, resume="always", **opts)
    tokenizer.write_bytes((root / "tokenizer.json").read_bytes())
    text.write_text("\n".join(sentences(seed=1)) + "\n")  # other text, as many lines
    with pytest.raises(OnnxaffError, match="another data set"):
        open_run(model, f"text:{text}", checkpoint=ckpt, resume="always", **opts)


def test_a_study_on_text_reruns_when_the_tokenizer_changes(case, tmp_path, capfd):
    root, _, lines, model = case
    tokenizer = tmp_path / "tokenizer.json"
    tokenizer.write_bytes((root / "tokenizer.json").read_bytes())
    args = ("study", model, "--data", f"text:{lines}", "--tokenizer", tokenizer, "--out", tmp_path / "st",
            "--chunk-size", 16, "--metrics", "affinity")
    for expect in ("(0 up to date", "(1 up to date", "(0 up to date"):  # the last after a new tokenizer
        code, out, err = run_cli(capfd, *args)
        assert code == 0 and expect in out + err, err
        if expect == "(1 up to date":
            train(tokenizer, vocab=70)


def test_sites_probes_with_text_data(case, tmp_path, capfd):
    """A model whose rank only a probe run settles (a dynamic Reshape) on text data: `sites` takes the text
    options as analyze does (it told the user to give --tokenizer, which it did not have)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    root, _, lines, _ = case
    ints = {"one": np.array(1, np.int64), "zero": np.array([0], np.int64), "m1": np.array([-1], np.int64)}
    nodes = [helper.make_node("Gather", ["emb", "input_ids"], ["e"]), helper.make_node("Shape", ["e"], ["sh"]),
             helper.make_node("Size", ["sh"], ["rk"]), helper.make_node("Sub", ["rk", "one"], ["rk1"]),
             helper.make_node("Unsqueeze", ["rk1", "zero"], ["end"]),
             helper.make_node("Slice", ["sh", "zero", "end"], ["head"]),
             helper.make_node("Concat", ["head", "m1"], ["t"], axis=0), helper.make_node("Reshape", ["e", "t"], ["q"]),
             helper.make_node("Tanh", ["q"], ["u"]), helper.make_node("ReduceSum", ["u"], ["y"], keepdims=0)]
    weights = [numpy_helper.from_array(np.random.default_rng(0).standard_normal((VOCAB, 4)).astype(np.float32), "emb"),
               *(numpy_helper.from_array(v, k) for k, v in ints.items())]
    graph = helper.make_graph(nodes, "dyn", [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["N", 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])], weights)
    model = tmp_path / "dyn.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), model)
    code, out, err = run_cli(capfd, "sites", model, "--data", f"text:{lines}", "--tokenizer", root / "tokenizer.json",
                             "--format", "json")
    assert code == 0, err
    (site,) = json.loads(out)
    assert site["status"] == "ok" and site["input_shape"] == ["N", 8, 4] and site["dim"] == 4

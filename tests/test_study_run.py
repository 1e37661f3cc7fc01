"""onnxaff/studies/run.py, function by function: one model's resumable analysis (`_analyse`), what a rerun redoes
(`_plan`), the checks before any model is read, the files a study writes and reads, the accuracy table.

tests/test_study.py runs whole studies through the CLI; here each private piece is called on its own, on one
small model and 64 synthetic rows (4 batches, 4 chunks), so a case takes a fraction of a second.
"""

from __future__ import annotations

import hashlib
import signal
from pathlib import Path

import pytest

import onnxaff.analysis
from onnxaff.analysis.checkpoint import is_checkpoint, load_state, save_state
from onnxaff.errors import ConfigError, Interrupted, OnnxaffError, option
from onnxaff.studies import StudyModel
from onnxaff.studies.identity import file_digest
from onnxaff.studies.run import _accuracies, _analyse, _check_run, _plan, study_inputs, study_outputs
from tests.test_scale import assert_same
from tests.test_study import write_models

DATA = "synthetic:gaussian:n=64"
OPTIONS = dict(metrics=["affinity", "cka_pooled"], chunk_size=16, batch_size=16, chunk_workers=0, progress=False)


@pytest.fixture
def model(tmp_path) -> StudyModel:
    return StudyModel("a", write_models(tmp_path / "m", names=("a",))[0])


def analyse(model, checkpoint, options=OPTIONS, every=0):
    """`_analyse` and the lines it echoed, as text."""
    lines = []
    sig = _analyse(model, DATA, dict(options), checkpoint, every, lines.append)
    return sig, [str(line) for line in lines]


@pytest.fixture
def runner_calls(monkeypatch):
    """Each run `_analyse` opens counts its runtime calls; `interrupt[0] = k` delivers a real SIGINT during call k."""
    real, calls, interrupt = onnxaff.analysis.open_run, [], [None]

    def open_run(*args, **kw):
        run = real(*args, **kw)
        original, count = run.runner.run, [0]
        calls.append(count)

        def runner(names, feed):
            count[0] += 1
            if count[0] == interrupt[0]:
                signal.raise_signal(signal.SIGINT)
            return original(names, feed)

        run.runner.run = runner
        return run

    monkeypatch.setattr(onnxaff.analysis, "open_run", open_run)  # _analyse imports it when called
    return calls, interrupt


def assert_identical(a, b):
    assert a.sites == b.sites and a.network == b.network and a.data == b.data
    assert_same(a, b, tol=0)


# --- _analyse: one model, resumable ---

def test_an_interrupted_model_continues_from_its_cursor_and_equals_an_uninterrupted_run(model, tmp_path,
                                                                                        runner_calls):
    calls, interrupt = runner_calls
    reference, lines = analyse(model, tmp_path / "ref.ckpt.npz")
    assert lines == [] and calls == [[4]]  # 64 rows in batches of 16, no checkpoint there: nothing to say
    ckpt = tmp_path / "a.ckpt.npz"
    interrupt[0] = 2
    with pytest.raises(Interrupted, match="SIGINT after 32 of 64 examples"):
        analyse(model, ckpt)
    assert is_checkpoint(ckpt) and load_state(ckpt)["cursor"] == 32
    interrupt[0] = None
    resumed, lines = analyse(model, ckpt)
    assert lines == ["    continuing from a.ckpt.npz (32 of 64 examples done)"]
    assert calls[-1] == [2]  # batches 3 and 4 only: the first two came from the checkpoint
    assert_identical(reference, resumed)


def test_a_checkpoint_of_other_options_is_noted_and_replaced(model, tmp_path):
    ckpt = tmp_path / "a.ckpt.npz"
    other = {**OPTIONS, "chunk_size": 32}
    analyse(model, ckpt, other, every=1)  # a saved state of the same model with another chunk size
    assert load_state(ckpt)["key"]["options"]["chunk_size"] == 32
    reference, _ = analyse(model, tmp_path / "ref.ckpt.npz")
    sig, lines = analyse(model, ckpt, every=1)
    assert len(lines) == 1, lines
    assert lines[0] == "    not continuing a.ckpt.npz (from other options (chunk_size)); starting over"
    assert_identical(reference, sig)  # started over with these options, nothing taken from the old state
    assert load_state(ckpt)["key"]["options"]["chunk_size"] == 16  # the saves replaced it
    _, lines = analyse(model, ckpt)
    assert lines == ["    continuing from a.ckpt.npz (64 of 64 examples done)"]


@pytest.mark.parametrize("content", [b"my own notes\n", b"", b"PK\x03\x04 not an npz"])
def test_a_file_that_is_not_a_checkpoint_is_refused_and_left_intact(model, tmp_path, content, runner_calls):
    calls, _ = runner_calls
    ckpt = tmp_path / "a.ckpt.npz"
    ckpt.write_bytes(content)
    with pytest.raises(OnnxaffError) as err:
        analyse(model, ckpt)
    assert str(err.value) == (f"{ckpt} is where the study keeps this model's checkpoint, and holds a file that is "
                              "not one; move it away or label the model otherwise (LABEL=MODEL)")
    assert ckpt.read_bytes() == content
    assert calls == []  # refused before the run is opened


def test_a_shard_part_at_the_checkpoint_path_is_refused_too(model, tmp_path):
    ckpt = tmp_path / "a.ckpt.npz"
    save_state(ckpt, {"kind": "part", "cursor": 0})
    before = ckpt.read_bytes()
    with pytest.raises(OnnxaffError, match="is where the study keeps this model's checkpoint"):
        analyse(model, ckpt)
    assert ckpt.read_bytes() == before


# --- _plan: what a rerun redoes ---

def plan(models, sig_dir, options=OPTIONS, code="code-1", force=False, data=DATA):
    digests = {m.label: file_digest(m.path) for m in models}
    return _plan(models, data, sig_dir, digests, dict(options), code, force)


def test_plan_skips_an_up_to_date_signature_and_says_why_a_stale_one_is_redone(model, tmp_path):
    sig_dir = tmp_path / "signatures"
    sig_dir.mkdir()
    first = plan([model], sig_dir)
    data, key, reason = first["a"]
    assert data == DATA and reason == "no signature yet"
    assert set(key) == {"model_sha256", "data", "options", "code", "option_values"} and key["code"] == "code-1"
    sig, _ = analyse(model, tmp_path / "a.ckpt.npz")
    sig.runtime["study"] = key
    sig.write(sig_dir / "a.json")
    assert plan([model], sig_dir)["a"] == (DATA, key, None)
    # Speed-only options do not make it stale.
    assert plan([model], sig_dir, {**OPTIONS, "chunk_workers": 1, "progress": True})["a"][2] is None
    assert plan([model], sig_dir, {**OPTIONS, "chunk_size": 32})["a"][2] == \
        f"the options changed: {option('chunk_size')} 16 → 32"
    assert plan([model], sig_dir, data="synthetic:gaussian:n=65")["a"][2] == "the data changed"
    assert plan([model], sig_dir, code="code-2")["a"][2] == "the metric code or the onnxaff version changed"
    assert plan([model], sig_dir, force=True)["a"][2] == option("force")
    del sig.runtime["study"]["option_values"]  # a signature of an older study: which options, it cannot say
    sig.write(sig_dir / "a.json")
    assert plan([model], sig_dir, {**OPTIONS, "chunk_size": 32})["a"][2] == "the options changed"
    model.path.write_bytes(model.path.read_bytes() + b"\n")  # trailing bytes: another file, parsed the same
    assert plan([model], sig_dir)["a"][2] == "the model or its weights changed"


def test_plan_marks_an_unreadable_model_and_an_unreadable_signature(model, tmp_path):
    sig_dir = tmp_path / "signatures"
    sig_dir.mkdir()
    gone = StudyModel("gone", tmp_path / "nowhere.onnx")
    own = StudyModel("own", model.path, data="synthetic:gaussian:n=32")
    (sig_dir / "a.json").write_text("{not json")
    got = plan([model, gone, own], sig_dir)
    assert got["gone"][2] == "unreadable" and got["gone"][1]["model_sha256"] is None
    assert got["a"][2].startswith("its signature is unreadable (")
    assert got["own"][0] == "synthetic:gaussian:n=32" and got["own"][1]["data"] != got["a"][1]["data"]
    assert got["own"][1]["model_sha256"] == got["a"][1]["model_sha256"]


# --- checks before any model is read ---

def test_check_run_refusals(tmp_path):
    models = [StudyModel("a", tmp_path / "a.onnx")]
    with pytest.raises(OnnxaffError, match=r"^unknown executor 'dask'; choose local or ray$"):
        _check_run(models, DATA, "dask", 0)
    with pytest.raises(ConfigError, match="the ray executor keeps no mid-model checkpoint") as err:
        _check_run(models, DATA, "ray", 5)
    assert err.value.field == "checkpoint_every"
    with pytest.raises(ConfigError, match="the study needs data: give data") as err:
        _check_run([*models, StudyModel("b", tmp_path / "b.onnx", data=DATA)], None, "local", 0)
    assert err.value.field == "data"
    with pytest.raises(ConfigError) as err:
        _check_run(models, DATA, "local", -1)
    assert err.value.field == "checkpoint_every"


def test_check_run_accepts_what_it_should(tmp_path):
    _check_run([StudyModel("a", tmp_path / "a.onnx", data=DATA)], None, "local", 0)  # each model its own data
    _check_run([StudyModel("a", tmp_path / "a.onnx")], DATA, "ray", 0)
    _check_run([StudyModel("a", tmp_path / "a.onnx")], DATA, "local", 3)


# --- what a study writes and reads ---

def test_study_outputs_name_every_file_it_writes(tmp_path):
    models = [StudyModel("a", tmp_path / "x.onnx"), StudyModel("b", tmp_path / "y.onnx")]
    out = tmp_path / "out"
    assert study_outputs(out, models) == [
        ("the study's compare.json", out / "compare.json"), ("the study's report.html", out / "report.html"),
        ("the signature of a", out / "signatures" / "a.json"), ("the signature of b", out / "signatures" / "b.json"),
        ("the checkpoint of a", out / "signatures" / "a.ckpt.npz"),
        ("the checkpoint of b", out / "signatures" / "b.ckpt.npz")]


def test_study_inputs_name_models_data_once_each_and_plugins(tmp_path):
    own_data = {"b": "z.npz", "c": "a.npz", "d": "z.npz", "e": "q.npz", "f": "c.npz"}
    models = [StudyModel(label, tmp_path / f"{label}.onnx", data=own_data.get(label)) for label in "abcdef"]
    assert study_inputs(models, "m.npz", {"plugins": ["p.py", "o.py"]}) == [
        *[(f"the model {label}", tmp_path / f"{label}.onnx") for label in "abcdef"],
        *[("the data", spec) for spec in ("a.npz", "c.npz", "m.npz", "q.npz", "z.npz")],  # once each, sorted
        ("the plugin", "p.py"), ("the plugin", "o.py")]
    own = [StudyModel("b", tmp_path / "y.onnx", data="z.npz")]  # no study data: only the model's own
    assert study_inputs(own, None, {"plugins": None}) == [("the model b", tmp_path / "y.onnx"), ("the data", "z.npz")]


# --- the accuracy table ---

def test_accuracies_by_label_or_sha256(tmp_path):
    paths = write_models(tmp_path / "m", names=("a", "b"))
    models = [StudyModel("a", paths[0]), StudyModel("b", paths[1]), StudyModel("c", paths[0], accuracy=0.5)]
    digests = {m.label: file_digest(m.path) for m in models}
    assert digests["b"] == hashlib.sha256(paths[1].read_bytes()).hexdigest()
    assert _accuracies(models, digests, None) == {"c": 0.5}  # no table: the models' own
    table = {"a": "0.7", digests["b"]: "0.8", "c": "0.25", "unused": "0.1"}
    assert _accuracies(models, digests, table) == {"a": 0.7, "b": 0.8, "c": 0.25}
    both = {"a": "0.1", digests["a"]: "0.9", "b": "0.2", "c": "0.3"}  # a label row comes before a sha256 row
    assert _accuracies(models, digests, both)["a"] == 0.1


def test_a_model_with_no_accuracy_row_is_refused(tmp_path):
    models = [StudyModel("a", Path(tmp_path / "a.onnx")), StudyModel("gone", tmp_path / "gone.onnx")]
    digests = {"a": "0" * 64, "gone": None}  # an unreadable model has no sha256 to look up
    with pytest.raises(OnnxaffError, match=r"^the accuracy file has no row for gone \(by label or sha256\)$"):
        _accuracies(models, digests, {"a": "0.7"})
    with pytest.raises(OnnxaffError, match="accuracy of a is not a number: 'high'"):
        _accuracies(models, digests, {"a": "high", "gone": "0.1"})

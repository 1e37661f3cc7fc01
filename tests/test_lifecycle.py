"""open_run and Run: the one lifecycle of a run (resume modes, the checkpoint's lock, execute, parts, the result).

Tiny inline models on synthetic data: each test says one thing about the lifecycle, not about the numbers."""

from __future__ import annotations

import numpy as np
import pytest
from onnx.parser import parse_model as parse

from onnxaff.analysis import STATE_KIND_CHECKPOINT, STATE_KIND_PART, analyze, open_run
from onnxaff.analysis.checkpoint import load_state, save_state, write_result
from onnxaff.errors import ConfigError, Interrupted, OnnxaffError
from tests.test_scale import crash_in, interrupt_after

TANH = parse('<ir_version: 8, opset_import: ["" : 17]> g (float[N, 3] x) => (float[N, 3] y) { y = Tanh(x) }')
DATA = "synthetic:gaussian:n=256"
OPTIONS = dict(metrics=["affinity", "cka"], chunk_size=64, batch_size=32, progress=False, chunk_workers=0)


def interrupted_checkpoint(path, batches: int = 3):
    """A checkpoint left by SIGINT during batch `batches` of a run."""
    with open_run(TANH, DATA, checkpoint=path, **OPTIONS) as run:
        interrupt_after(run, batches)
        with pytest.raises(Interrupted, match=f"SIGINT after {32 * batches} of 256 examples"):
            run.execute()
    return path


def test_resume_modes(tmp_path):
    ckpt = interrupted_checkpoint(tmp_path / "c.npz")
    lines = []
    with open_run(TANH, DATA, checkpoint=ckpt, resume="never", echo=lines.append, **OPTIONS) as run:
        assert run.state.cursor == 0  # starts over
    assert len(lines) == 1 and "holds an interrupted run" in lines[0] and "resume continues it" in lines[0]
    lines.clear()
    with open_run(TANH, DATA, checkpoint=ckpt, resume="auto", echo=lines.append, **OPTIONS) as run:
        assert run.state.cursor == 96
    assert lines == ["continuing from c.npz (96 of 256 examples done)"]
    with open_run(TANH, DATA, checkpoint=tmp_path / "none.npz", resume="auto", echo=lines.append, **OPTIONS) as run:
        assert run.state.cursor == 0
    with pytest.raises(OnnxaffError, match="no checkpoint to resume at"):
        open_run(TANH, DATA, checkpoint=tmp_path / "none.npz", resume="always", **OPTIONS)


def test_a_mismatched_checkpoint_is_refused_or_replaced(tmp_path):
    ckpt = interrupted_checkpoint(tmp_path / "c.npz")
    other = {**OPTIONS, "chunk_size": 32}
    with pytest.raises(OnnxaffError, match=r"from other options \(chunk_size\)"):
        open_run(TANH, DATA, checkpoint=ckpt, resume="always", **other)
    lines = []
    with open_run(TANH, DATA, checkpoint=ckpt, resume="auto", on_mismatch="restart", echo=lines.append,
                  **other) as run:
        assert run.state.cursor == 0
    assert lines == ["not continuing c.npz (from other options (chunk_size)); starting over"]


@pytest.mark.parametrize("kwargs, field", [(dict(resume="sometimes"), "resume"), (dict(resume="always"), "resume"),
                                           (dict(on_mismatch="ignore"), "on_mismatch")])
def test_bad_lifecycle_options_name_their_field(kwargs, field):
    with pytest.raises(ConfigError) as info:
        open_run(TANH, DATA, **kwargs, **OPTIONS)
    assert info.value.field == field


def test_the_checkpoint_is_locked_while_the_run_is_open(tmp_path):
    ckpt = tmp_path / "c.npz"
    with open_run(TANH, DATA, checkpoint=ckpt, **OPTIONS):
        with pytest.raises(OnnxaffError, match="the checkpoint"):
            open_run(TANH, DATA, checkpoint=ckpt, **OPTIONS)
    open_run(TANH, DATA, checkpoint=ckpt, **OPTIONS).close()  # released on close
    with pytest.raises(OnnxaffError):
        open_run(TANH, "synthetic:nonsense", checkpoint=ckpt, **OPTIONS)  # fails after taking the lock ...
    open_run(TANH, DATA, checkpoint=ckpt, **OPTIONS).close()  # ... which it gave back


def test_execute_again_after_interrupted_equals_one_run(tmp_path):
    """An API caller that catches Interrupted and calls execute() again ends with one run's numbers."""
    ckpt = tmp_path / "c.npz"
    with open_run(TANH, DATA, checkpoint=ckpt, **OPTIONS) as run:
        interrupt_after(run, 2)
        with pytest.raises(Interrupted):
            run.execute()
        assert load_state(ckpt)["cursor"] == 64
        run.execute()
        again = run.signature()
    one = analyze(TANH, DATA, **OPTIONS)
    assert again.scores("affinity") == one.scores("affinity") and again.scores("cka") == one.scores("cka")


def test_a_part_is_saved_unfinished_and_a_checkpoint_after_finish(tmp_path):
    with open_run(TANH, DATA, shard="0/2", **OPTIONS) as run:
        run.execute(finish=False)
        part = run.part_state()
    assert part["kind"] == STATE_KIND_PART and not any(s["finished"] for s in part["sites"])
    assert (part["start"], part["stop"], part["cursor"]) == (0, 128, 128)
    with open_run(TANH, DATA, checkpoint=tmp_path / "c.npz", **OPTIONS) as run:
        run.execute()
        saved = run.saved()
    assert saved["kind"] == STATE_KIND_CHECKPOINT and all(s["finished"] for s in saved["sites"])


def test_a_resumed_finished_pass_scores_nothing_again(tmp_path, monkeypatch):
    """The finished pass saved by write_result is resumed without running a batch or a metric again."""
    ckpt = tmp_path / "c.npz"
    with open_run(TANH, DATA, checkpoint=ckpt, **OPTIONS) as run:
        run.execute()
        first = run.signature()
        run.save()
    monkeypatch.setattr("onnxaff.analysis.feeder.Feeder.feed", lambda *a: pytest.fail("a batch ran again"))
    monkeypatch.setattr("onnxaff.collection.scoring.MetricScorer.submit", lambda *a: pytest.fail("a metric ran again"))
    with open_run(TANH, DATA, checkpoint=ckpt, resume="always", **OPTIONS) as run:
        run.execute()
        assert run.signature().scores("affinity") == first.scores("affinity")


def test_write_result_keeps_the_checkpoint_until_the_result_is_written(tmp_path):
    ckpt = tmp_path / "c.npz"
    with open_run(TANH, DATA, checkpoint=ckpt, **OPTIONS) as run:
        run.execute()
        seen = []
        result = write_result(run, lambda: seen.append(load_state(ckpt)["cursor"]) or "written")
    assert result == "written" and seen == [256] and not ckpt.exists()


def test_a_damaged_checkpoint_is_refused_in_one_line(tmp_path):
    ckpt = interrupted_checkpoint(tmp_path / "c.npz")
    state = load_state(ckpt)
    state["cursor"] = 10**12
    save_state(ckpt, state)
    with pytest.raises(OnnxaffError, match="is damaged") as info:
        open_run(TANH, DATA, checkpoint=ckpt, resume="always", **OPTIONS)
    assert "\n" not in str(info.value)


def test_without_a_checkpoint_a_plugin_interrupt_is_keyboard_interrupt(tmp_path):
    from onnxaff.metrics import Metric

    class Stop(Metric):
        name = "stop_now"
        description = "raises KeyboardInterrupt"

        def compute(self, chunk):
            raise KeyboardInterrupt

    run = open_run(TANH, DATA, **OPTIONS)
    run.plan.metrics[0] = Stop()
    with pytest.raises(KeyboardInterrupt):
        run.execute()
    assert np.isfinite(run.state.seconds)


def test_a_resume_keeps_the_plans_own_site_table(tmp_path):
    """The site records come from this run's plan, never from the file: a checkpoint whose records were edited
    still gives the model's sites; one edited to list no site (it once gave an empty signature) is refused as
    damaged, in one line naming the field."""
    ckpt = interrupted_checkpoint(tmp_path / "c.npz")
    state = load_state(ckpt)
    for record in state["site_records"]:
        record["id"], record["kind"] = "edited", "relu"
    save_state(ckpt, state)
    with open_run(TANH, DATA, checkpoint=ckpt, resume="always", **OPTIONS) as run:
        run.execute()
        sig = run.signature()
    plain = analyze(TANH, DATA, **OPTIONS).sites
    assert [(s["id"], s["kind"]) for s in sig.sites] == [(s["id"], s["kind"]) for s in plain] != []
    for damage, why in ([], "site_records: no record of site 0"), ([{"index": 0}], "site_records: expected a list"):
        state["site_records"] = damage
        save_state(ckpt, state)
        with pytest.raises(OnnxaffError, match=why):
            open_run(TANH, DATA, checkpoint=ckpt, resume="always", **OPTIONS)


def test_a_batch_that_fails_in_the_runtime_leaves_a_whole_state(tmp_path):
    """The cursor moves only past batches the collectors took: a runtime error in batch 3 leaves a state that
    saves, passes the counter checks and resumes to one run's numbers."""
    ckpt = tmp_path / "c.npz"
    with open_run(TANH, DATA, checkpoint=ckpt, **OPTIONS) as run:
        crash_in(run, 3, "out of memory in the runtime")
        with pytest.raises(RuntimeError):
            run.execute()
        assert (run.state.cursor, run.state.used) == (64, 64)
        run.save()
    resumed = analyze(TANH, DATA, checkpoint=ckpt, resume=True, **OPTIONS)
    assert resumed.scores("affinity") == analyze(TANH, DATA, **OPTIONS).scores("affinity")


def test_a_score_outside_its_metrics_range_in_a_checkpoint_is_refused(tmp_path):
    """An edited score would end in the signature (whose schema then refuses the file): refused at the resume."""
    ckpt = interrupted_checkpoint(tmp_path / "c.npz", batches=5)
    state = load_state(ckpt)
    assert state["sites"][0]["values"]["affinity"]
    state["sites"][0]["values"]["affinity"][0] = -1.0
    save_state(ckpt, state)
    with pytest.raises(OnnxaffError, match=r"is damaged: sites\[0\]\.values\.affinity: -1\.0 is outside"):
        open_run(TANH, DATA, checkpoint=ckpt, resume="always", **OPTIONS)


def test_the_end_of_data_scoring_has_a_progress_line_of_its_own(capsys):
    """Nothing silent after 100 % of the data: the sites' end-of-data scores count on a second line."""
    analyze(TANH, DATA, **{**OPTIONS, "progress": True})
    err = capsys.readouterr().err.splitlines()
    data = max(k for k, line in enumerate(err) if line.startswith("analyze ["))
    score = [k for k, line in enumerate(err) if line.startswith("score [") and "1/1 sites" in line]
    assert score and min(score) > data, err

"""AnalysisConfig: one validated carrier of the options; its errors name the field, the CLI renders the flag.
RunState: the saved dict round-trips; a metric whose code changed (plugin file or entry point) is refused by --resume
and by merge."""

import os

import numpy as np
import onnx
import pytest

import onnxaff
from onnxaff.analysis import AnalysisConfig, RunState, open_run
from onnxaff.errors import ConfigError, OnnxaffError
from tests.conftest import one_line_error, parse, run_cli

TANH = parse('<ir_version: 8, opset_import: ["" : 17]> g (float[N, 2] x) => (float[N, 2] y) { y = Tanh(x) }')
DATA = "synthetic:gaussian:n=256"

BAD = [
    ("metrics", []), ("chunk_size", 1), ("chunk_size", 2.5), ("batch_size", 0), ("limit", 0), ("seed", "one"),
    ("chunk_workers", -1), ("threads", 0), ("reduce", "median"), ("reduce_in", "gpu"), ("device", "tpu"),
    ("input_shapes", {"x": (0, 3)}), ("pairs", [("a",)]), ("shard", "3/3"), ("shard", "x"),
    ("nlc_directions", "none"), ("nlc_directions", 0),
]


@pytest.mark.parametrize("field,value", BAD)
def test_each_bad_field_is_named(field, value):
    with pytest.raises(ConfigError) as info:
        AnalysisConfig(**{field: value})
    exc = info.value
    assert exc.field == field and field in str(exc) and "--" not in str(exc)
    assert "--flag" in exc.render(lambda f: "--flag") and "\n" not in str(exc)


def test_normalised_once():
    c = AnalysisConfig(metrics=["affinity"], plugins=["p.py"], pairs=[["a", "b"]], blocks=["mlp"], shard="1/3",
                       nlc_directions=" ALL ", input_shapes={"x": [3, 4]})
    assert c.metrics == ("affinity",) and c.plugins == (os.path.abspath("p.py"),) and c.pairs == (("a", "b"),)
    assert c.blocks == ("mlp",) and c.shard == (1, 3) and c.nlc_directions == "all"
    assert c.input_shapes == {"x": (3, 4)} and AnalysisConfig(nlc_directions="4").nlc_directions == 4
    assert AnalysisConfig.of(c) is c and AnalysisConfig.of(c, chunk_size=64).chunk_size == 64
    assert type(AnalysisConfig(chunk_size=np.int64(64)).chunk_size) is int  # recorded in JSON
    options = c.signature_options(batch_size=32, metrics=list(c.metrics))
    assert options["metrics"] == ["affinity"] and options["batch_size"] == 32
    assert options["pairs"] == [["a", "b"]] and options["nlc_directions"] == "all"
    assert AnalysisConfig().metrics is None  # the declared defaults, resolved with the registry
    assert "nlc_directions" not in AnalysisConfig().signature_options(64, ["m"])  # default runs record what they did


def test_analyze_takes_a_config(tmp_path):
    config = AnalysisConfig(metrics=("affinity",), chunk_size=64, batch_size=32, progress=False)
    by_config = onnxaff.analyze(TANH, DATA, config=config)
    by_keywords = onnxaff.analyze(TANH, DATA, metrics=["affinity"], chunk_size=64, batch_size=32, progress=False)
    assert by_config.scores("affinity") == by_keywords.scores("affinity")
    assert by_config.options == by_keywords.options == config.signature_options(32, ["affinity"])
    replaced = onnxaff.analyze(TANH, DATA, config=config, chunk_size=128)  # keywords replace the config's fields
    assert replaced.options["chunk_size"] == 128


def test_cli_renders_the_flag(capfd, tmp_path):
    onnx.save(TANH, tmp_path / "m.onnx")
    code, _, err = run_cli(capfd, "analyze", str(tmp_path / "m.onnx"), "--data", DATA, "--chunk-size", "1",
                           "--out", str(tmp_path / "s.json"), "--quiet")
    assert code == 2 and err.strip().startswith("onnxaff: error: --chunk-size must be") and "chunk_size" not in err


def test_run_state_round_trips():
    run = open_run(TANH, DATA, metrics=["affinity", "nlc"], chunk_size=64, batch_size=32, progress=False)
    run.execute(finish=False)
    saved = run.part_state()
    state = RunState.from_state(saved)
    again = state.to_state()
    assert set(again) == set(saved) and again["cursor"] == saved["cursor"] == 256
    assert np.array_equal(again["sites"][0]["buffer"]["size"], saved["sites"][0]["buffer"]["size"])
    sig = state.to_signature(*state.metrics())
    assert sig.scores("affinity") == run.signature().scores("affinity")


PLUGIN = """from onnxaff.metrics import Metric
class Const(Metric):
    name = 'const'
    description = 'a constant'
    def compute(self, chunk):
        return {value}
"""


def test_a_plugin_edited_before_resume_is_refused(tmp_path):
    plugin = tmp_path / "const_metric.py"
    plugin.write_text(PLUGIN.format(value=1.0))
    options = dict(metrics=["affinity", "const"], plugins=[str(plugin)], chunk_size=64, batch_size=32, progress=False)
    ckpt = tmp_path / "run.ckpt.npz"
    first = open_run(TANH, DATA, **options)
    first.execute(finish=False)
    first.save(ckpt)
    open_run(TANH, DATA, checkpoint=ckpt, resume="always", **options).close()  # the same file: accepted
    plugin.write_text(PLUGIN.format(value=2.0))
    with pytest.raises(OnnxaffError, match=f"another version of the plugin {plugin}") as info:
        open_run(TANH, DATA, checkpoint=ckpt, resume="always", **options)
    assert "\n" not in str(info.value)


def test_resume_reads_the_state_through_run_state(tmp_path, monkeypatch):
    """A resume reads the saved dict with RunState.from_state (the reader merge and Ray use), checked against the
    live state of the run; the collectors take the run's site labels, and the resumed run's numbers are the saved
    run's."""
    options = dict(metrics=["affinity", "nlc"], chunk_size=64, batch_size=32, progress=False)
    ckpt = tmp_path / "run.ckpt.npz"
    first = open_run(TANH, DATA, **options)
    first.execute(finish=False)
    first.save(ckpt)
    read, from_state = [], RunState.from_state.__func__
    fresh = []
    monkeypatch.setattr(RunState, "from_state", classmethod(
        lambda cls, d, *args, **kwargs: read.append(kwargs.get("live")) or from_state(cls, d, *args, **kwargs)))
    from onnxaff.analysis.feeder import Feeder

    make = Feeder.fresh_state
    monkeypatch.setattr(Feeder, "fresh_state", lambda self: fresh.append(make(self)) or fresh[-1])
    again = open_run(TANH, DATA, checkpoint=ckpt, resume="always", **options)
    assert read == fresh and again.state is not fresh[0]
    assert [st.label for st in again.state.sites] == [st.label for st in fresh[0].sites] != [""]
    assert (again.state.cursor, again.state.used, again.state.seconds) == (256, 256, first.state.seconds)
    assert again.signature().to_dict()["sites"] == first.signature().to_dict()["sites"]
    again.close()


def test_an_entry_point_metric_changed_before_resume_is_refused(tmp_path, monkeypatch):
    """A built-in (or pip-installed) metric upgraded between the checkpoint and --resume: its module's sha256 is in
    the key, so the run is refused in one line naming the metric (before: only --plugin files were recorded)."""
    from onnxaff.metrics import Registered

    options = dict(metrics=["affinity"], chunk_size=64, batch_size=32, progress=False)
    ckpt = tmp_path / "run.ckpt.npz"
    first = open_run(TANH, DATA, **options)
    first.execute(finish=False)
    first.save(ckpt)
    assert first.state.key["metrics"] == {"affinity": first.plan.registry["affinity"].fingerprint}
    open_run(TANH, DATA, checkpoint=ckpt, resume="always", **options).close()  # the same code: accepted
    upgraded = Registered.fingerprint.fget
    monkeypatch.setattr(Registered, "fingerprint", property(
        lambda r: "0" * 64 if r.cls.name == "affinity" else upgraded(r)))
    with pytest.raises(OnnxaffError, match=f"checkpoint {ckpt} is from another version of metric affinity") as info:
        open_run(TANH, DATA, checkpoint=ckpt, resume="always", **options)
    assert "\n" not in str(info.value)


def test_a_plugin_edited_between_the_shards_and_the_merge_is_refused(tmp_path, capfd):
    """Both shards run with one version of a --plugin metric, the file edited before `merge`: the merge loads the
    metrics again and refuses, naming the metric (before: it merged, scoring what was left with the new code)."""
    model, plugin = tmp_path / "m.onnx", tmp_path / "const_metric.py"
    onnx.save(TANH, model)
    plugin.write_text(PLUGIN.format(value=1.0))
    parts = [tmp_path / f"part{i}.json" for i in range(2)]
    for i, out in enumerate(parts):
        code, _, err = run_cli(capfd, "analyze", model, "--data", DATA, "--metrics", "affinity,const", "--plugin",
                               plugin, "--chunk-size", 64, "--batch-size", 32, "--shard", f"{i}/2", "--out", out,
                               "--quiet")
        assert code == 0, err
    code, _, err = run_cli(capfd, "merge", *parts, "--out", tmp_path / "merged.json", "--quiet")
    assert code == 0, err  # the same code: merged
    plugin.write_text(PLUGIN.format(value=2.0))
    one_line_error(run_cli(capfd, "merge", *parts, "--out", tmp_path / "again.json", "--quiet"),
                   "the part 0/2 is from another version of metric const, not the code present now")
    assert not (tmp_path / "again.json").exists()


def test_parts_from_two_versions_of_a_metric_are_not_merged(tmp_path, monkeypatch):
    """A metric upgraded between two shards' runs: the parts' keys differ on that metric alone."""
    from onnxaff.metrics import Registered
    from onnxaff.results.executors import shard_state
    from onnxaff.results.shards import merge_states

    config = AnalysisConfig(metrics=("affinity",), chunk_size=32, batch_size=16, progress=False)
    first = shard_state(TANH, DATA, (0, 2), config)
    upgraded = Registered.fingerprint.fget
    monkeypatch.setattr(Registered, "fingerprint", property(
        lambda r: "0" * 64 if r.cls.name == "affinity" else upgraded(r)))
    second = shard_state(TANH, DATA, (1, 2), config)
    monkeypatch.undo()  # the first part's code is the code present now
    with pytest.raises(OnnxaffError, match=r"parts cannot be merged: one is from another version of metric affinity"):
        merge_states([first, second])


def test_run_state_merge_of_shards_is_one_run():
    """Parts merged by RunState.merge, finished once: the uninterrupted run's numbers, chunk for chunk."""
    from onnxaff.collection.scoring import MetricScorer
    from onnxaff.results.executors import shard_state

    config = AnalysisConfig(metrics=("affinity", "cka", "nlc"), chunk_size=32, batch_size=16, progress=False)
    parts = [RunState.from_state(shard_state(TANH, DATA, (i, 3), config)) for i in range(3)]
    total = parts[0]
    metrics, track_metrics = total.metrics()
    with MetricScorer(0) as scorer:
        for part in parts[1:]:
            total.merge(part, metrics, track_metrics, scorer)
    merged = total.to_signature(metrics, track_metrics)
    one = onnxaff.analyze(TANH, DATA, config=config)
    for metric in ("affinity", "cka"):
        assert [s["metrics"][metric]["values"] for s in merged.sites] == [s["metrics"][metric]["values"]
                                                                          for s in one.sites]
    # The shards' float64 sums are added in another grouping than one run's: equal to the last bits only by luck.
    for key in ("examples", "form", "status", "step"):
        assert merged.network["nlc"][key] == one.network["nlc"][key]
    for name, value in one.network["nlc"]["values"].items():
        assert merged.network["nlc"]["values"][name] == pytest.approx(value, rel=1e-12)
    assert merged.data["samples"] == one.data["samples"] == 256
    assert merged.data["merged_from"]["shards"] == 3


@pytest.mark.parametrize("field,value", [("layout", "bogus"), ("blocks", "bogus"), ("progress", "no"),
                                         ("images", "abc")])
def test_more_fields_checked_up_front(field, value):
    with pytest.raises(ConfigError) as info:
        AnalysisConfig(**{field: value})
    assert info.value.field == field


def test_one_text_is_one_item_and_blocks_are_normalised():
    c = AnalysisConfig(plugins="x.py", blocks="all")
    assert c.plugins == (os.path.abspath("x.py"),) and c.blocks == ("residual", "attention", "mlp")
    assert AnalysisConfig(blocks=["mlp", "residual"]).blocks == ("mlp", "residual")


def test_a_metric_named_twice_is_refused():
    with pytest.raises(ConfigError, match="names 'cka' twice"):
        onnxaff.analyze(TANH, DATA, metrics=["cka", "cka"], chunk_size=64, progress=False)


def _module_names() -> list[str]:
    import pkgutil

    return [m.name for m in pkgutil.walk_packages(onnxaff.__path__, "onnxaff.") if not m.name.endswith("__main__")]


# Each name imported with no onnxaff module loaded: what a fresh interpreter sees of onnxaff (a cycle among
# its modules fails the same way), while numpy, onnx and scipy stay loaded, so one process does all (2 s, not 60+).
_IMPORT_EACH_ALONE = """
import importlib, sys
for n in sys.argv[1:]:
    for loaded in [m for m in sys.modules if m == "onnxaff" or m.startswith(("onnxaff.", "onnxaff_"))]:
        del sys.modules[loaded]
    try:
        importlib.import_module(n)
    except Exception as exc:
        sys.exit(f"{n}: {type(exc).__name__}: {exc}")
"""


def test_every_module_imports_on_its_own():
    """Each module imports with no other onnxaff module loaded (a cycle, network -> analysis -> network, once
    broke one)."""
    import subprocess
    import sys

    names = _module_names()
    procs = [subprocess.Popen([sys.executable, "-c", _IMPORT_EACH_ALONE, *names[i::2]], stderr=subprocess.PIPE,
                              text=True) for i in range(2)]  # two halves side by side: two cores
    for proc in procs:
        _, err = proc.communicate()
        assert proc.returncode == 0, err[-800:]


@pytest.mark.slow
def test_every_module_imports_in_a_fresh_interpreter():
    """The same, one interpreter per module (a minute on 2 cores)."""
    import subprocess
    import sys

    code = "import importlib, sys\nfor n in sys.argv[1:]:\n    importlib.import_module(n)\n"
    for name in _module_names():
        r = subprocess.run([sys.executable, "-c", code, name], capture_output=True, text=True)
        assert r.returncode == 0, (name, r.stderr[-500:])


@pytest.mark.parametrize("field, value", [("threads", 99999999999999), ("limit", 10**20), ("batch_size", 2**40),
                                          ("seed", 2**70)])
def test_whole_numbers_past_what_the_runtime_holds_are_refused_up_front(field, value):
    """A manifest or a Python caller could give them: onnxruntime (threads) and numpy (limit) failed with a
    traceback per model (review)."""
    with pytest.raises(ConfigError, match="out of range") as info:
        AnalysisConfig(**{field: value})
    assert info.value.field == field


def test_a_ragged_constant_is_a_config_error():
    with pytest.raises(ConfigError, match="expected a number, a .npy file or a numeric array"):
        AnalysisConfig(constants={"x": [[1, 2], [3]]})

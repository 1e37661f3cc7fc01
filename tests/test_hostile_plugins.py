"""Hostile metric plugins: stuck, vandal, lying, exiting, interrupting and chatty ones cannot hurt a run."""

import json
import math
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import onnx
import pytest

import onnxaff
from onnxaff.analysis.checkpoint import load_state
from onnxaff.collection.scoring import check_value
from onnxaff.errors import OnnxaffError
from onnxaff.format.signature import read_signature
from onnxaff.metrics import Metric, registry, resolve
from tests.builders import chain, write_plugin
from tests.conftest import cli_process, run_cli, start_cli, stderr_once_ended, wait_for_file

# A well-behaved metric, and the same metric turned hostile after its second call when STUCK_MARK (HOSTILE) is
# set: the file stays as it is for --resume, which refuses a plugin file edited since the checkpoint.
PROBE = '''
    class Probe(Metric):
        name = "probe"
        range = (float("-inf"), float("inf"))
        needs = "chunk"

        def compute(self, chunk):
            return float(np.mean(np.abs(chunk.y - chunk.x)))
'''
STUCK = PROBE.replace("        def compute(self, chunk):\n", '''        calls = 0

        def compute(self, chunk):
            Probe.calls += 1
            if Probe.calls >= 3 and "STUCK_MARK" in os.environ:
                open(os.environ["STUCK_MARK"], "a").close()
                if os.environ["STUCK_HOW"] == "sleep":
                    threading.Event().wait()  # blocks in C, forever
                while True:  # holds the GIL in pure Python, forever
                    pass
''')
RAISES_CTRL_C = PROBE.replace("        def compute(self, chunk):\n", '''        calls = 0

        def compute(self, chunk):
            Probe.calls += 1
            if Probe.calls == 5 and "HOSTILE" in os.environ:
                raise KeyboardInterrupt
''')


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = tmp_path_factory.mktemp("model") / "m.onnx"
    onnx.save(chain("Relu", "Tanh", width=8), path)
    return path


def analyse_in_process(capfd, args, out, *extra):
    """A well-behaved run (the reference, or the resume), in this process: one interpreter start less."""
    code, _, err = run_cli(capfd, "analyze", *args, "--out", out, *extra)
    assert code == 0, err
    return out


def values(sig, metric):
    return [s["metrics"][metric].get("values") for s in sig.sites]


# --- a stuck plugin and Ctrl-C ---

@pytest.mark.parametrize("workers, how", [(0, "sleep"), pytest.param(2, "spin", marks=pytest.mark.slow)])
def test_ctrl_c_stops_a_stuck_plugin_saves_and_resume_equals_a_clean_run(model, tmp_path, capfd, workers, how):
    path = tmp_path / "probe.py"
    args = [model, "--data", "synthetic:gaussian:n=2048", "--metrics", "affinity,cka,probe,r2_heldout",
            "--chunk-size", 64,
            "--batch-size", 16, "--plugin", path, "--chunk-workers", workers, "--quiet"]
    write_plugin(path, STUCK)  # well-behaved without STUCK_MARK
    ref = analyse_in_process(capfd, args, tmp_path / "ref.json")
    out, mark = tmp_path / "sig.json", tmp_path / "stuck"
    env = dict(os.environ, STUCK_MARK=str(mark), STUCK_HOW=how)
    proc = start_cli("analyze", *args, "--out", out, stdout=subprocess.PIPE, env=env)
    wait_for_file(proc, mark)
    assert mark.exists(), proc.communicate()
    time.sleep(0.3)  # the loop is now waiting on the stuck chunk
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)  # one Ctrl-C is enough
    err = stderr_once_ended(proc, "SIGINT with a stuck plugin")
    took = time.monotonic() - sent
    print(f"stopped {took:.2f} s after SIGINT ({how}, {workers} workers)")
    assert took < 5, took
    assert proc.returncode == 130, err
    assert err.strip().count("\n") == 0 and err.startswith("onnxaff: interrupted: SIGINT after"), err
    assert not out.exists()
    unscored = [len(st["unscored"]) for st in load_state(tmp_path / "sig.json.ckpt.npz")["sites"]]
    print(f"chunks saved unscored per site: {unscored}")
    assert sum(unscored) >= 1  # at least the stuck chunk: scored again on resume
    analyse_in_process(capfd, args, out, "--resume")  # the same plugin file: an edited one is refused
    a, b = read_signature(ref), read_signature(out)
    for metric in ("affinity", "cka", "probe", "r2_heldout"):
        assert values(a, metric) == values(b, metric)  # bit for bit: the unscored chunks were scored on resume
        assert all(len(v) == 32 - (metric == "r2_heldout") for v in values(b, metric))


POOLED = (PROBE.replace("class Probe(", "class ProbePooled(").replace('"probe"', '"probe_pooled"')
          .replace('"chunk"', '"moments"').replace("np.mean(np.abs(chunk.y - chunk.x))", "np.trace(chunk.cov_xy())"))
STUCK_POOLED = POOLED.replace("        def compute(self, chunk):\n", '''        def compute(self, chunk):
            if "STUCK_MARK" in os.environ:
                open(os.environ["STUCK_MARK"], "a").close()
                threading.Event().wait()
''')
STUCK_LAST = PROBE.replace("        def compute(self, chunk):\n", '''        calls = 0

        def compute(self, chunk):
            Probe.calls += 1
            if Probe.calls == 16 and "STUCK_MARK" in os.environ:  # the last chunk of the run
                open(os.environ["STUCK_MARK"], "a").close()
                threading.Event().wait()
''')


@pytest.mark.parametrize("stuck, workers, shard", [(PROBE + STUCK_POOLED, 0, []), (STUCK_LAST + POOLED, 2, []),
                                                   pytest.param(STUCK_LAST + POOLED, 2, ["--shard", "0/1"],
                                                                marks=pytest.mark.slow)])
def test_ctrl_c_while_the_end_of_the_data_is_scored_saves_too(model, tmp_path, capfd, stuck, workers, shard):
    """The batches are done; the last chunks or the pooled metrics are being scored when Ctrl-C comes."""
    path = tmp_path / "probe.py"
    args = [model, "--data", "synthetic:gaussian:n=512", "--metrics", "affinity,cka_pooled,probe,probe_pooled",
            "--chunk-size", 64, "--batch-size", 32, "--plugin", path, "--chunk-workers", workers, "--quiet", *shard]
    write_plugin(path, stuck)  # well-behaved without STUCK_MARK
    ref = analyse_in_process(capfd, args, tmp_path / "ref.json")
    out, mark = tmp_path / "sig.json", tmp_path / "stuck"
    proc = start_cli("analyze", *args, "--out", out, env=dict(os.environ, STUCK_MARK=str(mark)))
    wait_for_file(proc, mark)
    assert mark.exists(), proc.communicate()
    time.sleep(0.3)
    proc.send_signal(signal.SIGINT)
    err = stderr_once_ended(proc, "SIGINT with a stuck plugin at the end of the data")
    assert proc.returncode == 130 and err.startswith("onnxaff: interrupted: SIGINT after 512 of 512"), err
    analyse_in_process(capfd, args, out, "--resume")
    a, b = read_signature(ref), read_signature(out)
    for metric in ("affinity", "cka_pooled", "probe", "probe_pooled"):
        assert values(a, metric) == values(b, metric) and all(values(b, metric)), metric


def test_keyboard_interrupt_raised_by_a_plugin_is_ctrl_c_with_the_checkpoint(model, tmp_path, capfd):
    path = tmp_path / "probe.py"
    args = [model, "--data", "synthetic:gaussian:n=2048", "--metrics", "affinity,probe", "--chunk-size", 64,
            "--batch-size", 16, "--plugin", path, "--quiet"]
    write_plugin(path, RAISES_CTRL_C)  # well-behaved without HOSTILE
    ref = analyse_in_process(capfd, args, tmp_path / "ref.json")
    out = tmp_path / "sig.json"
    r = cli_process("analyze", *args, "--out", out, timeout=60,  # a KeyboardInterrupt that escaped would stop pytest
                    env=dict(os.environ, HOSTILE="1"))
    assert r.returncode == 130, r.stderr
    assert r.stderr.strip().count("\n") == 0 and r.stderr.startswith("onnxaff: interrupted: SIGINT after"), r.stderr
    assert (tmp_path / "sig.json.ckpt.npz").exists()
    analyse_in_process(capfd, args, out, "--resume")
    a, b = read_signature(ref), read_signature(out)
    assert values(a, "probe") == values(b, "probe") and values(a, "affinity") == values(b, "affinity")


# --- metrics cannot change each other's inputs ---

# Each writes into what it was given, its own way: a chunk, a pair of chunks, the pooled moments, in place.
ATTACKS = [  # (class, name, needs, argument, the write)
    ("Vandal", "vandal", "chunk", "chunk", "chunk.x[...] = chunk.y  # what made affinity 0.67 -> 1.00"),
    ("VandalPair", "vandal_pair", "chunk_pair", "pair", "pair[1].y *= 0"),
    ("VandalPooled", "vandal_pooled", "moments", "m", "m.m_xx[...] = m.m_yy"),
    ("VandalSneaky", "vandal_sneaky", "chunk", "chunk", "np.exp(chunk.y, out=chunk.y)"),
]


def plugin_source(attacks) -> str:
    """One metric class per attack: it does the write, then scores 0.5."""
    return "".join(f'''
class {cls}(Metric):
    name = "{name}"
    range = (0.0, 1.0)
    needs = "{needs}"

    def compute(self, {arg}):
        {write}
        return 0.5
''' for cls, name, needs, arg, write in attacks)


VANDALS = plugin_source(ATTACKS)


@pytest.mark.parametrize("workers", [0, 2])
def test_a_metric_writing_into_its_input_changes_no_other_metric(model, tmp_path, workers):
    path = write_plugin(tmp_path / "vandal.py", VANDALS)
    clean = ["affinity", "cka", "r2_heldout", "cka_pooled", "r2_pooled"]
    kw = dict(data="synthetic:gaussian:n=512", chunk_size=64, batch_size=32, progress=False, chunk_workers=workers)
    ref = onnxaff.analyze(str(model), metrics=clean, **kw)
    hostile = [name for _, name, *_ in ATTACKS]
    sig = onnxaff.analyze(str(model), metrics=hostile + clean, plugins=[path], **kw)
    for metric in clean:
        assert values(sig, metric) == values(ref, metric), metric
        assert all(s["metrics"][metric]["status"] == "ok" for s in sig.sites)
    for s in sig.sites:
        for metric in hostile:
            entry = s["metrics"][metric]
            assert entry["status"] == "error" and "read-only" in entry["error"], entry
    affinity = [s["metrics"]["affinity"]["mean"] for s in sig.sites]
    assert max(affinity) < 0.99, affinity  # a vandalised chunk (X = Y) would score 1


# Past the read-only flag: through `.base`, by setting the flag back, by replacing a frozen field. Each metric gets
# its own copy, so these change only the vandal's own input (they may succeed: nobody else sees it).
SNEAKY = [  # (class, name, needs, argument, the write)
    ("ThroughBase", "through_base", "chunk", "chunk", "chunk.x.base[...] = 0"),
    ("FlagBack", "flag_back", "chunk", "chunk", "chunk.y.flags.writeable = True\n        chunk.y[...] = 1"),
    ("Replace", "replace", "chunk", "chunk", "object.__setattr__(chunk, 'x', chunk.y)"),
    ("PairBase", "pair_base", "chunk_pair", "pair", "pair[0].x.base[...] = 0"),
    ("PooledBase", "pooled_base", "moments", "m", "m.m_xx.base[...] = 0\n        object.__setattr__(m, 'n', 1)"),
]


@pytest.mark.parametrize("workers", [0, 2])
def test_a_metric_writing_past_the_read_only_flag_changes_no_other_metric(model, tmp_path, workers):
    path = write_plugin(tmp_path / "sneaky.py", plugin_source(SNEAKY))
    clean = ["affinity", "cka", "r2_heldout", "cka_pooled", "r2_pooled"]
    kw = dict(data="synthetic:gaussian:n=512", chunk_size=64, batch_size=32, progress=False, chunk_workers=workers)
    ref = onnxaff.analyze(str(model), metrics=clean, **kw)
    sig = onnxaff.analyze(str(model), metrics=[name for _, name, *_ in SNEAKY] + clean, plugins=[path], **kw)
    for metric in clean:
        assert values(sig, metric) == values(ref, metric), metric


# --- scores are checked before they are stored ---

LIARS = '''
    def liar(metric_name, value, low=0.0, high=1.0):
        class Liar(Metric):
            name = metric_name
            range = (low, high)
            needs = "chunk"

            def compute(self, chunk):
                return value
        return Liar

    Text = liar("text", "0.5")
    Flag = liar("flag", True)
    Nothing = liar("nothing", None)
    NotANumber = liar("nan", float("nan"))
    TooBig = liar("too_big", 5.0)
    TooSmall = liar("too_small", -0.25)
    Vector = liar("vector", np.array([0.5, 0.5]))
    Fine = liar("fine", np.float32(0.25))
    Rounding = liar("rounding", 1.0 + 2e-16)
'''


def test_scores_are_validated_before_they_are_stored(model, tmp_path):
    path = write_plugin(tmp_path / "liars.py", LIARS)
    names = ["text", "flag", "nothing", "nan", "too_big", "too_small", "vector", "fine", "rounding"]
    sig = onnxaff.analyze(str(model), data="synthetic:gaussian:n=128", metrics=["affinity", *names], chunk_size=64,
                          plugins=[path], progress=False)
    for s in sig.sites:
        m = s["metrics"]
        assert m["affinity"]["status"] == "ok"
        errors = {n: m[n].get("error", "") for n in names if m[n]["status"] == "error"}
        assert errors.keys() == {"text", "flag", "nothing", "nan", "too_big", "too_small", "vector"}, m
        assert all(m[n]["mean"] is None for n in errors)
        assert "str '0.5', not a number" in errors["text"] and "bool True" in errors["flag"]
        assert "NoneType" in errors["nothing"] and "returned nan" in errors["nan"]
        assert errors["too_big"] == "ValueError: out of range [0, 1]: 5.0"
        assert errors["too_small"] == "ValueError: out of range [0, 1]: -0.25"
        assert m["fine"]["values"] == [0.25, 0.25] and m["rounding"]["mean"] == 1.0 + 2e-16


def test_check_value_bounds():
    class M(Metric):
        name, range = "m", (1.0, float("inf"))

    assert check_value(M(), 1e300) == 1e300 and check_value(M(), 1 - 1e-12) == 1 - 1e-12
    assert check_value(M(), np.array(2.0)) == 2.0
    for bad in (0.5, float("inf"), -math.inf, "2", b"2", 2j, [2.0]):
        with pytest.raises((TypeError, ValueError)):
            check_value(M(), bad)


# --- declared attributes are checked at load time ---

@pytest.mark.parametrize("declared", ['("low", "high")', "(0.0,)", "0.5", "(1.0, 0.0)", '(float("nan"), 1.0)',
                                      "(0.0, None)", "(False, True)", "None"])
def test_malformed_range_is_one_line_at_load(tmp_path, capfd, declared):
    path = write_plugin(tmp_path / "bad_range.py", PROBE.replace('range = (float("-inf"), float("inf"))',
                                                           f"range = {declared}"))
    with pytest.raises(OnnxaffError, match=r"metric 'probe' \(file .*\) declares range"):
        registry([path])
    code, out, err = run_cli(capfd, "plugins", "--plugin", path)
    assert code == 2 and out == "" and err.count("\n") == 1 and "declares range" in err, err


def test_malformed_direction_is_one_line_at_load(tmp_path):
    path = write_plugin(tmp_path / "bad_dir.py", PROBE.replace('needs = "chunk"', 'needs = "chunk"\n'
                                                         '        higher_is_more_linear = "yes"'))
    with pytest.raises(OnnxaffError, match="declares higher_is_more_linear 'yes'"):
        registry([path])


# --- sys.exit and prints ---

EXITS = '''
    class Exits(Metric):
        name = "exits"
        needs = "chunk"

        def compute(self, chunk):
            sys.exit(3)
'''


ODD = '''
    class Odd(BaseException):
        pass

    class RaisesOdd(Metric):
        name = "odd"
        needs = "chunk"

        def compute(self, chunk):
            raise Odd("not an Exception")
'''


def test_sys_exit_in_compute_is_that_metrics_error(model, tmp_path):
    path = write_plugin(tmp_path / "exits.py", EXITS + ODD)
    for workers in (0, 2):
        sig = onnxaff.analyze(str(model), data="synthetic:gaussian:n=128", metrics=["exits", "odd", "affinity"],
                              chunk_size=64, plugins=[path], progress=False, chunk_workers=workers)
        for s in sig.sites:
            assert s["metrics"]["exits"]["status"] == "error"
            assert s["metrics"]["exits"]["error"] == "SystemExit: the metric called sys.exit(3)"
            assert s["metrics"]["odd"]["error"] == "Odd: not an Exception"
            assert s["metrics"]["affinity"]["status"] == "ok" and s["metrics"]["affinity"]["chunks"] == 2


def test_sys_exit_on_import_or_construction_is_one_line(tmp_path, capfd):
    on_import = write_plugin(tmp_path / "exit_import.py", textwrap.dedent(PROBE) + "\nsys.exit(4)\n")
    code, out, err = run_cli(capfd, "plugins", "--plugin", on_import)
    assert code == 2 and err.strip() == f"onnxaff: error: plugin file {on_import} called sys.exit(4) on import"
    exits_in_init = "\n    def __init__(self):\n        sys.exit(5)\n"
    on_init = write_plugin(tmp_path / "exit_init.py", textwrap.dedent(PROBE) + exits_in_init)
    with pytest.raises(OnnxaffError, match=r"metric 'probe' \(file .*\) failed to start: SystemExit: 5"):
        resolve(["probe"], [on_init])


CHATTY = '''
    print("hello from import")

    class Chatty(Metric):
        name = "chatty"
        range = (float("-inf"), float("inf"))
        needs = "chunk"

        def __init__(self):
            print("hello from __init__")

        def compute(self, chunk):
            print("hello from compute")
            sys.stdout.write("more from compute\\n")
            return 0.0
'''


def test_plugin_prints_never_reach_stdout(model, tmp_path, capfd):
    path = write_plugin(tmp_path / "chatty.py", CHATTY)
    code, out, err = run_cli(capfd, "plugins", "--format", "json", "--plugin", path)
    assert code == 0, err
    assert json.loads(out)["chatty"]["needs"] == "chunk"
    assert "hello from import" in err
    for workers in (0, 2):
        sig = tmp_path / f"sig{workers}.json"
        code, out, err = run_cli(capfd, "analyze", model, "--data", "synthetic:gaussian:n=128", "--metrics", "chatty",
                                 "--chunk-size", 64, "--plugin", path, "--quiet", "--out", sig,
                                 "--chunk-workers", workers)
        assert code == 0, err
        assert out == ""
        assert err.count("hello from compute") == 4 and "hello from __init__" in err
        assert read_signature(sig).sites[0]["metrics"]["chatty"]["values"] == [0.0, 0.0]
    assert sys.stdout.__class__.__name__ != "_StdoutRouter"  # put back once no plugin code runs

"""Issue 50, "lost work, internal errors, memory": a third-party data source or metric that misbehaves costs one
line naming it (never `internal error`), a source failing mid-run leaves a checkpoint to resume from, and the
small words (a synthetic key given twice, an empty data spec, a constant .npy whose header lies)."""

from __future__ import annotations

import sys
import textwrap
import time

import numpy as np
import onnx
import onnx.parser
import pytest

from onnxaff.data import registry
from onnxaff.format.signature import read_signature
from tests.builders import HEADER, chain, save
from tests.conftest import run_cli

# A well-behaved third-party kind, `hostile:N`: N examples of 8 floats, each drawn from its own index (a resumed
# run reads the same rows). An attack is a subclass of the same name appended to the module (the entry point
# names the last one).
BASE = '''
import os

import numpy as np

from onnxaff.data.source import DataSource


class Hostile(DataSource):
    spec_form = "hostile:N"
    fed_as_they_are = "hostile data"

    @classmethod
    def parse(cls, spec):
        return "" if spec.startswith("hostile:") else None

    @classmethod
    def from_spec(cls, spec, path, inputs, **options):
        return cls(int(spec.split(":")[1]), inputs)

    def __init__(self, n, inputs):
        self.n, self.input = n, inputs[0]

    def __len__(self):
        return self.n

    def batches(self, batch_size, start=0, stop=None, should_stop=None):
        stop = self.n if stop is None else stop
        for k in range(start, stop, batch_size):
            yield {self.input.name: self.rows(range(k, min(k + batch_size, stop)))}

    def rows(self, index):
        return np.stack([np.random.default_rng(i).standard_normal(8) for i in index]).astype(np.float32)

    def describe(self):
        return {"source": "hostile", "kind": "hostile", "samples": self.n}
'''


@pytest.fixture
def install(tmp_path, monkeypatch):
    """install(attack): the kind with `attack` (class text) appended, on sys.path as an installed wheel lays it out
    (entry point `hostile`)."""
    names = []

    def put(attack: str = "", module: str = "hostile_source") -> None:
        site = tmp_path / f"site_{module}"
        site.mkdir()
        (site / f"{module}.py").write_text(BASE + textwrap.dedent(attack))
        info = site / f"{module}-0.1.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module}\nVersion: 0.1\n")
        (info / "entry_points.txt").write_text(f"[onnxaff.sources]\nhostile = {module}:Hostile\n")
        monkeypatch.syspath_prepend(str(site))
        names.append(module)
        registry.installed.cache_clear()

    yield put
    registry.installed.cache_clear()
    for name in names:
        sys.modules.pop(name, None)


@pytest.fixture(scope="module")
def relu(tmp_path_factory):
    return save(chain("Relu", width=8), tmp_path_factory.mktemp("m") / "relu.onnx")


def one_line(code: int, out: str, err: str) -> str:
    """The run ended in one user-error line (status 2): no traceback, no internal error."""
    assert "internal error" not in out + err and "Traceback" not in out + err, err
    assert code == 2, (code, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("onnxaff: error: "), err
    return lines[0]


# --- a source that raises mid-run: the state is saved, and the resumed run equals a clean one ---

FAILS_MIDWAY = '''
class Hostile(Hostile):
    def batches(self, batch_size, start=0, stop=None, should_stop=None):
        for k, batch in enumerate(super().batches(batch_size, start, stop, should_stop)):
            if start + k * batch_size >= 64 and "HOSTILE_FAIL" in os.environ:
                raise ConnectionError("the data server went away")
            yield batch
'''


def test_a_third_party_source_raising_mid_run_saves_the_checkpoint(install, relu, tmp_path, capfd, monkeypatch):
    install(FAILS_MIDWAY)
    args = ["analyze", relu, "--data", "hostile:128", "--batch-size", 16, "--chunk-size", 32, "--metrics",
            "affinity,cka", "--quiet"]
    code, _, err = run_cli(capfd, *args, "--out", tmp_path / "ref.json")
    assert code == 0, err
    out = tmp_path / "sig.json"
    monkeypatch.setenv("HOSTILE_FAIL", "1")
    line = one_line(*run_cli(capfd, *args, "--out", out))
    assert "hostile_source:Hostile" in line and "ConnectionError: the data server went away" in line, line
    assert "64 of 128 examples saved to" in line and "--resume" in line, line
    assert (tmp_path / "sig.json.ckpt.npz").exists() and not out.exists()
    monkeypatch.delenv("HOSTILE_FAIL")
    code, _, err = run_cli(capfd, *args, "--out", out, "--resume")
    assert code == 0, err
    ref, resumed = read_signature(tmp_path / "ref.json"), read_signature(out)
    for a, b in zip(ref.sites, resumed.sites, strict=True):
        assert b["rows"] == 128
        for metric in ("affinity", "cka"):  # bit for bit: one machine, the same code, the same rows
            assert a["metrics"][metric]["values"] == b["metrics"][metric]["values"]


# --- every way a third-party source can misbehave: one line naming it ---

def attack(method: str, body: str) -> str:
    """A subclass overriding `method` ("def ..." lines or a class attribute) with `body`."""
    return "class Hostile(Hostile):\n" + textwrap.indent(textwrap.dedent(body), "    ")


LEN = "def __len__(self):\n    return {}\n"
BATCHES = "def batches(self, batch_size, start=0, stop=None, should_stop=None):\n{}\n"
EACH = "    for b in super().batches(batch_size, start, stop, should_stop):\n        yield {}"
MISBEHAVIOURS = {
    "from_spec raises": (attack("", "@classmethod\ndef from_spec(cls, spec, path, inputs, **options):\n"
                                    "    raise KeyError('no such bucket')\n"), "from_spec raised KeyError"),
    "from_spec returns None": (attack("", "@classmethod\ndef from_spec(cls, spec, path, inputs, **options):\n"
                                          "    return None\n"), "from_spec returned NoneType None, not a DataSource"),
    "from_spec exits": (attack("", "@classmethod\ndef from_spec(cls, spec, path, inputs, **options):\n"
                                   "    raise SystemExit(3)\n"), "from_spec raised SystemExit: 3"),
    "len raises": (attack("", "def __len__(self):\n    raise OSError('index gone')\n"),
                   "__len__() raised OSError: index gone"),
    "len negative": (attack("", LEN.format(-5)), "__len__() is int -5, not a count"),
    "len a float": (attack("", LEN.format(64.0)), "__len__() is float 64.0, not a count"),
    "len a bool": (attack("", LEN.format(True)), "__len__() is bool True, not a count"),
    "batches raises at once": (attack("", "def batches(self, *a, **k):\n    raise ValueError('closed')\n"),
                               "batches() raised ValueError: closed"),
    "batches returns None": (attack("", "def batches(self, *a, **k):\n    return None\n"),
                             "batches() raised TypeError"),
    "generator raises": (attack("", BATCHES.format("    yield from super().batches(batch_size, start, stop)\n"
                                                   "    raise RuntimeError('disk')")),
                         "batches() raised RuntimeError: disk"),
    "generator stops early": (attack("", BATCHES.format("    yield next(iter(super().batches(batch_size, start, "
                                                        "stop)))")), "batches() stopped after 16 of the 64"),
    "generator gives too many": (attack("", BATCHES.format(EACH.format("b\n        yield b"))),
                                 "batches() gave more than the 64 examples"),
    "batch a list": (attack("", BATCHES.format(EACH.format("list(b.values())"))),
                     "batches() yielded list [array"),
    "batch without the input": (attack("", BATCHES.format(EACH.format("{'y': b['x']}"))),
                                "a batch without input 'x' with 'y', no input it was asked for"),
    "batch of lists": (attack("", BATCHES.format(EACH.format("{'x': b['x'].tolist()}"))),
                       "yielded list [[") ,
    "batch of strings": (attack("", BATCHES.format(EACH.format("{'x': b['x'].astype(str)}"))),
                         "has dtype <U"),
    "batch of complex": (attack("", BATCHES.format(EACH.format("{'x': b['x'].astype(complex)}"))),
                         "has dtype complex128"),
    "batch of the wrong rank": (attack("", BATCHES.format(EACH.format("{'x': b['x'][..., None]}"))),
                                "of shape [16, 8, 1], but model input x: float32[N, 8] has rank 2"),
    "batch of the wrong width": (attack("", BATCHES.format(EACH.format("{'x': b['x'][:, :5]}"))),
                                 "gives examples of shape [5]"),
    "batch larger than asked": (attack("", BATCHES.format("    yield {'x': self.rows(range(64))}")),
                                "a batch of [64] examples"),
    "example_shapes lies": (attack("", "def example_shapes(self):\n    return {'x': (4,)}\n"),
                            "example_shapes() declares [4]"),
    "example_shapes raises": (attack("", "def example_shapes(self):\n    raise AttributeError('shape')\n"),
                              "example_shapes() raised AttributeError: shape"),
    "example_shapes junk": (attack("", "def example_shapes(self):\n    return {'x': 'eight'}\n"),
                            "example_shapes() gives 'x' str 'eight', not a tuple of positive ints"),
    "example_shapes names another input": (attack("", "def example_shapes(self):\n    return {'z': (8,)}\n"),
                                           "example_shapes() names 'z', which is not an input"),
    "describe raises": (attack("", "def describe(self):\n    raise NotImplementedError\n"),
                        "describe() raised NotImplementedError"),
    "describe returns None": (attack("", "def describe(self):\n    return None\n"), "describe() is NoneType None"),
    "describe is no JSON": (attack("", "def describe(self):\n    return {'source': {1, 2}}\n"),
                            "describe() is no JSON (TypeError"),
    "describe holds NaN": (attack("", "def describe(self):\n    return {'source': float('nan')}\n"),
                           "describe() is no JSON (ValueError"),
    "warnings raises": (attack("", "@property\ndef warnings(self):\n    raise LookupError('log')\n"),
                        "warnings raised LookupError: log"),
    "warnings a str": (attack("", "warnings = 'careful'\n"), "warnings is str 'careful', not a list of str"),
    "unfilled junk": (attack("", "unfilled = ['h0']\n"), "unfilled names 'h0', which is not an input"),
    "skipped junk": (attack("", "skipped = [42]\n"), "skipped is list [42], not a list of (file, reason) pairs"),
    "skipped raises": (attack("", "@property\ndef skipped(self):\n    raise IndexError('gone')\n"),
                       "skipped raised IndexError: gone"),
    "its own user error": (attack("", "def batches(self, *a, **k):\n"
                                      "    from onnxaff.errors import OnnxaffError\n"
                                      "    raise OnnxaffError('token expired')\n"), "token expired"),
}


@pytest.mark.parametrize("case", list(MISBEHAVIOURS))
def test_each_misbehaviour_of_a_third_party_source_is_one_line_naming_it(install, relu, tmp_path, capfd, case):
    code, expected = MISBEHAVIOURS[case]
    install(code)
    line = one_line(*run_cli(capfd, "analyze", relu, "--data", "hostile:64", "--batch-size", 16, "--chunk-size", 32,
                             "--metrics", "cka", "--quiet", "--out", tmp_path / "sig.json"))
    assert "data source hostile (hostile_source:Hostile)" in line and expected in line, line


PARSE_RAISES = attack("", "@classmethod\ndef parse(cls, spec):\n    raise ImportError('boto3 is missing')\n")


def test_an_installed_kind_whose_parse_raises_breaks_no_built_in_kind(install, relu, tmp_path, capfd):
    install(PARSE_RAISES)
    code, _, err = run_cli(capfd, "analyze", relu, "--data", "synthetic:gaussian:n=64", "--chunk-size", 32,
                           "--metrics", "cka", "--quiet", "--out", tmp_path / "sig.json")
    assert code == 0, err
    np.save(tmp_path / "x.npy", np.random.default_rng(0).standard_normal((64, 8)).astype(np.float32))
    code, _, err = run_cli(capfd, "analyze", relu, "--data", tmp_path / "x.npy", "--chunk-size", 32,
                           "--metrics", "cka", "--quiet", "--out", tmp_path / "sig2.json")
    assert code == 0, err
    # Where it matters, no other kind reading the spec, the line names the plugin and what it raised.
    line = one_line(*run_cli(capfd, "analyze", relu, "--data", "hostile:64", "--out", tmp_path / "sig3.json"))
    assert line == ("onnxaff: error: no kind of data reads 'hostile:64': data source hostile "
                    "(hostile_source:Hostile) fails to parse it (ImportError: boto3 is missing)"), line


@pytest.mark.parametrize("spec, expected", [
    ("synthetic:gaussian:n=4,n=8", "synthetic option 'n' is given twice"),
    ("synthetic:uniform:seed=1,low=0,seed=2", "synthetic option 'seed' is given twice"),
    ("audio:", "'audio:' names no folder: give audio:FOLDER"),
    ("", "no data given: the data spec is empty"),
    ("   ", "no data given: the data spec is empty"),
])
def test_a_key_given_twice_or_an_empty_spec_is_one_line(relu, tmp_path, capfd, monkeypatch, spec, expected):
    (tmp_path / "a.wav").write_bytes(b"")  # what a search of the current folder would find
    monkeypatch.chdir(tmp_path)
    line = one_line(*run_cli(capfd, "analyze", relu, "--data", spec, "--quiet", "--out", tmp_path / "sig.json"))
    assert expected in line, line
    assert not (tmp_path / "sig.json").exists()


@pytest.mark.parametrize("shape", [(8, 10 ** 10), (8,)])
def test_a_constant_npy_whose_header_lies_about_its_size_is_malformed_not_out_of_memory(tmp_path, capfd, shape):
    """The header declares 320 GB (or 32 bytes) over a file holding 12 bytes of data."""
    model = save(onnx.parser.parse_model(HEADER + """
        g (float[N, 8] x, float[N, 8] b) => (float[N, 8] y) { s = Add(x, b) y = Relu(s) }"""), tmp_path / "m.onnx")
    lie = tmp_path / "c.npy"
    with open(lie, "wb") as f:
        np.lib.format.write_array_header_1_0(f, {"descr": "<f4", "fortran_order": False, "shape": shape})
        f.write(b"\0" * 12)
    line = one_line(*run_cli(capfd, "analyze", model, "--data", "synthetic:gaussian:n=64", "--constant",
                             f"b={lie}", "--quiet", "--out", tmp_path / "sig.json"))
    assert "out of memory" not in line and "malformed or truncated" in line, line


@pytest.mark.parametrize("method", ["identity", "describe", "identity_no_json"])
def test_a_failing_identity_or_description_stops_only_its_model_in_a_study(install, tmp_path, capfd, method):
    body = {"identity": "@classmethod\ndef identity(cls, spec, path):\n    raise PermissionError('bucket')\n",
            "identity_no_json": "@classmethod\ndef identity(cls, spec, path):\n    return [object()]\n",
            "describe": "def describe(self):\n    raise PermissionError('bucket')\n"}[method]
    install(attack("", body))
    save(chain("Relu", width=8), tmp_path / "relu.onnx")
    (tmp_path / "study.toml").write_text(textwrap.dedent("""\
        data = "synthetic:gaussian:n=64"
        [[model]]
        label = "good"
        path = "relu.onnx"
        [[model]]
        label = "bad"
        path = "relu.onnx"
        data = "hostile:64"
        """))
    code, out, err = run_cli(capfd, "study", tmp_path / "study.toml", "--out", tmp_path / "out", "--chunk-size", 32,
                             "--metrics", "cka")
    assert "internal error" not in out + err and "Traceback" not in out + err, err
    assert (tmp_path / "out" / "signatures" / "good.json").exists(), err
    assert not (tmp_path / "out" / "signatures" / "bad.json").exists(), err
    failed = [line for line in (out + err).splitlines() if "bad: FAILED:" in line]
    assert len(failed) == 1 and "data source hostile (hostile_source:Hostile)" in failed[0], out + err
    assert "1 failed" in out + err, out + err


# --- a broken installed metric plugin does not take report down ---

def test_a_broken_installed_metric_does_not_take_report_or_compare_down(relu, tmp_path, capfd, monkeypatch):
    sig = tmp_path / "sig.json"
    code, _, err = run_cli(capfd, "analyze", relu, "--data", "synthetic:gaussian:n=256", "--metrics", "cka,affinity",
                           "--quiet", "--out", sig)
    assert code == 0, err
    code, alone, err = run_cli(capfd, "report", sig)
    assert code == 0, err
    site = tmp_path / "metric_site"
    info = site / "broken_metric-0.1.dist-info"
    info.mkdir(parents=True)
    (site / "broken_metric.py").write_text("raise ImportError('No module named cupy')\n")
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-metric\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[onnxaff.metrics]\nbroken = broken_metric:Broken\n")
    monkeypatch.syspath_prepend(str(site))
    try:
        code, shown, err = run_cli(capfd, "report", sig)
        assert code == 0 and "internal error" not in err, err
        assert shown == alone  # the same metric shown first (affinity, the first default), the same table
        code, _, err = run_cli(capfd, "compare", sig, sig, "--out", tmp_path / "c.html")
        assert code == 0, err
    finally:
        sys.modules.pop("broken_metric", None)


# --- NLC's overflow is its own: the other metrics keep their scores ---

@pytest.mark.parametrize("std", [1e20, 1.0])
def test_nlc_overflowing_on_features_near_1e20_costs_only_the_nlc(relu, tmp_path, capfd, std):
    """Features near 1e20 are finite in float32; their squares are not. The twin run without nlc is the reference:
    the same code on the same machine, so the other metrics' values must be equal to the bit."""
    sigs = {}
    for metrics in ("cka,affinity", "cka,affinity,nlc"):
        out = tmp_path / f"{metrics}.json"
        code, _, err = run_cli(capfd, "analyze", relu, "--data", f"synthetic:gaussian:n=256,std={std}", "--metrics",
                               metrics, "--chunk-size", 64, "--quiet", "--out", out)
        assert code == 0, err
        sigs[metrics] = read_signature(out).sites[0]
    alone, with_nlc = sigs["cka,affinity"], sigs["cka,affinity,nlc"]
    assert with_nlc["status"] == alone["status"] == "ok", with_nlc.get("reason")
    for metric in ("cka", "affinity"):
        assert with_nlc["metrics"][metric]["values"] == alone["metrics"][metric]["values"]
        assert len(alone["metrics"][metric]["values"]) == 4
    nlc = with_nlc["metrics"]["nlc"]
    if std > 1e19:
        assert nlc["status"] == "nonfinite" and nlc["mean"] is None, nlc
        assert "NaN/Inf in the Jacobian-vector sums of 4 batch(es)" in nlc["reason"], nlc  # 256 rows, batches of 64
    else:  # the control: an ordinary scale scores
        assert nlc["status"] == "ok" and np.isfinite(nlc["mean"]), nlc


# --- a site too wide for its metrics' working memory is refused before allocating ---

def test_a_site_whose_metrics_cannot_fit_is_refused_before_allocating(tmp_path):
    """The issue's 10⁶ features × 64 rows under 8 GB, scaled to the 3 GB cap: 3·10⁵ features × 64 rows. The
    buffers and half-samples (1.5 GB) fit, so the run went on and affinity ended in `MemoryError` (exit 0); the
    metrics' working copies (measured, onnxaff.analysis.budget.METRIC_WORK) do not, so it is refused first."""
    from tests.test_resources import capped_cli

    # 3·10⁵ features: at 2.5·10⁵ the estimate (2.94 GB against 2.9 available) sat within the address space a
    # process maps more or less (refused alone, run inside the whole suite, where OpenBLAS then failed to allocate)
    model = save(chain("Relu", width=300_000), tmp_path / "wide.onnx")
    start = time.monotonic()
    line = one_line(*capped_cli("analyze", model, "--data", "synthetic:gaussian:n=64", "--out", tmp_path / "s.json",
                                "--quiet", timeout=120))
    assert time.monotonic() - start < 60
    assert "working copies of site" in line and "--chunk-size" in line and "GB" in line, line
    assert not (tmp_path / "s.json").exists()


@pytest.mark.parametrize("first_overflowed", [True, False])
def test_a_shards_nlc_overflow_survives_the_merge(first_overflowed):
    """A shard whose NLC sums overflowed keeps the merged NLC from a value, in either merge order (the count was
    the one field `merge` did not add: the merged NLC read `ok` from the other shards' batches)."""
    from onnxaff.collection.collect import JvpAccumulator

    parts = [JvpAccumulator("elementwise", nonfinite_batches=3), JvpAccumulator("elementwise")]
    first, second = parts if first_overflowed else parts[::-1]
    first.merge(second)
    assert first.nonfinite_batches == 3


def test_a_failing_identity_of_a_file_kind_is_one_line_in_analyze(install, relu, tmp_path, capfd):
    """A kind reading a file: its identity keys the checkpoint (checkpoint.data_content) and was called unguarded
    there (a traceback where a study names the plugin)."""
    (tmp_path / "bucket").write_text("x")
    install(attack("", "@classmethod\ndef parse(cls, spec):\n    return spec.split(':', 2)[2] if spec.startswith("
                       "'hostile:') else None\n@classmethod\ndef identity(cls, spec, path):\n"
                       "    raise PermissionError('bucket')\n"))
    line = one_line(*run_cli(capfd, "analyze", relu, "--data", f"hostile:64:{tmp_path / 'bucket'}", "--quiet",
                             "--out", tmp_path / "sig.json"))
    assert "hostile_source:Hostile" in line and "identity() failed (PermissionError: bucket)" in line, line

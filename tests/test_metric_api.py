"""The public metric API: parameters (`name:key=value`), the Needs dispatch, declarations, fingerprints, and a
core that names no built-in metric."""

import ast
import hashlib
from pathlib import Path

import numpy as np
import pytest

import onnxaff
from onnxaff.collection.stats import metric_flags
from onnxaff.errors import OnnxaffError
from onnxaff.metrics import (
    Chunk,
    ChunkPair,
    Metric,
    Needs,
    default_metrics,
    parse_spec,
    parse_value,
    primary_metric,
    registry,
    resolve,
    stage_metrics,
)
from onnxaff.metrics.dispatch import SERVING, serving, stage_entry
from onnxaff_plugins.affinity import affinity_score
from tests.conftest import FIXTURES

CORE = Path(onnxaff.__file__).parent


def _chunk(rng, n=64, d=6):
    x = rng.standard_normal((n, d))
    return Chunk(x, np.tanh(x @ rng.standard_normal((d, d))))


def test_spec_syntax_and_values():
    assert parse_spec("affinity") == ("affinity", {})
    assert parse_spec(" affinity : eps = 1e-5 :shrinkage=ledoit_wolf") == (
        "affinity", {"eps": "1e-5", "shrinkage": "ledoit_wolf"})
    assert [parse_value(v) for v in ("true", "False", "3", "1e-6", "ledoit_wolf")] == [True, False, 3, 1e-6,
                                                                                        "ledoit_wolf"]
    for bad in ("affinity:eps", "affinity:=1", "affinity:eps=", "affinity:eps=1:eps=2"):
        with pytest.raises(OnnxaffError, match="affinity"):
            parse_spec(bad)


def test_a_parameter_reaches_compute_and_names_the_entry(rng):
    (m,) = resolve(["affinity:eps=0.01"])
    assert m.spec == "affinity:eps=0.01" and m.eps == 0.01 and isinstance(m.eps, float)
    assert type(m).name == "affinity" and m.name == m.spec  # registered name; the instance alias
    assert m.params() == {"eps": 0.01, "shrinkage": "none", "relative_eps": False, "method": "auto",
                          "transport": "auto"}
    c = _chunk(rng)
    assert m.compute(c) == affinity_score(c.x, c.y, eps=0.01) != affinity_score(c.x, c.y)


@pytest.mark.parametrize("spec, preset", [("affinity:shrinkage=ledoit_wolf", "affinity_lw"),
                                          ("affinity:relative_eps=true", "affinity_rel")])
def test_parameters_equal_the_registered_preset(rng, spec, preset):
    (a, b) = resolve([spec, preset])
    c = _chunk(rng)
    assert a.compute(c) == b.compute(c)  # bit for bit
    assert (a.rows_per_dim, a.regularised) == (b.rows_per_dim, b.regularised)
    assert b.spec == preset and "ledoit_wolf" not in b.spec


@pytest.mark.parametrize("spec, match", [
    ("affinity:foo=1", r"metric 'affinity' has no parameter 'foo'; it accepts eps=1e-06, shrinkage='none'"),
    ("affinity:eps=abc", r"metric 'affinity:eps=abc': eps must be a finite number, got 'abc'; affinity accepts eps="),
    ("affinity:eps=inf", r"metric 'affinity:eps=inf': eps must be a finite number, got 'inf'"),
    ("affinity:relative_eps=2", r"relative_eps must be true or false"),
    ("affinity:shrinkage=oas", r"shrinkage must be one of none, ledoit_wolf, not 'oas'; affinity accepts"),
    ("cka:eps=1", r"metric 'cka' has no parameter 'eps'; it accepts none"),
])
def test_a_bad_parameter_is_one_line_naming_the_metric(spec, match):
    with pytest.raises(OnnxaffError, match=match) as exc:
        resolve([spec])
    assert "\n" not in str(exc.value)


def test_the_signature_records_parameters(tmp_path):
    sig = onnxaff.analyze(str(FIXTURES / "res_cnn_op17.onnx"), "synthetic:gaussian", limit=64, chunk_size=32,
                          metrics=["affinity:shrinkage=none:eps=0.00001", "affinity_lw"], progress=False)
    name = "affinity:eps=1e-05"  # keys sorted, one spelling per value, defaults left out
    assert sig.metrics[name]["params"]["eps"] == 1e-5
    assert sig.metrics["affinity_lw"]["params"]["shrinkage"] == "ledoit_wolf"
    assert sig.options["metrics"] == [name, "affinity_lw"]  # what a resume or a merge resolves again
    ok = [s for s in sig.sites if s["status"] == "ok"]
    assert ok and all(s["metrics"][name]["status"] == "ok" for s in ok)


def test_two_spellings_of_one_metric_are_one_name():
    from onnxaff.metrics import resolve

    assert {m.spec for m in resolve(["affinity:eps=1e-5"])} == {m.spec for m in resolve(["affinity:eps=0.00001"])}
    assert resolve(["affinity:eps=1e-6"])[0].spec == "affinity"  # the default: the plain metric
    with pytest.raises(OnnxaffError, match="names 'affinity' twice"):
        resolve(["affinity", "affinity:eps=0.000001"])


def test_defaults_come_from_declarations():
    available = registry()
    assert default_metrics(available) == ["affinity"]  # affinity_lw needs 32·D rows: not a default (issue 49)
    assert sorted(stage_metrics(available)) == ["lss", "ots"]
    assert primary_metric(available) == "affinity"


def test_dispatch_covers_every_needs_and_builds_the_inputs(rng):
    assert set(SERVING) == set(Needs)
    c, p = _chunk(rng), _chunk(rng)
    assert SERVING[Needs.CHUNK].chunk_input(c, p, None) is c
    pair = SERVING[Needs.CHUNK_PAIR].chunk_input(c, p, None)
    assert isinstance(pair, ChunkPair) and pair.earlier is p and pair.later is c
    assert SERVING[Needs.CHUNK_PAIR].chunk_input(c, None, None) is None  # the first chunk has no pair yet
    tracks = SERVING[Needs.TRACKS].chunk_input(Chunk(np.hstack([c.x, c.y]), c.x[:, :0]), None, 2)
    assert len(tracks.arrays) == 2 and np.array_equal(tracks.arrays[1], c.y)
    assert {n for n, s in SERVING.items() if s.pooled} == {Needs.MOMENTS, Needs.JVP}
    assert [n for n, s in SERVING.items() if s.stage] == [Needs.TRACKS]

    class Pooled(Metric):
        name = "pooled_thing"
        needs = "moments"  # a plain string still declares it

    assert serving(Pooled()) is SERVING[Needs.MOMENTS]
    assert stage_entry({"needs": "tracks"}) and not stage_entry({"needs": "chunk"}) and not stage_entry({})


def test_only_the_dispatch_table_reads_needs():
    """What a metric is served is decided in one place: metrics/dispatch.py (base.py declares `needs`)."""
    readers = set()
    for path in CORE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr == "needs":
                readers.add(path.relative_to(CORE).as_posix())
    assert readers == {"metrics/dispatch.py", "metrics/base.py"}


def test_a_needs_no_row_serves_is_refused_when_the_metric_loads(tmp_path):
    from tests.builders import write_plugin

    path = write_plugin(tmp_path / "pixels.py", """
        class Pixels(Metric):
            name = "pixels"
            needs = "pixels"

            def compute(self, chunk):
                return 0.5
    """)
    with pytest.raises(OnnxaffError, match=r"metric 'pixels' .* declares unknown needs 'pixels'; one of chunk, "):
        registry([path])


def test_flags_follow_the_metric_declarations():
    seen = {"eps_dominated", "rank_deficient"}
    by_name = {m.spec: m for m in resolve(["affinity", "affinity_rel", "r2_heldout", "cka_pooled"])}
    assert metric_flags(by_name["affinity"], 10, 4, False, seen, scale=1e-4) == ["few_rows", "eps_dominated"]
    assert metric_flags(by_name["affinity_rel"], 100, 4, False, seen) == []
    assert metric_flags(by_name["r2_heldout"], 10, 4, True, seen) == ["partial", "rank_deficient"]
    assert metric_flags(by_name["cka_pooled"], 31, 4, True, seen) == ["few_rows"]  # cka's 8 rows per dimension


def test_fingerprint_is_the_source_files_sha256(tmp_path):
    found = registry()
    module = Path(__import__("onnxaff_plugins.affinity", fromlist=["x"]).__file__)
    assert found["affinity"].fingerprint == hashlib.sha256(module.read_bytes()).hexdigest()
    path = tmp_path / "mine.py"
    path.write_text("from onnxaff.metrics import Metric\n\nclass Mine(Metric):\n    name = 'mine'\n")
    assert registry([str(path)])["mine"].fingerprint == hashlib.sha256(path.read_bytes()).hexdigest()
    path.write_text(path.read_text() + "# edited\n")
    assert registry([str(path)])["mine"].fingerprint == hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_core_names_no_built_in_metric():
    """No string literal of onnxaff/ is a registered built-in metric's name: defaults, stage metrics and the
    primary metric are the metrics' own declarations. Correlation tables have an 'r2' column: a statistic."""
    names = {n for n, r in registry().items() if r.cls.__module__.startswith("onnxaff_plugins")}
    fit_r2 = ("results/comparison.py", "cli", "reports/")  # where 'r2' is the R² of correlate's fits, not the metric
    found = []
    for path in sorted(CORE.rglob("*.py")):
        rel = path.relative_to(CORE).as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value in names and not (
                    node.value == "r2" and rel.startswith(fit_r2)):
                found.append(f"{rel}:{node.lineno}: {node.value!r}")
    assert not found, found


JVP_PLUGIN = '''
import math
from onnxaff.metrics import JvpStats, Metric, Needs

class SquaredNLC(Metric):
    """A third-party metric of the Jacobian sums: the network figure is keyed by its own name."""

    name = "nlc_squared"
    higher_is_more_linear = False
    range = (0.0, float("inf"))
    needs = Needs.JVP

    def compute(self, stats: JvpStats) -> float:
        return stats.numerator / stats.denominator  # the test's outputs are never constant
'''


def test_the_network_figure_goes_through_each_jvp_metric(rng, tmp_path):
    from tests.conftest import parse
    from tests.test_baselines import NLC_MODEL

    model = parse(NLC_MODEL % ", ".join(f"{v:.6f}" for v in rng.standard_normal(36)))
    np.save(tmp_path / "x.npy", rng.standard_normal((256, 6)).astype(np.float32))
    (tmp_path / "sq.py").write_text(JVP_PLUGIN)
    sig = onnxaff.analyze(model, str(tmp_path / "x.npy"), metrics=["nlc", "nlc_squared"],
                          plugins=[str(tmp_path / "sq.py")], progress=False)
    assert set(sig.network) == {"nlc", "nlc_squared"}
    for out, value in sig.network["nlc"]["values"].items():
        assert sig.network["nlc_squared"]["values"][out] == pytest.approx(value**2, rel=1e-12)


def test_a_parameter_kept_under_another_name_is_refused(tmp_path):
    """params() reads the attribute of the keyword's name: without it the signature would record the default."""
    from tests.builders import write_plugin

    path = write_plugin(tmp_path / "hidden.py", '''
        class Hidden(Metric):
            name = "hidden"
            range = (float("-inf"), float("inf"))

            def __init__(self, k: float = 1.0):
                self._k = k

            def compute(self, chunk):
                return self._k
    ''')
    from onnxaff.metrics import registry, resolve

    assert resolve(["hidden"], available=registry([path]))[0].params() == {"k": 1.0}
    with pytest.raises(OnnxaffError, match="keeps its parameter 'k' under another name"):
        resolve(["hidden:k=5"], available=registry([path]))


def test_name_is_the_registered_name_and_spec_the_instances(tmp_path):
    """cls.name is what the plugin declares; an instance's name reads its spec and cannot be set apart from it."""
    from tests.builders import write_plugin

    (m,) = resolve(["affinity:shrinkage=ledoit_wolf"])
    assert type(m).name == "affinity" and m.spec == m.name == "affinity:shrinkage=ledoit_wolf"
    with pytest.raises(AttributeError, match="set spec"):
        m.name = "other"
    path = write_plugin(tmp_path / "taken.py", '''
        class Taken(Metric):
            name = "taken"

            def __init__(self, spec: str = "x"):
                self.spec = spec

            def compute(self, chunk):
                return 0.5
    ''')
    with pytest.raises(OnnxaffError, match="takes a parameter 'spec': name and spec are every metric's own"):
        registry([path])

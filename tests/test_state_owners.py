"""State lives in the class that owns it (issue 48): no stateless satellite rebuilt on every read, each part of a
site's state merged by its own `merge`, no module-global cache keyed by instances, no Protocol standing in for a
class an import ring kept out. Merges of the first chunk's half-samples are pinned against one run, bit for bit."""

from __future__ import annotations

import ast
import typing
from pathlib import Path

import numpy as np
import pytest
from onnx.parser import parse_model

from onnxaff.collection import entries, site_state
from onnxaff.collection.chunks import ChunkSchedule
from onnxaff.collection.half_samples import HalfSamples
from onnxaff.collection.observations import Observations
from onnxaff.collection.pooled import Pooled
from onnxaff.collection.scores import Scores
from onnxaff.collection.scoring import MetricScorer
from onnxaff.collection.site_state import SiteState
from onnxaff.graph import qdq
from onnxaff.graph.view import GraphView
from onnxaff.metrics import resolve

ROOT = Path(__file__).resolve().parents[1]
CHUNK = 16


@pytest.fixture(scope="module")
def metrics():
    return resolve(["affinity", "cka", "r2_heldout", "cka_pooled"])


@pytest.fixture
def scorer():
    with MetricScorer(0) as s:
        yield s


def _features(n: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((n, 6))
    y = np.tanh(x @ rng.standard_normal((6, 6))) + 0.1 * rng.standard_normal((n, 6))
    return x.astype(np.float32), y.astype(np.float32)


def _fed(intervals: str, start: int, stop: int, metrics, scorer) -> SiteState:
    x, y = _features(48)
    st = SiteState.open(CHUNK, index=0, label="s", intervals=intervals)
    for a in range(start, stop, 8):
        st.add(x[a:a + 8], y[a:a + 8], metrics, scorer, block=a // CHUNK)
    return st


def _finished(st: SiteState, metrics, scorer) -> dict:
    st.finish(metrics, scorer)
    return {m.spec: entries.metric_entry(st, m) for m in metrics}


# --- the half-samples of the first chunk across a merge: the whole's, as one run gives them ---


@pytest.mark.parametrize(("intervals", "split", "stop"), [
    ("auto", 16, 32),  # one chunk a part: two in all, the interval is over chunks and no half is kept
    ("auto", 16, 24),  # the next part holds no full chunk: the first part's one chunk keeps its halves
    ("auto", 0, 24),  # the earlier part holds no row (an empty shard): the halves are the next part's
    ("half", 16, 48),  # every interval reads the first chunk's halves: the earlier part's
])
def test_a_merge_keeps_the_first_chunks_halves_as_one_run_does(metrics, scorer, intervals, split, stop):
    one = _finished(_fed(intervals, 0, stop, metrics, scorer), metrics, scorer)
    first, second = _fed(intervals, 0, split, metrics, scorer), _fed(intervals, split, stop, metrics, scorer)
    first.merge(SiteState.from_state(second.to_state(), label="s", intervals=intervals), metrics, scorer)
    assert _finished(first, metrics, scorer) == one
    assert bool(first.halved.halves) == (intervals == "half" or stop < 32)


# --- each part merges itself ---


def test_a_site_state_merges_through_each_parts_own_merge(metrics, scorer, monkeypatch):
    calls = []
    for cls in (Observations, Pooled, Scores, HalfSamples):
        own = cls.merge
        monkeypatch.setattr(cls, "merge", lambda self, other, *a, _own=own, _cls=cls, **k: (
            calls.append(_cls.__name__), _own(self, other, *a, **k))[1])
    first, second = _fed("auto", 0, 16, metrics, scorer), _fed("auto", 16, 32, metrics, scorer)
    first.merge(second, metrics, scorer)
    assert sorted(calls) == ["HalfSamples", "Observations", "Pooled", "Scores"]


def test_scores_merge_appends_in_chunk_order():
    mine = Scores(values={"a": [1.0]}, live={"a": [0, 2.0]})
    theirs = Scores(values={"a": [3.0], "b": [4.0]}, errors={"b": "boom"}, live={"b": [0, 5.0]})
    mine.merge(theirs, boundary=[("a", 2.0, None)])
    assert mine.values == {"a": [1.0, 2.0, 3.0], "b": [4.0]} and mine.errors == {"b": "boom"}
    assert mine.live == {"a": [0, 2.0], "b": [0, 5.0]}  # b's chunk: none before


@pytest.mark.parametrize(("intervals", "chunks", "theirs", "kept"), [
    ("auto", 1, 0, "mine"), ("auto", 0, 1, "theirs"), ("auto", 1, 1, None), ("half", 1, 3, "mine"),
    ("half", 0, 2, "theirs"),
])
def test_half_samples_merge_keeps_the_first_chunks_where_the_whole_reads_them(intervals, chunks, theirs, kept):
    """The halves of the slice holding the whole's first chunk, where the whole keeps them (half_samples.kept)."""
    mine, other = HalfSamples(halves={"a": [0.5, 0.6]}), HalfSamples(halves={"a": [0.7]})
    want = {"mine": mine.halves, "theirs": other.halves, None: {}}[kept]
    mine.merge(other, intervals, chunks, theirs)
    assert mine.halves == want and mine.solo is None


# --- no satellite rebuilt per read, no cache keyed by instances, no stand-in Protocol ---


@pytest.mark.parametrize("cls", [SiteState, ChunkSchedule, Pooled, Observations, Scores, HalfSamples])
def test_reading_a_property_twice_gives_the_same_object(cls, metrics, scorer):
    """A property that built an object each time (SiteState.halves did) held no state of its own."""
    owner = _fed("auto", 0, 32, metrics, scorer)
    obj = {SiteState: owner, ChunkSchedule: owner.schedule, Pooled: owner.pooled, Observations: owner.observed,
           Scores: owner.scores, HalfSamples: owner.halved}[cls]
    props = [n for n in dir(cls) if isinstance(getattr(cls, n), property)]
    rebuilt = [n for n in props if not isinstance(getattr(obj, n), int | float | str | type(None))
               and getattr(obj, n) is not getattr(obj, n)]
    assert not rebuilt, rebuilt


def test_no_module_keeps_a_cache_keyed_by_instances():
    """A cache per object is that object's attribute (e.g. a cached_property), not a module-global weak map."""
    found = []
    for path in sorted((ROOT / "onnxaff").rglob("*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            value = node.value if isinstance(node, ast.Assign | ast.AnnAssign) else None
            if isinstance(value, ast.Call) and "Weak" in ast.unparse(value.func):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not found, found


QDQ = parse_model("""
<ir_version: 8, opset_import: ["" : 17]>
g (float[N, 4] x) => (float[N, 4] y) <float s = {0.5}, uint8 z = {3}> {
    q = QuantizeLinear(x, s, z)
    d = DequantizeLinear(q, s, z)
    y = Sigmoid(d)
}""")


def test_a_views_qdq_pairs_are_found_once_and_kept_on_it(monkeypatch):
    view = GraphView(QDQ.graph)
    assert qdq.paired(view) == frozenset({0, 1})
    monkeypatch.setattr(qdq, "pairs", lambda v: pytest.fail("the pairs were found again"))
    assert qdq.paired(view) is view.qdq_pairs and "qdq_pairs" in vars(view)


def test_entries_read_the_site_state_itself():
    """entries.py read a Protocol named SiteState: site_state imported entries, so entries could not import it."""
    assert typing.get_type_hints(entries.metric_entry)["st"] is site_state.SiteState
    assert not [n for n, v in vars(entries).items() if isinstance(v, type) and getattr(v, "_is_protocol", False)]


def test_the_half_samples_are_saved_under_the_names_checkpoints_have():
    """`solo` and `halves` moved from the schedule and the scores into HalfSamples: a state saved before loads."""
    x, y = _features(16)
    before = {"solo": {"x": x.astype(np.float64), "y": y.astype(np.float64), "rounding": 1e-7},
              "halves": {"affinity": [0.5, 0.6]}}
    st = SiteState.from_state(before)
    assert st.halved.halves == {"affinity": [0.5, 0.6]} and st.halved.solo.n == 16
    saved = st.to_state()
    assert saved["halves"] == before["halves"] and np.array_equal(saved["solo"]["x"], before["solo"]["x"])

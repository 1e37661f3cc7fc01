"""The collection parts on their own: saved state from dataclass fields (statefields), the chunk schedule
(chunks), one site's state (site_state: add, finish, save, restore, merge) and what the features showed
(observations). End-to-end runs over them are in tests/test_scale.py and tests/test_analyze.py."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest

from onnxaff.analysis.checkpoint import load_state, save_state
from onnxaff.collection.chunks import ChunkSchedule
from onnxaff.collection.collect import ChunkBuffer
from onnxaff.collection.entries import metric_entry
from onnxaff.collection.observations import Observations
from onnxaff.collection.scoring import MetricScorer
from onnxaff.collection.site_state import SiteState
from onnxaff.errors import OnnxaffError
from onnxaff.foundations.statefields import from_state, part, saved, to_state, transient
from onnxaff.metrics import resolve

# --- statefields ---


@dataclass
class Counter:
    count: int = 0
    names: list = field(default_factory=list)


@dataclass
class Collector:
    label: str = "site"
    values: list = field(default_factory=list)
    table: dict = field(default_factory=dict)
    span: range | None = saved(None, encode=lambda r: [r.start, r.stop], decode=lambda v: range(*v))
    future: object = transient(None)
    counter: Counter = part(Counter)


def filled() -> Collector:
    c = Collector(label="relu", values=[1.0, 2.5], table={"a": [1, 2], "b": {"c": 3}}, span=range(3, 9),
                  future=object())
    c.counter.count, c.counter.names = 4, ["x", "y"]
    return c


def test_a_collector_round_trips_through_its_state():
    live = filled()
    back = from_state(Collector, to_state(live))
    assert back == Collector(label="relu", values=[1.0, 2.5], table={"a": [1, 2], "b": {"c": 3}},
                             span=range(3, 9), future=None, counter=Counter(4, ["x", "y"]))
    assert isinstance(back.span, range)  # decoded, not the saved list


def test_encode_gives_the_plain_form_and_none_is_not_encoded():
    assert to_state(filled())["span"] == [3, 9]
    assert to_state(Collector())["span"] is None
    assert from_state(Collector, {"span": None}).span is None


def test_a_transient_field_is_not_saved_and_takes_its_default_or_the_given_value():
    state = to_state(filled())
    assert "future" not in state
    marker = object()
    assert from_state(Collector, {**state, "future": "ignored"}).future is None
    assert from_state(Collector, state, future=marker).future is marker


def test_a_parts_fields_are_flat_in_the_parents_dict():
    assert to_state(filled()) == {"label": "relu", "values": [1.0, 2.5], "table": {"a": [1, 2], "b": {"c": 3}},
                                  "span": [3, 9], "count": 4, "names": ["x", "y"]}


def test_a_missing_key_takes_the_fields_default():
    back = from_state(Collector, {"label": "only"})
    assert back == Collector(label="only")
    assert back.values == [] and back.counter == Counter()


def test_saved_state_does_not_alias_the_live_lists():
    live = filled()
    state = to_state(live)
    live.values.append(9.0)
    live.table["a"].append(3)
    live.table["b"]["c"] = 0
    live.counter.names.append("z")
    assert state["values"] == [1.0, 2.5] and state["table"] == {"a": [1, 2], "b": {"c": 3}}
    assert state["names"] == ["x", "y"]
    back = from_state(Collector, state)
    back.values.append(7.0)
    back.counter.names.append("w")
    assert state["values"] == [1.0, 2.5] and state["names"] == ["x", "y"]  # nor the restored one the state


# --- chunks: ChunkSchedule ---


def schedule(size: int) -> ChunkSchedule:
    s = ChunkSchedule()
    s.buffer = ChunkBuffer(size)
    return s


def rows(n: int, dx: int = 3, dy: int = 2, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, dx)).astype(np.float32), rng.standard_normal((n, dy)).astype(np.float32)


def test_rows_are_cut_into_exact_chunks_across_batches():
    x, y = rows(11)
    s = schedule(4)
    assert s.cut(x[:3], y[:3], 1e-7) == [] and s.chunks == 0
    got = s.cut(x[3:10], y[3:10], 1e-7)  # completes rows 0-3 and 4-7; 8-9 wait
    assert [c.n for c in got] == [4, 4] and s.chunks == 2 and s.chunk_rows == 4
    for k, c in enumerate(got):
        assert c.x.dtype == np.float64 and not c.x.flags.writeable and not c.y.flags.writeable
        assert np.array_equal(c.x, x[4 * k:4 * k + 4]) and np.array_equal(c.y, y[4 * k:4 * k + 4])
        assert c.rounding == 1e-7
    assert [c.n for c in s.cut(x[10:], y[10:], 1e-7)] == [] and s.buffer.rows == 3
    assert s.remainder(1e-7) is None and not s.partial  # a full chunk exists: the rest is never scored


@pytest.mark.parametrize("n, scored", [(3, True), (2, True), (1, False)])
def test_the_remainder_is_the_partial_chunk_only_without_a_full_one_and_with_two_rows(n, scored):
    x, y = rows(n)
    s = schedule(4)
    s.cut(x, y, 1e-7)
    rest = s.remainder(1e-7)
    if not scored:
        assert rest is None and not s.partial and s.chunks == 0
        return
    assert rest.n == n and np.array_equal(rest.x, x) and np.array_equal(rest.y, y)
    assert s.partial and s.chunks == 1 and s.chunk_rows == n


def test_an_empty_schedule_has_no_remainder():
    assert schedule(4).remainder(1e-7) is None


def test_keep_holds_the_first_and_the_previous_chunk():
    x, y = rows(12)
    s = schedule(4)
    chunks = s.cut(x, y, 1e-7)
    assert s.first is None and s.previous is None
    for c in chunks:
        s.keep(c)
        assert s.previous is c
    assert s.first is chunks[0] and s.previous is chunks[2]


def test_a_saved_schedule_continues_the_same_cut():
    x, y = rows(14)
    one = schedule(4)
    whole = one.cut(x, y, 1e-7)
    s = schedule(4)
    first = s.cut(x[:6], y[:6], 1e-7)
    s.keep(first[0])
    state = to_state(s)
    assert "pending" not in state and state["buffer"]["size"] == 4 and state["buffer"]["x"].shape == (2, 3)
    back = from_state(ChunkSchedule, state)
    assert back.chunks == 1 and np.array_equal(back.first.x, first[0].x) and not back.first.x.flags.writeable
    rest = back.cut(x[6:], y[6:], 1e-7)
    assert back.chunks == 3 and back.buffer.rows == 2
    for a, b in zip(whole, first + rest, strict=True):
        assert np.array_equal(a.x, b.x) and np.array_equal(a.y, b.y)


# --- site_state: SiteState ---

CHUNK = 16
METRICS = ["affinity", "cka"]


@pytest.fixture(scope="module")
def metrics():
    return resolve(METRICS)


@pytest.fixture(scope="module")
def more_metrics():
    """Every kind the merge touches: chunk scores, a chunk pair across the boundary, pooled moments."""
    return resolve([*METRICS, "r2_heldout", "cka_pooled"])


@pytest.fixture
def scorer():
    with MetricScorer(0) as s:
        yield s


def features(n: int, dy: int = 6, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """X [n, 6] and a non-linear Y [n, dy] of it, float32 as onnxruntime gives them."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, 6))
    y = np.tanh(x @ rng.standard_normal((6, dy))) + 0.1 * rng.standard_normal((n, dy))
    return x.astype(np.float32), y.astype(np.float32)


def feed(st: SiteState, x, y, metrics, scorer, start: int, stop: int, batch: int = 8) -> SiteState:
    """Rows [start, stop) in batches, each numbered with its shard unit as the feeder numbers it."""
    for a in range(start, stop, batch):
        b = min(a + batch, stop)
        st.add(x[a:b], y[a:b], metrics, scorer, block=a // CHUNK)
    return st


def entries(st: SiteState, metrics) -> dict:
    return {m.spec: metric_entry(st, m) for m in metrics}


def finished(st: SiteState, metrics, scorer) -> dict:
    st.finish(metrics, scorer)
    return entries(st, metrics)


def test_a_site_scores_each_full_chunk_with_every_metric(metrics, scorer):
    x, y = features(60)
    st = feed(SiteState.open(CHUNK, index=0, label="s"), x, y, metrics, scorer, 0, 60)
    got = finished(st, metrics, scorer)
    assert st.finished and st.chunks == 3 and st.observed.rows == 60 and st.observed.dims == (6, 6)
    for name in METRICS:
        e = got[name]
        assert e["status"] == "ok" and e["chunks"] == 3 and len(e["values"]) == 3
        assert e["mean"] == float(np.mean(e["values"])) and 0 < e["mean"] < 1


@pytest.mark.parametrize("through_file", [False, True])
def test_a_state_saved_restored_and_finished_gives_the_same_entries(metrics, scorer, tmp_path, through_file):
    x, y = features(60)
    direct = finished(feed(SiteState.open(CHUNK, index=0, label="s"), x, y, metrics, scorer, 0, 60), metrics,
                      scorer)
    live = feed(SiteState.open(CHUNK, index=0, label="s"), x, y, metrics, scorer, 0, 40)  # 2 chunks, 8 rows left
    state = live.to_state()
    assert "label" not in state and "pending" not in state and state["rows"] == 40 and state["chunks"] == 2
    if through_file:
        state = load_state(save_state(tmp_path / "s.npz", {"site": state}))["site"]
    back = SiteState.from_state(state, label="s")
    assert back.label == "s" and back.index == 0 and back.schedule.buffer.rows == 8
    feed(back, x, y, metrics, scorer, 40, 60)
    assert finished(back, metrics, scorer) == direct


def test_a_restored_finished_state_is_not_finished_twice(more_metrics, scorer):
    x, y = features(40)
    st = feed(SiteState.open(CHUNK, index=0, label="s"), x, y, more_metrics, scorer, 0, 40)
    want = finished(st, more_metrics, scorer)
    assert want["cka_pooled"]["values"] == [want["cka_pooled"]["mean"]]
    back = SiteState.from_state(st.to_state(), label="s")
    assert back.finished
    assert finished(back, more_metrics, scorer) == want  # no pooled score appended twice


@pytest.mark.parametrize("split", [16, 32, 48])
def test_two_states_split_at_a_chunk_boundary_merge_into_one_bit_for_bit(more_metrics, scorer, split):
    x, y = features(72)  # 4 full chunks and 8 rows left over in the last part
    one = finished(feed(SiteState.open(CHUNK, index=0, label="s"), x, y, more_metrics, scorer, 0, 72),
                   more_metrics, scorer)
    first = feed(SiteState.open(CHUNK, index=0, label="s"), x, y, more_metrics, scorer, 0, split)
    second = feed(SiteState.open(CHUNK, index=0, label="s"), x, y, more_metrics, scorer, split, 72)
    first.merge(SiteState.from_state(second.to_state(), label="s"), more_metrics, scorer)
    merged = finished(first, more_metrics, scorer)
    assert merged == one  # floats compared with ==: every value, mean, std and interval bit for bit
    assert merged["r2_heldout"]["chunks"] == 3  # the pair straddling the split is scored once
    assert merged["cka_pooled"]["pooled_rows"] == 72 and first.observed.rows == 72


def test_merging_parts_of_other_dimensions_is_an_error(metrics, scorer):
    x, y = features(16)
    _, y4 = features(16, dy=4)
    a = feed(SiteState.open(CHUNK, label="s"), x, y, metrics, scorer, 0, 16)
    b = feed(SiteState.open(CHUNK, label="s"), x, y4, metrics, scorer, 0, 16)
    with pytest.raises(OnnxaffError, match=r"parts disagree on feature dimensions \(\(6, 6\) vs \(6, 4\)\)"):
        a.merge(b, metrics, scorer)


@pytest.mark.parametrize("bad_row", [3, 20])
def test_nan_rows_flag_the_site_and_no_value_is_given(metrics, scorer, bad_row):
    x, y = features(48)
    y[bad_row, 2] = np.nan
    x[bad_row + 1, 0] = np.inf
    st = feed(SiteState.open(CHUNK, index=0, label="s"), x, y, metrics, scorer, 0, 48)
    got = finished(st, metrics, scorer)
    assert st.observed.nonfinite_rows == 2 and st.observed.rows == 48
    for name in METRICS:
        assert got[name]["status"] == "nonfinite" and got[name]["mean"] is None and "values" not in got[name]
    if bad_row < CHUNK:  # flagged before its first chunk: nothing scored at all
        assert st.scores.values == {} and st.chunks == 0


def test_a_metric_needing_equal_dims_is_not_applicable_where_they_differ(metrics, scorer):
    x, y = features(48, dy=4)
    st = feed(SiteState.open(CHUNK, index=0, label="s"), x, y, metrics, scorer, 0, 48)
    got = finished(st, metrics, scorer)
    affinity = next(m for m in metrics if m.name == "affinity")
    assert affinity.equal_dims
    assert got["affinity"]["status"] == "not_applicable" and got["affinity"]["mean"] is None
    assert got["affinity"]["reason"] == "needs equal feature dimensions (X: 6, Y: 4)"
    assert "affinity" not in st.scores.values and "affinity" not in st.scores.errors  # never computed
    assert got["cka"]["status"] == "ok" and got["cka"]["chunks"] == 3


def test_rows_of_x_and_y_must_agree(metrics, scorer):
    x, y = features(16)
    with pytest.raises(OnnxaffError, match="s: X gives 16 rows and Y 15"):
        SiteState.open(CHUNK, label="s").add(x, y[:15], metrics, scorer)


# --- observations ---


def test_rounding_keeps_the_largest_seen():
    seen = Observations()
    seen.note_rounding(None)
    assert seen.rounding is None
    for r, want in ((1e-7, 1e-7), (4e-7, 4e-7), (2e-7, 4e-7), (None, 4e-7)):
        seen.note_rounding(r)
        assert seen.rounding == want


def test_observations_merge_counts_and_keeps_the_least_scale_and_the_largest_rounding():
    a = Observations(rows=10, nonfinite_rows=1, dims=(3, 2), seen={"constant_output"}, scale=0.5, rounding=1e-7)
    b = Observations(rows=6, nonfinite_rows=2, dims=(3, 2), seen={"rank_deficient"}, scale=0.25, rounding=3e-7)
    a.merge(b)
    assert (a.rows, a.nonfinite_rows, a.dims) == (16, 3, (3, 2))
    assert a.seen == {"constant_output", "rank_deficient"} and a.scale == 0.25 and a.rounding == 3e-7
    empty = Observations()
    empty.merge(Observations(rows=4, dims=(3, 2), scale=0.5))
    assert empty.dims == (3, 2) and empty.scale == 0.5 and empty.rounding is None


def test_observations_of_other_dims_do_not_merge():
    a = Observations(rows=10, dims=(3, 2))
    with pytest.raises(ValueError, match=r"parts disagree on feature dimensions \(\(3, 2\) vs \(3, 3\)\)"):
        a.merge(Observations(rows=4, dims=(3, 3)))
    assert a.rows == 10  # nothing taken from the refused part


def test_observations_state_round_trips_dims_and_seen():
    seen = Observations(rows=5, dims=(4, 2), seen={"b", "a"}, scale=0.1)
    state = to_state(seen)
    assert state["dims"] == [4, 2] and state["seen"] == ["a", "b"]
    assert from_state(Observations, state) == seen


def test_note_rows_counts_rows_with_nan_or_inf_once_each():
    seen = Observations()
    x = np.zeros((5, 3), np.float32)
    y = np.zeros((5, 2), np.float32)
    assert seen.note_rows(x, y) and seen.dims == (3, 2)
    x[1, 0], y[1, 1], y[4, 0] = np.nan, np.inf, -np.inf
    assert not seen.note_rows(x, y)
    assert seen.rows == 10 and seen.nonfinite_rows == 2

"""The what-if replay's two paths: the shift trick where it is exact, one tracker per lane elsewhere."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lowwater.advisor.lanes import ExactLanes, ShiftedLanes, at_bound, grid_lanes, shifted
from lowwater.advisor.replay import Log, replay
from lowwater.advisor.session_sweep import SessionSweep
from lowwater.advisor.sweep import COMPARE_FIELDS, FIELDS, LatenessSweep
from lowwater.core.lateness import classify, row_verdicts
from lowwater.core.tracker import DEFAULT_SOURCE, WatermarkTracker
from lowwater.core.watermarks import Adaptive, Punctuated, WatermarkStrategy
from lowwater.core.windows import HoppingWindows, SessionWindows, TumblingWindows

S = 1_000_000
ADAPTIVE = WatermarkStrategy.for_generator(Adaptive(target_quantile=0.9, rows=5, max_lateness_us=30 * S))


@st.composite
def logs(draw):
    n_parts = draw(st.integers(1, 3))
    n = draw(st.integers(1, 60))
    parts = np.array([str(draw(st.integers(0, n_parts - 1))) for _ in range(n)])
    arrival = np.array(sorted(draw(st.lists(st.integers(0, 200), min_size=n, max_size=n)))) * S
    delays = np.array(draw(st.lists(st.integers(0, 40), min_size=n, max_size=n))) * S
    keys = np.array(draw(st.lists(st.integers(0, 3), min_size=n, max_size=n)), dtype=np.int64)
    strategy = WatermarkStrategy()
    if draw(st.booleans()):
        strategy = strategy.with_idleness(draw(st.integers(1, 50)) * S)
    if draw(st.booleans()):
        strategy = strategy.with_partitions([str(i) for i in range(n_parts)])
    if draw(st.booleans()):
        strategy = strategy.with_max_future_skew(draw(st.integers(0, 5)) * S)
    bounds = sorted(set(draw(st.lists(st.integers(0, 30), min_size=1, max_size=4))))
    graces = sorted(set(draw(st.lists(st.integers(0, 20), min_size=1, max_size=2))))
    cuts = sorted(set(draw(st.lists(st.integers(1, max(1, n - 1)), max_size=3))))
    batches = np.array(sorted(draw(st.lists(st.integers(0, 4), min_size=n, max_size=n))))
    return strategy, parts, arrival - delays, arrival, keys, [b * S for b in bounds], [g * S for g in graces], \
        cuts, batches


def feed_all(sweep, parts, event, arrival, keys, cuts, batches, **extra):
    lo = 0
    for hi in [*cuts, len(event)]:
        more = {k: v[lo:hi] for k, v in extra.items()}
        sweep.feed(parts[lo:hi], event[lo:hi], keys[lo:hi], arrival[lo:hi], batch_ids=batches[lo:hi], **more)
        lo = hi
    return sweep.results()


@settings(max_examples=120, deadline=None)
@given(logs(), st.sampled_from([TumblingWindows(10 * S), HoppingWindows(10 * S, 5 * S), SessionWindows(8 * S)]))
def test_shift_trick_equals_one_tracker_per_bound(case, assigner):
    """For one bounded L, the shifted W_0 and a tracker per grid point give the same figures, to the row."""
    strategy, parts, event, arrival, keys, bounds, graces, cuts, batches = case
    cls = SessionSweep if isinstance(assigner, SessionWindows) else LatenessSweep
    exact = {f"L={b}": {DEFAULT_SOURCE: at_bound(strategy, b)} for b in bounds}
    sweep = cls(strategy, assigner, bounds, graces, compare=exact)
    assert isinstance(sweep.lanes[0], ShiftedLanes) and isinstance(sweep.lanes[1], ExactLanes)
    rows = feed_all(sweep, parts, event, arrival, keys, cuts, batches)
    grid, compared = sweep.split(rows)
    assert all(set(r) == set(FIELDS) for r in grid) and all(set(r) == set(COMPARE_FIELDS) for r in compared)
    by_lane = {(r["strategy"], r["allowed_lateness"]): r for r in compared}
    for r in grid:
        twin = by_lane[(f"L={int(r['lateness'] * S)}", r["allowed_lateness"])]
        assert {k: twin[k] for k in FIELDS if k != "lateness"} == {k: r[k] for k in FIELDS if k != "lateness"}


def naive(strategies, assigner, grace_us, parts, event, arrival, sources=None, markers=None):
    """Verdict counts the engine's way: one tracker over the whole log, then classify each data row's windows."""
    tracker = WatermarkTracker(strategies)
    w = tracker.advance(parts, event, arrival, sources=sources, markers=markers)
    data = np.arange(len(event)) if markers is None else np.flatnonzero(~markers)
    pairs = assigner.assign(event[data])
    verdict = classify(pairs.end, w[data][pairs.row], grace_us)
    return np.bincount(row_verdicts(pairs.row, verdict, len(data)), minlength=3).tolist()


def test_per_partition_bounds_and_other_generators_never_take_the_shift():
    bounded = WatermarkStrategy(2 * S)
    assert isinstance(grid_lanes({DEFAULT_SOURCE: bounded}, [0, S]), ShiftedLanes)
    for s in (bounded.with_bounds({"a": 9 * S}), ADAPTIVE, WatermarkStrategy.for_generator(Punctuated("m"))):
        assert isinstance(grid_lanes({DEFAULT_SOURCE: s}, [0, S]), ExactLanes)
        with pytest.raises(ValueError, match="exact only"):
            ShiftedLanes({DEFAULT_SOURCE: s}, [0])
    # Per-partition overrides keep their bound while the grid moves the default.
    assert at_bound(bounded.with_bounds({"a": 9 * S}), 4 * S).bound_for("a") == 9 * S
    assert at_bound(bounded.with_bounds({"a": 9 * S}), 4 * S).bound_for("b") == 4 * S
    floor = at_bound(ADAPTIVE, 40 * S).generator
    assert (floor.min_lateness_us, floor.max_lateness_us) == (40 * S, 40 * S)


def delayed_log():
    """One partition, one row per second; every 5th row arrives 3 s late, every 17th 5 s more."""
    i = np.arange(100)
    arrival = i * S
    delay = np.where(i % 5 == 2, 3 * S, 0) + np.where(i % 17 == 9, 5 * S, 0)
    return np.array(["p"] * 100), arrival - delay, arrival, np.zeros(100, dtype=np.int64)


def test_adaptive_grid_is_replayed_exactly():
    """A grid point L is an adaptive floor: W_L is not W_0 - L, and the grid must not pretend it is."""
    parts, event, arrival, keys = delayed_log()
    assigner = TumblingWindows(5 * S)
    bounds = [0, 2 * S, 5 * S]
    sweep = LatenessSweep(ADAPTIVE, assigner, bounds, [0])
    assert isinstance(sweep.lanes[0], ExactLanes)
    grid = {r["lateness"]: r for r in feed_all(sweep, parts, event, arrival, keys, [40], np.zeros(100))}
    w0 = WatermarkTracker(ADAPTIVE).advance(parts, event, arrival)
    tricked = []
    for b in bounds:
        expected = naive(at_bound(ADAPTIVE, b), assigner, 0, parts, event, arrival)
        r = grid[b / S]
        assert [r["on_time"], r["late_updates"], r["too_late"]] == expected
        pairs = assigner.assign(event)  # what the shift W_0 - L would have said
        tricked.append(np.bincount(row_verdicts(pairs.row, classify(pairs.end, shifted(w0, b)[pairs.row], 0), 100),
                                   minlength=3).tolist() != expected)
    assert any(tricked)  # on this log the shift trick gives other figures than the exact replay
    bounded = LatenessSweep(WatermarkStrategy(), assigner, [0], [0])
    assert grid[0.0]["too_late"] < feed_all(bounded, parts, event, arrival, keys, [], np.zeros(100))[0]["too_late"]


def test_compare_reports_the_adaptive_range_and_the_punctuated_markers():
    parts, event, arrival, keys = delayed_log()
    markers = np.zeros(100, dtype=bool)
    markers[::10] = True  # every 10th row proves its own event time
    lanes = {
        "bounded 0s": {DEFAULT_SOURCE: WatermarkStrategy()},
        "adaptive": {DEFAULT_SOURCE: ADAPTIVE},
        "punctuated": {DEFAULT_SOURCE: WatermarkStrategy.for_generator(Punctuated("m"))},
    }
    got = replay(lanes, TumblingWindows(5 * S), 0, Log(parts, event, keys, arrival, markers=markers))
    one_by_one = WatermarkTracker(ADAPTIVE)  # the L in force after every row
    seen = [one_by_one.advance(parts[i:i + 1], event[i:i + 1], arrival[i:i + 1]) is not None
            and one_by_one.statuses()[0].lateness_us for i in range(100)]
    assert got["adaptive"]["lateness_range"] == [min(seen) / S, max(seen) / S] and max(seen) > min(seen)
    assert got["bounded 0s"]["lateness_range"] is None
    for label, strategies in lanes.items():
        r = got[label]
        assert r["rows"] == 90  # marker rows are not data
        expected = naive(strategies, TumblingWindows(5 * S), 0, parts, event, arrival, markers=markers)
        assert [r["on_time"], r["late_updates"], r["too_late"]] == expected, label
    assert got["punctuated"]["too_late"] < got["bounded 0s"]["too_late"]


def two_sources(seed=3):
    """Sources `slow` and `fast`, one row each per second, delays up to 25 s, arrival order across sources."""
    rng = np.random.default_rng(seed)
    arrival = np.repeat(np.arange(300), 2) * S
    sources = np.tile(np.array(["slow", "fast"]), 300)
    event = arrival - rng.integers(0, 26, len(arrival)) * S
    parts = np.array([f"p{i % 3}" for i in range(len(arrival))])
    keys = rng.integers(0, 4, len(arrival))
    return Log(parts, event, keys, arrival, sources=sources)


def test_the_30s_source_governs_tightening_the_other_changes_nothing():
    log = two_sources()

    def bounded(seconds):  # W is defined once every declared partition of every source reported (§2)
        return WatermarkStrategy(seconds * S).with_partitions(["p0", "p1", "p2"])

    slow, fast = bounded(30), bounded(10)
    lanes = {
        "as configured": {"slow": slow, "fast": fast},
        "fast tightened": {"slow": slow, "fast": bounded(1)},
        "slow tightened": {"slow": bounded(1), "fast": fast},
    }
    got = replay(lanes, TumblingWindows(10 * S), 0, log, chunk_rows=97)
    same = [k for k in FIELDS if k != "lateness"]
    assert {k: got["as configured"][k] for k in same} == {k: got["fast tightened"][k] for k in same}
    assert got["slow tightened"]["too_late"] > got["as configured"]["too_late"]
    r = got["slow tightened"]
    ordered = log.in_arrival_order()
    expected = naive(lanes["slow tightened"], TumblingWindows(10 * S), 0, ordered.partitions, ordered.event_us,
                     ordered.arrival_us, sources=ordered.sources)
    assert [r["on_time"], r["late_updates"], r["too_late"]] == expected
    assert all("/" in name for name in r["too_late_by_partition"])  # source/partition with several sources
    # Rows given out of order are put in (arrival, source, partition, offset) order first.
    shuffled = np.random.default_rng(0).permutation(len(log.event_us))
    mixed = Log(*(a[shuffled] for a in (log.partitions, log.event_us, log.key_hash, log.arrival_us, log.sources)))
    assert replay(lanes, TumblingWindows(10 * S), 0, mixed) == got

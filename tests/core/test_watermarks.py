"""The watermark tracker against a row-by-row reading of SEMANTICS.md §2.

``naive_watermarks`` is a deliberately plain, per-row transcription of the
contract (no numpy tricks); the vectorised tracker must agree with it on
random logs, and must give the same W(r) however the log is cut (§8).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lowwater.core.tracker import WatermarkTracker
from lowwater.core.watermarks import BoundedOutOfOrderness, WatermarkStrategy, clip_future
from lowwater.time import NEG_INF, POS_INF


def naive_watermarks(strategy: WatermarkStrategy, rows: list[tuple[str, int, int | None]]) -> list[int]:
    """W(r) for rows (partition, event, arrival) in arrival order, one row at a time."""
    max_ev: dict[str, int] = {}
    last: dict[str, int] = {}
    declared = list(strategy.declared_partitions)
    w = NEG_INF
    start = None
    out = []

    def candidate(clock: int | None) -> int:
        parts = list(dict.fromkeys(declared + list(max_ev)))
        active = []
        for p in parts:
            if strategy.idle_timeout_us is not None and clock is not None:
                ref = last.get(p, start)
                if clock - ref > strategy.idle_timeout_us:
                    continue
            active.append(p)
        if any(p not in max_ev for p in active):
            return NEG_INF  # a declared, active partition has not reported
        if not active:
            return NEG_INF
        return min(max_ev[p] - strategy.bound_for(p) for p in active)

    for p, ev, arr in rows:
        if start is None:
            start = arr
        w = max(w, candidate(arr))
        out.append(w)
        max_ev[p] = max(max_ev.get(p, NEG_INF), ev)
        if arr is not None:
            last[p] = arr
        w = max(w, candidate(arr))  # right after r, r's partition is active
    return out


def test_bounded_out_of_orderness_is_max_minus_bound():
    g = BoundedOutOfOrderness(3)
    assert g.watermark(np.array([10, NEG_INF])).tolist() == [7, NEG_INF]
    with pytest.raises(ValueError):
        BoundedOutOfOrderness(-1)


@pytest.mark.parametrize(
    ("rows", "expected"),
    [
        # one partition: W(r) = max seen before r - L
        ([("0", 10, None), ("0", 5, None), ("0", 20, None)], [NEG_INF, 8, 8]),
        # p1 discovered after W reached 98: it joins the min, but W never regresses
        ([("0", 100, None), ("1", 10, None), ("0", 110, None), ("1", 12, None)], [NEG_INF, 98, 98, 98]),
    ],
)
def test_tracker_table(rows, expected):
    t = WatermarkTracker(WatermarkStrategy.for_bounded_out_of_orderness(2))
    parts = np.array([r[0] for r in rows])
    ev = np.array([r[1] for r in rows])
    assert t.advance(parts, ev).tolist() == expected


def test_the_slowest_declared_partition_governs():
    """min, never max: p1 trails by 90 and holds W back."""
    rows = [("0", 100), ("1", 10), ("0", 110), ("1", 12), ("0", 120)]
    t = WatermarkTracker(WatermarkStrategy.for_bounded_out_of_orderness(2).with_partitions(["0", "1"]))
    w = t.advance(np.array([r[0] for r in rows]), np.array([r[1] for r in rows]))
    assert w.tolist() == [NEG_INF, NEG_INF, 8, 8, 10]
    assert t.spread() == (118 - 10, "1")


def test_monotone_when_a_partition_rejoins_behind():
    s = WatermarkStrategy.for_bounded_out_of_orderness(0).with_idleness(10)
    t = WatermarkTracker(s)
    # p1 silent from arrival 1 to 30: idle, W follows p0 to 29; p1 comes back with event 5
    w = t.advance(np.array(["0", "1", "0", "1", "0"]), np.array([0, 1, 29, 5, 30]), np.array([0, 1, 29, 30, 31]))
    assert w.tolist() == [NEG_INF, 0, 0, 29, 29]
    assert t.watermark_us == 29  # never regresses to p1's 5
    assert t.state.regressions_ignored == 1


def test_declared_partitions_block_until_reported():
    t = WatermarkTracker(WatermarkStrategy().with_partitions(["a", "b"]))
    assert t.advance(np.array(["a", "a"]), np.array([5, 9])).tolist() == [NEG_INF, NEG_INF]
    assert t.watermark_us == NEG_INF
    t.advance(np.array(["b"]), np.array([7]))
    assert t.watermark_us == 7


def test_drain_sets_infinity():
    t = WatermarkTracker(WatermarkStrategy())
    t.advance(np.array(["0"]), np.array([5]))
    t.drain()
    assert t.watermark_us == POS_INF
    assert t.advance(np.array(["0"]), np.array([1])).tolist() == [POS_INF]


def test_idleness_needs_an_arrival_clock():
    t = WatermarkTracker(WatermarkStrategy().with_idleness(5))
    with pytest.raises(ValueError, match="arrival clock"):
        t.advance(np.array(["0"]), np.array([1]))


def test_clip_future_counts_and_clamps():
    ev, mask = clip_future(np.array([1, 50, 9]), np.array([10, 10, 10]), 5)
    assert ev.tolist() == [1, 10, 9] and mask.tolist() == [False, True, False]
    ev, mask = clip_future(np.array([1]), None, 5)
    assert ev.tolist() == [1] and not mask.any()


@st.composite
def logs(draw):
    n_parts = draw(st.integers(1, 4))
    n = draw(st.integers(1, 60))
    parts = [str(draw(st.integers(0, n_parts - 1))) for _ in range(n)]
    arrivals = sorted(draw(st.lists(st.integers(0, 200), min_size=n, max_size=n)))
    delays = draw(st.lists(st.integers(0, 40), min_size=n, max_size=n))
    events = [a - d for a, d in zip(arrivals, delays, strict=True)]
    bound = draw(st.integers(0, 10))
    idle = draw(st.one_of(st.none(), st.integers(1, 50)))
    declare = draw(st.booleans())
    s = WatermarkStrategy.for_bounded_out_of_orderness(bound).with_idleness(idle)
    if declare:
        s = s.with_partitions([str(i) for i in range(n_parts)])
    if draw(st.booleans()):
        s = s.with_bounds({"0": draw(st.integers(0, 20))})
    cuts = sorted(set(draw(st.lists(st.integers(1, max(1, n - 1)), max_size=5))))
    return s, list(zip(parts, events, arrivals, strict=True)), cuts


@settings(max_examples=300, deadline=None)
@given(logs())
def test_tracker_matches_the_contract_and_any_cutting(case):
    strategy, rows, cuts = case
    expected = naive_watermarks(strategy, rows)
    parts = np.array([r[0] for r in rows])
    ev = np.array([r[1] for r in rows], dtype=np.int64)
    arr = np.array([r[2] for r in rows], dtype=np.int64)
    whole = WatermarkTracker(strategy)
    assert whole.advance(parts, ev, arr).tolist() == expected
    pieces = WatermarkTracker(strategy)
    got = []
    bounds = [0, *cuts, len(rows)]
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        # Each batch resumes from the serialised state, as after a restart.
        pieces = WatermarkTracker(strategy, type(pieces.state).from_json(pieces.state.to_json()))
        got += pieces.advance(parts[lo:hi], ev[lo:hi], arr[lo:hi]).tolist()
    assert got == expected
    assert pieces.watermark_us == whole.watermark_us


@settings(max_examples=300, deadline=None)
@given(logs())
def test_the_path_without_idleness_equals_the_two_evaluation_path(case):
    """With no input able to go idle each state is evaluated once; with an idle timeout longer than
    the whole log, twice (at the row just consumed and at the next one). Same W(r) and carried state
    (maxima, last arrivals, clocks, regressions)."""
    strategy, rows, cuts = case
    strategy = dataclasses.replace(strategy, idle_timeout_us=None)
    never_idle = strategy.with_idleness(10**9)
    parts = np.array([r[0] for r in rows])
    ev = np.array([r[1] for r in rows], dtype=np.int64)
    arr = np.array([r[2] for r in rows], dtype=np.int64)
    once, twice = WatermarkTracker(strategy), WatermarkTracker(never_idle)
    bounds = [0, *cuts, len(rows)]
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        assert once.advance(parts[lo:hi], ev[lo:hi], arr[lo:hi]).tolist() == (
            twice.advance(parts[lo:hi], ev[lo:hi], arr[lo:hi]).tolist()
        )
        assert once.state.to_json() == twice.state.to_json()

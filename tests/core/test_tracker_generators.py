"""The tracker over every generator: the min over ``(source, partition)``, regressions, and §8.

``naive_low_watermarks`` (tests/core/naive_generators.py) reads SEMANTICS.md
§2 one row at a time; the tracker must agree with it for every strategy, with
and without idleness, for one source or several, and give the same ``W(r)``
however the log is cut (each batch resuming from the JSON the manifest stores).
"""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lowwater.core.tracker import TrackerState, WatermarkTracker
from lowwater.core.watermarks import Adaptive, Punctuated, WatermarkStrategy
from lowwater.time import NEG_INF
from tests.core.naive_generators import naive_low_watermarks


def feed(tracker: WatermarkTracker, log: list[tuple], sources: bool = False) -> list[int]:
    """Rows (source, partition, event, arrival, marker) through ``advance`` in one call."""
    return tracker.advance(
        np.array([r[1] for r in log]),
        np.array([r[2] for r in log], dtype=np.int64),
        None if log and log[0][3] is None else np.array([r[3] for r in log], dtype=np.int64),
        sources=np.array([r[0] for r in log]) if sources else None,
        markers=np.array([r[4] for r in log], dtype=bool),
    ).tolist()


def timeline(spec: str, arrivals: list[int], events: list[int]) -> list[tuple]:
    """``spec`` is one token per row: partition, then ``M`` for a marker row (``aM``, ``b``)."""
    return [("default", t[0], e, a, t.endswith("M")) for t, a, e in zip(spec.split(), arrivals, events, strict=True)]


def test_punctuated_partitions_combine_by_min():
    # row      aM   b    bM   a    aM   bM
    # arrival  0    1    2    3    4    5
    # event    10   50   20   99   30   25
    # W_a      10   10   10   10   30   30
    # W_b      -    -    20   20   20   25 (25 > 20: moves; a data row at 50 did not)
    # W(r)     -inf 10   10   10   10   20   (b reported without a marker: W holds at 10 until its marker)
    log = timeline("aM b bM a aM bM", [0, 1, 2, 3, 4, 5], [10, 50, 20, 99, 30, 25])
    t = WatermarkTracker(WatermarkStrategy.for_generator(Punctuated("is_marker")))
    assert feed(t, log) == [NEG_INF, 10, 10, 10, 10, 20]
    assert t.watermark_us == 25
    assert t.state.regressions_ignored == 0


def test_a_partition_without_a_marker_holds_w_until_it_goes_idle():
    # row      aM   b    aM   aM
    # arrival  0    1    8    14
    # event    10   7    15   30
    # W(r)     -inf 10   10   15   b reported at 1 without a marker: W holds at 10 (b promised nothing);
    #                               at 14, b has been silent 13 > 10: idle, out of the min, W follows a
    log = timeline("aM b aM aM", [0, 1, 8, 14], [10, 7, 15, 30])
    t = WatermarkTracker(WatermarkStrategy.for_generator(Punctuated("m")).with_idleness(10))
    assert feed(t, log) == [NEG_INF, 10, 10, 15]
    assert t.watermark_us == 30
    assert [(s.partition, s.active) for s in t.statuses()] == [("a", True), ("b", False)]


def test_a_marker_regression_is_ignored_counted_and_logged_once_per_step(caplog):
    # row      aM   aM   aM   aM
    # event    10   4    12   3      two markers older than the last one: W_a stays; 2 regressions
    log = timeline("aM aM aM aM", [0, 1, 2, 3], [10, 4, 12, 3])
    t = WatermarkTracker(WatermarkStrategy.for_generator(Punctuated("m")))
    with caplog.at_level(logging.WARNING, logger="lowwater.core.tracker"):
        w = feed(t, log)
    assert w == [NEG_INF, 10, 10, 12]
    assert t.watermark_us == 12 and np.all(np.diff(w) >= 0)
    assert t.state.regressions_ignored == 2
    assert len(caplog.records) == 1 and "2 proposal(s)" in caplog.records[0].getMessage()


def test_a_widening_adaptive_bound_is_ignored_and_counted():
    # rows = 2, q = 1.0: L = the larger of the last two delays
    # arrival  10  11  12  13
    # event    10  11  2   13
    # L        0   0   10  10
    # proposal 10  11  1   3      W_p stays at 11 twice: two regressions; W monotone
    log = timeline("a a a a", [10, 11, 12, 13], [10, 11, 2, 13])
    t = WatermarkTracker(WatermarkStrategy.for_generator(Adaptive(target_quantile=1.0, rows=2)))
    assert feed(t, log) == [NEG_INF, 10, 11, 11]
    assert t.watermark_us == 11 and t.state.regressions_ignored == 2
    assert t.statuses()[0].lateness_us == 10


def test_sources_are_keyed_separately_and_the_slowest_governs():
    # Two sources with a partition named "0" each: two inputs, not one.
    # radar (L = 1):   events 100 at arrival 0 and 1;   optical (L = 30): event 100 at arrival 2
    strategies = {
        "radar": WatermarkStrategy.for_bounded_out_of_orderness(1),
        "optical": WatermarkStrategy.for_bounded_out_of_orderness(30),
    }
    t = WatermarkTracker(strategies)
    log = [("radar", "0", 100, 0, False), ("radar", "0", 100, 1, False), ("optical", "0", 100, 2, False)]
    # Each source is an input of the union (as in Flink): W is undefined until optical reports.
    assert feed(t, log, sources=True) == [NEG_INF, NEG_INF, NEG_INF]
    assert t.watermark_us == 70  # min(radar 99, optical 70): the slower source governs from the start
    assert t.state.regressions_ignored == 0
    assert {(s.source, s.partition, s.watermark_us) for s in t.statuses()} == {("radar", "0", 99), ("optical", "0", 70)}
    assert t.state.to_json()["sources"] == ["optical", "radar"]  # registered in name order within a batch
    with pytest.raises(ValueError, match="several sources"):
        t.advance(np.array(["0"]), np.array([1]), np.array([3]))
    with pytest.raises(ValueError, match="'lidar', which is not configured"):
        t.advance(np.array(["0"]), np.array([1]), np.array([3]), sources="lidar")


def test_a_silent_declared_source_goes_idle_in_a_batch_without_its_rows():
    # cdc declares partition "0" and never reports; idle_timeout 1 from the run's first arrival (0).
    # row      radar  radar  radar  | cut | radar
    # arrival  0      0      2      |     | 3
    # W(r)     -inf   -inf   0            2     cdc idle from arrival 2 on: radar alone governs
    strategies = {
        "radar": WatermarkStrategy(),
        "cdc": WatermarkStrategy().with_idleness(1).with_partitions(["0"]),
    }
    log = [("radar", "0", e, a, False) for e, a in [(0, 0), (0, 0), (2, 2), (3, 3)]]
    t = WatermarkTracker(strategies)
    assert feed(t, log[:3], sources=True) + feed(t, log[3:], sources=True) == [NEG_INF, NEG_INF, 0, 2]
    assert t.watermark_us == 3


def test_an_old_manifest_restores_and_a_single_source_state_keeps_its_json():
    old = {  # the tracker JSON of a manifest written before generators existed
        "partitions": ["0", "1"], "max_event_us": [100, 40], "last_arrival_us": [5, 6], "watermark_us": 38,
        "clock_us": 6, "start_clock_us": 0, "rows_seen": 7, "regressions_ignored": 0,
    }
    t = WatermarkTracker(WatermarkStrategy.for_bounded_out_of_orderness(2), TrackerState.from_json(dict(old)))
    assert t.advance(np.array(["1", "0"]), np.array([90, 101]), np.array([7, 8])).tolist() == [38, 88]
    assert set(t.state.to_json()) == set(old)  # no new keys for a single bounded source
    assert t.state.max_event_us == [101, 90] and t.state.rows_seen == 9


@st.composite
def strategy_for(draw, n_parts: int) -> WatermarkStrategy:
    kind = draw(st.sampled_from(["bounded", "punctuated", "adaptive"]))
    if kind == "bounded":
        s = WatermarkStrategy.for_bounded_out_of_orderness(draw(st.integers(0, 10)))
        if draw(st.booleans()):
            s = s.with_bounds({"0": draw(st.integers(0, 20))})
    elif kind == "punctuated":
        s = WatermarkStrategy.for_generator(Punctuated("m"))
    else:
        rows = draw(st.one_of(st.none(), st.integers(1, 8)))
        over = draw(st.integers(1, 60)) if rows is None else draw(st.one_of(st.none(), st.integers(1, 60)))
        low = draw(st.integers(0, 5))
        high = draw(st.one_of(st.none(), st.integers(low, low + 30)))
        q = draw(st.sampled_from([0.5, 0.9, 0.999, 1.0]))
        s = WatermarkStrategy.for_generator(Adaptive(q, rows, over, low, high))
    s = s.with_idleness(draw(st.one_of(st.none(), st.integers(1, 50))))
    if draw(st.booleans()):
        s = s.with_partitions([str(i) for i in range(n_parts)])
    return s


@st.composite
def logs(draw):
    names = ["radar", "cdc"][: draw(st.integers(1, 2))]
    n_parts = draw(st.integers(1, 3))
    strategies = {name: draw(strategy_for(n_parts)) for name in names}
    n = draw(st.integers(1, 50))
    arrivals = sorted(draw(st.lists(st.integers(0, 200), min_size=n, max_size=n)))
    log = [
        (
            draw(st.sampled_from(names)),
            str(draw(st.integers(0, n_parts - 1))),
            a - draw(st.integers(-3, 40)),
            a,
            draw(st.booleans()),
        )
        for a in arrivals
    ]
    cuts = sorted(set(draw(st.lists(st.integers(1, max(1, n - 1)), max_size=5))))
    return strategies, log, cuts


@settings(max_examples=400, deadline=None)
@given(logs())
def test_every_strategy_matches_the_contract_and_any_cutting(case):
    strategies, log, cuts = case
    several = len(strategies) > 1
    expected, regressions = naive_low_watermarks(strategies, log)
    build = (lambda state=None: WatermarkTracker(strategies, state)) if several else (
        lambda state=None: WatermarkTracker(strategies["radar"], state)
    )
    whole = build()
    assert feed(whole, log, sources=several) == expected
    assert whole.state.regressions_ignored == regressions
    pieces, got = build(), []
    bounds = [0, *cuts, len(log)]
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        # Each batch resumes from the JSON a manifest stores, as after a restart.
        pieces = build(TrackerState.from_json(json.loads(json.dumps(pieces.state.to_json()))))
        got += feed(pieces, log[lo:hi], sources=several)
    assert got == expected
    assert carried(pieces) == carried(whole)


def carried(t: WatermarkTracker) -> tuple:
    """The carried state, per input: inputs are registered in the order batches discover them."""
    st = t.state
    scalars = (st.watermark_us, st.clock_us, st.start_clock_us, st.rows_seen, st.regressions_ignored)
    inputs = sorted(
        (s.source, s.partition, s.watermark_us, s.active, s.lateness_us, json.dumps(st.snapshot_of(i), sort_keys=True))
        for i, s in enumerate(t.statuses())
    )
    return scalars, inputs

"""The row clock (core/row_clock) equals the tracker's ``W(r)`` row for row.

Per micro-batch every partition is summarised on its own, from the snapshot
the tracker state carries, and the summaries are folded on the "driver"; each
row then looks its ``W(r)`` up by its key alone. For random logs, strategies
(bounded with per-partition ``L``, punctuated with marker rows, adaptive),
idleness, declared partitions, several sources, clipping and random cuts this
must equal :meth:`WatermarkTracker.advance` on the same batches, and so must
the carried state (snapshots, clock, regressions counted).
"""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from lowwater.core.accounting import dead_by_source
from lowwater.core.judge import clip_per_source
from lowwater.core.row_clock import PartitionSummary, fold, gap_for, summarise_partition
from lowwater.core.tracker import TrackerState, WatermarkTracker
from lowwater.core.tracker_state import DEFAULT_SOURCE
from lowwater.core.watermarks import PartitionRows, WatermarkStrategy
from lowwater.time import NEG_INF
from tests.core.test_tracker_generators import strategy_for


def _snapshot(state: TrackerState | None, source: str, partition: str, several: bool) -> dict | None:
    """The generator snapshot the state carries for ``(source, partition)`` (None: a new input)."""
    if state is None:
        return None
    names = state.sources if several else [source] * len(state.partitions)
    for i, key in enumerate(zip(names or [], state.partitions, strict=True)):
        if key == (source, partition):
            return state.snapshot_of(i)
    return None


def summarise_batch(strategies, state, batch, seq0, clock, several) -> list[PartitionSummary]:
    """Pass 1: one summary per (source, partition), each from its own rows and snapshot only."""
    gap = gap_for(strategies)
    out = []
    for key in sorted({(r[0], r[1]) for r in batch}):
        at = [k for k, r in enumerate(batch) if (r[0], r[1]) == key]
        source = key[0] if several else DEFAULT_SOURCE
        strat = strategies[key[0]] if several else next(iter(strategies.values()))
        arrival = np.array([batch[k][3] for k in at], dtype=np.int64)
        seq = seq0 + np.array(at, dtype=np.int64)
        rows = PartitionRows(
            np.array([batch[k][2] for k in at], dtype=np.int64),
            arrival if clock else None,
            np.array([batch[k][4] for k in at], dtype=bool),
        )
        major, minor = (arrival, seq) if clock else (seq, np.zeros(len(at), dtype=np.int64))
        snap = _snapshot(state, source, key[1], several)
        out.append(summarise_partition(strat, key[1], snap, rows, major, minor, source=source, gap_us=gap))
    return out


def tracker_batch(tracker: WatermarkTracker, strategies, batch, clock, several) -> list[int]:
    """The current path: the batch in arrival order through the tracker (event times clipped first, as judge does)."""
    arrival = np.array([r[3] for r in batch], dtype=np.int64) if clock else None
    sources = np.array([r[0] for r in batch]) if several else None
    skew = {name: s.max_future_skew_us for name, s in tracker.strategies.items()}
    event, _ = clip_per_source(np.array([r[2] for r in batch], dtype=np.int64), arrival, skew, sources)
    return tracker.advance(
        np.array([r[1] for r in batch]), event, arrival, sources=sources,
        markers=np.array([r[4] for r in batch], dtype=bool),
    ).tolist()


def run_both(strategies: dict, log: list[tuple], cuts: list[int], clock: bool = True) -> None:
    several = len(strategies) > 1
    config = strategies if several else next(iter(strategies.values()))
    tracker, state = WatermarkTracker(config), None
    bounds = [0, *cuts, len(log)]
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        batch = log[lo:hi]
        expected = tracker_batch(tracker, strategies, batch, clock, several)
        summaries = summarise_batch(strategies, state, batch, lo, clock, several)
        # The driver gets the summaries and the state as JSON, as from executors and a manifest.
        step, state, _ = fold(summaries, config, TrackerState.from_json(json.loads(json.dumps(
            (state or TrackerState(sources=[] if several else None)).to_json()))))
        seq = np.arange(lo, hi, dtype=np.int64)
        arrival = np.array([r[3] for r in batch], dtype=np.int64)
        got = step.lookup(*((arrival, seq) if clock else (seq, np.zeros(len(seq), dtype=np.int64)))).tolist()
        assert got == expected, (lo, hi)
        assert state.to_json() == tracker.state.to_json()


@st.composite
def cases(draw, max_parts: int = 5, max_rows: int = 80):
    names = ["radar", "cdc"][: draw(st.integers(1, 2))]
    n_parts = draw(st.integers(1, max_parts))
    strategies = {}
    for name in names:
        s = draw(strategy_for(n_parts))
        if draw(st.booleans()):
            s = s.with_max_future_skew(draw(st.integers(0, 20)))
        strategies[name] = s
    n = draw(st.integers(1, max_rows))
    span = draw(st.sampled_from([20, 300, 4 * max_rows]))  # 20: many rows share an arrival time
    arrivals = sorted(draw(st.lists(st.integers(0, span), min_size=n, max_size=n)))
    log = [
        (
            draw(st.sampled_from(names)),
            str(draw(st.integers(0, n_parts - 1))),
            a - draw(st.integers(-25, 40)),
            a,
            draw(st.booleans()),
        )
        for a in arrivals
    ]
    cuts = sorted(set(draw(st.lists(st.integers(1, max(1, n - 1)), max_size=6))))
    # Without an arrival clock: only strategies that need none (no idleness, no adaptive, no clipping).
    clockless = all(
        s.kind != "adaptive" and s.idle_timeout_us is None and s.max_future_skew_us is None
        for s in strategies.values()
    )
    clock = not (clockless and draw(st.booleans()))
    return strategies, log, cuts, clock


@settings(max_examples=400, deadline=None)
@given(cases())
def test_the_row_clock_equals_the_tracker_row_for_row_for_any_cut(case):
    strategies, log, cuts, clock = case
    run_both(strategies, log, cuts, clock)


@settings(max_examples=40, deadline=None)
@given(cases(max_parts=12, max_rows=400))
def test_the_row_clock_equals_the_tracker_on_longer_logs_with_many_partitions(case):
    strategies, log, cuts, clock = case
    run_both(strategies, log, cuts, clock)


def test_a_threshold_no_row_arrives_in_does_not_move_w():
    # p@0 (event 100), q@2 (event 200), p@50: p idle from 11, q from 13, but no row arrives
    # before 50, when both are idle: W holds at 100 (min(p, q) at 2). A fold that evaluated
    # the point between 11 and 13 (p idle, q active) would say 200.
    s = WatermarkStrategy.for_bounded_out_of_orderness(0).with_idleness(10)
    log = [("radar", "p", 100, 0, False), ("radar", "q", 200, 2, False), ("radar", "p", 300, 50, False)]
    run_both({"radar": s}, log, [])
    t = WatermarkTracker(s)
    assert tracker_batch(t, {"radar": s}, log, True, False) == [NEG_INF, 100, 100]


def test_several_sources_wait_for_a_silent_one_until_its_timeout():
    radar = WatermarkStrategy.for_bounded_out_of_orderness(0).with_idleness(30)
    cdc = WatermarkStrategy.for_bounded_out_of_orderness(5).with_partitions(["0"])
    log = [("radar", "0", 10 * a, a, False) for a in range(0, 100, 7)] + [("cdc", "0", 500, 101, False)]
    run_both({"radar": radar, "cdc": cdc}, log, [3, 9])


def test_an_in_order_ish_partition_summarises_to_far_fewer_entries_than_rows():
    # 100k rows, 40 a millisecond, a little disorder inside it: W_p moves about once a millisecond.
    n = 100_000
    rng = np.random.default_rng(7)
    arrival = 1_000 * (np.arange(n) // 40) + rng.integers(0, 1000, n).clip(0, 999)
    arrival = np.sort(arrival)
    event = arrival - rng.integers(0, 5_000, n)
    s = WatermarkStrategy.for_bounded_out_of_orderness(10_000).with_idleness(60_000_000)
    rows = PartitionRows(event, arrival)
    summary = summarise_partition(s, "0", None, rows, arrival, np.arange(n), gap_us=gap_for({"x": s}))
    assert len(summary.keys) < n // 10
    step, state, counts = fold([summary], s)
    assert len(step) <= len(summary.keys) and counts.entries == len(summary.keys) and counts.rows == n
    t = WatermarkTracker(s)
    assert np.array_equal(step.lookup(arrival, np.arange(n)), t.advance(np.full(n, "0"), event, arrival))
    assert state.to_json() == t.state.to_json()


def test_a_summary_must_keep_the_gaps_the_smallest_timeout_needs():
    s = WatermarkStrategy.for_bounded_out_of_orderness(0).with_idleness(10)
    rows = PartitionRows(np.array([1, 2]), np.array([0, 50]))
    coarse = summarise_partition(s, "0", None, rows, np.array([0, 50]), np.array([0, 1]), gap_us=None)
    try:
        fold([coarse], s)
    except ValueError as e:
        assert "idle_timeout" in str(e)
    else:
        raise AssertionError("a summary without the gaps was folded")
    assert replace(coarse, gap_us=10).gaps()[0].tolist() == [0]


def test_the_tasks_dead_letters_per_source_add_up_and_an_unknown_part_makes_them_unknown():
    # Pass 1's tasks each count their dead letters per source; the driver's fold sums them (the join splits its
    # dead letters between its sides by them), and a task that could not tell leaves the split unknown.
    tasks = [{"clicks": 2}, {}, {"orders": 1, "clicks": 1}, {"orders": 3}]
    assert dead_by_source(tasks) == {"clicks": 3, "orders": 4}
    assert dead_by_source([]) == {}
    assert dead_by_source([*tasks, None]) is None

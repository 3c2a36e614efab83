"""The what-if sweep by hand: a small log replayed under several L (and G)."""

from __future__ import annotations

import numpy as np
import pytest

from lowwater.advisor.sweep import FIELDS, LatenessSweep
from lowwater.core.watermarks import WatermarkStrategy
from lowwater.core.windows import HoppingWindows, TumblingWindows

S = 1_000_000
# One partition, 10s tumbling windows; event times in arrival order:
#   1  4  13  7  25  3
# L=0:  W(r) = -inf 1 4 13 13 25 -> 7 too late (end 10 <= 13), 3 too late
# L=2:  W(r) = -inf -1 2 11 11 23 -> 7 too late (10 <= 11), 3 too late
# L=5:  W(r) = -inf -4 -1 8 8 20  -> 7 on time (10 > 8), 3 too late (10 <= 20)
# L=20: W(r) = -inf ... 5 at the last row -> all on time
EVENTS = np.array([1, 4, 13, 7, 25, 3]) * S


def sweep(bounds, graces, assigner=None, parts=None, events=EVENTS, chunks=(6,)):
    s = LatenessSweep(WatermarkStrategy(), assigner or TumblingWindows(10 * S), [b * S for b in bounds],
                      [g * S for g in graces])
    parts = np.array(parts or ["0"] * len(events))
    keys = np.zeros(len(events), dtype=np.int64)
    lo = 0
    for hi in np.cumsum(chunks):
        s.feed(parts[lo:hi], events[lo:hi], keys[lo:hi])
        lo = hi
    return {(r["lateness"], r["allowed_lateness"]): r for r in s.results()}


def test_too_late_shrinks_as_l_grows():
    r = sweep([0, 2, 5, 20], [0])
    assert [r[(b, 0)]["too_late"] for b in (0, 2, 5, 20)] == [2, 2, 1, 0]
    assert all(set(x) == set(FIELDS) for x in r.values())
    assert r[(5, 0)]["completeness"] == 5 / 6


def test_grace_turns_too_late_into_late_updates():
    r = sweep([2], [0, 5, 20])
    assert [(r[(2, g)]["late_updates"], r[(2, g)]["too_late"]) for g in (0, 5, 20)] == [(0, 2), (1, 1), (2, 0)]


def test_windows_fired_and_emit_latency():
    # L=2: after 13, W=11 >= 10: [0,10) fires with max event seen 13 -> latency 3s.
    # After 25, W=23 >= 20: [10,20) fires with max seen 25 -> latency 5s. [20,30) only by a drain.
    r = sweep([2], [0])[(2, 0)]
    assert (r["windows_fired"], r["windows_drain_only"]) == (2, 1)
    assert r["emit_latency_mean"] == 4.0
    # One micro-batch (one feed, no batch ids): after it W = 23 has freed [0,10) and [10,20).
    assert r["peak_open_windows"] == 1


@pytest.mark.parametrize(
    ("batch_ids", "chunks", "peak"),
    [
        (None, (6,), 1),  # one micro-batch: W = 20 at its end, only [20,30) is left
        ([0, 0, 0, 1, 1, 1], (6,), 2),  # after 1 4 13, W = 8: [0,10) and [10,20) both open
        ([0, 0, 0, 1, 1, 1], (1, 2, 1, 2), 2),  # the same batches fed in other chunks
        ([0, 0, 0, 1, 1, 1], (2, 4), 2),  # a batch that spans two chunks
        ([0, 0, 1, 1, 2, 2], (3, 3), 2),  # after 13 7, W = 8: both open again
        ([0, 0, 0, 0, 0, 1], (3, 3), 1),  # 13 and 25 in one batch: W = 20 at its end, [20,30) alone
        ([0, 1, 2, 3, 4, 5], (6,), 2),  # one row per batch: the most any cutting shows
    ],
)
def test_peak_open_windows_is_counted_at_micro_batch_ends(batch_ids, chunks, peak):
    """L = 5, G = 0: W after each row is -4 -1 8 8 20 20; entries are freed at the end of a micro-batch."""
    s = LatenessSweep(WatermarkStrategy(), TumblingWindows(10 * S), [5 * S], [0])
    parts, keys = np.array(["0"] * 6), np.zeros(6, dtype=np.int64)
    ids = None if batch_ids is None else np.array(batch_ids)
    lo = 0
    for hi in np.cumsum(chunks):
        s.feed(parts[lo:hi], EVENTS[lo:hi], keys[lo:hi], batch_ids=None if ids is None else ids[lo:hi])
        lo = hi
    assert s.results()[0]["peak_open_windows"] == peak


def test_chunking_does_not_change_counts():
    whole = sweep([0, 2, 5], [0, 5])
    cut = sweep([0, 2, 5], [0, 5], chunks=(1, 2, 1, 2))
    for k in whole:
        for f in ("on_time", "late_updates", "too_late", "windows_fired", "windows_drain_only", "emit_latency_mean"):
            assert whole[k][f] == cut[k][f], (k, f)


def test_two_partitions_and_hopping():
    # p1 trails p0 by 15s; declared partitions: the min keeps p1 on time for any L.
    events = np.array([20, 5, 22, 7, 24, 9]) * S
    parts = ["0", "1", "0", "1", "0", "1"]
    s = LatenessSweep(WatermarkStrategy().with_partitions(["0", "1"]), HoppingWindows(10 * S, 5 * S), [0, 2 * S], [0])
    s.feed(np.array(parts), events, np.zeros(6, dtype=np.int64))
    res = {r["lateness"]: r for r in s.results()}
    assert res[0]["too_late"] == 0 and res[2]["too_late"] == 0
    # Without declaring p1, it is discovered behind W=20 (L=0): its rows are too late.
    s = LatenessSweep(WatermarkStrategy(), HoppingWindows(10 * S, 5 * S), [0], [0])
    s.feed(np.array(parts), events, np.zeros(6, dtype=np.int64))
    r = s.results()[0]
    assert r["too_late"] == 3 and r["too_late_by_partition"] == {"1": 3}


def test_dead_letters_are_counted():
    s = LatenessSweep(WatermarkStrategy(), TumblingWindows(10 * S), [0], [0])
    s.feed(np.array(["0"]), np.array([1 * S]), np.zeros(1, dtype=np.int64), dead_letter=2)
    r = s.results()[0]
    assert (r["rows"], r["dead_letter"], r["on_time"]) == (3, 2, 1)


# -- the sweep against the engine's own per-L path -----------------------------------------------------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from lowwater.core.judge import judge  # noqa: E402
from lowwater.core.tracker import WatermarkTracker  # noqa: E402


@st.composite
def sweep_logs(draw):
    n_parts = draw(st.integers(1, 3))
    n = draw(st.integers(1, 80))
    parts = np.array([str(draw(st.integers(0, n_parts - 1))) for _ in range(n)])
    arrival = np.array(sorted(draw(st.lists(st.integers(0, 200), min_size=n, max_size=n)))) * S
    delays = np.array(draw(st.lists(st.integers(0, 40), min_size=n, max_size=n))) * S
    keys = np.array(draw(st.lists(st.integers(0, 3), min_size=n, max_size=n)), dtype=np.int64)
    strategy = WatermarkStrategy()
    if draw(st.booleans()):
        strategy = strategy.with_idleness(draw(st.integers(1, 50)) * S)
    if draw(st.booleans()):
        strategy = strategy.with_partitions([str(i) for i in range(n_parts)])
    assigner = draw(st.sampled_from([TumblingWindows(10 * S), HoppingWindows(10 * S, 5 * S)]))
    bounds = sorted(set(draw(st.lists(st.integers(0, 30), min_size=1, max_size=4))))
    graces = sorted(set(draw(st.lists(st.integers(0, 20), min_size=1, max_size=3))))
    cuts = sorted(set(draw(st.lists(st.integers(1, max(1, n - 1)), max_size=4))))
    batches = np.array(sorted(draw(st.lists(st.integers(0, 5), min_size=n, max_size=n))))
    return strategy, assigner, parts, arrival - delays, arrival, keys, bounds, graces, cuts, batches


@settings(max_examples=150, deadline=None)
@given(sweep_logs())
def test_every_l_and_g_equals_the_engine_judging_alone(case):
    """One scan at L=0 serves every L: the grid equals `judge` run once per (L, G) with its own tracker."""
    strategy, assigner, parts, event, arrival, keys, bounds, graces, cuts, batches = case
    s = LatenessSweep(strategy, assigner, [b * S for b in bounds], [g * S for g in graces])
    lo = 0
    for hi in [*cuts, len(event)]:
        s.feed(parts[lo:hi], event[lo:hi], keys[lo:hi], arrival[lo:hi], batch_ids=batches[lo:hi])
        lo = hi
    got = {(r["lateness"], r["allowed_lateness"]): r for r in s.results()}
    for b in bounds:
        for g in graces:
            tracker = WatermarkTracker(
                WatermarkStrategy(b * S, (), strategy.idle_timeout_us, strategy.declared_partitions)
            )
            j = judge(tracker, assigner, g * S, parts, event, arrival)
            r = got[(float(b), float(g))]
            counts = np.bincount(j.row_verdict, minlength=3)
            assert (r["on_time"], r["late_updates"], r["too_late"]) == tuple(counts.tolist())
            too = parts[j.row_verdict == 2]
            assert r["too_late_by_partition"] == {p: int((too == p).sum()) for p in sorted(set(too.tolist()))}
            # Every (key, window) with an on-time pair fires before the end of the log or on a drain.
            on = j.verdict == 0
            groups = set(zip(j.pairs.end[on].tolist(), keys[j.pairs.row[on]].tolist(), strict=True))
            assert r["windows_fired"] + r["windows_drain_only"] == len(groups)
            assert r["windows_fired"] == sum(1 for e, _ in groups if e <= tracker.watermark_us)
            assert r["peak_open_windows"] == engine_peak_open(strategy, b * S, assigner, g * S, parts, event,
                                                              arrival, keys, batches)


def engine_peak_open(strategy, bound_us, assigner, grace_us, parts, event, arrival, keys, batches) -> int:
    """The engine's way, naively: judge each micro-batch, keep admitted (key, window) entries, free at its end."""
    tracker = WatermarkTracker(WatermarkStrategy(bound_us, (), strategy.idle_timeout_us, strategy.declared_partitions))
    open_entries: set = set()
    peak = 0
    for b in np.unique(batches):
        rows = np.flatnonzero(batches == b)
        j = judge(tracker, assigner, grace_us, parts[rows], event[rows], arrival[rows])
        admitted = j.verdict < 2  # on time or late update: the entry holds state
        open_entries |= set(zip(j.pairs.end[admitted].tolist(), keys[rows][j.pairs.row[admitted]].tolist(),
                                strict=True))
        open_entries = {(e, k) for e, k in open_entries if e + grace_us > tracker.watermark_us}
        peak = max(peak, len(open_entries))
    return peak

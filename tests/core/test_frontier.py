"""The arrival frontier (core/frontier.py) and several sources through ``judge``.

The property test is the pure-core version of SEMANTICS.md §8 for several
sources: each source cut into micro-batches independently, rows held until
the frontier passes them, gives every row the same ``W(r)`` and verdict as
one batch of the whole log in arrival order.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from lowwater.core.frontier import ArrivalFrontier, FrontierState, Lanes
from lowwater.core.judge import arrival_order, judge
from lowwater.core.tracker import WatermarkTracker
from lowwater.core.watermarks import Punctuated, WatermarkStrategy
from lowwater.core.windows import TumblingWindows
from lowwater.time import NEG_INF, POS_INF

S = 1_000_000


def test_frontier_is_the_slowest_source():
    f = ArrivalFrontier({"a": None, "b": None})
    st_ = FrontierState()
    assert f.frontier_us(st_) == NEG_INF  # nobody delivered: nothing may be judged
    f.deliver(st_, np.array(["a", "a"]), np.array([5, 600]))
    assert f.frontier_us(st_) == NEG_INF  # b has delivered nothing
    f.deliver(st_, np.array(["b"]), np.array([20]))
    assert f.frontier_us(st_) == 20
    assert f.holder(st_) == "b"
    # a's rows after 20 wait for b; a's row at 20 sorts before anything b may still deliver at 20
    # ((20, "a") < (20, "b")); b never waits for itself.
    ready = f.ready(st_, np.array(["a", "a", "a", "b"]), np.array([19, 20, 21, 20]))
    assert ready.tolist() == [True, True, False, True]
    # b at 600 waits: a may still deliver at 600, and (600, "a") sorts first
    ready = f.ready(st_, np.array(["b", "b"]), np.array([20, 600]))
    assert ready.tolist() == [True, False]


def test_idle_source_stops_holding_after_its_timeout():
    f = ArrivalFrontier({"a": None, "b": 60 * S})
    st_ = FrontierState()
    f.deliver(st_, np.array(["a", "b"]), np.array([0, 20 * S]))
    assert f.frontier_us(st_) == 0
    f.deliver(st_, np.array(["a"]), np.array([70 * S]))
    assert f.idle(st_) == []  # 20 s + 60 s is not yet passed
    assert f.frontier_us(st_) == 20 * S
    f.deliver(st_, np.array(["a"]), np.array([81 * S]))
    assert f.idle(st_) == ["b"]
    assert f.frontier_us(st_) == 81 * S


def test_a_silent_source_with_a_timeout_counts_from_the_first_arrival():
    f = ArrivalFrontier({"a": None, "b": 10 * S})
    st_ = FrontierState()
    f.deliver(st_, np.array(["a"]), np.array([100 * S]))
    assert f.frontier_us(st_) == NEG_INF  # b: 100 s + 10 s not passed yet
    f.deliver(st_, np.array(["a"]), np.array([111 * S]))
    assert f.frontier_us(st_) == 111 * S
    assert FrontierState.from_json(st_.to_json()) == st_


def test_a_source_with_landed_unread_files_is_never_idle():
    # flights read six hours of files in one step, weather (idle_timeout 90 min) one: by the clock weather
    # is idle, but it has files landed and waiting, so it holds the frontier at its own latest arrival.
    f = ArrivalFrontier({"flights": None, "weather": 90 * 60 * S})
    st_ = FrontierState()
    f.deliver(st_, np.array(["weather", "flights", "flights"]), np.array([600, 300, 6 * 3600]) * S)
    assert f.idle(st_) == ["weather"]  # caught up (or not told): silent for 90 min by the clock
    assert f.idle(st_, {"weather": False}) == []  # landed, unread: not silent
    assert f.holder(st_, {"weather": False}) == "weather"
    assert f.frontier_us(st_, {"weather": False}) == 600 * S
    assert f.ready(st_, np.array(["flights", "flights"]), np.array([300, 6 * 3600]) * S,
                   {"weather": False}).tolist() == [True, False]
    # Read to the end of its log: it is silent now, and idle by its timeout.
    assert f.idle(st_, {"weather": True}) == ["weather"]
    assert f.frontier_us(st_, {"weather": True}) == 6 * 3600 * S  # flights alone


def test_only_a_lane_s_own_past_makes_an_arrival_regression():
    f = ArrivalFrontier({"a": None, "b": None})
    st_ = FrontierState()
    f.deliver(st_, np.array(["a", "b"]), np.array([500, 20]))
    # b reads behind a's clock: not a regression (another source read ahead); a going back is one.
    assert f.regressions(st_, np.array(["b", "b"]), np.array([30, 40])) == []
    assert f.regressions(st_, np.array(["a", "b"]), np.array([400, 20])) == [("a", 400, 500)]


def test_no_holding_source_means_plus_infinity():
    assert ArrivalFrontier({}).frontier_us(FrontierState()) == POS_INF


def test_marker_rows_move_the_watermark_but_are_not_judged():
    strat = {"cdc": WatermarkStrategy.for_generator(Punctuated("m")), "bnd": WatermarkStrategy()}
    tracker = WatermarkTracker(strat)
    # cdc: data 5, marker 10, data 7 (behind the marker: too late); bnd: data 12.
    ev = np.array([5, 12, 10, 7]) * S
    sources = np.array(["cdc", "bnd", "cdc", "cdc"])
    markers = np.array([False, False, True, False])
    j = judge(tracker, TumblingWindows(10 * S), 0, np.array(["0"] * 4), ev, np.arange(4) * S,
              sources=sources, markers=markers)
    assert j.markers == 1
    assert j.data.tolist() == [0, 1, 3]
    assert len(j.event_us) == 3
    # W after the marker: min(cdc 10, bnd 12) = 10; row 3 (event 7, window [0,10)) is too late.
    assert j.watermark_us.tolist() == [NEG_INF, NEG_INF, 10 * S]
    assert j.row_verdict.tolist() == [0, 0, 2]
    assert j.seq.tolist() == [0, 1, 3]


def test_clipping_is_per_source():
    strat = {"a": WatermarkStrategy().with_max_future_skew(60 * S), "b": WatermarkStrategy()}
    tracker = WatermarkTracker(strat)
    ev = np.array([1000, 1000]) * S
    j = judge(tracker, TumblingWindows(10 * S), 0, np.array(["0", "0"]), ev, np.array([0, 0]),
              sources=np.array(["a", "b"]))
    assert j.clipped.tolist() == [True, False]
    assert j.event_us.tolist() == [0, 1000 * S]


SOURCES = {"fast": 1 * S, "slow": 30 * S, "mid": 10 * S}


@st.composite
def multi_source_logs(draw):
    """Rows of three sources with per-source non-decreasing arrivals, and independent cuts per source."""
    logs = {}
    for name in SOURCES:
        n = draw(st.integers(1, 25))
        gaps = draw(st.lists(st.integers(0, 4), min_size=n, max_size=n))
        arrival = np.cumsum(gaps) * S
        delay = np.array(draw(st.lists(st.integers(0, 40), min_size=n, max_size=n))) * S
        part = np.array(draw(st.lists(st.sampled_from(["0", "1"]), min_size=n, max_size=n)))
        by = np.lexsort([part, arrival])  # a source's log is in its own arrival order
        arrival, delay, part = arrival[by], delay[by], part[by]
        cuts = sorted(set(draw(st.lists(st.integers(1, max(1, n - 1)), max_size=4))))
        logs[name] = (arrival, arrival - delay, part, cuts)
    return logs


def _one_batch(logs):
    rows = [(a, name, p, i, e) for name, (arr, ev, part, _) in logs.items()
            for i, (a, e, p) in enumerate(zip(arr.tolist(), ev.tolist(), part.tolist(), strict=True))]
    rows.sort(key=lambda r: (r[0], r[1], r[2], r[3]))
    tracker = WatermarkTracker({n: WatermarkStrategy.for_bounded_out_of_orderness(b) for n, b in SOURCES.items()})
    j = judge(tracker, TumblingWindows(10 * S), 0, np.array([r[2] for r in rows]), np.array([r[4] for r in rows]),
              np.array([r[0] for r in rows]), sources=np.array([r[1] for r in rows]))
    return {(r[1], r[3]): (int(w), int(v)) for r, w, v in zip(rows, j.watermark_us, j.row_verdict, strict=True)}


def _cut_and_held(logs):
    """Micro-batch k brings each source's k-th chunk; rows wait until the frontier passes them."""
    chunks = {}
    for name, (arr, _ev, _part, cuts) in logs.items():
        bounds = [0, *cuts, len(arr)]
        chunks[name] = [list(range(lo, hi)) for lo, hi in zip(bounds[:-1], bounds[1:], strict=True) if hi > lo]
    steps = max(len(c) for c in chunks.values())
    tracker = WatermarkTracker({n: WatermarkStrategy.for_bounded_out_of_orderness(b) for n, b in SOURCES.items()})
    frontier, fstate = ArrivalFrontier({n: None for n in SOURCES}), FrontierState()
    held: list[tuple] = []
    seen = {}
    for k in range(steps + 1):  # the last step drains (F = +inf)
        new = [(int(logs[n][0][i]), n, str(logs[n][2][i]), i, int(logs[n][1][i]))
               for n in SOURCES for i in (chunks[n][k] if k < len(chunks[n]) else [])]
        if new:
            frontier.deliver(fstate, np.array([r[1] for r in new]), np.array([r[0] for r in new]))
        pool = held + new
        if k == steps:
            mask = [True] * len(pool)
        else:
            mask = frontier.ready(fstate, np.array([r[1] for r in pool]), np.array([r[0] for r in pool])).tolist()
        ready = [r for r, m in zip(pool, mask, strict=True) if m]
        held = [r for r, m in zip(pool, mask, strict=True) if not m]
        if not ready:
            continue
        order = arrival_order(len(ready), np.array([r[0] for r in ready]),
                              np.array([f"{r[1]}\x00{r[2]}" for r in ready]), np.array([r[3] for r in ready]))
        ready = [ready[i] for i in order]
        j = judge(tracker, TumblingWindows(10 * S), 0, np.array([r[2] for r in ready]),
                  np.array([r[4] for r in ready]), np.array([r[0] for r in ready]),
                  sources=np.array([r[1] for r in ready]))
        for r, w, v in zip(ready, j.watermark_us, j.row_verdict, strict=True):
            seen[(r[1], r[3])] = (int(w), int(v))
    assert not held
    return seen


@settings(max_examples=60, deadline=None)
@given(multi_source_logs())
def test_any_per_source_cutting_gives_the_one_batch_answer(logs):
    assert _cut_and_held(logs) == _one_batch(logs)


IDLE = {"fast": None, "slow": 3 * S, "mid": 2 * S}  # idle timeouts: the sources go quiet now and then


@st.composite
def idle_source_logs(draw):
    """Three sources with gaps longer than their idle timeouts, each cut on its own (a cut may bring nothing)."""
    logs = {}
    for name in SOURCES:
        n = draw(st.integers(0 if name == "mid" else 1, 20))
        gaps = draw(st.lists(st.sampled_from([0, 1, 1, 2, 5, 9]), min_size=n, max_size=n))
        arrival = np.cumsum(gaps).astype(np.int64) * S
        delay = np.array(draw(st.lists(st.integers(0, 40), min_size=n, max_size=n)), dtype=np.int64) * S
        part = np.array(draw(st.lists(st.sampled_from(["0", "1"]), min_size=n, max_size=n)), dtype=object)
        by = np.lexsort([part, arrival])
        cuts = sorted(draw(st.lists(st.integers(0, n), max_size=6)))  # repeated: a step that brings nothing
        logs[name] = (arrival[by], (arrival - delay)[by], part[by], cuts)
    return logs


def _strategies():
    return {n: WatermarkStrategy.for_bounded_out_of_orderness(b).with_idleness(IDLE[n]) if IDLE[n]
            else WatermarkStrategy.for_bounded_out_of_orderness(b) for n, b in SOURCES.items()}


def _judge_all(logs):
    """Every row of every source judged at once, in arrival order: {(source, i): (W(r), verdict)}."""
    rows = sorted((int(a), n, str(p), i, int(e)) for n, (arr, ev, part, _) in logs.items()
                  for i, (a, e, p) in enumerate(zip(arr, ev, part, strict=True)))
    if not rows:
        return {}
    j = judge(WatermarkTracker(_strategies()), TumblingWindows(10 * S), 0, np.array([r[2] for r in rows]),
              np.array([r[4] for r in rows]), np.array([r[0] for r in rows]), sources=np.array([r[1] for r in rows]))
    return {(r[1], r[3]): (int(w), int(v)) for r, w, v in zip(rows, j.watermark_us, j.row_verdict, strict=True)}


def _cut_with_idleness(logs, told: bool):
    """Step k delivers each source's k-th chunk; ``told``: the frontier knows which sources have unread rows."""
    chunks = {n: list(zip([0, *c], [*c, len(logs[n][0])], strict=True)) for n, (*_, c) in logs.items()}
    steps = max(len(c) for c in chunks.values())
    tracker, frontier, fstate = WatermarkTracker(_strategies()), ArrivalFrontier(IDLE), FrontierState()
    held, seen, regressions = [], {}, 0
    for k in range(steps + 1):  # the last step drains
        new = [(int(logs[n][0][i]), n, str(logs[n][2][i]), i, int(logs[n][1][i]))
               for n in SOURCES if k < steps and k < len(chunks[n]) for i in range(*chunks[n][k])]
        if new:
            regressions += len(frontier.regressions(fstate, np.array([r[1] for r in new]),
                                                    np.array([r[0] for r in new])))
            frontier.deliver(fstate, np.array([r[1] for r in new]), np.array([r[0] for r in new]))
        caught_up = {n: k + 1 >= len(chunks[n]) for n in SOURCES}  # everything landed before the run
        pool = held + new
        mask = [True] * len(pool) if k == steps else frontier.ready(
            fstate, np.array([r[1] for r in pool], dtype=object), np.array([r[0] for r in pool]),
            caught_up if told else None).tolist()
        ready = sorted(r for r, m in zip(pool, mask, strict=True) if m)
        held = [r for r, m in zip(pool, mask, strict=True) if not m]
        if ready:
            j = judge(tracker, TumblingWindows(10 * S), 0, np.array([r[2] for r in ready]),
                      np.array([r[4] for r in ready]), np.array([r[0] for r in ready]),
                      sources=np.array([r[1] for r in ready]))
            seen.update({(r[1], r[3]): (int(w), int(v))
                         for r, w, v in zip(ready, j.watermark_us, j.row_verdict, strict=True)})
    assert regressions == 0  # every source's rows come in its own arrival order
    return seen


@settings(max_examples=150, deadline=None)
@given(idle_source_logs())
def test_idleness_does_not_depend_on_the_cut(logs):
    """Issue 31: idle timeouts, sources cut at random, landed rows waiting: one batch's answer."""
    assert _cut_with_idleness(logs, told=True) == _judge_all(logs)


def test_without_the_backlog_a_cut_can_fool_idleness():
    """The same harness not told which sources have unread rows (the engine before issue 31) differs."""
    logs = {"fast": (np.array([0, 1, 6, 7, 8]) * S, np.array([0, 1, 6, 7, 8]) * S, np.array(["0"] * 5), [5]),
            "slow": (np.array([0, 1, 2, 3, 4]) * S, np.array([0, 0, 0, 0, 0]) * S, np.array(["0"] * 5), [1]),
            "mid": (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, object), [])}
    assert _cut_with_idleness(logs, told=True) == _judge_all(logs)
    assert _cut_with_idleness(logs, told=False) != _judge_all(logs)


def test_rows_are_held_only_when_more_than_one_lane_can_deliver():
    """One source is a union of one: no frontier unless a second source, or a source of partition lanes."""
    assert not Lanes({"default": 60 * S}, (), "default").hold
    assert Lanes({"default": 60 * S}, (), "default").frontier() is None
    assert Lanes({}, ("default",), "default").hold  # Kafka's partitions: lanes of one source
    both = Lanes({"a": None, "b": 10 * S}, ("k",))
    assert both.hold and both.frontier() == ArrivalFrontier({"a": None, "b": 10 * S})  # partition lanes: no timeout

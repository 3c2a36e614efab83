"""Windows after a join (core/join_windows.py): the join's held output watermark drives them.

The scenario file (tests/scenarios/join/windows_after_join.yaml) runs here with
every cut via tests/core/test_join.py's scenario test; this file holds the
window results to a brute force over the brute-force join, whatever the cut,
and checks that a window fires only once the hold reaches its end.
"""

from __future__ import annotations

import copy
from collections import Counter
from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from lowwater.config import parse_config
from lowwater.core.join import IntervalJoin, JoinBounds, Joined, JoinRow, JoinType, Side
from lowwater.core.join_windows import JoinWindows, joined_event_us, run_joined_batch
from lowwater.core.windows import TumblingWindows
from lowwater.testing.join_scenarios import compare, expected, load_join, one_batch_clock, run_join_log
from lowwater.time import NEG_INF

from . import test_temporal_join
from .test_join import S, brute_force, join_logs

SCENARIO = Path(__file__).parent.parent / "scenarios" / "join" / "windows_after_join.yaml"


def test_a_pair_is_stamped_with_its_later_row():
    left, right = JoinRow(Side.LEFT, ("u",), 4, 0), JoinRow(Side.RIGHT, ("u",), 12, 1)
    assert joined_event_us(Joined(left, right, 0)) == 12
    assert joined_event_us(Joined(right, left, 0)) == 12  # whichever side is later
    assert joined_event_us(Joined(left, None, 0)) == 4  # an unmatched left row: its own


def test_a_window_waits_for_the_hold_not_for_w():
    # A click at 8 s is buffered (upper 10 s): W = 15 s passes the window [0, 10) but the hold stays
    # at 8 s, so a pair the click may still make (an order up to 18 s, admitted while W <= 18 s)
    # still lands in a window the hold keeps open; the window fires once the click is freed.
    join = IntervalJoin(JoinBounds(0, 10 * S), JoinType.LEFT_OUTER)
    windows = JoinWindows(TumblingWindows(10 * S), 0, [None])

    def cols(j):  # noqa: ANN001, ANN202
        return j.left.key, {}

    got = run_joined_batch(join, windows, cols, [JoinRow(Side.LEFT, ("u",), 8 * S, 0)], [NEG_INF], 15 * S)
    assert (got.hold_us, got.results) == (8 * S, [])
    got = run_joined_batch(join, windows, cols, [JoinRow(Side.RIGHT, ("u",), 17 * S, 1)], [15 * S], 16 * S)
    assert got.results == []  # the pair (8 s, 17 s) is stamped 17 s: window [10, 20), still open
    got = run_joined_batch(join, windows, cols, [], [], 30 * S)  # W > 18 s frees the click
    assert [(r.start_us // S, r.end_us // S, r.count) for r in got.results] == [(10, 20, 1)]
    assert got.hold_us == 30 * S and windows.behind() == 0


def test_the_scenario_file_in_one_batch_and_one_row_a_batch():
    s = load_join(SCENARIO)
    n = sum(len(v) for v in s.input.values())
    one = run_join_log(s.pipeline(), s.input)
    assert not compare(one, expected(s), s)
    every_row = run_join_log(s.pipeline(), s.input, list(range(1, n)))
    assert (every_row.results, every_row.joined, every_row.counts) == (one.results, one.joined, one.counts)


@st.composite
def windowed_join_logs(draw):
    if draw(st.booleans()):
        raw, inputs, cuts = draw(join_logs())
    else:  # windows after a temporal join: its held output watermark is its waiting left rows'
        raw, inputs, cuts = draw(test_temporal_join.temporal_logs())
    size = draw(st.integers(1, 12))
    slide = draw(st.sampled_from([d for d in range(1, size + 1) if size % d == 0]))
    raw["window"] = ({"type": "tumbling", "size": f"{size}s"} if slide == size
                     else {"type": "hopping", "size": f"{size}s", "slide": f"{slide}s"})
    raw["window"]["key"] = ["user"]
    return raw, inputs, cuts


@settings(max_examples=200, deadline=None)
@given(windowed_join_logs())
def test_window_results_are_the_brute_force_windows_of_the_brute_force_join(case):
    raw, inputs, cuts = case
    cfg = parse_config(copy.deepcopy(raw))
    one = run_join_log(cfg, inputs)
    cut = run_join_log(cfg, inputs, cuts)
    assert (cut.results, cut.joined, cut.counts) == (one.results, one.joined, one.counts)  # §8
    pairs, _ = (brute_force if cfg.join.kind == "interval" else test_temporal_join.brute_force)(cfg, inputs)
    assigner = cfg.join.window.assigner()
    counts: Counter = Counter()
    for key, lt, rt in pairs:
        t = round((lt if rt is None else max(lt, rt)) * S)
        a = assigner.assign(np.array([t], dtype=np.int64))
        counts.update((key, s / S, e / S) for s, e in zip(a.start.tolist(), a.end.tolist(), strict=True))
    want = sorted((k, s, e, "final", 0, n) for (k, s, e), n in counts.items())
    assert one.results == want  # every joined row counted once per window, on time, no revision


# -- windows after a join keep every aggregate (ADR 0039) -----------------------------------------------

NEW_AGGS = {"first": "first_by_time(amount)", "last": "last_by_time(c)", "n": "count_distinct(amount)",
            "s": "collect_set(c)", "l": "collect_list(amount)", "d": "approx_count_distinct(c)",
            "p": "approx_percentile(amount, 0.5)", "total": "sum(amount)"}


@st.composite
def valued_join_logs(draw):
    """:func:`windowed_join_logs` whose clicks carry a text ``c`` and orders an ``amount`` (null now and then),
    windowed by every kind of aggregate."""
    raw, inputs, cuts = draw(windowed_join_logs())
    for r in inputs["clicks"]:
        r["c"] = draw(st.sampled_from(["x", "y", "z"]))
    for r in inputs["orders"]:
        r["amount"] = draw(st.one_of(st.none(), st.integers(0, 4).map(float)))
    raw["join"]["columns"] = {"left": ["c"], "right": ["amount"]}
    raw["window"]["aggregations"] = dict(NEW_AGGS)
    return raw, inputs, cuts


def _joined_entries(cfg, inputs) -> list[tuple]:  # noqa: ANN001
    """Brute force: every joined row of the admitted rows as (user, time, later arrival, earlier arrival, c, amount)."""
    jc = cfg.join
    rows, order, event, w = one_batch_clock(cfg, inputs)
    left, right = [], []
    for k, i in enumerate(order.tolist()):
        name, r = rows[i]
        if not (w[k] > NEG_INF and event[k] < w[k]):
            (left if name == jc.left else right).append((r["user"], int(event[k]), k, r))
    out = []
    for u, lt, lk, lr in left:
        partners = [(rt, rk, rr) for ru, rt, rk, rr in right if ru == u and jc.bounds.matches(lt, rt)]
        out += [(u, max(lt, rt), max(lk, rk), min(lk, rk), lr["c"], rr["amount"]) for rt, rk, rr in partners]
        if not partners and jc.type == JoinType.LEFT_OUTER:
            out.append((u, lt, lk, lk, lr["c"], None))
    return out


@settings(max_examples=200, deadline=None)
@given(valued_join_logs())
def test_every_aggregate_after_a_join_is_the_one_batch_value_for_any_cut(case):
    """first/last by event time (ties: the later row's arrival, then the earlier's), distinct counts,
    collections and sketches of joined rows: any cut gives the one-batch results, which are the brute-force
    values of the brute-force interval join's rows per window (after a temporal join: any cut alone)."""
    raw, inputs, cuts = case
    cfg = parse_config(copy.deepcopy(raw))
    one = run_join_log(cfg, inputs)
    cut = run_join_log(cfg, inputs, cuts)
    assert cut.results == one.results
    if cfg.join.kind != "interval":
        return
    assigner = cfg.join.window.assigner()
    windows: dict[tuple, list] = {}
    for e in _joined_entries(cfg, inputs):
        a = assigner.assign(np.array([e[1]], dtype=np.int64))
        for s, end in zip(a.start.tolist(), a.end.tolist(), strict=True):
            windows.setdefault((str(e[0]), s / S, end / S), []).append(e)
    want = []
    for (u, s, end), es in windows.items():
        es.sort(key=lambda e: e[1:4])  # (time, later arrival, earlier arrival): a total order
        amounts = [e[5] for e in es if e[5] is not None]
        cs = [e[4] for e in es]
        # KLL: exact when small; an inclusive search, as Spark's kll_sketch_get_quantile_double
        p = sorted(amounts)[(len(amounts) - 1) // 2] if amounts else None
        want.append((u, s, end, "final", 0, len(es), es[0][5], es[-1][4], float(len(set(amounts))), sorted(set(cs)),
                     amounts, float(len(set(cs))), p, float(sum(amounts)) if amounts else None))
    assert one.results == sorted(want, key=lambda t: tuple((x is None, x) for x in t))


def test_ties_of_a_joined_rows_time_are_broken_by_its_later_rows_arrival_then_its_earlier_rows():
    # Two clicks of u at 0 s and 2 s, then one order of u at 5 s: both pairs are stamped 5 s and completed by
    # the same order, so the earlier-arriving click's pair is first; a second order at 5 s, arriving later,
    # makes the last pairs.
    raw = {**_interval_config(), "window": {"type": "tumbling", "size": "10s", "key": ["user"],
                                                          "aggregations": dict(NEW_AGGS)}}
    rows = {"clicks": [{"partition": "0", "event_time": 0.0, "arrival_time": 0.0, "user": "u", "c": "y"},
                       {"partition": "0", "event_time": 2.0, "arrival_time": 2.0, "user": "u", "c": "x"}],
            "orders": [{"partition": "0", "event_time": 5.0, "arrival_time": 5.0, "user": "u", "amount": 1.0},
                       {"partition": "0", "event_time": 5.0, "arrival_time": 6.0, "user": "u", "amount": 2.0}]}
    cfg = parse_config(raw)
    (got,) = run_join_log(cfg, rows).results
    # pairs in order: (o1, c1) y/1, (o1, c2) x/1, (o2, c1) y/2, (o2, c2) x/2
    # (the median of {1, 1, 2, 2} by an inclusive search, as Spark's kll_sketch_get_quantile_double: 1.0)
    assert got[5:] == (4, 1.0, "x", 2.0, ["x", "y"], [1.0, 1.0, 2.0, 2.0], 2.0, 1.0, 6.0)
    for cuts in ([1], [2], [3], [1, 2, 3]):
        assert run_join_log(cfg, rows, cuts).results == [got]


def _interval_config() -> dict:
    """An inner interval join of clicks (``c``) and orders (``amount``), orders 0 to 10 s after their click."""
    from .test_join import _config

    raw = _config(0, 10, "inner", 0, 0)
    raw["join"]["columns"] = {"left": ["c"], "right": ["amount"]}
    return raw

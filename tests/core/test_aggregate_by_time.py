"""first_by_time / last_by_time (ADR 0034): the min / max of the by-time input (event µs, arrival order, value).

The value of the row first (last) by event time, ties broken by arrival order, is a min (max) over a total
order, so any cut of the rows in any order and grouping merges to the one-batch value, and a revision or a
retraction is recomputed from the merged state like ``min``/``max``.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lowwater.core import partials
from lowwater.core.aggregates import AggSpec, input_index, type_problem, value_inputs, windowed_only
from lowwater.core.panes import Agg, Pane
from lowwater.core.partials import BY_TIME, empty, merge_into, merged, output
from lowwater.core.triggers import AccumulationMode

# One row: its event time (few values: ties of event time are common) and a value (None is null).
row = st.tuples(st.integers(0, 4), st.one_of(st.none(), st.integers(-50, 50), st.text("ab", max_size=2)))
rows = st.lists(row, max_size=12)
SPECS = [AggSpec("first", "first_by_time", "v"), AggSpec("last", "last_by_time", "v")]
INPUTS = value_inputs(SPECS)


def partial_of(rs: list[tuple[int, tuple]]) -> list:
    """The partial of ``(arrival position, (event, value))`` rows over :data:`INPUTS` (no sum: a by-time value)."""
    p = empty(len(INPUTS))
    for a, (e, v) in rs:
        vals = [partials.input_value(v, of, (e, a)) if of == BY_TIME else partials.input_value(_num(v), of)
                for _, of in INPUTS]
        partials.add_row_where(p, vals, [False] * len(INPUTS))
    return p


def _num(v: object) -> object:
    return None if v is None else str(v)  # the column itself: kept as text beside the by-time input


def results(p: list) -> dict[str, object]:
    return {s.name: output(s.func, p, input_index(INPUTS, s)) for s in SPECS}


def expected(rs: list[tuple[int, tuple]]) -> dict[str, object]:
    """Straight from the rows: Spark's ``min_by``/``max_by`` of the value over (event time, arrival)."""
    if not rs:
        return {"first": None, "last": None}
    order = sorted(rs, key=lambda r: (r[1][0], r[0]))
    return {"first": order[0][1][1], "last": order[-1][1][1]}


def numbered(rs: list[tuple]) -> list[tuple[int, tuple]]:
    return list(enumerate(rs))


def test_the_by_time_input_and_its_types():
    assert INPUTS == [("v", ""), ("v", BY_TIME)]
    assert AggSpec.parse("f", "FIRST_BY_TIME(amount)") == AggSpec("f", "first_by_time", "amount")
    assert type_problem(AggSpec("f", "first_by_time", "c"), "string") is None
    assert type_problem(AggSpec("f", "last_by_time", "c"), "array<int>") == (
        "last_by_time(c) needs a number, string, date, timestamp or boolean, but column 'c' is array<int>")


@given(rs=rows)
def test_one_batch_is_the_value_first_and_last_by_event_time_then_arrival(rs):
    assert results(partial_of(numbered(rs))) == expected(numbered(rs))


@given(rs=rows, cuts=st.lists(st.integers(0, 12), max_size=4), order=st.randoms())
def test_any_cut_in_any_order_merges_to_the_one_batch_value(rs, cuts, order):
    rs = numbered(rs)
    bounds = [0, *sorted(c for c in cuts if c < len(rs)), len(rs)]
    pieces = [partial_of(rs[a:b]) for a, b in zip(bounds, bounds[1:], strict=False)]
    order.shuffle(pieces)
    p = empty(len(INPUTS))
    for q in pieces:
        merge_into(p, q)
    assert p == partial_of(rs)
    assert results(p) == expected(rs)


@given(a=rows, b=rows, c=rows)
def test_merge_is_associative_and_commutative(a, b, c):
    rs = numbered(a + b + c)
    pa_, pb, pc = partial_of(rs[:len(a)]), partial_of(rs[len(a):len(a) + len(b)]), partial_of(rs[len(a) + len(b):])
    assert merged(merged(pa_, pb), pc) == merged(pa_, merged(pb, pc))
    assert merged(pa_, pb) == merged(pb, pa_)
    assert results(merged(merged(pa_, pb), pc)) == expected(rs)


def _agg(a: int, e: int, v: object) -> Agg:
    p = empty(1)
    partials.add_row_where(p, [partials.input_value(v, BY_TIME, (e, a))], [False])
    return Agg(*p)


@pytest.mark.parametrize("mode", ["accumulating", "retracting", "discarding"])
def test_a_late_row_earlier_by_event_time_revises_first_and_retracts_the_old_one(mode):
    """Rows arrive 0, 1, 2; the window fires; a late row (arrival 3) has the earliest event time of all."""
    pane = Pane(AccumulationMode(mode))
    for a, (e, v) in enumerate([(20, "b"), (10, "a"), (30, "c")]):
        pane.admit(_agg(a, e, v), now_us=0)
    final = pane.fire()
    first = [(str(x.kind), x.value.low[-1], x.value.high[-1]) for x in final]
    assert first == [("final", "a", "c")]
    got = [(str(x.kind), x.revision, x.value.low[-1], x.value.high[-1]) for x in pane.late(_agg(3, 5, "z"))]
    if mode == "discarding":  # only the rows since the last emission: the late one
        assert got == [("revision", 1, "z", "z")]
    elif mode == "retracting":
        assert got == [("retraction", 0, "a", "c"), ("revision", 1, "z", "c")]
    else:
        assert got == [("revision", 1, "z", "c")]
    # A late row at the same event time as the last one arrives after it: it becomes the last.
    got = pane.late(_agg(4, 30, "y"))[-1]
    assert got.value.high[-1] == "y"


def test_joins_and_reconcile_refuse_by_time_in_one_line_and_sessions_keep_it():
    from lowwater.config import parse_config

    why = windowed_only(SPECS, "windows after a join")
    assert why == ("first = first_by_time(v): windows after a join do not keep a row's arrival order, which breaks "
                   "ties of event time, so first/last by event time is kept by tumbling, hopping and session windows "
                   "only")
    assert windowed_only([AggSpec("t", "sum", "v")], "windows after a join") is None
    cfg = parse_config({"source": {"format": "jsonl", "path": "x", "partition": "p", "event_time": "t"},
                        "window": {"type": "session", "gap": "10s", "aggregations": {"f": "first_by_time(v)"}},
                        "output": {"path": "out"}})  # the session machine keeps it (ADR 0038)
    assert cfg.window.value_inputs == [("v", ""), ("v", BY_TIME)]


def test_the_scenario_runners_core_path_gives_one_answer_for_every_cut():
    """The core path (``testing/transcript_core.py``): retracting, ties of event time and late rows that come first
    by event time; every cut of the log gives the same result rows, and each window's last value is ``min_by`` /
    ``max_by`` over (event time, arrival) of its rows."""
    from lowwater.testing.scenario_files import Scenario
    from lowwater.testing.transcript_core import run_core

    config = {
        "source": {"format": "jsonl", "path": "landing", "partition": "partition", "event_time": "event_time",
                   "time_unit": "s", "schema": "partition STRING, offset LONG, event_time DOUBLE, key STRING, "
                                               "amount DOUBLE"},
        "watermark": {"max_out_of_orderness": "2s"},
        "window": {"type": "tumbling", "size": "10s", "allowed_lateness": "30s", "key": ["key"],
                   "accumulation": "retracting",
                   "aggregations": {"first": "first_by_time(amount)", "last": "last_by_time(amount)",
                                    "n": "count_distinct(amount)", "l": "collect_list(amount)",
                                    "d": "approx_count_distinct(amount)", "m": "approx_percentile(amount, 0.5)"}},
        "late": {"policy": "side_output"}, "output": {"path": "out"},
    }
    events = [(4, 1), (4, 2), (1, 3), (13, 4), (7, 5), (1, 6), (9, 7), (9, 8), (25, 9), (0, 10), (9, 11)]
    rows = [{"partition": "0", "event_time": e, "key": "a", "amount": v} for e, v in events]
    s = Scenario("by_time", "", config, {"default": rows}, [], {})
    one = run_core(s)
    assert any(r[3] == "retraction" for r in one.results)  # late rows first by event time revise the window
    for cuts in ([3], [1, 2, 5, 8], list(range(1, len(rows)))):
        assert run_core(s, cuts).results == one.results
    last = {}
    for r in one.results:
        if r[3] != "retraction":
            last[r[1]] = r[6:]
    arrived = list(enumerate(events))
    for start, (first, final, n, in_order, d, m) in last.items():
        mine = sorted(((e, a), v) for a, (e, v) in arrived if start <= e < start + 10)
        assert (first, final) == (mine[0][1], mine[-1][1]), start
        # The collections and sketches on the same path (ADR 0034): exact while small.
        assert in_order == [v for _, v in mine] and n == d == len({v for _, v in mine}), start
        assert m == sorted(v for _, v in mine)[len(mine) // 2], start

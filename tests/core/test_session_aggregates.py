"""Session windows keep first/last by event time, collections and sketches exactly (ADR 0038).

The session machine (``core/sessions.py``) folds each row's value inputs (``partials.input_value``: the by-time
tuple (event, arrival, value), a one-value collection or sketch) into a session's partial and merges sessions by
the one merge of each (``core/partial_values.py``). So any cut of the log gives the one-batch emissions, a session's
value is straight from its rows whatever merges built it, discarding emissions add up to the admitted rows and a
retraction carries the value emitted before it. Times are integers (read them as seconds).
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lowwater.core import partials
from lowwater.core.aggregates import AggSpec, input_index, value_inputs
from lowwater.core.lateness import Lateness
from lowwater.core.partials import BY_TIME, empty, input_value, merge_into, output
from lowwater.core.sessions import RETRACTION, SessionMachine, run_steps
from lowwater.time import NEG_INF, POS_INF

SPECS = [AggSpec("first", "first_by_time", "v"), AggSpec("last", "last_by_time", "v"),
         AggSpec("nd", "count_distinct", "v"), AggSpec("set", "collect_set", "v"), AggSpec("list", "collect_list", "v"),
         AggSpec("ad", "approx_count_distinct", "v"), AggSpec("med", "approx_percentile", "v", 0.5),
         AggSpec("rids", "collect_set", "rid")]  # which rows a session holds: the reference below reads them
INPUTS = value_inputs(SPECS)
SUMMED = tuple(of != BY_TIME for _, of in INPUTS)  # the columns are numbers; a by-time input keeps no sum
MODES = ("accumulating", "discarding", "retracting")


def values_of(rid: int, event: int, v: int | None) -> tuple:
    """A row's value inputs; its arrival position is its row id."""
    row = {"v": v, "rid": rid}
    return tuple(input_value(row[c], of, (event, rid)) for c, of in INPUTS)


def results(p) -> dict[str, object]:  # noqa: ANN001 - a partial (list or tuple)
    return {s.name: output(s.func, p, input_index(INPUTS, s), s.fraction) for s in SPECS}


def median(vs: list) -> float | None:
    """The inclusive median of a small set, which a KLL sketch keeps whole (up to k), as Spark's
    ``kll_sketch_get_quantile_double`` reads it."""
    xs = sorted(float(v) for v in vs)
    return next((x for i, x in enumerate(xs, 1) if i / len(xs) >= 0.5), None)


def expected(rows: list[tuple[int, int, int | None]]) -> dict[str, object]:
    """Straight from ``(rid, event, v)`` rows: Spark's min_by/max_by over (event, arrival), the distinct non-null
    values, every non-null value in (event, arrival) order, the exact distinct count and median (small sets)."""
    order = sorted(rows, key=lambda r: (r[1], r[0]))
    vs = [v for _, _, v in order if v is not None]
    return {"first": order[0][2] if order else None, "last": order[-1][2] if order else None,
            "nd": len(set(vs)), "set": sorted(set(vs)), "list": vs, "ad": len(set(vs)), "med": median(vs),
            "rids": sorted(r for r, _, _ in rows)}


@st.composite
def logs(draw):  # noqa: ANN001, ANN201
    """Rows of keys a/b in arrival order with ``W(r)`` roughly following the events (late updates, too-late rows,
    merges of fired sessions), ties of event time and repeated values; cuts; gap and grace."""
    n = draw(st.integers(1, 30))
    keys = draw(st.lists(st.sampled_from("ab"), min_size=n, max_size=n))
    events = draw(st.lists(st.integers(0, 60), min_size=n, max_size=n))
    vs = draw(st.lists(st.one_of(st.none(), st.integers(-3, 3)), min_size=n, max_size=n))
    lags = draw(st.lists(st.integers(0, 8), min_size=n, max_size=n))
    w, ws = NEG_INF, []
    for i, lag in enumerate(lags):
        if i and lag:
            w = max(w, events[i - 1] - 3 * lag)
        ws.append(w)
    w_final = max(w, max(events) - draw(st.integers(0, 20)))
    cuts = sorted(set(draw(st.lists(st.integers(1, n), max_size=5)))) if n > 1 else []
    return keys, events, vs, ws, w_final, cuts, draw(st.sampled_from([3, 10])), draw(st.sampled_from([0, 5, 30]))


def run(log, mode: str, cut: bool):  # noqa: ANN001, ANN201
    """(emissions as (key, start, end, kind, revision, partial), verdicts) of the log, cut at its cuts or not."""
    keys, events, vs, ws, w_final, cuts, gap, grace = log
    m = SessionMachine(gap, grace, len(INPUTS), mode, SUMMED)
    n = len(events)
    steps = [*((c, ws[c]) for c in (cuts if cut else []) if c < n), (n, w_final)]
    vals = [values_of(i, e, v) for i, (e, v) in enumerate(zip(events, vs, strict=True))]
    verdicts = run_steps(m, keys, events, ws, vals, steps)
    m.advance(POS_INF)
    return [(e.key, e.start_us, e.end_us, e.kind, e.revision, e.agg) for e in m.take_emissions()], verdicts


def shown(emissions: list) -> list:
    return sorted((k, s, e, kind, r, sorted(results(p).items(), key=str)) for k, s, e, kind, r, p in emissions)


@settings(max_examples=100, deadline=None)
@given(log=logs(), mode=st.sampled_from(MODES))
def test_any_cut_gives_the_one_batch_emissions(log, mode):
    whole, v_whole = run(log, mode, cut=False)
    cut, v_cut = run(log, mode, cut=True)
    assert v_cut == v_whole
    assert shown(cut) == shown(whole)


@settings(max_examples=100, deadline=None)
@given(log=logs())
def test_every_session_standing_is_straight_from_its_rows_and_retractions_carry_what_was_emitted(log):
    """Retracting: the sessions left standing (emitted, not retracted) hold every admitted row once, each within its
    bounds, and each one's values are straight from its rows, however merges of sessions built it."""
    keys, events, vs, *_ = log
    emissions, verdicts = run(log, "retracting", cut=True)
    rows = {i: (i, e, v) for i, (e, v) in enumerate(zip(events, vs, strict=True))}
    emitted: dict[tuple, dict] = {}
    standing: dict[tuple, dict] = {}
    for key, start, end, kind, rev, p in emissions:
        at, value = (key, start, end, rev), results(p)
        if kind == RETRACTION:
            assert emitted[at] == value  # the value emitted before, whole
            del standing[at]
        else:
            emitted[at] = standing[at] = value
    held = sorted(r for value in standing.values() for r in value["rids"])
    assert held == [i for i, v in enumerate(verdicts) if v != Lateness.TOO_LATE]
    for (key, start, end, _), value in standing.items():
        assert all(keys[r] == key and start <= events[r] < end for r in value["rids"])
        assert value == expected([rows[r] for r in value["rids"]])


@settings(max_examples=100, deadline=None)
@given(log=logs())
def test_discarding_emissions_add_up_to_the_admitted_rows(log):
    """What each discarding emission carries merges (the one merge of each partial) into every admitted row of the
    key: first/last by time, collections and sketches of the pieces are those of the whole."""
    keys, events, vs, *_ = log
    emissions, verdicts = run(log, "discarding", cut=True)
    for key in "ab":
        p = empty(len(INPUTS))
        for k, *_, q in emissions:
            if k == key:
                merge_into(p, list(q))
        admitted = [(i, events[i], vs[i]) for i, v in enumerate(verdicts) if keys[i] == key and v != Lateness.TOO_LATE]
        assert results(p) == expected(admitted)


def test_a_bridging_row_merges_two_fired_sessions_ties_broken_by_arrival():
    """a@0 (v 5) and a@15 (v 7) fire; a@8 (v 9), then a@15 again (v 1), bridge them within grace: one session
    [0, 25) whose last by time is the later arrival at 15; retracting takes back both finals, then the first
    revision."""
    m = SessionMachine(10, 20, len(INPUTS), "retracting", SUMMED)
    script = [(0, NEG_INF, 5), (15, NEG_INF, 7), (None, 26, None), (8, 26, 9), (15, 26, 1)]
    for i, (t, w, v) in enumerate(script):
        if t is None:
            m.advance(w)
        else:
            m.process("a", t, w, values_of(i, t, v))
    m.advance(POS_INF)
    got = [(e.start_us, e.end_us, e.kind, e.revision, results(e.agg)) for e in m.take_emissions()]
    first = expected([(0, 0, 5)])
    second = expected([(1, 15, 7)])
    merged = expected([(0, 0, 5), (1, 15, 7), (3, 8, 9)])
    assert got == [(0, 10, "final", 0, first), (15, 25, "final", 0, second),
                   (0, 10, "retraction", 0, first), (15, 25, "retraction", 0, second),
                   (0, 25, "revision", 1, merged),
                   (0, 25, "retraction", 1, merged), (0, 25, "revision", 2, expected([
                       (0, 0, 5), (1, 15, 7), (3, 8, 9), (4, 15, 1)]))]
    assert got[-1][-1]["last"] == 1 and got[-1][-1]["list"] == [5, 9, 7, 1]  # 15 twice: by arrival


def test_a_large_session_is_the_same_for_every_cut_and_its_sketches_within_their_error():
    """1,200 rows of one session: the HLL unions are the same bytes for any cut (the machine merges in arrival
    order whatever the cut), the estimate within 3 relative standard errors; the median within twice KLL's rank
    error (its compactions are random: exact only up to k = 200 values)."""
    rnd = random.Random(38)
    n = 1200
    events = [i // 2 for i in range(n)]
    vs = [rnd.randrange(10**6) for _ in range(n)]
    log = (["a"] * n, events, vs, [NEG_INF] * n, POS_INF - 1, sorted(rnd.sample(range(1, n), 7)), 10, 0)
    (one,), _ = run(log, "accumulating", cut=False)
    (cut,), _ = run(log, "accumulating", cut=True)
    i = partials.position(partials.SUM, INPUTS.index(("v", partials.HLL)))
    assert one[5][i].data == cut[5][i].data
    truth = len(set(vs))
    rse = 1.04 / 2 ** (partials.HLL_LG_K / 2)
    for e in (one, cut):
        got = results(e[5])
        assert abs(got["ad"] - truth) <= 3 * rse * truth
        rank = sum(v <= got["med"] for v in vs) / n
        assert abs(rank - 0.5) <= 2 * 0.0165, rank
        assert got["nd"] == truth and got["list"] == vs  # events never decrease: arrival order is event order


def test_a_session_past_the_collection_bound_fails_in_one_line():
    """A session's collection is bounded as a window's (ADR 0034): past it the row that overflows fails the step with
    the line the CLI prints, never a silently cut collection."""
    specs = [AggSpec("s", "collect_set", "v")]
    inputs = value_inputs(specs)
    m = SessionMachine(10, 0, len(inputs), "accumulating")
    for i in range(partials.COLLECTION_LIMIT):
        m.process("a", 0, NEG_INF, tuple(input_value(i, of) for _, of in inputs))
    m.process("a", 1, NEG_INF, tuple(input_value(0, of) for _, of in inputs))  # a value it holds: no growth
    with pytest.raises(OverflowError, match=rf"^lowwater: collection over its bound: one window's collection holds "
                                            rf"more than {partials.COLLECTION_LIMIT} values$"):
        m.process("a", 2, NEG_INF, tuple(input_value(-1, of) for _, of in inputs))

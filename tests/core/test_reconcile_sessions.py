"""Session windows reconciled (core/reconcile.py ``fold_session``): the stream's intervals folded per batch session.

The differential runs random logs through the engine's own ``SessionMachine``
(random cuts, early firings, nulls), builds the batch sessions over every
row, and checks that each fired batch session's fold equals the aggregate of
its rows that were not too late, in every accumulation mode. Timeline of the
two-heads case (gap 5, grace 10):

    a@0 -> [0, 5)      a@8 -> [8, 13)      W -> 30: both fired and freed
    a@4 bridges them (batch session [0, 13)), but its proto-window [4, 9) touches nothing live: too late.
    The stream's value of [0, 13) is the two heads together: count 2, avg weighted by their counts.
"""

from __future__ import annotations

import math

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from lowwater.core.reconcile import fold_session, heads, readings, rule, same
from lowwater.core.sessions import SessionMachine
from lowwater.core.triggers import EarlyTrigger
from lowwater.time import NEG_INF as N
from lowwater.time import output_us

from .test_sessions import _steps, logs

FUNCS = {"count": "count", "total": "sum", "mean": "avg", "top": "max", "low": "min"}
MODES = ("accumulating", "discarding", "retracting")


def _rows(e, w: int | None = None) -> dict:  # noqa: ANN001 - an Emission
    n, s, mn, mx, nn = e.agg
    return {"kind": e.kind, "revision": e.revision, "batch_id": 0, "count": n, "total": s if nn else None,
            "mean": s / nn if nn else None, "top": mx if nn else None, "low": mn if nn else None, "watermark": w}


def _run(log, mode: str, values: list[float], early: int) -> tuple[list, list[int]]:  # noqa: ANN001
    """Every emission with its step's watermark (not drained: the stream at its last step) and the verdicts, as
    the engine runs them."""
    keys, events, ws, w_final, cuts, gap, grace = log
    m = SessionMachine(gap, grace, 1, mode)
    verdicts, lo, out = [], 0, []
    for step, (hi, w_end) in enumerate(_steps(ws, w_final, cuts, len(events))):
        for i in range(lo, hi):
            verdicts.append(m.process(keys[i], events[i], ws[i], (values[i],), row=i))
        m.advance(w_end)
        if early:
            m.early(EarlyTrigger(every_rows=early), w_end, now_us=step)
        out += [(e, output_us(w_end)) for e in m.take_emissions()]
        lo = hi
    return out, verdicts


def _batch_sessions(keys: list[str], events: list[int], gap: int) -> dict[str, list[tuple[int, int]]]:
    out: dict[str, list[tuple[int, int]]] = {}
    for k in sorted(set(keys)):
        bounds: list[list[int]] = []
        for t in sorted(t for kk, t in zip(keys, events, strict=True) if kk == k):
            if not bounds or t - bounds[-1][1] >= gap:
                bounds.append([t, t])
            bounds[-1][1] = t
        out[k] = [(s, e + gap) for s, e in bounds]
    return out


def _intervals(emissions: list, key: str, b: tuple[int, int]) -> dict:
    """The emissions (or (emission, watermark) pairs) mapped to batch session ``b`` by their start (a session
    starts at its first row), per interval."""
    out: dict[tuple[int, int], list[dict]] = {}
    for x in emissions:
        e, w = x if isinstance(x, tuple) else (x, None)
        if e.key == key and b[0] <= e.start_us < b[1]:
            out.setdefault((e.start_us, e.end_us), []).append(_rows(e, w))
    return out


@settings(max_examples=250, deadline=None)
@given(log=logs(), mode=st.sampled_from(MODES), early=st.sampled_from([0, 0, 2]),
       nulls=st.lists(st.booleans(), min_size=40, max_size=40))
def test_every_fired_batch_session_folds_to_its_rows_that_were_not_too_late(log, mode, early, nulls):
    keys, events, _, w_final, _, gap, grace = log
    values = [math.nan if nulls[i] and i % 3 == 0 else float(1 + t % 7) for i, t in enumerate(events)]
    emissions, verdicts = _run(log, mode, values, early)
    lineage = _run(log, "retracting", values, early)[0]  # retractions name what each merge replaced
    sessions = _batch_sessions(keys, events, gap)
    for key, bounds in sessions.items():
        for b in bounds:
            if b[1] > w_final:
                continue  # open: in flight as a whole
            kept = [v for k, t, v, verdict in zip(keys, events, values, verdicts, strict=True)
                    if k == key and b[0] <= t < b[1] and verdict != 2]
            intervals = _intervals(emissions, key, b)
            true = heads("retracting", _intervals(lineage, key, b))  # the stream's own lineage
            options = readings(mode, intervals, grace)
            if mode == "accumulating":  # a wrong first reading is always flagged by a second one
                assert true == options[0] or len(options) == 2, (intervals, true)
                assume(true in options)  # the documented limit: several splits, some of them merges
            else:
                assert options == [true] or mode == "discarding"
            top = true if mode != "discarding" else None
            got, skipped = fold_session(mode, intervals, FUNCS, ["mean"] if any(map(math.isnan, kept)) else [], top)
            vals = [v for v in kept if not math.isnan(v)]
            want = {"count": len(kept), "total": sum(vals) if vals else None, "top": max(vals, default=None),
                    "low": min(vals, default=None), "mean": sum(vals) / len(vals) if vals else None}
            for col, func in FUNCS.items():
                if rule(mode, func) is None or col in skipped:
                    continue
                assert same(want[col], got[col] if col != "count" else got[col] or 0), (col, b, intervals)
            # Only an average over several heads with a null among the rows is left out, and said so.
            assert skipped in ([], ["mean"])
            if skipped:
                assert len(true) > 1 and any(map(math.isnan, kept))


def _emission(kind: str, rev: int, count: int, total: float) -> dict:
    return {"kind": kind, "revision": rev, "batch_id": 0, "count": count, "total": total, "mean": total / count,
            "top": total, "low": total}


def test_two_sessions_a_too_late_row_would_have_bridged_are_two_heads_and_their_average_is_weighted():
    m = SessionMachine(5, 10, 1, "accumulating")
    for t, v in ((0, 1.0), (1, 2.0), (8, 6.0)):
        m.process("a", t, N, (v,))
    m.advance(30)
    assert m.process("a", 4, 30, (100.0,)) == 2  # too late: both sessions were freed
    intervals = _intervals(m.take_emissions(), "a", (0, 13))
    assert sorted(intervals) == [(0, 6), (8, 13)]
    got, skipped = fold_session("accumulating", intervals, FUNCS)
    assert (got["count"], got["total"], got["mean"], got["top"], got["low"], skipped) == (3, 9.0, 3.0, 6.0, 1.0, [])
    # With a null among the rows, the two averages cannot be weighted by rows: not compared, and named.
    got, skipped = fold_session("accumulating", intervals, FUNCS, nulls=["mean"])
    assert got["mean"] is None and skipped == ["mean"] and got["count"] == 3


def test_merged_components_are_replaced_by_the_merge_in_every_mode():
    """[0, 5) and [8, 13) fired, then a@4 within grace merges them: revision 1 of [0, 13)."""
    for mode in MODES:
        m = SessionMachine(5, 20, 1, mode)
        for t in (0, 8):
            m.process("a", t, N, (float(t + 1),))
        m.advance(15)
        assert m.process("a", 4, 15, (5.0,)) == 1  # a late update
        intervals = _intervals(m.take_emissions(), "a", (0, 13))
        assert heads(mode, intervals) == {(0, 13)}
        got, _ = fold_session(mode, intervals, FUNCS)
        assert (got["count"], got["total"], got["top"]) == (3, 15.0, 9.0), mode
        assert got["mean"] == (5.0 if mode != "discarding" else None)


def test_a_session_split_by_freeing_keeps_its_earlier_part_in_retracting_mode():
    """Retracting: [0, 7) fired and freed; new rows build [-1, 12) around it, retracting only their own values."""
    intervals = {
        (0, 7): [_emission("final", 0, 2, 3.0)],  # rows 0 and 2, freed: never retracted
        (5, 12): [_emission("revision", 1, 1, 4.0), _emission("retraction", 1, 1, 4.0)],
        (-1, 12): [_emission("revision", 2, 2, 9.0)],  # rows -1 and 5 (not the freed session's)
    }
    assert heads("retracting", intervals) == {(0, 7), (-1, 12)}
    got, _ = fold_session("retracting", intervals, FUNCS)
    assert (got["count"], got["total"], got["mean"]) == (4, 12.0, 3.0)
    # Accumulating has no retractions: the later part, containing the earlier with a higher revision, is first
    # taken for its merge; it was emitted at W = 30, past the earlier part's freeing (7 + 5), so it may be a split:
    # a second reading keeps the earlier part. [5, 12) ends where [-1, 12) ends: surely merged (a split ends later).
    acc = {iv: [{**e, "watermark": 30} for e in ems if e["kind"] != "retraction"] for iv, ems in intervals.items()}
    assert heads("accumulating", acc) == {(-1, 12)}
    assert readings("accumulating", acc, 5) == [{(-1, 12)}, {(0, 7), (-1, 12)}]
    assert fold_session("accumulating", acc, FUNCS, top_set={(0, 7), (-1, 12)})[0]["count"] == 4
    # Emitted while the earlier part was still live (W = 10 < 7 + 5): it surely merged it, one reading.
    live = {iv: [{**e, "watermark": 10} for e in ems] for iv, ems in acc.items()}
    assert readings("accumulating", live, 5) == [{(-1, 12)}]
    split = {(0, 7): [_emission("final", 0, 2, 3.0)], (-1, 12): [_emission("final", 0, 2, 9.0)]}
    assert heads("accumulating", split) == {(0, 7), (-1, 12)}


def test_a_tampered_emission_no_longer_folds_to_the_rows():
    m = SessionMachine(5, 20, 1, "accumulating")
    for t in (0, 8):
        m.process("a", t, N, (1.0,))
    m.advance(15)
    m.process("a", 4, 15, (1.0,))
    intervals = _intervals(m.take_emissions(), "a", (0, 13))
    assert fold_session("accumulating", intervals, FUNCS)[0]["count"] == 3
    intervals[(0, 13)][-1]["count"] += 1
    assert fold_session("accumulating", intervals, FUNCS)[0]["count"] == 4


def test_a_by_time_value_distinct_count_or_sketch_is_its_one_heads_and_not_compared_over_several():
    """ADR 0039: a head emits a finished last/distinct count/estimate, not its partial, so one head's is the batch
    session's (a merge replaced its components) and several heads' are not compared (named), in either mode."""
    funcs = {"count": "count", "last": "last_by_time", "n": "count_distinct", "d": "approx_count_distinct"}

    def em(rev: int, n: int, last: float) -> dict:
        return {"kind": "revision" if rev else "final", "revision": rev, "batch_id": rev, "count": n, "last": last,
                "n": n, "d": n}

    parts = {(0, 5): [em(0, 1, 1.0)], (8, 13): [em(0, 1, 9.0)]}
    merged = {**parts, (0, 13): [em(1, 3, 9.0)]}  # a late update at 4 merged them (accumulating: no retractions)
    got, skipped = fold_session("accumulating", merged, funcs)
    assert (got["count"], got["last"], got["n"], got["d"], skipped) == (3, 9.0, 3, 3, [])
    for mode in ("accumulating", "retracting"):  # two heads (a too-late row would have bridged them)
        got, skipped = fold_session(mode, parts, funcs)
        assert got["count"] == 2 and (got["last"], got["n"], got["d"]) == (None, None, None), mode
        assert skipped == ["last", "n", "d"], mode
    got, skipped = fold_session("discarding", parts, funcs)  # a delta's distinct count has no fold
    assert got["count"] == 2 and got["n"] is None and rule("discarding", "count_distinct") is None

"""Session windows as tables (core/sessions.py; SEMANTICS.md §3-§4, issue 6).

Times are plain integers (read them as seconds); gap 10 unless said. Each row
is ``(key, t, W(r))``; ``step(W)`` ends a step at watermark ``W``. Timeline of
the bridging case:

    a@0  -> [0, 10)
    a@15 ->              [15, 25)
    W -> 26: both fire (final, revision 0)
    a@8  -> proto [8, 18) overlaps both: C = [0, 25), C.end = 25 <= W = 26
            G = 20: late update, one revision [0, 25) of 3 rows
            G = 0 : both sessions were freed at W = 26; C = [8, 18): too late
            G = 5 : [0, 10) was freed (10 + 5 <= 26), [15, 25) was not: C = [8, 25)
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lowwater.core.partials import stored
from lowwater.core.sessions import SessionMachine, run_steps
from lowwater.core.triggers import EarlyTrigger
from lowwater.time import NEG_INF, POS_INF

N = NEG_INF
STEP = object()


def run(script, gap=10, grace=0, mode="accumulating", drain=True):
    """Run a script of ``(key, t, W)`` rows and ``(STEP, W)`` step ends; one value column (amount = t)."""
    m = SessionMachine(gap, grace, 1, mode)
    verdicts = []
    for item in script:
        if item[0] is STEP:
            m.advance(item[1])
        else:
            key, t, w = item
            verdicts.append(m.process(key, t, w, (float(t),), row=len(verdicts)))
    if drain:
        m.advance(POS_INF)
    out = [(e.key, e.start_us, e.end_us, e.agg[0], e.agg[1], e.kind, e.revision) for e in m.take_emissions()]
    return out, verdicts, m


BRIDGE = [("a", 0, N), ("a", 15, N), ("b", 40, N), (STEP, 26), ("a", 8, 26)]


def test_bridging_row_within_grace_merges_fired_sessions_into_a_revision():
    out, verdicts, _ = run(BRIDGE, grace=20)
    assert out == [
        ("a", 0, 10, 1, 0.0, "final", 0),
        ("a", 15, 25, 1, 15.0, "final", 0),
        ("a", 0, 25, 3, 23.0, "revision", 1),  # 0 + 15 + 8, emitted at once
        ("b", 40, 50, 1, 40.0, "final", 0),  # the drain
    ]
    assert verdicts == [0, 0, 0, 1]


def test_bridging_row_on_time_without_grace_merges_before_firing():
    # The bridging row arrives out of order but before W passes either session: one final.
    out, verdicts, _ = run([("a", 0, N), ("a", 15, N), ("a", 8, 5), (STEP, 30)], grace=0)
    assert out == [("a", 0, 25, 3, 23.0, "final", 0)]
    assert verdicts == [0, 0, 0]


def test_too_late_bridging_row_goes_to_the_side_and_leaves_sessions_untouched():
    # G = 0: the sessions were freed at W = 26, and C = [8, 18) ends before W.
    out, verdicts, m = run(BRIDGE, grace=0, drain=False)
    assert verdicts == [0, 0, 0, 2]
    assert [(x.key, x.row, x.start_us, x.end_us, x.watermark_us) for x in m.take_too_late()] == [("a", 3, 8, 18, 26)]
    assert out == [("a", 0, 10, 1, 0.0, "final", 0), ("a", 15, 25, 1, 15.0, "final", 0)]
    # G = 5: only [15, 25) is still live; the row joins it alone (a late update), [0, 10) stays as fired.
    out5, verdicts5, _ = run(BRIDGE, grace=5)
    assert verdicts5[-1] == 1
    assert [e for e in out5 if e[0] == "a"] == [*out, ("a", 8, 25, 2, 23.0, "revision", 1)]


def test_grace_keeps_a_too_late_row_out_even_when_its_proto_window_would_touch_a_live_session():
    # W = 30, G = 12: [15, 25) is still live (25 + 12 > 30); a@3 overlaps nothing live
    # ([0, 10) was freed: 10 + 12 <= 30), and its proto [3, 13) ends 13 + 12 <= 30: too late.
    out, verdicts, _ = run([("a", 0, N), ("a", 15, N), (STEP, 30), ("a", 3, 30)], grace=12)
    assert verdicts[-1] == 2
    assert out == [("a", 0, 10, 1, 0.0, "final", 0), ("a", 15, 25, 1, 15.0, "final", 0)]


@pytest.mark.parametrize(
    ("script", "expected", "verdict"),
    [
        # On-time extension after the final: C = [0, 15) ends after W = 12, so it waits and
        # fires as revision 1 when W reaches 15.
        ([("a", 0, N), (STEP, 12), ("a", 5, 12), (STEP, 20)],
         [("a", 0, 10, 1, 0.0, "final", 0), ("a", 0, 15, 2, 5.0, "revision", 1)], 0),
        # Late extension: C = [0, 11) ends at or before W = 12: revision 1 at once.
        ([("a", 0, N), (STEP, 12), ("a", 1, 12)],
         [("a", 0, 10, 1, 0.0, "final", 0), ("a", 0, 11, 2, 1.0, "revision", 1)], 1),
    ],
)
def test_session_extended_after_firing(script, expected, verdict):
    out, verdicts, _ = run(script, grace=10)
    assert out == expected
    assert verdicts[-1] == verdict


def test_row_at_exactly_the_session_end_starts_a_new_session():
    out, _, _ = run([("a", 0, N), ("a", 10, N)])
    assert [(e[1], e[2], e[3]) for e in out] == [(0, 10, 1), (10, 20, 1)]


def test_firing_before_a_row_makes_cuts_irrelevant():
    # W(r) = 12 already passed [0, 10) when a@5 arrives: the final fires first, in one step too.
    one, _, _ = run([("a", 0, N), ("a", 5, 12), (STEP, 20)], grace=10)
    two, _, _ = run([("a", 0, N), (STEP, 12), ("a", 5, 12), (STEP, 20)], grace=10)
    assert one == two == [("a", 0, 10, 1, 0.0, "final", 0), ("a", 0, 15, 2, 5.0, "revision", 1)]


def test_late_row_with_no_session_emits_only_a_revision():
    out, verdicts, _ = run([("a", 50, N), (STEP, 40), ("a", 20, 40)], grace=15)
    assert verdicts == [0, 1]
    assert ("a", 20, 30, 1, 20.0, "revision", 1) in out
    assert not [e for e in out if e[1] == 20 and e[5] == "final"]


def test_retracting_mode_retracts_both_merged_sessions():
    out, _, _ = run(BRIDGE, grace=20, mode="retracting")
    assert [e for e in out if e[0] == "a"] == [
        ("a", 0, 10, 1, 0.0, "final", 0),
        ("a", 15, 25, 1, 15.0, "final", 0),
        ("a", 0, 10, 1, 0.0, "retraction", 0),  # each with the bounds and revision it was emitted with
        ("a", 15, 25, 1, 15.0, "retraction", 0),
        ("a", 0, 25, 3, 23.0, "revision", 1),
    ]


def test_discarding_mode_carries_only_the_new_rows_and_folds():
    out, _, _ = run(BRIDGE, grace=20, mode="discarding")
    a = [e for e in out if e[0] == "a"]
    assert a[-1] == ("a", 0, 25, 1, 8.0, "revision", 1)  # only the bridging row
    assert (sum(e[3] for e in a), sum(e[4] for e in a)) == (3, 23.0)


def test_on_time_extension_of_a_fired_session_in_discarding_and_retracting():
    script = [("a", 0, N), (STEP, 12), ("a", 5, 12), (STEP, 20)]
    disc, _, _ = run(script, grace=10, mode="discarding")
    assert disc == [("a", 0, 10, 1, 0.0, "final", 0), ("a", 0, 15, 1, 5.0, "revision", 1)]
    retr, _, _ = run(script, grace=10, mode="retracting")
    assert retr == [("a", 0, 10, 1, 0.0, "final", 0), ("a", 0, 10, 1, 0.0, "retraction", 0),
                    ("a", 0, 15, 2, 5.0, "revision", 1)]


def test_state_is_freed_at_end_plus_grace():
    _, _, m = run([("a", 0, N), (STEP, 14)], grace=5, drain=False)
    assert m.live() == 1  # fired at 10, kept until 15
    m.advance(15)
    assert m.live() == 0


def test_nulls_count_rows_but_not_values():
    m = SessionMachine(10, 0, 1)
    m.process("a", 0, N, (math.nan,))
    m.advance(POS_INF)
    (e,) = m.take_emissions()
    assert stored(e.agg) == [1, None, None, None, 0]


def test_early_firings_are_provisional_and_numbered_for_the_next_emission():
    trig = EarlyTrigger(every_rows=2)
    for mode, expected in [
        ("accumulating", [(0, 10, 2, "provisional", 0), (0, 13, 3, "final", 0)]),
        ("discarding", [(0, 10, 2, "provisional", 0), (0, 13, 1, "final", 0)]),
        ("retracting", [(0, 10, 2, "provisional", 0), (0, 10, 2, "retraction", 0), (0, 13, 3, "final", 0)]),
    ]:
        m = SessionMachine(10, 0, 1, mode)
        m.process("a", 0, N, (1.0,))
        m.early(trig, N, now_us=0)  # one pending row: not due
        m.process("a", 0, N, (1.0,))
        m.early(trig, N, now_us=0)
        m.process("a", 3, N, (1.0,))
        m.early(trig, N, now_us=0)  # one pending row since the provisional: not due
        m.advance(POS_INF)
        got = [(e.start_us, e.end_us, e.agg[0], e.kind, e.revision) for e in m.take_emissions()]
        assert got == expected, mode


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("accumulating", [(2, "provisional", 0), (2, "final", 0)]),
        ("discarding", [(2, "provisional", 0), (0, "final", 0)]),  # the final is owed, and empty
        ("retracting", [(2, "provisional", 0), (2, "retraction", 0), (2, "final", 0)]),
    ],
)
def test_final_still_fires_after_a_provisional_with_nothing_pending(mode, expected):
    m = SessionMachine(10, 0, 1, mode)
    m.process("a", 0, N, (1.0,))
    m.process("a", 1, N, (1.0,))
    m.early(EarlyTrigger(every_rows=2), N, now_us=0)
    m.advance(20)
    assert [(e.agg[0], e.kind, e.revision) for e in m.take_emissions()] == expected
    m.advance(POS_INF)
    assert m.take_emissions() == []  # nothing owed any more


def test_time_based_early_firing_waits_from_first_pending_step_then_from_each_emission():
    m = SessionMachine(10, 0, 1)
    trig = EarlyTrigger(every_us=100)
    m.process("a", 0, N, (1.0,))
    m.early(trig, N, now_us=1_000)  # starts waiting
    m.early(trig, N, now_us=1_050)
    assert m.take_emissions() == []
    m.early(trig, N, now_us=1_100)
    assert [e.kind for e in m.take_emissions()] == ["provisional"]
    m.now_us = 1_150  # a later step: a new row; the clock runs from the provisional at 1_100
    m.process("a", 1, N, (1.0,))
    m.early(trig, N, now_us=1_150)
    assert m.take_emissions() == []
    m.early(trig, N, now_us=1_200)
    assert [(e.agg[0], e.kind) for e in m.take_emissions()] == [(2, "provisional")]


# -- hypothesis: random cuts, and the fold property per mode ----------------------------


@st.composite
def logs(draw):
    n = draw(st.integers(1, 40))
    keys = draw(st.lists(st.sampled_from("ab"), min_size=n, max_size=n))
    events = draw(st.lists(st.integers(0, 100), min_size=n, max_size=n))
    steps = draw(st.lists(st.integers(0, 8), min_size=n, max_size=n))
    w, ws = N, []
    for i, s in enumerate(steps):  # W(r): monotone, roughly following the events
        if i and s:
            w = max(w, events[i - 1] - 3 * s)
        ws.append(w)
    w_final = max(w, max(events) - draw(st.integers(0, 20)))
    cuts = sorted(set(draw(st.lists(st.integers(1, n), max_size=5)))) if n > 1 else []
    gap = draw(st.sampled_from([3, 10, 25]))
    grace = draw(st.sampled_from([0, 5, 30]))
    return keys, events, ws, w_final, cuts, gap, grace


def _steps(ws, w_final, cuts, n):
    """Step ends: each cut ends at the watermark the next row sees (W after the step's last row)."""
    bounds = [c for c in cuts if c < n]
    return [*((c, ws[c]) for c in bounds), (n, w_final)]


def _run_log(log, mode, cuts):
    keys, events, ws, w_final, _, gap, grace = log
    m = SessionMachine(gap, grace, 1, mode)
    vals = [(float(1 + (t % 7)),) for t in events]
    verdicts = run_steps(m, keys, events, ws, vals, _steps(ws, w_final, cuts, len(events)))
    m.advance(POS_INF)
    emissions = sorted((e.key, e.start_us, e.end_us, e.agg, e.kind, e.revision) for e in m.take_emissions())
    return emissions, verdicts, vals


@settings(max_examples=300, deadline=None)
@given(log=logs(), mode=st.sampled_from(["accumulating", "discarding", "retracting"]))
def test_random_cuts_give_the_same_emissions_and_verdicts(log, mode):
    whole, v_whole, _ = _run_log(log, mode, [])
    cut, v_cut, _ = _run_log(log, mode, log[4])
    assert cut == whole
    assert v_cut == v_whole


@settings(max_examples=300, deadline=None)
@given(log=logs())
def test_fold_per_mode_equals_the_admitted_rows(log):
    keys = log[0]
    acc, verdicts, vals = _run_log(log, "accumulating", log[4])
    disc, _, _ = _run_log(log, "discarding", log[4])
    retr, _, _ = _run_log(log, "retracting", [])
    # Retracting = accumulating plus retraction rows.
    assert [e for e in retr if e[4] != "retraction"] == acc
    for key in "ab":
        admitted = [v[0] for k, v, verdict in zip(keys, vals, verdicts, strict=True) if k == key and verdict != 2]
        want = (len(admitted), sum(admitted))
        # Discarding: every emission adds. Retracting: values add, retractions subtract.
        assert (sum(e[3][0] for e in disc if e[0] == key), sum(e[3][1] for e in disc if e[0] == key)) == want
        sign = [(-1 if e[4] == "retraction" else 1, e[3]) for e in retr if e[0] == key]
        assert (sum(s * a[0] for s, a in sign), sum(s * a[1] for s, a in sign)) == want
        # Per session (retracting): what is left after cancelling is each session's full value, once.
        net: dict = {}
        for e in retr:
            if e[0] == key:
                k = (e[1], e[2], e[5])
                net[k] = net.get(k, 0) + (-1 if e[4] == "retraction" else 1)
        assert all(c in (0, 1) for c in net.values())

"""Panes of one window: provisional / final / revision emissions per accumulation mode, and their fold."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lowwater.core.panes import EMPTY, Agg, Emission, Pane, fold
from lowwater.core.triggers import AccumulationMode, EarlyTrigger, EmissionKind

ACC, DIS, RET = AccumulationMode.ACCUMULATING, AccumulationMode.DISCARDING, AccumulationMode.RETRACTING
P, F, V, R = "provisional", "final", "revision", "retraction"


def run(pane: Pane, script: list[tuple]) -> list[tuple]:
    """Actions: ("step", [on-time values], now_us) admits and ends a step; ("fire",); ("late", value)."""
    out: list[Emission] = []
    for action, *args in script:
        if action == "step":
            values, now = args
            pane.admit(Agg.of(values), now_us=now)
            out += pane.early(now_us=now)
        elif action == "fire":
            out += pane.fire()
        else:
            out += pane.late(Agg.of([args[0]]))
    return [(str(e.kind), e.revision, e.value.n, e.value.total) for e in out]


# One window, every 2 rows; steps admit [1, 2], [4], [8, 16]; then W passes end; then late 32.
SCRIPT = [("step", [1.0, 2.0], 0), ("step", [4.0], 1), ("step", [8.0, 16.0], 2), ("fire",), ("late", 32.0)]


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        (ACC, [(P, 0, 2, 3.0),                   # 2 pending rows: due
               (P, 0, 5, 31.0),                  # 1 + 2 pending (4, 8, 16): due at the third step
               (F, 0, 5, 31.0),                  # the on-time final, nothing new: same value
               (V, 1, 6, 63.0)]),
        (DIS, [(P, 0, 2, 3.0),
               (P, 0, 3, 28.0),                  # only 4, 8, 16
               (F, 0, 0, None),                  # nothing since the last provisional: empty final
               (V, 1, 1, 32.0)]),
        (RET, [(P, 0, 2, 3.0),
               (R, 0, 2, 3.0), (P, 0, 5, 31.0),  # each replacement retracts the previous full value
               (R, 0, 5, 31.0), (F, 0, 5, 31.0),
               (R, 0, 5, 31.0), (V, 1, 6, 63.0)]),
    ],
)
def test_every_two_rows_per_mode(mode, expected):
    got = run(Pane(mode, EarlyTrigger(every_rows=2)), SCRIPT)
    assert got == expected


def test_without_trigger_modes_are_the_old_revisions():
    script = [("step", [1.0, 2.0], 0), ("fire",), ("late", 10.0), ("late", 100.0)]
    assert run(Pane(DIS), script) == [(F, 0, 2, 3.0), (V, 1, 1, 10.0), (V, 2, 1, 100.0)]
    assert run(Pane(RET), script) == [(F, 0, 2, 3.0), (R, 0, 2, 3.0), (V, 1, 3, 13.0),
                                      (R, 1, 3, 13.0), (V, 2, 4, 113.0)]


@pytest.mark.parametrize(
    ("script", "expected"),
    [
        # every 5 (µs here): waits count from the first pending step, then from the last emission.
        ([("step", [1.0], 10), ("step", [], 14), ("step", [], 15)], [(P, 0, 1, 1.0)]),
        ([("step", [1.0], 10), ("step", [2.0], 15), ("step", [4.0], 19), ("step", [], 20)],
         [(P, 0, 2, 3.0), (P, 0, 3, 7.0)]),
        # nothing pending: no provisional however long it waits
        ([("step", [1.0], 0), ("step", [], 5), ("step", [], 500)], [(P, 0, 1, 1.0)]),
        # a row after a long quiet spell: the wait since the last emission is long, so it fires at once
        ([("step", [1.0], 0), ("step", [], 5), ("step", [2.0], 500)], [(P, 0, 1, 1.0), (P, 0, 2, 3.0)]),
    ],
)
def test_processing_time_trigger(script, expected):
    assert run(Pane(ACC, EarlyTrigger(every_us=5)), script) == expected


def test_window_without_on_time_rows_has_no_final_only_revisions():
    pane = Pane(RET, EarlyTrigger(every_rows=1))
    assert pane.fire() == []
    assert run(pane, [("late", 5.0), ("late", 7.0)]) == [(V, 1, 1, 5.0), (R, 1, 1, 5.0), (V, 2, 2, 12.0)]


def test_misuse_is_loud():
    pane = Pane()
    pane.admit(Agg.of([1.0]), 0)
    with pytest.raises(ValueError):
        pane.late(Agg.of([2.0]))
    pane.fire()
    with pytest.raises(ValueError):
        pane.admit(Agg.of([2.0]), 0)


def test_agg_merge_and_identity():
    a, b = Agg.of([3.0, -1.0]), Agg.of([7.0])
    assert a.merge(b) == Agg(3, 9.0, -1.0, 7.0)
    assert a.merge(EMPTY) == a == EMPTY.merge(a)
    assert fold([], ACC) == EMPTY


actions = st.lists(
    st.one_of(
        st.tuples(st.just("step"), st.lists(st.integers(-5, 9).map(float), max_size=4), st.integers(0, 3)),
        st.tuples(st.just("fire")),
        st.tuples(st.just("late"), st.integers(-5, 9).map(float)),
    ),
    max_size=14,
)


@given(script=actions, mode=st.sampled_from(list(AccumulationMode)),
       trigger=st.sampled_from([None, EarlyTrigger(every_rows=1), EarlyTrigger(every_rows=3),
                                EarlyTrigger(every_us=2)]))
def test_fold_is_the_batch_value_of_the_admitted_rows(script, mode, trigger):
    pane = Pane(mode, trigger)
    admitted: list[float] = []
    on_time = 0
    clock = 0
    for action, *args in script:
        if action == "step" and not pane.fired:
            clock += args[1]
            pane.admit(Agg.of(args[0]), clock)
            admitted += args[0]
            on_time += len(args[0])
            pane.early(clock)
        elif action == "fire":
            pane.fire()
        elif action == "late" and pane.fired:
            pane.late(Agg.of([args[0]]))
            admitted.append(args[0])
    pane.fire()
    got, want = fold(pane.log, mode), Agg.of(admitted)
    if mode == RET:
        assert (got.n, got.total or 0.0) == (want.n, want.total or 0.0)
    else:
        assert got == want
    assert all(e.kind != EmissionKind.PROVISIONAL or e.revision == 0 for e in pane.log)
    finals = sum(e.kind == EmissionKind.FINAL for e in pane.log)
    assert finals == (1 if on_time else 0)  # exactly one on-time final iff the window had on-time rows


def test_a_pane_value_may_know_only_some_fields():
    """An ``Agg`` read back from result columns knows only what was configured (here count, sum, max)."""
    a, b = Agg(2, 3.0, None, 2.0), Agg(1, 4.0, None, 4.0)
    assert a.merge(b) == Agg(3, 7.0, None, 4.0)
    assert a.merge(b).nn == 3
    emissions = [Emission(EmissionKind.FINAL, 0, a), Emission(EmissionKind.REVISION, 1, b)]
    assert fold(emissions, DIS) == Agg(3, 7.0, None, 4.0)

"""The pane rules are one table (``core/pane_rules.py``): changing a mode's rule changes every path that emits panes.

The windowed operator's Spark fold is checked through the columns its SQL reads
(``StateLayout.reads``, the state columns it keeps): pure names, no JVM.
"""

from __future__ import annotations

import pytest

from lowwater.core import pane_rules
from lowwater.core.pane_rules import RULES, Carries, Fold, PaneRule, rule_of
from lowwater.core.panes import Agg, Pane, WindowPanes, fold
from lowwater.core.reconcile import rule as reconcile_rule
from lowwater.core.sessions import SessionMachine
from lowwater.core.triggers import AccumulationMode, EarlyTrigger, EmissionKind
from lowwater.spark.operators.windowed.fold import StateLayout

ACC, DIS, RET = AccumulationMode.ACCUMULATING, AccumulationMode.DISCARDING, AccumulationMode.RETRACTING
EVERY_2 = EarlyTrigger(every_rows=2)


def pane_kinds(mode: AccumulationMode) -> list[tuple[str, int, int]]:
    """A window of the core: [1, 2] (provisional), fire, one late row: (kind, revision, count) per emission."""
    pane = Pane(mode, EVERY_2)
    pane.admit(Agg.of([1.0, 2.0]), now_us=0)
    out = pane.early(now_us=0) + pane.fire() + pane.late(Agg.of([4.0]))
    return [(str(e.kind), e.revision, e.value.n) for e in out]


def session_kinds(mode: AccumulationMode) -> list[tuple[str, int, int]]:
    """A session of the session machine: two rows, a late row merging into it after it fired."""
    m = SessionMachine(gap_us=10, grace_us=100, n_values=1, accumulation=mode.value)
    m.process("k", 0, -1, (1.0,))
    m.process("k", 5, -1, (2.0,))
    m.advance(20)
    m.process("k", 8, 20, (4.0,))
    return [(e.kind, e.revision, e.agg[0]) for e in m.take_emissions()]


def windows_kinds(mode: AccumulationMode) -> list[tuple[str, int, int]]:
    """The scenario runner's core path (``WindowPanes``): two on-time rows, fire, one late row."""
    wp = WindowPanes([("v", "column")], mode)
    wp.admit(("k", 0, 10), {"v": 1.0})
    wp.admit(("k", 0, 10), {"v": 2.0})
    got = wp.fire(10) + wp.late(("k", 0, 10), {"v": 4.0})
    return [(str(e.kind), e.revision, e.value.n) for _, per_input in got for e, _ in WindowPanes.emitted(per_input)]


def spark_reads(mode: AccumulationMode) -> tuple:
    """What the Spark fold reads for an on-time pane and a revision, and the early-trigger state it keeps."""
    layout = StateLayout(keys=("k",), key_types=(), values=("v",), aggregations=(), accumulation=mode.value,
                         early=EVERY_2)
    return layout.reads(EmissionKind.FINAL), layout.reads(EmissionKind.REVISION), layout.extra_cols()


PARTS = ["_n", "_s0", "_mn0", "_mx0", "_nn0"]
EXPECTED = {
    ACC: dict(
        pane=[("provisional", 0, 2), ("final", 0, 2), ("revision", 1, 3)],
        session=[("final", 0, 2), ("revision", 1, 3)],
        windows=[("final", 0, 2), ("revision", 1, 3)],
        spark=((None, PARTS), (None, [f"cum{c}" for c in PARTS]), ["_pn"]),
    ),
    DIS: dict(
        pane=[("provisional", 0, 2), ("final", 0, 0), ("revision", 1, 1)],
        session=[("final", 0, 2), ("revision", 1, 1)],
        windows=[("final", 0, 2), ("revision", 1, 1)],
        spark=((None, ["_pn", "_p_s0", "_p_mn0", "_p_mx0", "_p_nn0"]), (None, PARTS),
               ["_pn", "_p_s0", "_p_mn0", "_p_mx0", "_p_nn0"]),
    ),
    RET: dict(
        pane=[("provisional", 0, 2), ("retraction", 0, 2), ("final", 0, 2), ("retraction", 0, 2),
              ("revision", 1, 3)],
        session=[("final", 0, 2), ("retraction", 0, 2), ("revision", 1, 3)],
        windows=[("final", 0, 2), ("retraction", 0, 2), ("revision", 1, 3)],
        spark=(([f"_e{c}" for c in PARTS], PARTS), ([f"prev{c}" for c in PARTS], [f"cum{c}" for c in PARTS]),
               ["_pn", *[f"_e{c}" for c in PARTS]]),
    ),
}


def every_path(mode: AccumulationMode) -> dict:
    return dict(pane=pane_kinds(mode), session=session_kinds(mode), windows=windows_kinds(mode),
                spark=spark_reads(mode))


@pytest.mark.parametrize("mode", list(AccumulationMode))
def test_every_path_follows_its_modes_rule(mode):
    assert every_path(mode) == EXPECTED[mode]


@pytest.mark.parametrize(("mode", "like"), [(ACC, RET), (ACC, DIS), (RET, ACC), (DIS, RET)])
def test_changing_one_rule_in_the_table_changes_every_path(monkeypatch, mode, like):
    """Give ``mode`` the rule of ``like``: the core pane, the session machine, the scenario runner's windows,
    the Spark fold's columns and both consumer folds now do what ``like`` does."""
    monkeypatch.setitem(RULES, mode, RULES[like])
    assert every_path(mode) == EXPECTED[like]
    emissions = Pane(mode)
    emissions.admit(Agg.of([1.0, 2.0]), 0)
    emissions.fire()
    emissions.late(Agg.of([4.0]))
    assert fold(emissions.log, mode).n == 3  # each mode's fold undoes what its panes carry
    assert reconcile_rule(mode.value, "sum") == reconcile_rule(like.value, "sum")


def test_a_rule_that_retracts_carries_the_full_value():
    with pytest.raises(ValueError, match="retracts carries the full value"):
        PaneRule(Carries.PENDING, retracts=True, fold=Fold.SIGNED)
    assert rule_of("retracting") is RULES[RET] and pane_rules.NEVER == -1
    with pytest.raises(ValueError, match="unknown accumulation mode"):
        reconcile_rule("upserting", "sum")

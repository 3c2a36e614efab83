"""Alert rules over scripted steps: each rule fires once when it starts and once when it resolves."""

from __future__ import annotations

import pytest

from lowwater.core.alerts import RULES, AlertRules, AlertState, StepFigures, Transition

S = 1_000_000  # µs


def _run(steps: list[StepFigures], rules: AlertRules | None = None) -> list[Transition]:
    state = AlertState(rules or AlertRules())
    return [t for f in steps for t in state.evaluate(f)]


def _healthy(n: int, start: int = 0) -> list[StepFigures]:
    """Two partitions keeping pace: lag ~5 s, no late rows, spread steady at 1 s, a step every 10 s."""
    return [StepFigures(step=i, now_us=i * 10 * S, lag_s=5.0 + (i % 3) * 0.1, rows=1000, too_late=0,
                        spread_s=1.0, holding="1") for i in range(start, start + n)]


def test_a_healthy_run_trips_nothing():
    assert _run(_healthy(60)) == []


def test_a_stalling_partition_trips_spread_and_idle_then_resolves_when_it_rejoins():
    #   step:       0..9 healthy | 10..49: partition 1 stalls (spread grows, then it goes idle) | 50: rejoins
    steps = _healthy(10)
    for i in range(10, 50):
        stalled = i >= 30  # idle from step 30 (its idle_timeout passed): out of the min
        steps.append(StepFigures(step=i, now_us=i * 10 * S, lag_s=5.0, rows=1000,
                                 spread_s=1.0 + (i - 9) * 10.0, holding="0" if stalled else "1",
                                 idle=frozenset({"1"}) if stalled else frozenset()))
    steps += [StepFigures(step=50, now_us=500 * S, lag_s=5.0, rows=1000, spread_s=1.0, holding="1")]
    got = _run(steps, AlertRules(idle_for_us=60 * S, holding_for_us=None))
    assert [(t.rule, t.firing, t.step) for t in got] == [
        ("spread_growing", True, 14),    # the 5th growth in a row (steps 10..14)
        ("partition_idle", True, 37),    # idle since step 30 (300 s), more than 60 s at step 37 (370 s)
        ("spread_growing", False, 50),   # rejoined: spread back to 1 s
        ("partition_idle", False, 50),
    ]
    assert "1 idle for more than 60s" in got[1].message


def test_a_late_burst_trips_the_late_rate_and_resolves_after_the_window():
    steps = _healthy(10)
    steps.append(StepFigures(step=10, now_us=100 * S, lag_s=5.0, rows=1000, too_late=30, spread_s=1.0))
    steps += _healthy(10, start=11)
    got = _run(steps)
    assert [(t.rule, t.firing, t.step) for t in got] == [("late_rate", True, 10), ("late_rate", False, 15)]
    assert got[0].value == pytest.approx(30 / 5000)  # over the last 5 steps, above 0.1 %


def test_lag_above_three_times_its_median():
    steps = _healthy(10) + [StepFigures(step=10, now_us=100 * S, lag_s=16.0, rows=10)]
    got = _run(steps)
    assert [(t.rule, t.firing) for t in got] == [("watermark_lag", True)]
    assert got[0].threshold == pytest.approx(15.3)  # 3 x median 5.1


def test_a_partition_holding_w_too_long():
    steps = [StepFigures(step=i, now_us=i * 60 * S, holding="3") for i in range(12)]
    got = _run(steps)
    assert [(t.rule, t.step) for t in got] == [("partition_holding", 11)]  # 660 s > 10 min


@pytest.mark.parametrize(("figures", "rule"), [
    (StepFigures(step=0, now_us=0, regressions=2, regressing_sources=("orders",)), "watermark_regression"),
    (StepFigures(step=0, now_us=0, rows=100, dead_letter=2), "dead_letter_rate"),  # 2 % > 1 %
])
def test_one_step_rules(figures, rule):
    got = _run([figures])
    assert [t.rule for t in got] == [rule]


def test_rules_can_be_switched_off():
    off = AlertRules(lag_factor=None, late_rate=None, spread_steps=None, idle_for_us=None, holding_for_us=None,
                     regression=False, dead_letter_rate=None)
    burst = [StepFigures(step=0, now_us=0, rows=10, dead_letter=5, too_late=5, regressions=1, holding="0")]
    assert _run(burst, off) == []
    assert set(RULES) == set(AlertState().firing)

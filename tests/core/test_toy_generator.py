"""A new watermark generator is one module plus one registration line (issue 34 item 7).

The toy: a *staircase* watermark, ``W_p = floor((max event - lag) / step) * step``,
so ``W_p`` moves only in whole steps. Registered here, it is a ``strategy =
"staircase"`` of a configuration, runs in the tracker (cut anywhere, the same
``W(r)``), has a fingerprint text and a what-if lane; no existing file knows it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import pytest

from lowwater.advisor.lanes import ExactLanes, grid_lanes
from lowwater.config import ConfigError, describe_strategy, load_config
from lowwater.core.tracker import TrackerState, WatermarkTracker
from lowwater.core.watermarks import STRATEGIES, StrategyError, register_strategy, strategy_from_table
from lowwater.core.watermarks.protocol import Emitted, GeneratorSpec, PartitionRows, setting_text
from lowwater.time import NEG_INF, POS_INF


@dataclass(frozen=True)
class Staircase(GeneratorSpec):
    """``W_p`` in whole ``step_us``: the max event time minus ``lag_us``, rounded down to a step."""

    step_us: int
    lag_us: int = 0
    kind: ClassVar[str] = "staircase"

    def build(self, snapshot: dict[str, Any] | None = None) -> StaircaseGenerator:
        g = StaircaseGenerator(self)
        g.restore(snapshot or {})
        return g

    def check_inputs(self, has_arrival: bool, has_marker: bool) -> None:
        """Event times only."""

    def describe(self) -> str:
        return f"staircase step={setting_text(self.step_us)}, lag={setting_text(self.lag_us)}"


class StaircaseGenerator:
    def __init__(self, spec: Staircase) -> None:
        self.spec = spec
        self.max_event_us = NEG_INF

    def on_rows(self, rows: PartitionRows) -> Emitted:
        ev = np.asarray(rows.event_us, dtype=np.int64)
        running = np.maximum.accumulate(np.maximum(ev, self.max_event_us))
        if len(ev):
            self.max_event_us = int(running[-1])
        return Emitted((running - self.spec.lag_us) // self.spec.step_us * self.spec.step_us)

    @property
    def watermark_us(self) -> int:
        if self.max_event_us <= NEG_INF:
            return NEG_INF
        return (self.max_event_us - self.spec.lag_us) // self.spec.step_us * self.spec.step_us

    @property
    def reported(self) -> bool:
        return self.max_event_us > NEG_INF

    @property
    def lateness_us(self) -> int | None:
        return None

    def active_until_us(self, start_clock_us: int) -> int:
        return POS_INF

    def snapshot(self) -> dict[str, Any]:
        return {"max_event_us": self.max_event_us}

    def restore(self, snapshot: dict[str, Any]) -> None:
        self.max_event_us = int(snapshot.get("max_event_us", NEG_INF))


def _staircase(t: Any) -> Staircase:  # noqa: ANN401 - a StrategyTable
    step = t.duration("step")
    if not step:
        raise t.fail("step", "must be positive")
    return Staircase(step, t.duration("lag", "0s"))


@pytest.fixture
def registered():
    register_strategy("staircase", {"step", "lag"}, _staircase)  # the one registration line
    yield
    STRATEGIES.pop("staircase")


LOG = [("a", 12), ("b", 3), ("a", 25), ("b", 31), ("a", 29), ("b", 44)]  # (partition, event µs), arrival order


def _advance(tracker: WatermarkTracker, log: list[tuple[str, int]]) -> list[int]:
    return tracker.advance(np.array([p for p, _ in log]), np.array([e for _, e in log], dtype=np.int64)).tolist()


def test_a_table_names_it_and_the_tracker_runs_it_however_the_log_is_cut(registered):
    strategy = strategy_from_table({"strategy": "staircase", "step": "10us", "lag": "2us"})
    assert strategy.kind == "staircase" and strategy.generator == Staircase(10, 2)
    # W_a: (12-2)//10*10 = 10, then 20, 20; W_b: 0, 20, 40. W(r), before each row: the min over the
    # partitions seen so far, never moving back (b's first 0 does not pull 10 down).
    whole = _advance(WatermarkTracker(strategy), LOG)
    assert whole == [NEG_INF, 10, 10, 10, 20, 20]
    for cut in range(1, len(LOG)):
        first = WatermarkTracker(strategy)
        head = _advance(first, LOG[:cut])
        resumed = WatermarkTracker(strategy, TrackerState.from_json(first.state.to_json()))
        assert head + _advance(resumed, LOG[cut:]) == whole, cut


def test_its_keys_are_checked_and_a_name_is_registered_once(registered):
    with pytest.raises(StrategyError, match=r"^watermark\.marker: not a key of strategy = \"staircase\""):
        strategy_from_table({"strategy": "staircase", "step": "1s", "marker": "m"})
    with pytest.raises(StrategyError, match=r"^watermark\.step: must be positive"):
        strategy_from_table({"strategy": "staircase", "step": "0s"})
    with pytest.raises(ValueError, match="registered already"):
        register_strategy("staircase", {"step"}, _staircase)


def test_a_pipeline_configures_it_and_the_fingerprint_and_what_if_know_it(registered, tmp_path):
    (tmp_path / "p.toml").write_text(
        '[source]\npath = "landing"\nevent_time = "t"\npartition = "p"\narrival_time = "a"\n'
        '[watermark]\nstrategy = "staircase"\nstep = "1m"\nidle_timeout = "5m"\n'
        '[window]\nsize = "10s"\n[output]\npath = "out"\n')
    cfg = load_config(tmp_path / "p.toml")
    assert describe_strategy(cfg.watermark) == "staircase step=1m, lag=0s, idle_timeout=5m"
    lanes = grid_lanes({"default": cfg.watermark}, [0, 5_000_000])
    assert isinstance(lanes, ExactLanes)  # not a bounded L: one tracker per grid point, the toy unchanged in each
    assert [t.strategies["default"].generator for t in lanes.trackers.values()] == [Staircase(60_000_000)] * 2


def test_without_the_registration_the_configuration_is_refused(tmp_path):
    (tmp_path / "p.toml").write_text(
        '[source]\npath = "landing"\nevent_time = "t"\n[watermark]\nstrategy = "staircase"\nstep = "1m"\n'
        '[window]\nsize = "10s"\n[output]\npath = "out"\n')
    with pytest.raises(ConfigError, match="strategy: 'staircase' is not one of bounded, punctuated, adaptive$"):
        load_config(tmp_path / "p.toml")

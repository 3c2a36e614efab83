"""``spark/hooks.StepHooks``: the engine's observers when none are handed in (no Spark needed)."""

from __future__ import annotations

import logging

from lowwater.config import load_config
from lowwater.spark.hooks import StepHooks

BASE = """
[source]
path = "landing"
event_time = "t"
partition = "p"
[watermark]
max_out_of_orderness = "3s"
[window]
size = "10s"
[output]
path = "out"
"""


def _cfg(tmp_path, extra: str = ""):
    f = tmp_path / "p.toml"
    f.write_text(BASE + extra)
    return load_config(f)


def test_hooks_see_every_step_and_one_that_raises_stops_no_other(caplog):
    seen: list[tuple[int, float]] = []

    def broken(*_: object) -> None:
        raise ValueError("boom")

    hooks = StepHooks()
    hooks.hooks += [broken, lambda step, row, totals, alerts: seen.append((step, row["lag"]))]
    with caplog.at_level(logging.WARNING, logger="lowwater"):
        for step in range(3):
            hooks.on_step(step, {"lag": step / 2}, {"rows": step})
    assert seen == [(0, 0.0), (1, 0.5), (2, 1.0)]
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 1 and "broken" in warned[0] and "boom" in warned[0]  # once per kind of error


def test_exporters_asked_for_but_not_handed_in_are_said_once_at_start(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="lowwater"):
        StepHooks(_cfg(tmp_path)).start()
        assert caplog.records == []  # nothing configured: nothing to say
        StepHooks(_cfg(tmp_path, '[observe]\nprometheus_port = 0\n[alerts]\n')).start()
    (line,) = [r.getMessage() for r in caplog.records]
    assert line.startswith("[alerts], observe.prometheus_port configured, but this Engine was given no observers")

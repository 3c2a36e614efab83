"""The terminal status line of ``lowwater run`` (no Spark)."""

from __future__ import annotations

from lowwater.observe.terminal import status_line
from tests.core.test_observe_model import ROW, TOTALS


def test_terminal_status_line_names_who_holds_w_and_the_idle():
    line = status_line(7, ROW, TOTALS, {"late_rate": True, "partition_idle": False})
    assert line.startswith("step 7 | 500 rows (5 too late) | W 1970-01-01T00:01:30")
    assert "held by b" in line and "idle: c" in line and "late rate 1.05%" in line
    assert line.endswith("ALERT: late_rate")

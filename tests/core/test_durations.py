"""Durations in user output are written as users write them (``lowwater.time.format_duration``)."""

from __future__ import annotations

import pytest

from lowwater.report import stop_line
from lowwater.time import format_duration, to_duration_us


@pytest.mark.parametrize(("text", "shown"), [
    ("11h", "11h"),                     # the flights log's bound: never 39600s
    ("30m", "30m"),
    ("90m", "1h 30m"),
    ("250ms", "250ms"),
    ("1.5s", "1.5s"),
    ("0s", "0s"),
    ("40us", "40us"),
    ("2d", "2d"),
    ("26h", "1d 2h"),
    ("3725s", "1h 2m 5s"),
    ("59.9999s", "1m"),                 # rounds to the unit shown, not to "60s"
    ("999.9996ms", "1s"),
])
def test_typed_durations_print_back_as_typed(text, shown):
    assert format_duration(to_duration_us(text)) == shown


def test_measured_durations_round_to_what_is_read():
    assert format_duration(40_380.4e6) == "11h 13m"    # a quantile in seconds: whole seconds from a minute on
    assert format_duration(12.3456e6) == "12.346s"     # under a minute: three decimals at most
    assert format_duration(0.0125e6) == "12.5ms"
    assert format_duration(-90e6) == "-1m 30s"
    assert format_duration(None) == "-"


def test_stop_line_names_a_step_in_flight_only_when_there_was_one():
    line = stop_line("SIGTERM", 4, False)
    assert line == "stopped by SIGTERM: the checkpoint holds step 4; run the same command to resume"
    assert "a step in flight was not committed" in stop_line("SIGINT", 4, True)
    assert stop_line("SIGTERM", -1, False).startswith("stopped by SIGTERM: no step was committed yet;")

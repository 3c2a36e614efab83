"""``source.time_zone``: validated, fingerprinted, warned about when naive timestamps are read as UTC (issue 31)."""

from __future__ import annotations

import json

import pytest

from lowwater.config import ConfigError, parse_config
from lowwater.io.checkpoint import differences, fingerprint
from lowwater.io.headers import NAIVE_TIME, Header, naive_clock_warning, read_header


def _cfg(tmp_path, **source):
    return parse_config({"source": {"path": "landing", "event_time": "t", "arrival_time": "arr", **source},
                         "window": {"size": "1h"}, "output": {"path": "out"}}, base_dir=tmp_path)


def test_time_zone_is_an_iana_name_or_one_line(tmp_path):
    assert _cfg(tmp_path).source.zone == "UTC" and _cfg(tmp_path).source.time_zone is None
    assert _cfg(tmp_path, time_zone="America/New_York").source.zone == "America/New_York"
    for bad in ("America/Nowhere", "EST5EDT/x", "", 5):
        with pytest.raises(ConfigError, match=r"^source.time_zone: .* is not a time zone name \(an IANA name"):
            _cfg(tmp_path, time_zone=bad)
    named = {"source": [{"name": "flights", "path": "a", "event_time": "t", "time_zone": "Mars/Olympus"}],
             "window": {"size": "1h"}, "output": {"path": "out"}}
    with pytest.raises(ConfigError, match="^source.flights.time_zone: 'Mars/Olympus' is not a time zone name"):
        parse_config(named)


def test_time_zone_is_fingerprinted_and_absent_means_utc(tmp_path):
    utc = fingerprint(_cfg(tmp_path), "struct<t:string>")
    assert "source.time_zone" not in utc  # a checkpoint started before the key keeps its fingerprint
    ny = fingerprint(_cfg(tmp_path, time_zone="America/New_York"), "struct<t:string>")
    assert ny["source.time_zone"] == "America/New_York"
    assert differences(utc, ny) == ["source.time_zone"] and differences(ny, utc) == ["source.time_zone"]
    assert differences(utc, fingerprint(_cfg(tmp_path, time_zone="UTC"), "struct<t:string>")) == []


@pytest.mark.parametrize(("text", "naive"), [
    ("2013-01-01 20:45:00", True), ("2013-01-01T20:45", True), ("2013-01-01", True),
    ("2013-01-01 20:45:00.123", True), ("2013-01-01T20:45:00Z", False), ("2013-01-01T20:45:00-05:00", False),
    ("1357073100", False),
])
def test_naive_time_text(text, naive):
    assert bool(NAIVE_TIME.match(text)) == naive


def test_naive_clocks_are_warned_about_once_unless_time_zone_is_set(tmp_path):
    land = tmp_path / "landing"
    land.mkdir()
    (land / "a.jsonl").write_text(json.dumps({"t": "2013-01-01 20:45:00", "arr": "2013-01-01T21:00:00Z"}) + "\n")
    cfg = _cfg(tmp_path)
    h = read_header(cfg.source)
    assert h.naive == {"t"}
    line = naive_clock_warning(cfg, {"default": h})
    assert line == ("source.time_zone is not set: 't' holds timestamps without a zone, read as UTC; set "
                    'source.time_zone to the zone they were written in (e.g. "America/New_York")')
    assert naive_clock_warning(_cfg(tmp_path, time_zone="UTC"), {"default": h}) is None
    assert naive_clock_warning(cfg, {"default": Header({"t": "string"}, True)}) is None

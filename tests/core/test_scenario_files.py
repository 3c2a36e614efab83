"""What needs several core runs of a scenario transcript (tests/scenarios/*.yaml).

Each transcript alone runs through the core in tests/core/test_transcripts.py and through the Spark engine
in tests/spark/test_scenario_files.py. The tests below change the configuration or the rows of a file and
compare runs (issue 13's acceptance: the slowest source governs, markers against a bound, an adaptive L against
fixed ones, clipping on and off).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from lowwater.core.windows import TumblingWindows
from lowwater.demo.compare import max_based_outcome
from lowwater.testing.scenario_files import emit_latencies
from lowwater.testing.transcript_core import run_core
from lowwater.testing.transcripts import load, load_all

SCENARIOS = Path(__file__).parent.parent / "scenarios"


def _bounds(s, **bounds):
    for src in s.config["source"]:
        if src["name"] in bounds:
            src["watermark"]["max_out_of_orderness"] = bounds[src["name"]]
    return run_core(s)


def test_the_slowest_source_governs_and_tightening_the_others_changes_nothing():
    s = load(SCENARIOS / "three_sources_slowest_governs.yaml")
    base = run_core(s)
    for radar, link in (("1ms", "10s"), ("100ms", "1s"), ("1ms", "1ms")):
        tightened = _bounds(s, radar=radar, link=link)
        assert tightened.results == base.results
        assert tightened.too_late == base.too_late == [("optical", "0", 3.0)]
    # Tightening the governing source does change the answer: link's row 27 s late becomes too late.
    assert ("link", "0", 15.0) in _bounds(s, optical="10s").too_late


def _as_bounded(s, source: str, bound: str):
    for src in s.config["source"]:
        if src["name"] == source:
            src["watermark"] = {"strategy": "bounded", "max_out_of_orderness": bound}
    return run_core(s)


def test_commit_markers_lose_nothing_where_a_bound_on_the_same_data_loses_rows():
    s = load(SCENARIOS / "punctuated_cdc.yaml")
    markers = sum(1 for r in s.input["cdc"] if r["is_marker"])
    data = len(s.input["cdc"]) - markers
    punctuated = run_core(s)
    assert punctuated.too_late == []
    assert punctuated.counts["markers"] == markers == 12
    # Marker rows are not data: not rows, not in any result.
    assert punctuated.counts["rows"] == data
    assert sum(r[5] for r in punctuated.results if r[3] == "final") == data
    s.input["cdc"] = [r for r in s.input["cdc"] if not r["is_marker"]]
    bounded = _as_bounded(s, "cdc", "5s")
    assert bounded.counts["rows"] == data
    assert bounded.counts["too_late"] > 0
    assert {("cdc", "s0", 26.0), ("cdc", "s1", 33.0)} <= set(bounded.too_late)


def test_an_older_marker_is_ignored_counted_and_changes_nothing():
    s = load(SCENARIOS / "marker_regression.yaml")
    got = run_core(s)
    assert got.counts["regressions"] == 2
    assert got.watermarks == sorted(got.watermarks)
    assert got.too_late == [("cdc", "s0", 18.0)]  # W held at the proof of 21, not moved back to 15
    # Without the two older markers: the same answer and no regression (they were ignored).
    older = {(15, 23), (28, 34)}
    s.input["cdc"] = [r for r in s.input["cdc"] if (r["commit_ts"], r["ingested_at"]) not in older]
    clean = run_core(s)
    assert clean.counts["regressions"] == 0
    assert (clean.results, clean.too_late, clean.watermarks) == (got.results, got.too_late, got.watermarks)


BURST = range(21, 44)  # row indices (arrival - 1 s) of the burst: every other row 2 s .. 12 s late


def test_the_adaptive_bound_widens_during_the_burst_and_tightens_after():
    s = load(SCENARIOS / "adaptive_burst.yaml")
    got = run_core(s)
    trajectory = got.lateness["mobile/eu"]
    assert len(trajectory) == len(s.input["mobile"])
    assert set(trajectory[: BURST.start]) == {2.0}  # min_lateness while delays are under 1 s
    widest = int(np.argmax(trajectory))
    assert trajectory[widest] == 12.0  # the largest delay of the burst (max_lateness 20 s not reached)
    assert widest in BURST
    during = trajectory[BURST.start : widest + 1]
    assert during == sorted(during) and during[-1] > during[0]  # widens step by step
    assert trajectory[-20:] == [2.0] * 20  # and tightens back once the burst left the 10 s window
    assert got.counts["regressions"] > 0  # proposals behind W_p while L widened: ignored, counted


def test_the_adaptive_bound_loses_less_than_its_initial_l_and_emits_sooner_than_its_maximum():
    s = load(SCENARIOS / "adaptive_burst.yaml")
    adaptive = run_core(s)
    at_min = _as_bounded(load(SCENARIOS / "adaptive_burst.yaml"), "mobile", "2s")  # its initial L
    at_max = _as_bounded(load(SCENARIOS / "adaptive_burst.yaml"), "mobile", "20s")  # its max_lateness
    assert adaptive.counts["too_late"] < at_min.counts["too_late"]
    assert (adaptive.counts["too_late"], at_min.counts["too_late"]) == (1, 5)
    assert np.mean(adaptive.emit_latency) < np.mean(at_max.emit_latency)
    assert np.mean(at_max.emit_latency) >= 20.0  # a fixed 20 s bound fires every window 20 s after its end


def test_without_clipping_the_device_ahead_makes_the_other_sources_rows_too_late():
    s = load(SCENARIOS / "clipping_device_ahead.yaml")
    clipped = run_core(s)
    assert clipped.too_late == []
    assert clipped.counts["clipped"] == 1
    del s.config["source"][0]["watermark"]["max_future_skew"]
    unclipped = run_core(s)
    assert unclipped.counts["clipped"] == 0
    assert unclipped.too_late == [("link", "0", 7.0), ("link", "0", 21.0), ("link", "0", 33.0)]


def test_a_marker_without_event_time_is_a_dead_letter_and_moves_nothing():
    s = load(SCENARIOS / "bad_input.yaml")
    got = run_core(s)
    assert ("cdc", "marker row without event_time (commit_ts)") in got.dead_letters
    s.input["cdc"] = [r for r in s.input["cdc"] if r["commit_ts"] is not None]
    without = run_core(s)
    assert without.counts["dead_letter"] == got.counts["dead_letter"] - 1
    assert (without.results, without.watermarks) == (got.results, got.watermarks)


def test_emit_latency_is_max_event_seen_minus_end_when_w_first_reaches_the_end():
    s = 10**6
    event = np.array([5, 12, 9, 25, 31]) * s
    w_after = np.array([0, 8, 10, 20, 26]) * s
    # [0,10) fires after row 2 (max seen 12), [10,20) after row 3 (25), [30,40) never (drain only).
    assert emit_latencies([10 * s, 20 * s, 40 * s], event, w_after) == [2.0, 5.0]
    assert emit_latencies([], event, w_after) == []


def test_a_max_based_watermark_drops_the_trailing_partition_the_min_keeps():
    """watermarks.yaml's trailing partition: on time under the min (its expectations), all dropped under a max."""
    (t,) = [t for t in load_all(SCENARIOS / "watermarks.yaml") if t.name == "trailing_partition_on_time_under_the_min"]
    rows = t.scenario.input["default"]
    assert run_core(t.scenario).counts["too_late"] == 0
    ev = np.array([int(r["event_time"] * 1e6) for r in rows])
    spark_like = max_based_outcome(ev, np.arange(len(rows)), 2_000_000, TumblingWindows(10_000_000), 0)
    assert spark_like.dropped == 5  # every row of p1

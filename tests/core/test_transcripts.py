"""Every scenario transcript (tests/scenarios/**/*.yaml) through the core: its expectations, steps and replays.

The same transcripts run through the Spark engine in tests/spark/test_scenario_files.py, held to the same
expectations, so the two paths are compared through them. Here each also runs re-cut into other
micro-batches and, where arrival times decide the order, landed reversed and shuffled: every replay must
give the same results, too-late rows and counts (SEMANTICS.md §8). A transcript with ``error:`` is a
configuration that must be refused with that message.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from lowwater.config import ConfigError, parse_config
from lowwater.testing.scenario_files import compare
from lowwater.testing.transcript_core import replays, run
from lowwater.testing.transcripts import expected, load_all, parse, step_cuts, step_problems

SCENARIOS = Path(__file__).parent.parent / "scenarios"
TRANSCRIPTS = [t for p in sorted(SCENARIOS.glob("*.yaml")) for t in load_all(p)]
RUNS = [t for t in TRANSCRIPTS if t.error is None]
ERRORS = [t for t in TRANSCRIPTS if t.error is not None]


def _steps(t):
    return [st.take for st in t.steps] if t.steps else None


@pytest.mark.parametrize("t", RUNS, ids=[t.name for t in RUNS])
def test_core_path_gives_the_expected_outcome_and_steps(t):
    got, steps = run(t.scenario, steps=_steps(t))
    assert not compare(got, expected(t.scenario))
    c = got.counts
    assert c["rows"] == c["on_time"] + c["late_updates"] + c["too_late"] + c["dead_letter"]  # §6
    assert got.watermarks == sorted(got.watermarks)  # W(r) never goes back in arrival order (§2)
    if t.steps:
        assert not step_problems(t, [(st.watermark, st.panes, st.too_late) for st in steps])


@pytest.mark.parametrize("t", RUNS, ids=[t.name for t in RUNS])
def test_replays_give_the_same_results(t):
    base, _ = run(t.scenario, steps=_steps(t))
    want = expected(t.scenario)
    assert "recut" in t.replay
    for name, got in replays(t).items():
        assert not compare(got, want), name
        assert (got.results, got.too_late, got.counts) == (base.results, base.too_late, base.counts), name


@pytest.mark.parametrize("t", ERRORS, ids=[t.name for t in ERRORS])
def test_a_refused_configuration_says_why(t):
    with pytest.raises(ConfigError) as e:
        parse_config(t.scenario.config)
    assert t.error in str(e.value)


def test_every_transcript_is_run_and_the_refusals_are_there():
    assert len(RUNS) >= 6 and ERRORS


def test_replays_by_default_only_where_arrival_times_decide_the_order():
    cfg = {"source": {"format": "jsonl", "path": "in", "event_time": "t"},
           "window": {"type": "tumbling", "size": "10s", "key": [], "aggregations": {}}, "output": {"path": "out"}}
    assert parse({"config": cfg}, "x").replay == ("recut",)
    with_arrival = {**cfg, "source": {**cfg["source"], "arrival_time": "a"}}
    assert parse({"config": with_arrival}, "x").replay == ("reversed", "shuffled", "recut")
    assert parse({"config": with_arrival, "order_sensitive": True}, "x").replay == ("recut",)
    tie = [{"t": 1, "a": 5}, {"t": 2, "a": 5}]  # one arrival time: landing order breaks the tie
    assert parse({"config": with_arrival, "input": {"default": tie}}, "x").replay == ("recut",)
    with pytest.raises(ValueError, match="unknown keys"):
        parse({"config": cfg, "expected": {}}, "x")
    with pytest.raises(ValueError, match="steps take 1 rows of default, it has 2"):
        parse({"config": cfg, "input": {"default": [{"t": 1}, {"t": 2}]}, "steps": [{"input": {"default": 1}}]}, "x")


MODES = [t for t in RUNS if t.name.startswith("mode_")]


@pytest.mark.parametrize("t", MODES, ids=[t.name for t in MODES])
def test_folding_a_windows_emissions_as_its_mode_says_gives_its_rows_value(t):
    """The fold property (core/panes.py): [0, 10)'s emissions, folded per mode, give its rows 1, 2, 10, 100."""
    got = run(t.scenario)[0]
    mode = t.scenario.config["window"]["accumulation"]
    window = [r for r in got.results if r[:3] == ("a", 0.0, 10.0)]
    in_order = sorted(window, key=lambda r: (r[4], r[3] != "retraction"))  # by revision, a retraction first
    if mode == "accumulating":
        value = in_order[-1][5:7]
    else:
        sign = {"discarding": lambda r: 1, "retracting": lambda r: -1 if r[3] == "retraction" else 1}[mode]
        value = (sum(sign(r) * r[5] for r in in_order), sum(sign(r) * r[6] for r in in_order))
    assert value == (4, 113.0)
    assert len(MODES) == 3


def test_steps_map_onto_files_for_one_source():
    (t,) = [t for t in RUNS if t.name == "out_of_order_with_grace"]
    assert step_cuts(t) == {"default": [3, 4]}
    assert step_cuts(next(t for t in RUNS if t.name == "bad_input")) is None  # no steps

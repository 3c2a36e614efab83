"""Every scenario transcript (tests/scenarios/*.yaml) through the Spark engine, cut into files independently per source.

The core path runs the same transcripts in tests/core/test_transcripts.py (with their steps and their
reversed, shuffled and re-cut replays); here each runs once, with the second cutting it lists (sources cut
independently: the engine's arrival frontier must hold rows back), and must give the transcript's expected
results, too-late rows and counts -- the same the core gives, so the two paths are compared (SEMANTICS.md §8).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from lowwater.testing.scenario_files import compare
from lowwater.testing.scenario_spark import run_spark
from lowwater.testing.transcripts import expected, load, load_all, step_cuts, step_problems

pytestmark = pytest.mark.spark

SCENARIOS = Path(__file__).parent.parent / "scenarios"
# adaptive_burst runs through Spark in test_adaptive_lateness_trajectory_is_in_the_metrics (one run, both checks).
RUNS = [t for p in sorted(SCENARIOS.glob("*.yaml")) if p.stem != "adaptive_burst" for t in load_all(p)
        if t.error is None]


@pytest.mark.parametrize("t", RUNS, ids=[t.name for t in RUNS])
def test_spark_path_gives_the_expected_outcome(spark, t, tmp_path):
    """Its steps as files, else the second cutting listed (the three-source file: also one batch).

    One run per transcript keeps the suite's time; the steps' watermarks, panes and too-late rows are
    checked per micro-batch as in the core.
    """
    s = t.scenario
    want = expected(s)
    steps = step_cuts(t)
    cuttings = [steps] if steps is not None else s.cuts[1:2] or s.cuts[:1]
    if t.name == "three_sources_slowest_governs":
        cuttings = s.cuts[:2]
    for i, cuts in enumerate(cuttings):
        got = run_spark(spark, s, cuts, workdir=tmp_path / f"cut{i}")
        problems = compare(got, want) + (step_problems(t, got.steps) if steps is not None else [])
        assert not problems, f"cutting {cuts}:\n" + "\n".join(problems)
        c = got.counts
        assert c["rows"] == c["on_time"] + c["late_updates"] + c["too_late"] + c["dead_letter"]  # §6


def test_adaptive_lateness_trajectory_is_in_the_metrics(spark, tmp_path):
    """metrics/ shows the L in force per partition after each step: it widens in the burst, then tightens."""
    import pyarrow.parquet as pq

    s = load(SCENARIOS / "adaptive_burst.yaml")
    n = len(s.input["mobile"])
    got = run_spark(spark, s, {"mobile": list(range(6, n, 6))}, workdir=tmp_path)
    assert not compare(got, expected(s))
    metrics = pq.read_table(tmp_path / "out" / "metrics").to_pandas().sort_values("batch_id")
    steps = [dict(m)["eu"] for m, b in zip(metrics["partition_lateness_s"], metrics["batch_id"], strict=True)
             if b >= 0 and len(m)]
    assert steps[0] == 2.0  # min_lateness while the delays are under 1 s
    widest = max(steps)
    assert 2.0 < widest <= 20.0  # widened during the burst, within max_lateness
    assert steps.index(widest) < len(steps) - 1
    assert steps[-1] == 2.0  # and tightened after it

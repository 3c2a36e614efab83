"""Every scenario file (tests/scenarios/*.yaml) through the Spark engine, cut into files independently per source.

The core path runs the same files in tests/core/test_scenario_files.py; here
each cutting (sources cut independently into files) must give the scenario's
expected results, too-late rows and counts (SEMANTICS.md §8).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from lowwater.testing.scenario_files import compare, expected, load
from lowwater.testing.scenario_spark import run_spark

pytestmark = pytest.mark.spark

SCENARIOS = Path(__file__).parent.parent / "scenarios"
# adaptive_burst runs through Spark in test_adaptive_lateness_trajectory_is_in_the_metrics (one run, both checks).
FILES = sorted(p for p in SCENARIOS.glob("*.yaml") if p.stem != "adaptive_burst")


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_spark_path_gives_the_expected_outcome(spark, path, tmp_path):
    """The second cutting listed (sources cut independently; the three-source file: also one batch).

    The core path runs every cutting (tests/core/test_scenario_files.py); here one cut run per file keeps the
    suite's time (each file is a micro-batch of the real engine).
    """
    s = load(path)
    want = expected(s)
    cuttings = s.cuts[1:2] if path.stem != "three_sources_slowest_governs" else s.cuts[:2]
    for i, cuts in enumerate(cuttings):
        got = run_spark(spark, s, cuts, workdir=tmp_path / f"cut{i}")
        problems = compare(got, want)
        assert not problems, f"cutting {cuts}:\n" + "\n".join(problems)


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

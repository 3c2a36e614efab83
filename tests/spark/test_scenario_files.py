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

FILES = sorted((Path(__file__).parent.parent / "scenarios").glob("*.yaml"))


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_spark_path_gives_the_expected_outcome(spark, path, tmp_path):
    """The first cutting (usually one batch) and the last (the most cut): the core path checks the others."""
    s = load(path)
    want = expected(s)
    for i, cuts in enumerate(s.cuts[:1] + s.cuts[1:][-1:]):
        got = run_spark(spark, s, cuts, workdir=tmp_path / f"cut{i}")
        problems = compare(got, want)
        assert not problems, f"cutting {cuts}:\n" + "\n".join(problems)

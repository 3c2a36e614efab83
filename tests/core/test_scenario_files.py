"""Every scenario file (tests/scenarios/*.yaml) through the pure core path.

The same files run through the Spark engine in tests/spark/test_scenario_files.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from lowwater.testing.scenario_files import compare, expected, load, run_core

FILES = sorted((Path(__file__).parent.parent / "scenarios").glob("*.yaml"))


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_core_path_gives_the_expected_outcome(path):
    s = load(path)
    assert not compare(run_core(s), expected(s))


def _bounds(s, **bounds):
    for src in s.config["source"]:
        if src["name"] in bounds:
            src["watermark"]["max_out_of_orderness"] = bounds[src["name"]]
    return run_core(s)


def test_the_slowest_source_governs_and_tightening_the_others_changes_nothing():
    s = load(Path(__file__).parent.parent / "scenarios" / "three_sources_slowest_governs.yaml")
    base = run_core(s)
    for radar, link in (("1ms", "10s"), ("100ms", "1s"), ("1ms", "1ms")):
        tightened = _bounds(s, radar=radar, link=link)
        assert tightened.results == base.results
        assert tightened.too_late == base.too_late == [("optical", "0", 3.0)]
    # Tightening the governing source does change the answer: link's row 27 s late becomes too late.
    assert ("link", "0", 15.0) in _bounds(s, optical="10s").too_late

"""The interval join through the Spark engine: sources cut into different files, late rows, a restart.

The semantic cases run in the core (tests/core/test_join.py, every cut and a
brute-force differential); here each run is compared with the core's answer
on the same log and with the scenario file's expectation.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from lowwater.testing.join_scenarios import compare, expected, load_join, run_core, run_spark

pytestmark = pytest.mark.spark

SCENARIOS = Path(__file__).parent.parent / "scenarios" / "join"


def test_left_outer_join_with_sources_cut_differently_matches_the_core(spark, tmp_path):
    s = load_join(SCENARIOS / "bounds_and_outer.yaml")
    cuts = s.cuts[1]  # clicks in five files, orders in three: the arrival frontier holds rows back
    got, summary = run_spark(spark, s, cuts, workdir=tmp_path)
    assert not compare(got, expected(s), s)
    core = run_core(s)
    assert (got.joined, got.too_late) == (core.joined, core.too_late)
    assert got.counts == core.counts
    assert summary["join"]["left"]["balanced"] and summary["join"]["right"]["balanced"]
    assert summary["rows"] == 11 and summary["on_time"] == 11 and summary["balanced"]
    metrics = pd.read_parquet(tmp_path / "out" / "join_metrics")
    held = metrics.dropna(subset=["output_watermark"])
    assert (held["output_watermark"] <= held["watermark"]).all()  # the held output watermark (§2)
    assert metrics["open_left"].iloc[-1] == 0 and metrics["open_right"].iloc[-1] == 0  # drained: all freed


def test_a_partner_too_late_goes_to_the_side_output_across_a_restart(spark, tmp_path):
    # A new engine takes over from the checkpoint after the first micro-batch (the click at 10 s buffered,
    # the arrival frontier holding rows) and replays that batch, as after a crash before its commit:
    # joined/ and late/ are those of the scenario's one-batch answer (and of the core, every cut).
    s = load_join(SCENARIOS / "partner_too_late.yaml")
    got, summary = run_spark(spark, s, s.cuts[1], workdir=tmp_path, restart_after=0)
    assert not compare(got, expected(s), s)
    core = run_core(s)
    assert (got.joined, got.too_late, got.counts) == (core.joined, core.too_late, core.counts)
    late = pd.read_parquet(tmp_path / "out" / "late")
    assert late[["source", "reason"]].values.tolist() == [["orders", "too_late_for_join"]]
    assert late["watermark"].iloc[0] == pd.Timestamp(28, unit="s", tz="UTC")  # W(r) = min(30 - 2, 31 - 2)
    assert summary["too_late"] == 1 and summary["join"]["right"]["too_late"] == 1

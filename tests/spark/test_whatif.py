"""The what-if replay against the engine: one semantic core, the same numbers."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from lowwater.advisor.whatif import SweepSpec, advise, run_whatif
from lowwater.config import parse_config
from lowwater.testing.scenario import base_config, run_scenario

from .test_determinism import random_logs
from .test_scenarios import OUT_OF_ORDER, rows_of

pytestmark = pytest.mark.spark
S = 1_000_000


def whatif_of(spark, workdir: Path, cfg_dict: dict, bounds, graces):
    cfg = parse_config(cfg_dict, base_dir=workdir)
    return run_whatif(spark, cfg, SweepSpec([b * S for b in bounds], [g * S for g in graces], chunk_rows=7))


def test_hand_computed_grid(spark, tmp_path):
    run_scenario(spark, base_config(), rows_of(OUT_OF_ORDER), workdir=tmp_path)  # lands the files
    grid = whatif_of(spark, tmp_path, base_config(), [0, 2, 5], [0, 5])
    res = {(r["lateness"], r["allowed_lateness"]): r for r in grid}
    assert [res[(b, 0)]["too_late"] for b in (0, 2, 5)] == [2, 2, 1]
    assert (res[(2, 5)]["late_updates"], res[(2, 5)]["too_late"]) == (1, 1)
    assert res[(2, 0)]["emit_latency_mean"] == 4.0  # see tests/core/test_sweep.py
    text = advise(list(res.values()), 0.8, None)
    assert text.startswith("Smallest L meeting completeness >= 0.8: L=0s (G=5s)")  # 5 of 6 rows counted
    assert advise([r for r in res.values() if r["allowed_lateness"] == 0], 0.8, None).startswith(
        "Smallest L meeting completeness >= 0.8: L=5s (G=0s)"
    )
    assert "No candidate" in advise(list(res.values()), 0.9999, 0.5)


@settings(
    max_examples=3, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(case=random_logs())
def test_whatif_equals_run_once_drain(spark, tmp_path_factory, case):
    cfg, rows, cuts = case
    work = tmp_path_factory.mktemp("diff")
    engine = run_scenario(spark, cfg, rows, cuts=cuts, workdir=work)
    bound = cfg["watermark"]["max_out_of_orderness"]
    grace = cfg["window"]["allowed_lateness"]
    results = whatif_of(spark, work, cfg, [int(bound[:-1])], [int(grace[:-1])])
    assert len(results) == 1
    r, s = results[0], engine.summary
    for k in ("rows", "on_time", "late_updates", "too_late", "dead_letter"):
        assert r[k] == s[k], k
    assert r["windows_fired"] + r["windows_drain_only"] == s["windows_fired"]
    # The same too-late rows, by partition (the side output has one row per too-late (row, window)).
    late = engine.late
    by_part = {} if late.empty else late.drop_duplicates(["partition", "offset"]).groupby("partition").size().to_dict()
    assert r["too_late_by_partition"] == {str(k): int(v) for k, v in by_part.items()}


def test_cli_whatif_and_delays(tmp_path):
    rows = rows_of("""
    p  t   a
    0  1   1
    1  2   3
    0  12  12
    1  5   30
    """)
    run_dir = tmp_path
    landing = run_dir / "landing"
    landing.mkdir()
    import json

    (landing / "part-0.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + "{broken\n")
    cmd = [sys.executable, "-m", "lowwater.cli", "whatif", str(landing), "--event-time", "event_time",
           "--arrival-time", "arrival_time", "--partition", "partition", "--lateness", "0s,5s",
           "--json", str(tmp_path / "w.json"), "--plot", str(tmp_path / "w.png"), "-q", "--master", "local[1]"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads((tmp_path / "w.json").read_text())
    assert [(r["lateness"], r["dead_letter"], r["rows"]) for r in got] == [(0.0, 1, 5), (5.0, 1, 5)]
    assert (tmp_path / "w.png").stat().st_size > 10_000
    bad = subprocess.run(cmd[:5] + ["--event-time", "nope", "-q"], capture_output=True, text=True, timeout=240)
    assert bad.returncode == 2 and "'nope'" in bad.stderr and "Traceback" not in bad.stderr
    prof = subprocess.run([sys.executable, "-m", "lowwater.cli", "delays", str(landing), "--event-time", "event_time",
                           "--arrival-time", "arrival_time", "--partition", "partition", "-q", "--master", "local[1]"],
                          capture_output=True, text=True, timeout=240)
    assert prof.returncode == 0, prof.stderr[-2000:]
    assert "p99.9" in prof.stdout and "25.000" in prof.stdout  # partition 1's 30 - 5

"""Scenario tables through the real engine: rows in arrival order -> expected emissions.

What fits a transcript has moved to tests/scenarios/*.yaml (run by tests/core/test_transcripts.py and
tests/spark/test_scenario_files.py); what stays here needs the engine's own outputs or a second run.

Each scenario is run as one micro-batch and as several cuts; the emissions,
late rows and counts must be the same (SEMANTICS.md §8), and the accounting
identity must hold (§6). Times are seconds; windows are [start, end).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from lowwater.testing.scenario import base_config, run_scenario, table

from .helpers import emitted

pytestmark = pytest.mark.spark


def rows_of(text: str, key: str = "a") -> list[dict]:
    """Table rows -> input rows (p -> partition, t -> event_time, a -> arrival_time)."""
    out = []
    for r in table(text):
        row = {"partition": str(r["p"]), "event_time": float(r["t"]), "key": r.get("key", key),
               "amount": None if r.get("amount", 1.0) is None else float(r.get("amount", 1.0))}
        if "a" in r:
            row["arrival_time"] = float(r["a"])
        out.append(row)
    return out


def check_all_cuts(spark, cfg, rows, cut_sets, drain=True):
    """Run every cutting; all must agree; return the first outcome."""
    outcomes = [run_scenario(spark, cfg, rows, cuts=c, drain=drain) for c in cut_sets]
    first = outcomes[0]
    assert first.summary["balanced"], first.summary
    for o in outcomes[1:]:
        assert o.emissions() == first.emissions()
        assert o.late_rows() == first.late_rows()
        for k in ("rows", "on_time", "late_updates", "too_late", "dead_letter", "windows_fired", "revisions"):
            assert o.summary[k] == first.summary[k], k
    return first


# The rows of tests/scenarios/late_updates.yaml, still used by test_whatif.py.
OUT_OF_ORDER = """
p  t   key amount
0  1   a   1      # W(r) = -inf
0  4   a   2
0  13  a   3      # after it W = 13 - 2 = 11: [0,10) fires with {1, 4}
0  7   a   10     # W(r) = 11 >= end 10: late
0  25  b   1      # W -> 23: [10,20) fires
0  3   a   100    # W(r) = 23: late by 13s
"""


IDLE = """
p  t   a
0  1   1
1  2   2      # p1 reports once, then goes quiet
0  5   5
0  12  12
0  25  25     # clock 25: p1 silent for 23s > 10s -> idle, W = 12 before, 25 after
0  31  31
1  8   40     # p1 rejoins: W(r) = 31 -> its row for [0,10) is too late
1  41  42     # on time; W does not regress to p1's 8
"""


def test_idle_partition_stalls_the_watermark_without_timeout(spark):
    cfg = base_config(source={"arrival_time": "arrival_time"})
    rows = rows_of(IDLE, key="k")
    held = run_scenario(spark, cfg, rows, cuts=[3, 6], drain=False)
    # While p1 is silent W = min(p0, p1) stays at p1's 2: nothing fires for 40s of arrivals.
    assert [(r.windows_fired, r.watermark_us) for r in held.reports[:2]] == [(0, 2_000_000), (0, 2_000_000)]
    # When p1 produces again (41), W jumps to p0's 31; p1's row at 8 was never late.
    assert held.reports[2].watermark_us == 31_000_000 and held.summary["too_late"] == 0
    drained = check_all_cuts(spark, cfg, rows, [None, [3, 6]])
    assert [e[1:4] for e in emitted(drained)] == [(0, 10, 4), (10, 20, 1), (20, 30, 1), (30, 40, 1), (40, 50, 1)]
    assert drained.summary["too_late"] == 0


def test_drain_fires_everything_and_is_idempotent(spark):
    rows = rows_of("""
    p  t
    0  1
    0  15
    """)
    o = run_scenario(spark, base_config(), rows)
    assert emitted(o) == [("a", 0, 10, 1, "final", 0), ("a", 10, 20, 1, "final", 0)]
    assert o.summary["final_watermark"] == "2262-04-11T23:47:16.854775Z" and o.summary["open_windows"] == 0
    drained_rows = o.results[o.results["window_start"].astype("int64") == 10 * 10**9]
    # fired by the drain: W = +inf, written as the documented max timestamp (never null, never 1970)
    drained_at = pd.Timestamp("2262-04-11T23:47:16.854775").value
    assert [pd.Timestamp(t).value for t in drained_rows["watermark"]] == [drained_at]


def test_bad_rows_go_to_dead_letter_and_the_run_goes_on(spark):
    rows = rows_of("""
    p  t   amount
    0  1   1
    0  12  2
    """)
    bad = [
        "this is not json",
        '{"partition": "0", "key": "a", "amount": 1}',
        '{"partition": "0", "event_time": "yesterday", "key": "a", "amount": 1}',
        '{"event_time": 3, "key": "a", "amount": 1}',
        '{"partition": "0", "event_time": 4, "key": "a", "amount": "lots"}',
    ]
    clean = run_scenario(spark, base_config(), rows)
    o = run_scenario(spark, base_config(), rows, raw_lines={0: bad})
    assert o.emissions() == clean.emissions()
    reasons = sorted(o.dead_letter["reason"])
    assert len(reasons) == 5
    assert "malformed record" in reasons  # not JSON at all
    assert "malformed record: wrong type for amount" in reasons  # "lots" where a number goes
    assert "malformed record: wrong type for event_time" in reasons  # "yesterday" (schema: DOUBLE)
    assert any(r.startswith("missing event_time") for r in reasons)
    assert any(r.startswith("missing partition") for r in reasons)
    assert o.summary["dead_letter"] == 5 and o.summary["rows"] == 7 and o.summary["balanced"]
    assert "this is not json" in set(o.dead_letter["raw"])


def test_drop_policy_counts_but_writes_no_late_rows(spark):
    cfg = base_config(watermark={"max_out_of_orderness": "2s"}, late={"policy": "drop"})
    o = run_scenario(spark, cfg, rows_of(OUT_OF_ORDER))
    assert o.summary["too_late"] == 2 and o.late.empty and o.summary["balanced"]


def test_metrics_name_the_partition_holding_the_watermark(spark):
    rows = rows_of("""
    p  t
    0  20
    1  5
    0  24
    1  9
    """)
    cfg = base_config(watermark={"max_out_of_orderness": "2s", "partitions": ["0", "1"]})
    o = run_scenario(spark, cfg, rows, drain=False)
    m = o.metrics.iloc[0]
    assert m["holding_partition"] == "1"
    assert m["spread_s"] == 15.0  # (24 - 2) - (9 - 2)
    assert dict(m["partition_watermarks"])["0"].timestamp() == 22.0
    assert (m["rows"], m["on_time"], m["too_late"]) == (4, 4, 0)


def test_restart_resumes_from_the_checkpoint(spark, tmp_path):
    """Two --once runs (files landing in between) equal one run over everything."""
    from lowwater.config import parse_config
    from lowwater.spark.engine import Engine

    rows = rows_of(OUT_OF_ORDER)
    cfg_dict = base_config(watermark={"max_out_of_orderness": "2s"}, window={"allowed_lateness": "5s"})
    cfg_dict["source"]["max_files_per_batch"] = 1
    landing = tmp_path / "landing"
    landing.mkdir()

    def land(i, chunk):
        import json as _json
        import os as _os

        f = landing / f"part-{i:03d}.jsonl"
        f.write_text("".join(_json.dumps(r) + "\n" for r in chunk))
        _os.utime(f, (1_700_000_000 + i, 1_700_000_000 + i))

    land(0, rows[:3])
    land(1, rows[3:4])
    cfg = parse_config(cfg_dict, base_dir=tmp_path)
    first = Engine(cfg, spark).run(once=True)
    assert first.step == 1 and first.open_windows > 0
    land(2, rows[4:])
    resumed = Engine(cfg, spark)
    final = resumed.run(once=True, drain=True)
    assert final.step == 3  # steps 0, 1 before; 2 (new file) and 3 (drain) now
    whole = run_scenario(spark, cfg_dict, rows, cuts=[3, 4])
    import pandas as pd

    def table_of(r):
        # ns whatever the reader's unit (pandas reads the Parquet as µs, Spark's toPandas gives ns)
        starts = [pd.Timestamp(t).value for t in r["window_start"]]
        cols = [r["key"], starts, r["count"], r["kind"], r["revision"]]
        return sorted(zip(*cols, strict=True))

    assert table_of(pd.read_parquet(tmp_path / "out" / "results")) == table_of(whole.results)
    assert resumed.summary(final)["too_late"] == whole.summary["too_late"] == 1


def test_global_window_without_key_and_every_aggregate(spark):
    cfg = base_config(window={"key": [], "aggregations": {
        "total": "sum(amount)", "low": "min(amount)", "high": "max(amount)", "mean": "avg(amount)",
        "priced": "count(amount)",
    }})
    rows = rows_of("""
    p  t   key  amount
    0  1   a    1
    1  2   b    4
    0  3   c    -     # a null amount: counted in count, not in the value aggregates
    0  12  a    7
    """)
    o = run_scenario(spark, cfg, rows, drain=True)
    r = o.results.sort_values("window_start").reset_index(drop=True)
    assert "key" not in r.columns and len(r) == 2
    first = r.iloc[0]
    assert (first["count"], first["total"], first["low"], first["high"], first["mean"], first["priced"]) == (
        3, 5.0, 1.0, 4.0, 2.5, 2
    )
    assert r.iloc[1]["count"] == 1 and r.iloc[1]["total"] == 7.0


def test_executors_disagreeing_with_the_driver_stop_the_step_before_it_commits(spark, tmp_path, monkeypatch):
    """The pair-count check (run while the driver builds the fold) fails the step loudly; nothing is committed."""
    from dataclasses import replace

    from lowwater.spark.planner import StepPlanner

    real = StepPlanner.plan

    def off_by_one(self, compact, tracker, prev, **kw):  # noqa: ANN001, ANN003, ANN202
        plan = real(self, compact, tracker, prev, **kw)
        # the driver "expects" one more on-time pair
        return replace(plan, pair_counts=plan.pair_counts + np.array([1, 0, 0]))

    monkeypatch.setattr(StepPlanner, "plan", off_by_one)
    rows = rows_of("""
    p  t
    0  1
    0  12
    """)
    with pytest.raises(RuntimeError, match=r"step 0: executors judged \(2, 0, 0\) .* the driver \(3, 0, 0\)"):
        run_scenario(spark, base_config(), rows, drain=False, workdir=tmp_path)
    state = tmp_path / "out" / "_checkpoint" / "lowwater" / "state"
    assert not list(state.glob("manifest-*.json"))

"""The interval join through the Spark engine: sources cut into different files, late rows, a restart.

The semantic cases run in the core (tests/core/test_join.py, every cut and a
brute-force differential); here each run is compared with the core's answer
on the same log and with the scenario file's expectation.
"""

from __future__ import annotations

import inspect
import json
from dataclasses import replace
from pathlib import Path

import pandas as pd
import psycopg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lowwater.config import parse_config
from lowwater.io.outputs import ParquetOutputs
from lowwater.spark.engine import Engine
from lowwater.spark.metrics import METRICS_ARROW, METRICS_SCHEMA
from lowwater.spark.operators.join.operator import JoinOperator
from lowwater.spark.row_clock import ExecutorClock
from lowwater.testing.join_scenarios import compare, expected, load_join, run_core, run_spark
from lowwater.testing.scenario_files import _plain_copy
from lowwater.testing.scenario_spark import _chunks

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
    # metrics/ carries the same held output watermark, step by step (the drain's is the max timestamp)
    steps = pd.read_parquet(tmp_path / "out" / "metrics").sort_values("batch_id")
    assert steps["output_watermark"].tolist() == metrics.sort_values("step")["output_watermark"].tolist()
    assert steps["output_watermark"].notna().any() and steps["output_watermark"].iloc[-1].year == 2262
    assert (steps["output_watermark"].dropna() <= steps.loc[steps["output_watermark"].notna(), "low_watermark"]).all()


def test_the_join_on_the_executors_row_clock_equals_the_drivers(spark, tmp_path, monkeypatch):
    # Both sources with an arrival clock: after the first step (numeric event times: the time_unit check
    # reads them on the driver) the executors keep W(r) and arrival order; every output and count equals
    # the same run on the driver's clock, where the planner assigns the join no window.
    s = load_join(SCENARIOS / "windows_after_join.yaml")
    cuts = s.cuts[2]  # four micro-batches and the drain's release of held rows: four on the executors' clock
    # Dead letters on both sides (no event time), in the last micro-batch: each side counts its own, as the row
    # clock counted them per source (pass 1 of the executors' clock, the driver's plan): no Spark job of the join's.
    bad = {"clicks": [{"partition": 0, "arrival_time": 32, "user": "u8", "campaign": "A"}],
           "orders": [{"partition": 0, "arrival_time": 34, "user": "u8", "amount": 2.0},
                      {"partition": 0, "arrival_time": 35, "user": "u9", "amount": 4.0}]}
    counts = s.expect["counts"]
    s = replace(s, input={name: [*rows, *bad[name]] for name, rows in s.input.items()},
                expect={**s.expect, "counts": {"left": {**counts["left"], "rows": 8, "dead_letter": 1},
                                               "right": {**counts["right"], "rows": 8, "dead_letter": 2}}})
    status = spark.sparkContext.statusTracker()
    jobs_before = set(status.getJobIdsForGroup())
    join_step = JoinOperator.step
    dead_steps: list[tuple[int, bool]] = []  # (a join step's dead letters, on the executors' clock)

    def judged(self, parsed, plan, *a):  # noqa: ANN001, ANN202
        dead_steps.append((plan.dead, plan.lookup is None))
        return join_step(self, parsed, plan, *a)

    monkeypatch.setattr(JoinOperator, "step", judged)
    steps: list[int] = []
    inner = ExecutorClock.step
    monkeypatch.setattr(ExecutorClock, "step", lambda self, *a, **kw: steps.append(1) or inner(self, *a, **kw))
    # The buckets a step's rows touch, as pass 1 of the executors' clock told them (ADR 0047), are those its rows
    # have (a bucket missed would be dropped unread when W frees it).
    touched: list[tuple[set[int], set[int]]] = []
    advance = JoinOperator._advance

    def told(self, prev, step, w, rows, n, dead, cache, late, known=None):  # noqa: ANN001, ANN202
        if known is not None:
            have = set() if rows is None else {int(r[0]) for r in rows.select("_bucket").distinct().collect()}
            touched.append((set(known), have))
        return advance(self, prev, step, w, rows, n, dead, cache, late, known)

    monkeypatch.setattr(JoinOperator, "_advance", told)
    got, summary = run_spark(spark, s, cuts, workdir=tmp_path / "executors")
    assert len(steps) >= 2
    assert touched and all(k == want for k, want in touched)
    monkeypatch.setattr(JoinOperator, "_advance", advance)
    assert not compare(got, expected(s), s)
    # Every step but the first on the executors' clock, the drain's release of the held rows too.
    ran = len(dead_steps)
    assert [e for _, e in dead_steps] == [False, True, True, True, True]
    monkeypatch.setenv("LOWWATER_ROW_CLOCK", "driver")
    n = len(steps)
    want, want_summary = run_spark(spark, s, cuts, workdir=tmp_path / "driver")
    assert len(steps) == n
    assert got == want
    assert summary == want_summary

    def metrics(run: str) -> list[dict]:
        return pd.read_parquet(tmp_path / run / "out" / "join_metrics").sort_values("step").to_dict("records")

    assert metrics("executors") == metrics("driver")
    assert dead_steps[3] == (3, True) and (3, False) in dead_steps[ran:]  # dead letters on either clock
    assert not any(e for _, e in dead_steps[ran:])
    # No job of either run was started by the join's step itself (it once split its dead letters by a collect).
    spark.sparkContext._jsc.sc().listenerBus().waitUntilEmpty()  # every job the runs started is recorded
    sites = [info.name for j in sorted(set(status.getJobIdsForGroup()) - jobs_before)
             for sid in (status.getJobInfo(j).stageIds if status.getJobInfo(j) else [])
             if (info := status.getStageInfo(sid)) is not None]
    source, first = inspect.getsourcelines(join_step)
    in_step = {f"{inspect.getsourcefile(join_step)}:{n}" for n in range(first, first + len(source))}
    assert any("row_clock.py:" in site for site in sites)  # the call sites name lowwater's lines
    assert not [site for site in sites if site.rsplit(" at ", 1)[-1] in in_step]


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


def test_joined_rows_reach_postgres_exactly_once_like_parquet(spark, pg_server, tmp_path):
    # The streaming query, one file of each source a micro-batch; an old metrics table (no
    # output_watermark yet) is given the column; a second run on the checkpoint adds nothing.
    s = load_join(SCENARIOS / "bounds_and_outer.yaml")
    for name, rows in s.input.items():
        landing = tmp_path / "landing" / name
        landing.mkdir(parents=True)
        for i, chunk in enumerate(_chunks(rows, [3])):  # two files a source: two micro-batches, then the drain
            (landing / f"part-{i:05d}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in chunk))
    data = _plain_copy(s.config)
    for src in data["source"]:
        src["max_files_per_batch"] = 1
    data["output"].update(kind="postgres", postgres={"url": pg_server.url, "joined_table": "jj",
                                                     "metrics_table": "jm", "late_table": "jl"})
    cfg = parse_config(data, base_dir=tmp_path)
    with psycopg.connect(pg_server.url) as conn:
        conn.execute("CREATE TABLE jm (lw_pipeline text NOT NULL, batch_id bigint NOT NULL, spark_batch bigint, "
                     "PRIMARY KEY (lw_pipeline, batch_id))")
    Engine(cfg, spark).run(drain=True)
    cols = ["batch_id", "user", "click", "amount", "left_event_time", "right_event_time", "watermark"]

    def pg(table: str) -> pd.DataFrame:
        with psycopg.connect(pg_server.url) as conn:
            cur = conn.execute(psycopg.sql.SQL("SELECT * FROM {} WHERE lw_pipeline = %s").format(
                psycopg.sql.Identifier(table)), (cfg.output.path,))
            return pd.DataFrame(cur.fetchall(), columns=[d.name for d in cur.description])

    def rows(df: pd.DataFrame) -> list[tuple]:
        df = df[cols].copy()
        for c in ("left_event_time", "right_event_time", "watermark"):
            df[c] = pd.to_datetime(df[c], utc=True)
        return sorted(map(tuple, df.astype(str).itertuples(index=False)))

    want = pd.read_parquet(tmp_path / "out" / "joined")
    got = rows(pg("jj"))
    assert len(want) == 8 and got == rows(want)
    metrics = pg("jm").sort_values("batch_id")
    steps = pd.read_parquet(tmp_path / "out" / "metrics").sort_values("batch_id")
    assert len(metrics) == len(steps) >= 3
    assert (pd.to_datetime(metrics["output_watermark"], utc=True).astype(str).tolist()
            == steps["output_watermark"].astype(str).tolist())
    Engine(cfg, spark).run(drain=True)
    assert rows(pg("jj")) == got and len(pg("jm")) == len(metrics)
    with psycopg.connect(pg_server.url) as conn:
        assert conn.execute("SELECT count(*) FROM jj_staging").fetchone()[0] == 0


def test_an_older_metrics_output_gets_the_output_watermark_column(spark, tmp_path):
    # An output path written before metrics/ had output_watermark: its empty schema file is rewritten,
    # so pandas (which takes the first file's schema) sees the column, null in the older steps.
    old = METRICS_ARROW.remove(METRICS_ARROW.get_field_index("output_watermark"))
    for step in (-1, 0):
        d = tmp_path / "out" / "metrics" / f"batch_id={step}"
        d.mkdir(parents=True)
        rows = [] if step < 0 else [dict.fromkeys(old.names)]
        pq.write_table(pa.Table.from_pylist(rows, old), d / "part-00000.parquet")
    ParquetOutputs(spark, str(tmp_path / "out")).prepare("metrics", METRICS_ARROW.empty_table(), METRICS_SCHEMA)
    got = pd.read_parquet(tmp_path / "out" / "metrics")
    assert "output_watermark" in got.columns and len(got) == 1 and got["output_watermark"].isna().all()


def test_windows_after_the_join_follow_the_held_watermark_like_the_core(spark, tmp_path):
    # [join] then [window]: orders per campaign per 10 s over joined pairs, sources cut into different
    # files; the windows' W is the join's held output watermark. results/ equals the scenario file's
    # windows and the core's (one row a batch), joined/ and the accounting are the join's. A new engine
    # replays the first micro-batch from the checkpoint (as after a crash before its commit): the
    # window state is read back by the step of the engine's manifest.
    s = load_join(SCENARIOS / "windows_after_join.yaml")
    got, summary = run_spark(spark, s, s.cuts[1], workdir=tmp_path, restart_after=0)
    assert not compare(got, expected(s), s)
    n = sum(len(v) for v in s.input.values())
    core = run_core(s, list(range(1, n)))
    assert (got.results, got.joined, got.too_late, got.counts) == (core.results, core.joined, core.too_late,
                                                                   core.counts)
    assert summary["join_window"] == {"on_time": 6, "late_updates": 0, "too_late": 0}  # 6 joined rows, 1 window each
    results = pd.read_parquet(tmp_path / "out" / "results")
    results["batch_id"] = results["batch_id"].astype(int)
    held = pd.read_parquet(tmp_path / "out" / "join_metrics").set_index("step")["output_watermark"]
    for r in results[results["batch_id"] < results["batch_id"].max()].itertuples():  # before the drain
        assert r.window_end <= held[r.batch_id] and r.watermark == held[r.batch_id]  # fired by the hold
    assert (results["kind"] == "final").all()
    # Every aggregate after the join (ADR 0039), a second engine in this session: per user, with a second click of
    # u1 (campaign B at 2 s) whose pair with the order at 9 s ties the first click's at 9 s: the tie goes by the
    # later row's arrival (the same order), then the earlier row's (the click at 1 s first).
    clicks = [*s.input["clicks"]]
    clicks.insert(1, {"partition": 0, "event_time": 2, "arrival_time": 2, "user": "u1", "campaign": "B"})
    aggs = {"first": "first_by_time(campaign)", "last": "last_by_time(campaign)", "l": "collect_list(campaign)",
            "n": "count_distinct(amount)", "s": "collect_set(amount)", "d": "approx_count_distinct(campaign)",
            "p": "approx_percentile(amount, 0.5)"}
    every = replace(s, config={**s.config, "window": {"type": "tumbling", "size": "10s", "key": ["user"],
                                                      "aggregations": aggs}},
                    input={**s.input, "clicks": clicks}, expect={})
    got, _ = run_spark(spark, every, s.cuts[1], workdir=tmp_path / "every")
    want = run_core(every, list(range(1, n + 1))).results
    assert got.results == want == run_core(every).results
    assert ("u1", 0.0, 10.0, "final", 0, 2, "A", "B", ["A", "B"], 1.0, [10.0], 2.0, 10.0) in want
    assert ("u3", 0.0, 10.0, "final", 0, 1, "B", "B", ["B"], 0.0, [], 1.0, None) in want  # unmatched: no amount


def test_a_temporal_join_through_spark_equals_the_core(spark, tmp_path):
    # [join] kind = "temporal": payments with the rate valid at their event time, the sources cut into
    # two files each (payments waiting in the key buckets across steps, older rates freed).
    s = load_join(SCENARIOS / "temporal_rates.yaml")
    got, summary = run_spark(spark, s, s.cuts[1], workdir=tmp_path)
    assert not compare(got, expected(s), s)
    core = run_core(s, [4])
    assert (got.joined, got.too_late, got.counts) == (core.joined, core.too_late, core.counts)
    assert summary["join"]["left"]["balanced"] and summary["join"]["right"]["balanced"]
    late = pd.read_parquet(tmp_path / "out" / "late")
    assert sorted(late["reason"]) == ["too_late_for_join"] * 2
    joined = pd.read_parquet(tmp_path / "out" / "joined")
    rates = {p: None if pd.isna(r) else r for p, r in zip(joined["payment"], joined["rate"], strict=True)}
    assert rates == {"p1": 1.1, "p2": 1.2, "p3": None, "p4": 1.2, "p5": 1.0, "p7": 1.3}  # the chosen columns
    # The same with a [window] after it: payments per currency per 10 s, at their payment's time, the
    # windows' W held at the waiting payments only (the kept rates emit nothing).
    window = {"type": "tumbling", "size": "10s", "key": ["currency"],
              "aggregations": {"paid": "sum(amount)", "top_rate": "max(rate)"}}
    w = replace(s, config={**s.config, "window": window}, expect={})
    got, _ = run_spark(spark, w, s.cuts[1], workdir=tmp_path / "windows")
    want = run_core(w, [4]).results
    assert got.results == want and ("EUR", 10.0, 20.0, "final", 0, 2, 600.0, 1.2) in want

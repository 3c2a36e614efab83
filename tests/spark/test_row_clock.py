"""The executors' row clock (spark/row_clock.py) equals the driver's, row for row and output for output.

Two checks. First, on a run's own steps (the driver's clock forced), the
planner's input, the tracker state before it, its per-row ``W`` and the state
after are kept, and the executors' clock recomputes ``W`` from the same rows:
summaries per partition, the fold, the lookup in the operator's pass. Then
whole runs through either clock, with random cuts, give identical outputs for
each window type, lateness policy, accumulation mode, markers, idleness and
clipping -- and the executors' clock did run. Both clocks name a row's lane
with one rule (``core/frontier.lane_of``), in Arrow and in Spark SQL.
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest

from lowwater.config import parse_config
from lowwater.core.frontier import kafka_lane
from lowwater.core.tracker import WatermarkTracker
from lowwater.core.tracker_state import TrackerState
from lowwater.io.source import lanes_of
from lowwater.spark.planner import StepPlanner
from lowwater.spark.ready import lane_column
from lowwater.spark.row_clock import ExecutorClock, unavailable
from lowwater.testing.scenario import base_config, run_scenario

pytestmark = pytest.mark.spark

ARRIVAL = {"arrival_time": "arrival_time", "offset": "offset", "time_unit": "ms"}


def _rows(seed: int, n: int = 90, markers: bool = False) -> list[dict]:
    """Three partitions, disorder up to ~8 s, one partition lagging, a silent stretch, shared arrivals."""
    rng = np.random.default_rng(seed)
    out, arrival = [], 0
    for i in range(n):
        arrival += int(rng.choice([0, 0, 300, 700, 1500]))
        if i == n // 2:
            arrival += 9000  # a silence longer than the idle timeout
        p = str(int(rng.choice(3, p=[0.5, 0.35, 0.15])))
        lag = int(rng.integers(0, 8000)) if p != "2" else int(rng.integers(5000, 30000))
        row = {"partition": p, "offset": i, "event_time": float(max(arrival - lag, 0) + 1000),
               "arrival_time": float(arrival + 1000), "key": f"k{int(rng.integers(0, 3))}", "amount": float(i % 7)}
        if markers:
            row["is_marker"] = int(i % 9 == 4)
        out.append(row)
    return out


def test_the_w_column_equals_the_planners_w_row_for_row(spark, tmp_path, monkeypatch):
    monkeypatch.setenv("LOWWATER_ROW_CLOCK", "driver")
    captured = []
    real = StepPlanner.plan

    def spy(self, compact, tracker, prev, **kw):  # noqa: ANN001, ANN003, ANN202
        before = TrackerState.from_json(json.loads(json.dumps(tracker.state.to_json())))
        plan = real(self, compact, tracker, prev, **kw)
        captured.append((compact, before, plan, tracker.state.to_json()))
        return plan

    monkeypatch.setattr(StepPlanner, "plan", spy)
    config = base_config(
        source=ARRIVAL,
        watermark={"max_out_of_orderness": "2s", "idle_timeout": "5s", "partitions": ["0", "1", "2"]},
    )
    rows = _rows(7)
    run_scenario(spark, config, rows, cuts=[20, 51], drain=False, workdir=tmp_path)
    cfg = parse_config(config, base_dir=tmp_path)
    assert unavailable(cfg) is None
    assert len(captured) == 3
    for compact, before, plan, after in captured:
        cache: list = []
        clocked = ExecutorClock(cfg).step(spark.createDataFrame(compact), WatermarkTracker(cfg.watermark, before),
                                          cache)
        got = clocked.rows.frame_with_clock(["_rid"]).select("_rid", "_w", "_seq", "_seq_minor").collect()
        rid, w, seq = plan.lookup
        assert {int(r["_rid"]): int(r["_w"]) for r in got} == dict(zip(rid.tolist(), w.tolist(), strict=True))
        # Arrival order: the executors' (arrival, minor) sorts the rows as the driver's global sequence does.
        mine = [int(r["_rid"]) for r in sorted(got, key=lambda r: (r["_seq"], r["_seq_minor"]))]
        assert mine == rid[np.argsort(seq)].tolist()
        assert clocked.tracker.state.to_json() == after
        assert clocked.counts.rows == len(rid) and clocked.counts.entries <= clocked.counts.rows
        for c in cache:
            c.unpersist()


CASES = {
    "tumbling, side output, idleness, clipping": dict(
        watermark={"max_out_of_orderness": "2s", "idle_timeout": "5s", "max_future_skew": "3s",
                   "partitions": ["0", "1", "2"]},
        window={"type": "tumbling", "size": "10s", "allowed_lateness": "4s",
                "aggregations": {"total": "sum(amount)", "n": "count(amount)", "top": "max(amount)"}},
    ),
    "hopping, retracting, drop": dict(
        watermark={"max_out_of_orderness": "1s"},
        window={"type": "hopping", "size": "10s", "slide": "5s", "allowed_lateness": "6s",
                "accumulation": "retracting"},
        late={"policy": "drop"},
    ),
    "sessions, discarding, side output": dict(
        watermark={"max_out_of_orderness": "1s", "idle_timeout": "4s"},
        window={"type": "session", "gap": "3s", "allowed_lateness": "5s", "accumulation": "discarding"},
    ),
    "tumbling, early trigger, accumulating": dict(
        watermark={"max_out_of_orderness": "3s"},
        window={"type": "tumbling", "size": "5s", "allowed_lateness": "5s"},
        trigger={"early": "every 2 rows"},
    ),
}


def _outputs(outcome) -> tuple:  # noqa: ANN001
    metrics = outcome.metrics.sort_values("batch_id")
    cols = ["batch_id", "low_watermark", "partition_watermarks", "idle_partitions", "holding_partition", "rows",
            "on_time", "late_updates", "too_late", "dead_letter", "clipped", "windows_fired", "revisions",
            "open_windows", "arrival_regressions", "markers", "regressions"]
    return (outcome.emissions(), outcome.late_rows(), outcome.summary,
            [tuple(str(v) for v in row) for row in metrics[cols].itertuples(index=False)])


@pytest.mark.parametrize("case", list(CASES))
def test_either_clock_gives_the_same_outputs(spark, tmp_path, monkeypatch, case):
    config = base_config(source=ARRIVAL, **CASES[case])
    if config["window"]["type"] == "session":
        del config["window"]["size"]
    rows = _rows(len(case))
    calls = []
    real = ExecutorClock.step

    def counted(self, *a, **kw):  # noqa: ANN001, ANN002, ANN003, ANN202
        calls.append(1)
        return real(self, *a, **kw)

    monkeypatch.setattr(ExecutorClock, "step", counted)
    cuts = sorted(np.random.default_rng(len(case)).choice(np.arange(1, len(rows)), 2, replace=False).tolist())
    raw = {1: ['{"partition": "0", "offset": 999, "event_time": "soon", "arrival_time": 1.0}']}
    outs = {}
    for clock in ("driver", "executors"):
        monkeypatch.setenv("LOWWATER_ROW_CLOCK", clock)
        outs[clock] = _outputs(run_scenario(spark, config, rows, cuts=cuts, raw_lines=raw, workdir=tmp_path / clock))
        if clock == "driver":
            assert not calls
    # Every step of the second run but the first kept its clock on the executors (the first step of a
    # checkpoint with numeric event times checks their time_unit on the driver).
    assert len(calls) == 2
    assert outs["executors"] == outs["driver"]
    emissions, _, summary, _ = outs["executors"]
    assert emissions and summary["dead_letter"] == 1 and summary["balanced"]
    assert summary["late_updates"] + summary["too_late"] > 0  # the cases exercise lateness


def test_markers_move_the_watermark_on_the_executors_too(spark, tmp_path, monkeypatch):
    config = base_config(
        source={**ARRIVAL, "schema": "partition STRING, offset LONG, event_time DOUBLE, arrival_time DOUBLE, "
                                     "key STRING, amount DOUBLE, is_marker INT"},
        watermark={"strategy": "punctuated", "marker": "is_marker"},
    )
    del config["watermark"]["max_out_of_orderness"]
    rows = _rows(3, markers=True)
    outs = {}
    for clock in ("driver", "executors"):
        monkeypatch.setenv("LOWWATER_ROW_CLOCK", clock)
        outs[clock] = _outputs(run_scenario(spark, config, rows, cuts=[30, 61], workdir=tmp_path / clock))
    assert outs["executors"] == outs["driver"]
    assert outs["executors"][2]["markers"] == sum(r["is_marker"] for r in rows)


def _kafka(name: str, **topics: object) -> dict:
    return {"name": name, "format": "kafka", "bootstrap_servers": "b:9092", "schema": "id STRING, event_time DOUBLE",
            "event_time": "event_time", "watermark": {"max_out_of_orderness": "0s"}, **topics}


def test_the_driver_and_the_executors_name_lanes_as_the_core_rule_does(spark):
    """The planner's Arrow lanes and ``lane_column``'s equal ``kafka_lane``'s strings (persisted in manifests)."""
    several = base_config()
    several["source"] = [{**several.pop("source"), "name": "bank", "arrival_time": "event_time",
                          "watermark": several.pop("watermark")},
                         _kafka("pay", topic="payments"), _kafka("mt", topics=["a", "orders-eu"])]
    one = base_config()
    one["source"] = {k: v for k, v in _kafka("pay", topic="payments").items() if k not in ("name", "watermark")}
    rows = [("bank", "0", "landing/f.jsonl", "bank"),
            ("pay", "3", "payments-3", kafka_lane("pay", 3, "payments")),
            ("pay", "12", "payments-12", kafka_lane("pay", 12, "payments")),
            ("mt", "a-0", "a-0", kafka_lane("mt", 0, "a", by_topic=True)),  # several topics (ADR 0043)
            ("mt", "orders-eu-12", "orders-eu-12", kafka_lane("mt", 12, "orders-eu", by_topic=True))]
    single = [("default", "7", "payments-7", kafka_lane("default", 7, "payments"))]
    for data, table in ((several, rows), (one, single)):
        cfg = parse_config(data)
        lanes = lanes_of(cfg)
        compact = pa.table({"_source": [r[0] for r in table], "_part": [r[1] for r in table],
                            "_file": [r[2] for r in table]})
        if not cfg.multi_source:
            compact = compact.drop_columns(["_source"])
        expected = [r[3] for r in table]
        assert StepPlanner(cfg, {}, lambda: 0).lanes(compact).tolist() == expected
        frame = spark.createDataFrame([(i, *r[:3]) for i, r in enumerate(table)], "_i INT, _source STRING, "
                                      "_part STRING, _file STRING")
        got = frame.orderBy("_i").select(lane_column(lanes.by_partition, lanes.single).alias("lane")).collect()
        assert [r["lane"] for r in got] == expected
    assert rows[1][3] == "pay\x000000000003\x00payments-3" and rows[3][3] == "mt\x00a-0\x00a-0"

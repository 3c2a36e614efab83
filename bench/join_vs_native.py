"""The interval join: lowwater's ``[join]`` against native Spark's stream-stream join, and its open state.

(a) native Spark: ``withWatermark`` on both sides + the time-range condition,
    inner join, ``noop`` sink, available-now trigger;
(b) lowwater: the same files, bounds and ``L`` through ``Engine.run(once=True)``
    (``joined/`` written for real).

Clicks arrive at ``rate`` a second (half of them have an order of the same
user 0-20 s later); arrival delays are exponential (clicks mean 0.5 s,
orders 2 s). Prints one JSON line per case, the ratio (lowwater events/s ÷
native events/s), and the join's largest open-row count per step against
``rate × (upper - lower + L_left + L_right)`` (issue 14's state bound).

    python -m bench.join_vs_native --clicks 200000 --files 20
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from bench.results import record, size

START_US = 1_767_225_600_000_000  # 2026-01-01T00:00:00Z
S = 1_000_000


def make_logs(clicks: int, users: int, rate: float, seed: int = 1) -> tuple[pa.Table, pa.Table]:
    """Clicks and orders, each sorted by arrival (one partition each)."""
    rng = np.random.default_rng(seed)
    c_event = START_US + (np.arange(clicks) * (S / rate)).astype(np.int64)
    c_user = rng.integers(0, users, clicks)
    bought = rng.random(clicks) < 0.5
    o_event = c_event[bought] + rng.integers(0, 20 * S, int(bought.sum()))
    o_user = c_user[bought]

    def table(event: np.ndarray, user: np.ndarray, mean_delay_us: float, ids: str) -> pa.Table:
        arrival = event + rng.exponential(mean_delay_us, len(event)).astype(np.int64)
        order = np.argsort(arrival, kind="stable")
        return pa.table({
            "partition": pa.array(np.zeros(len(event), dtype=np.int32)),
            "event_time": pa.array(event[order], pa.timestamp("us", tz="UTC")),
            "arrival_time": pa.array(arrival[order], pa.timestamp("us", tz="UTC")),
            "user_id": pa.array(np.char.add("u", user[order].astype(str))),
            ids: pa.array(np.arange(len(event))[order]),
        })

    return table(c_event, c_user, 0.5 * S, "click_id"), table(o_event, o_user, 2 * S, "order_id")


def land(directory: Path, table: pa.Table, files: int) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    per = -(-table.num_rows // files)
    for i in range(files):
        pq.write_table(table.slice(i * per, per), directory / f"part-{i:05d}.parquet")


def native(spark, work: Path, l_click_s: int, l_order_s: int, upper_s: int) -> dict:  # noqa: ANN001
    from pyspark.sql import functions as F

    def read(name: str, files_per_batch: int = 1):  # noqa: ANN202
        schema = spark.read.parquet(str(work / name)).schema
        return spark.readStream.schema(schema).option("maxFilesPerTrigger", files_per_batch).parquet(str(work / name))

    c = read("clicks").select(F.col("user_id").alias("c_user"), F.col("event_time").alias("c_ts"), "click_id")
    o = read("orders").select(F.col("user_id").alias("o_user"), F.col("event_time").alias("o_ts"), "order_id")
    c = c.withWatermark("c_ts", f"{l_click_s} seconds")
    o = o.withWatermark("o_ts", f"{l_order_s} seconds")
    cond = F.expr(f"c_user = o_user AND o_ts >= c_ts AND o_ts <= c_ts + interval {upper_s} seconds")
    joined = c.join(o, cond, "inner")
    t0 = time.monotonic()
    q = (joined.writeStream.format("noop").trigger(availableNow=True)
         .option("checkpointLocation", str(work / "native-ckpt")).start())
    q.awaitTermination()
    secs = time.monotonic() - t0
    state = [sum(int(s.get("numRowsTotal", 0)) for s in r.get("stateOperators", [])) for r in q.recentProgress]
    return {"seconds": secs, "max_state_rows": max(state, default=0)}


def lowwater(spark, work: Path, l_click_s: int, l_order_s: int, upper_s: int) -> dict:  # noqa: ANN001
    from lowwater.config import parse_config
    from lowwater.spark.engine import Engine

    def source(name: str, bound: int) -> dict:
        return {"name": name, "format": "parquet", "path": str(work / name), "partition": "partition",
                "event_time": "event_time", "arrival_time": "arrival_time", "max_files_per_batch": 1,
                "watermark": {"strategy": "bounded", "max_out_of_orderness": f"{bound}s"}}

    cfg = parse_config({
        "source": [source("clicks", l_click_s), source("orders", l_order_s)],
        "join": {"left": "clicks", "right": "orders", "on": ["user_id"], "lower": "0s", "upper": f"{upper_s}s",
                 "type": "inner", "columns": {"left": ["click_id"], "right": ["order_id"]}},
        "late": {"policy": "drop"},
        "output": {"path": str(work / "lowwater-out")},
    })
    t0 = time.monotonic()
    engine = Engine(cfg, spark)
    engine.run(once=True)
    secs = time.monotonic() - t0
    metrics = pq.read_table(work / "lowwater-out" / "join_metrics").to_pydict()
    open_rows = [a + b for a, b in zip(metrics["open_left"], metrics["open_right"], strict=True)]
    joined = pq.read_table(work / "lowwater-out" / "joined").num_rows
    return {"seconds": secs, "steps": len(engine.reports), "max_open_rows": max(open_rows, default=0),
            "joined": joined}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--clicks", type=int, default=200_000)
    p.add_argument("--users", type=int, default=10_000)
    p.add_argument("--rate", type=float, default=1000.0, help="clicks per second of event time")
    p.add_argument("--files", type=int, default=20, help="files per source (one per micro-batch)")
    p.add_argument("--upper", type=int, default=30, help="upper bound, s (lower = 0)")
    p.add_argument("--l-click", type=int, default=5)
    p.add_argument("--l-order", type=int, default=15)
    args = p.parse_args(argv)
    from lowwater.config import SparkConfig
    from lowwater.runtime.session import get_spark

    spark = get_spark(SparkConfig(master="local[2]", app_name="bench-join", shuffle_partitions=2,
                                  conf={"spark.ui.enabled": "false"}))
    work = Path(tempfile.mkdtemp(prefix="lowwater-bench-join-"))
    try:
        clicks, orders = make_logs(args.clicks, args.users, args.rate)
        land(work / "clicks", clicks, args.files)
        land(work / "orders", orders, args.files)
        events = clicks.num_rows + orders.num_rows
        nat = native(spark, work, args.l_click, args.l_order, args.upper)
        low = lowwater(spark, work, args.l_click, args.l_order, args.upper)
        rate_rows = args.rate * 1.5  # clicks + orders a second of event time
        bound = rate_rows * (args.upper + args.l_click + args.l_order)
        for name, r in (("native", nat), ("lowwater", low)):
            print(json.dumps({"case": f"join-{name}", "events": events, **r,
                              "events_per_s": round(events / r["seconds"])}))
        print(json.dumps({
            "case": "join-ratio", "ratio": round(nat["seconds"] / low["seconds"], 3),
            "max_open_rows": low["max_open_rows"], "state_bound": round(bound),
            "open_over_bound": round(low["max_open_rows"] / bound, 3),
        }))
        record("join_vs_native", f"join_vs_native/{size(args.clicks)} clicks, {args.files} files", {
            "events": events, "native_s": round(nat["seconds"], 1), "lowwater_s": round(low["seconds"], 1),
            "ratio": round(nat["seconds"] / low["seconds"], 2), "lowwater_max_open_rows": low["max_open_rows"],
            "bound_rows": round(bound)})
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

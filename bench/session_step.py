"""One session-window step of N rows: lowwater's engine against native ``session_window``.

Generates N rows (``--keys`` keys, 4 partitions, 1,000 rows/s of arrival time,
exponential delays with mean 1 s) as one Parquet file, then times

(a) lowwater: ``Engine.process_batch`` of the whole file as one step (gap 30 s,
    L = 3 s, G = 5 s; results, late rows and session state written for real),
    then the drain;
(b) native Spark: ``groupBy(key, session_window(30 seconds)).agg(count, sum)``
    on the same file, written to Parquet (a batch job: no state store).

Each is run ``--reps`` times in one SparkSession (the first run includes JIT
and cache warm-up). Prints one line per run.

    python -m bench.session_step --rows 200000
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from bench.results import record, size


def generate(path: Path, rows: int, keys: int, seed: int = 1) -> None:
    rng = np.random.default_rng(seed)
    arrival = np.sort(rng.uniform(0, rows / 1000.0, rows))
    event = np.round(arrival - rng.exponential(1.0, rows), 3)
    table = pa.table({
        "partition": pa.array(rng.integers(0, 4, rows).astype(str)),
        "offset": pa.array(np.arange(rows, dtype=np.int64)),
        "event_time": pa.array(event),
        "arrival_time": pa.array(np.round(arrival, 3)),
        "key": pa.array(np.char.add("k", rng.integers(0, keys, rows).astype(str))),
        "amount": pa.array((np.arange(rows) % 100).astype(np.float64)),
    })
    path.mkdir(parents=True)
    pq.write_table(table, path / "part-00000.parquet")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--keys", type=int, default=2_000)
    ap.add_argument("--reps", type=int, default=2)
    args = ap.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import functions as F

    from lowwater.config import SparkConfig, parse_config
    from lowwater.io.files import read_batch
    from lowwater.runtime.session import get_spark
    from lowwater.spark.engine import Engine
    from lowwater.testing.scenario import base_config

    logging.getLogger("lowwater").setLevel(logging.DEBUG if os.environ.get("LOWWATER_DEBUG") else logging.WARNING)
    work = Path(tempfile.mkdtemp(prefix="lowwater-session-bench-"))
    generate(work / "landing", args.rows, args.keys)
    spark = get_spark(SparkConfig(master="local[2]", app_name="session-bench", shuffle_partitions=2,
                                  conf={"spark.ui.enabled": "false"}))
    raw = base_config(
        source={"format": "parquet", "arrival_time": "arrival_time", "offset": "offset"},
        watermark={"max_out_of_orderness": "3s"},
        window={"type": "session", "gap": "30s", "allowed_lateness": "5s"},
    )
    raw["window"].pop("size")
    cfg = parse_config(raw, base_dir=work)
    for rep in range(args.reps):
        shutil.rmtree(work / "out", ignore_errors=True)
        engine = Engine(cfg, spark)
        t0 = time.monotonic()
        report = engine.process_batch(read_batch(spark, cfg.source, engine.schema, path=str(work / "landing")), 0)
        t1 = time.monotonic()
        engine.drain()
        t2 = time.monotonic()
        lw_rate = args.rows / (t1 - t0)  # the last run's (warm) is recorded
        live = report.open_windows
        print(f"run {rep}: lowwater step {args.rows / (t1 - t0):,.0f} rows/s ({t1 - t0:.2f}s; "
              f"{report.open_windows} open sessions, {report.windows_fired} fired), drain {t2 - t1:.2f}s", flush=True)
    for rep in range(args.reps):
        t0 = time.monotonic()
        df = read_batch(spark, cfg.source, engine.schema, path=str(work / "landing"))
        agg = df.withColumn("ts", F.timestamp_seconds("event_time")).groupBy(
            "key", F.session_window("ts", "30 seconds")
        ).agg(F.count("*").alias("count"), F.sum("amount").alias("total"))
        agg.write.mode("overwrite").parquet(str(work / "native"))
        t1 = time.monotonic()
        print(f"run {rep}: native session_window {args.rows / (t1 - t0):,.0f} rows/s ({t1 - t0:.2f}s)", flush=True)
    native_rate = args.rows / (t1 - t0)
    record("session_step", f"session_step/{size(args.rows)} rows, {size(args.keys)} keys", {
        "lowwater_rows_per_s": round(lw_rate), "native_batch_rows_per_s": round(native_rate),
        "ratio": round(lw_rate / native_rate, 2), "live_sessions": live})
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

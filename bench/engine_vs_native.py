"""Throughput: lowwater's engine against native Spark on the same generated data.

(a) native Spark: ``withWatermark`` + ``groupBy(window, key)`` with the RocksDB
    state store, append mode, ``noop`` sink, available-now trigger;
(b) lowwater: the same window, lateness and files through ``Engine.run(once=True)``.

Both read the same Parquet landing zone with the same ``maxFilesPerTrigger``,
in one process, one SparkSession. Prints one JSON line per case and the ratio.

    python -m bench.engine_vs_native --events 4000000 --keys 10000
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

from bench.results import record, size

START_US = 1_767_225_600_000_000  # 2026-01-01T00:00:00Z


def make_log(events: int, keys: int, partitions: int, rate: float, seed: int = 1) -> pa.Table:
    """``events`` rows in arrival order (the generator every benchmark shares).

    Event time advances at ``rate`` events/s; arrival = event + exponential
    delay (mean 0.5 s, 1% of rows 5-30 s late); rows sorted by arrival.
    """
    rng = np.random.default_rng(seed)
    event = START_US + (np.arange(events) * (1e6 / rate)).astype(np.int64)
    delay = rng.exponential(500_000, events).astype(np.int64)
    slow = rng.random(events) < 0.01
    delay[slow] = rng.integers(5_000_000, 30_000_000, int(slow.sum()))
    arrival = event + delay
    order = np.argsort(arrival, kind="stable")
    event, arrival = event[order], arrival[order]
    part = rng.integers(0, partitions, events)
    key = rng.integers(0, keys, events)
    amount = np.round(rng.lognormal(3, 1, events), 2)
    offsets = np.zeros(events, dtype=np.int64)
    for p in range(partitions):
        m = part == p
        offsets[m] = np.arange(int(m.sum()))
    return pa.table({
        "partition": pa.array(part, pa.int32()),
        "offset": pa.array(offsets),
        "event_time": pa.array(event, pa.timestamp("us", tz="UTC")),
        "arrival_time": pa.array(arrival, pa.timestamp("us", tz="UTC")),
        "key": pa.array(np.char.add("k", key.astype(str))),
        "amount": pa.array(amount),
    })


def generate(directory: Path, events: int, keys: int, partitions: int, files: int, rate: float, seed: int = 1) -> None:
    """Land :func:`make_log`'s rows as ``files`` Parquet files in arrival order."""
    from bench.suite import land  # bench.suite imports this module: import at call time

    land(directory, make_log(events, keys, partitions, rate, seed), files)


def native(spark, data: Path, window_s: int, lateness_s: int, files_per_batch: int, work: Path) -> float:  # noqa: ANN001
    """Native Spark's tumbling-window query (the suite's ``native_run``); seconds."""
    from bench.suite import Shape, native_run

    return native_run(spark, data, Shape("tumbling", size_s=window_s), lateness_s, files_per_batch,
                      work / "native-ckpt")["seconds"]


def lowwater_run(spark, data: Path, window_s: int, lateness_s: int, files_per_batch: int, work: Path) -> float:  # noqa: ANN001
    """lowwater on the same files (the suite's ``lowwater_run``, G = 0); seconds."""
    from bench import suite

    shape = suite.Shape("tumbling", size_s=window_s)
    return suite.lowwater_run(spark, data, shape, lateness_s, 0, files_per_batch, work / "lowwater-out")["seconds"]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=4_000_000)
    ap.add_argument("--keys", type=int, default=10_000)
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--files", type=int, default=8)
    ap.add_argument("--files-per-batch", type=int, default=1)
    ap.add_argument("--rate", type=float, default=20_000.0, help="events per second of event time")
    ap.add_argument("--window-s", type=int, default=10)
    ap.add_argument("--lateness-s", type=int, default=5)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--only", choices=["native", "lowwater"], default=None)
    args = ap.parse_args(argv)

    from lowwater.config import SparkConfig
    from lowwater.runtime.session import get_spark

    spark = get_spark(SparkConfig(
        master=args.master,
        app_name="lowwater-bench",
        shuffle_partitions=4,
        conf={
            "spark.sql.streaming.stateStore.providerClass":
                "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
            "spark.driver.memory": "6g",
            "spark.ui.enabled": "false",
        },
    ))
    work = Path(tempfile.mkdtemp(prefix="lowwater-bench-"))
    try:
        data = work / "landing"
        t0 = time.monotonic()
        generate(data, args.events, args.keys, args.partitions, args.files, args.rate)
        print(json.dumps({"case": "generate", "events": args.events, "seconds": round(time.monotonic() - t0, 2)}))
        results = {}
        for name, fn in (("native", native), ("lowwater", lowwater_run)):
            if args.only and args.only != name:
                continue
            secs = fn(spark, data, args.window_s, args.lateness_s, args.files_per_batch, work)
            results[name] = args.events / secs
            print(json.dumps({
                "case": f"tumbling/{name}", "events": args.events, "keys": args.keys,
                "files_per_batch": args.files_per_batch, "seconds": round(secs, 2),
                "events_per_s": round(results[name]),
            }), flush=True)
        if len(results) == 2:
            ratio = round(results["lowwater"] / results["native"], 3)
            print(json.dumps({"case": "tumbling/ratio", "lowwater_over_native": ratio}))
            batch = size(args.events // args.files * args.files_per_batch)
            record("engine_vs_native", f"engine_vs_native/tumbling {args.window_s} s, {batch}-row batches", {
                "events": args.events, "native_eps": round(results["native"]),
                "lowwater_eps": round(results["lowwater"]), "ratio": ratio})
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

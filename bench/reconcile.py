"""``lowwater reconcile`` against the unavoidable part: a plain ``groupBy(window, key)`` of the same files.

Generates an N-row log (``engine_vs_native.make_log``: 8 partitions, 1 % of
rows 5-30 s late), runs the pipeline once over it (``Engine.run(once=True)``,
10 s tumbling windows, L = 5 s, ``--policy`` side_output or drop; timed apart,
not part of the ratio), then in the same process and SparkSession:

- **baseline**: ``spark.read.parquet(files).groupBy(window(event_time, 10 s),
  key).agg(count, sum(amount))`` to the ``noop`` sink;
- **reconcile**: ``lowwater.reconcile.job.reconcile`` over the same files
  (batch truth, causes, the stream's fold, the ``reconcile/`` Parquet write,
  the summary).

Both run ``--repeat`` times (3), alternated, so both see the same JVM warmth
and load. Prints JSON lines with every timing and the ratios: of the first
run (the JVM warm from the stream run only) and of the medians (bar:
reconcile <= 2x baseline).

    python -m bench.reconcile --rows 10000000
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from bench.engine_vs_native import generate
from bench.results import record, size


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--keys", type=int, default=10_000)
    ap.add_argument("--files", type=int, default=20)
    ap.add_argument("--files-per-batch", type=int, default=4)
    ap.add_argument("--policy", choices=["side_output", "drop"], default="side_output")
    ap.add_argument("--rate", type=float, default=20_000.0, help="rows per second of event time")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--repeat", type=int, default=3, help="baseline and reconcile, alternated, this many times")
    args = ap.parse_args(argv)

    from pyspark.sql import functions as F

    from bench.suite import Shape, lowwater_config
    from lowwater.config import SparkConfig, parse_config
    from lowwater.reconcile.job import reconcile
    from lowwater.runtime.session import get_spark
    from lowwater.spark.engine import Engine

    spark = get_spark(SparkConfig(master=args.master, app_name="lowwater-bench-reconcile", shuffle_partitions=8,
                                  conf={"spark.driver.memory": "8g", "spark.ui.enabled": "false"}))
    work = Path(tempfile.mkdtemp(prefix="lowwater-reconcile-bench-"))
    try:
        data = work / "log"
        t0 = time.monotonic()
        generate(data, args.rows, args.keys, 8, args.files, args.rate)
        print(json.dumps({"case": "generate", "rows": args.rows, "seconds": round(time.monotonic() - t0, 2)}))
        raw = lowwater_config(data, work / "out", Shape("tumbling", size_s=10), 5, 0, args.files_per_batch)
        raw["late"] = {"policy": args.policy}
        raw["window"]["aggregations"] = {"total": "sum(amount)"}
        cfg = parse_config(raw)
        t0 = time.monotonic()
        engine = Engine(cfg, spark)
        engine.run(once=True)
        engine.close()
        print(json.dumps({"case": "reconcile/stream_run", "rows": args.rows,
                          "seconds": round(time.monotonic() - t0, 2)}))

        def baseline() -> float:
            t0 = time.monotonic()
            (spark.read.parquet(str(data)).groupBy(F.window("event_time", "10 seconds"), "key")
             .agg(F.count(F.lit(1)), F.sum("amount")).write.format("noop").mode("overwrite").save())
            return time.monotonic() - t0

        def reconciled() -> tuple[float, dict]:
            t0 = time.monotonic()
            result = reconcile(spark, cfg)  # writes reconcile/ too
            took = time.monotonic() - t0
            return took, result.summary

        bases, recs = [], []
        for run in range(args.repeat):  # alternated, so both see the same JVM warmth and machine load
            bases.append(baseline())
            print(json.dumps({"case": "reconcile/baseline_groupby", "run": run, "rows": args.rows,
                              "seconds": round(bases[-1], 2)}))
            took, s = reconciled()
            recs.append(took)
            print(json.dumps({"case": "reconcile/reconcile", "run": run, "rows": args.rows, "policy": args.policy,
                              "seconds": round(took, 2), "rows_per_s": round(args.rows / took),
                              "windows_checked": s["windows_checked"], "windows_differing": s["windows_differing"],
                              "unexplained": s["unexplained"], "late_rows": s["causes"]["too_late"]["rows"]
                              + s["causes"]["dropped"]["rows"]}))
        print(json.dumps({"case": "reconcile/ratio", "first_run": round(recs[0] / bases[0], 3),
                          "median": round(statistics.median(recs) / statistics.median(bases), 3),
                          "baseline_median_s": round(statistics.median(bases), 2),
                          "reconcile_median_s": round(statistics.median(recs), 2)}))
        record("reconcile", f"reconcile/{size(args.rows)} rows, {size(args.keys)} keys, {args.policy}", {
            "baseline_runs_s": [round(x, 2) for x in bases], "reconcile_runs_s": [round(x, 2) for x in recs],
            "ratio_first": round(recs[0] / bases[0], 2),
            "ratio_median": round(statistics.median(recs) / statistics.median(bases), 2),
            "windows_checked": s["windows_checked"], "windows_differing": s["windows_differing"],
            "unexplained": s["unexplained"],
            "too_late_rows": s["causes"]["too_late"]["rows"] + s["causes"]["dropped"]["rows"]})
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

"""What-if sweep cost against the unavoidable part: reading and sorting the log.

Generates an N-row log (``engine_vs_native.generate``), then in one process:

- **baseline**: a plain Spark job that reads the same files and sorts them by
  arrival order (``orderBy(arrival_time, partition, offset)``, ``noop`` sink);
- **sweep**: ``run_whatif`` for six values of L in one call.

Prints JSON lines with both timings and the ratio (bar: sweep <= 2x baseline).

    python -m bench.whatif_sweep --events 10000000
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

from bench.engine_vs_native import generate
from bench.results import record, size


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=10_000_000)
    ap.add_argument("--keys", type=int, default=10_000)
    ap.add_argument("--files", type=int, default=20)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--lateness", default="0s,2s,5s,10s,20s,40s")
    args = ap.parse_args(argv)

    from lowwater.advisor.whatif import SweepSpec, run_whatif
    from lowwater.config import SparkConfig, parse_config
    from lowwater.runtime.session import get_spark
    from lowwater.time import to_duration_us

    spark = get_spark(SparkConfig(master=args.master, app_name="lowwater-bench-whatif", shuffle_partitions=8,
                                  conf={"spark.driver.memory": "8g", "spark.ui.enabled": "false"}))
    work = Path(tempfile.mkdtemp(prefix="lowwater-whatif-bench-"))
    try:
        data = work / "log"
        t0 = time.monotonic()
        generate(data, args.events, args.keys, 8, args.files, 20_000.0)
        print(json.dumps({"case": "generate", "events": args.events, "seconds": round(time.monotonic() - t0, 2)}))

        t0 = time.monotonic()
        (spark.read.parquet(str(data)).orderBy("arrival_time", "partition", "offset")
         .write.format("noop").mode("overwrite").save())
        baseline = time.monotonic() - t0
        print(json.dumps({"case": "whatif/baseline_sort", "events": args.events, "seconds": round(baseline, 2)}))

        cfg = parse_config({
            "source": {"format": "parquet", "path": str(data), "partition": "partition", "offset": "offset",
                       "arrival_time": "arrival_time", "event_time": "event_time"},
            "window": {"type": "tumbling", "size": "10s", "key": ["key"]},
            "output": {"path": str(work / "unused")},
        })
        bounds = [to_duration_us(x) for x in args.lateness.split(",")]
        t0 = time.monotonic()
        results = run_whatif(spark, cfg, SweepSpec(bounds, [0]))
        sweep = time.monotonic() - t0
        print(json.dumps({"case": "whatif/sweep", "events": args.events, "bounds": len(bounds),
                          "seconds": round(sweep, 2), "events_per_s": round(args.events / sweep)}))
        print(json.dumps({"case": "whatif/ratio", "sweep_over_sort": round(sweep / baseline, 3),
                          "completeness_by_L": {r["lateness"]: round(r["completeness"], 6) for r in results}}))
        record("whatif_sweep", f"whatif_sweep/{size(args.events)} rows, {len(bounds)} L", {
            "rows": args.events, "baseline_s": round(baseline, 2), "sweep_s": round(sweep, 2),
            "ratio": round(sweep / baseline, 3)})
    finally:
        shutil.rmtree(work, ignore_errors=True)

if __name__ == "__main__":
    main()

"""Overhead of watching a run: every exporter on ([observe] Prometheus + Spark progress, [alerts]) against off.

The same generated log (``engine_vs_native.make_log``) and tumbling window as
the suite, run through ``Engine.run(once=True)`` alternately without and with
the exporters (A/B interleaved, so drift in the machine's load hits both),
with a scraper reading ``/metrics`` every second while the watched run goes.
Prints one JSON line per run and a summary: the median throughput of each and
their ratio (the issue's bar: within 5 %), and the median step time.

    python -m bench.observe_overhead --events 2000000 --rounds 3
    python -m bench.observe_overhead --no-spark-progress   # Prometheus and alerts only
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np

from bench.engine_vs_native import make_log
from bench.results import record
from bench.suite import PARTITIONS, RATE, TUMBLING, land, lowwater_config


def one_run(spark, data: Path, out: Path, watched: bool, files_per_batch: int,  # noqa: ANN001
            spark_progress: bool = True) -> dict:
    from lowwater.config import parse_config
    from lowwater.observe.hub import Observers
    from lowwater.spark.engine import Engine

    raw = lowwater_config(data, out, TUMBLING, 5, 0, files_per_batch)
    if watched:
        raw["observe"] = {"prometheus_port": 0, "spark_progress": spark_progress, "pipeline": out.name}
        raw["alerts"] = {}
    cfg = parse_config(raw)
    engine = Engine(cfg, spark, observers=Observers(cfg))
    stop = threading.Event()
    scrapes = [0]

    def scrape() -> None:
        while not stop.wait(1.0):
            exporter = engine.observers.prometheus
            if exporter is not None:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{exporter.port}/metrics", timeout=5) as r:
                        r.read()
                    scrapes[0] += 1
                except OSError:  # the endpoint closes when the run ends
                    pass

    scraper = threading.Thread(target=scrape, daemon=True)
    scraper.start()
    t0 = time.monotonic()
    manifest = engine.run(once=True)
    secs = time.monotonic() - t0
    stop.set()
    scraper.join()
    steps = [r.duration_s for r in engine.reports]
    return {"watched": watched, "seconds": round(secs, 2), "rows": int(manifest.totals["rows"]),
            "rows_per_s": manifest.totals["rows"] / secs, "step_s_median": float(np.median(steps)),
            "steps": len(steps), "scrapes": scrapes[0]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.observe_overhead", description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=2_000_000)
    ap.add_argument("--keys", type=int, default=1_000)
    ap.add_argument("--files", type=int, default=16)
    ap.add_argument("--files-per-batch", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--no-spark-progress", action="store_true",
                    help="watched runs without [observe] spark_progress (Prometheus and alerts only)")
    args = ap.parse_args(argv)
    from lowwater.config import SparkConfig
    from lowwater.runtime.session import get_spark

    spark = get_spark(SparkConfig(master=args.master, app_name="lowwater-bench-observe", shuffle_partitions=2,
                                  conf={"spark.ui.enabled": "false"}), quiet=True)
    work = Path(tempfile.mkdtemp(prefix="lowwater-observe-bench-"))
    try:
        data = work / "data"
        land(data, make_log(args.events, args.keys, PARTITIONS, RATE), args.files)
        one_run(spark, data, work / "warmup", False, args.files_per_batch)  # JIT and class loading
        runs: dict[bool, list[dict]] = {False: [], True: []}
        for i in range(args.rounds):
            for watched in (False, True) if i % 2 == 0 else (True, False):
                r = one_run(spark, data, work / f"out-{i}-{int(watched)}", watched, args.files_per_batch,
                            not args.no_spark_progress)
                runs[watched].append(r)
                print(json.dumps(r), flush=True)
        off = float(np.median([r["rows_per_s"] for r in runs[False]]))
        on = float(np.median([r["rows_per_s"] for r in runs[True]]))
        print(json.dumps({
            "summary": "observe overhead", "events": args.events, "rounds": args.rounds,
            "spark_progress": not args.no_spark_progress,
            "rows_per_s_off": round(off), "rows_per_s_on": round(on), "ratio_on_off": round(on / off, 3),
            "step_s_median_off": round(float(np.median([r["step_s_median"] for r in runs[False]])), 3),
            "step_s_median_on": round(float(np.median([r["step_s_median"] for r in runs[True]])), 3),
        }), flush=True)
        record("observe_overhead", "observe_overhead/Prometheus + alerts"
               + ("" if args.no_spark_progress else " + Spark progress"), {
                   "rows_per_s_off": round(off), "rows_per_s_on": round(on), "on_over_off": round(on / off, 2),
                   "step_s_off": round(float(np.median([r["step_s_median"] for r in runs[False]])), 3),
                   "step_s_on": round(float(np.median([r["step_s_median"] for r in runs[True]])), 3)})
    finally:
        shutil.rmtree(work, ignore_errors=True)
        spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Driver report: what reaches the driver in a step, and the driver's CPU, as the rows per step grow (issue 32).

For each size (rows in one step) and each row clock -- ``driver`` (every row's
``W`` computed on the driver, ``LOWWATER_ROW_CLOCK=driver``) and ``executors``
(per-partition summaries folded on the driver, ADR 0032) -- interleaved over
``--rounds``, one run of tumbling 10 s windows over ``make_log`` rows (8
partitions, 1k keys) landed as Parquet and read in one step, then a second
step of a few rows (so the first step's figures are a steady step's, not a
cold start's). Per run:

* ``to_driver_bytes``: the task results sent to the driver by every stage of
  the run (Spark's own ``resultSize`` metric, from its REST API): collects,
  ``toArrow``, observations;
* ``broadcast_bytes``: what the driver ships back per row (the driver clock's
  lookup: row id, ``W``, sequence, 24 bytes a row; the executors' clock ships a
  step function inside the task, reported as its pickled size);
* ``driver_cpu_s``: the Python driver process's CPU time for the run;
* ``seconds``: wall time of the run.

    python -m bench.driver_report                       # 100k, 1M, 5M rows; 2 rounds
    python -m bench.driver_report --rows 100000 --rounds 1
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pickle
import shutil
import tempfile
import time
import urllib.request
from pathlib import Path

import pyarrow.parquet as pq

from bench import results
from bench.engine_vs_native import make_log

CLOCKS = ("driver", "executors")


def _stages(spark) -> dict[int, int]:  # noqa: ANN001
    """Every completed stage's ``resultSize`` (bytes of task results sent to the driver), by stage id."""
    sc = spark.sparkContext
    url = f"{sc.uiWebUrl}/api/v1/applications/{sc.applicationId}/stages?status=complete"
    with urllib.request.urlopen(url, timeout=30) as r:  # noqa: S310 - the local Spark UI
        return {int(s["stageId"]): int(s.get("resultSize") or 0) for s in json.load(r)}


def _config(data: Path, out: Path) -> dict:
    return {
        "source": {"format": "parquet", "path": str(data), "partition": "partition", "offset": "offset",
                   "arrival_time": "arrival_time", "event_time": "event_time", "max_files_per_batch": 1},
        "watermark": {"max_out_of_orderness": "2s"},
        "window": {"type": "tumbling", "size": "10s", "allowed_lateness": "2s", "key": ["key"],
                   "aggregations": {"total": "sum(amount)"}},
        "late": {"policy": "drop"},
        "output": {"path": str(out)},
    }


def one_run(spark, data: Path, work: Path, clock: str) -> dict:  # noqa: ANN001
    """One run (a big step, then a small one) with ``clock``; the big step's figures."""
    from lowwater.config import parse_config
    from lowwater.spark import row_clock
    from lowwater.spark.engine import Engine

    os.environ["LOWWATER_ROW_CLOCK"] = clock
    shipped: list[int] = []
    real = row_clock.executor_attach

    def measured(step, ranks, *rest):  # noqa: ANN001, ANN002, ANN202
        fn = real(step, ranks, *rest)
        shipped.append(len(pickle.dumps((step, ranks))))
        return fn

    row_clock.executor_attach = measured
    try:
        before = set(_stages(spark))
        cpu0, t0 = time.process_time(), time.monotonic()
        engine = Engine(parse_config(_config(data, work / "out")), spark)
        engine.run(once=True)
        seconds, cpu = time.monotonic() - t0, time.process_time() - cpu0
        after = _stages(spark)
    finally:
        row_clock.executor_attach = real
        os.environ.pop("LOWWATER_ROW_CLOCK", None)
    first = engine.reports[0]
    rows = first.accounting.rows
    broadcast = 24 * rows if clock == "driver" else (shipped[0] if shipped else 0)
    return {
        "rows": rows, "steps": len(engine.reports),
        "to_driver_bytes": sum(v for k, v in after.items() if k not in before),
        "broadcast_bytes": broadcast, "driver_cpu_s": round(cpu, 3), "seconds": round(seconds, 2),
        "step_s": round(first.duration_s, 2),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.driver_report", description=__doc__.split("\n")[0])
    ap.add_argument("--rows", default="100000,1000000,5000000", help="rows in the big step (comma-separated)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--master", default="local[*]")
    ap.add_argument("--no-record", action="store_true", help="do not append to bench/results/driver_report.jsonl")
    args = ap.parse_args(argv)

    from lowwater.config import SparkConfig
    from lowwater.runtime.session import get_spark

    spark = get_spark(SparkConfig(master=args.master, app_name="lowwater-driver-report", shuffle_partitions=4,
                                  conf={"spark.driver.memory": "8g", "spark.ui.enabled": "true"}))
    work = Path(tempfile.mkdtemp(prefix="lowwater-driver-report-"))
    try:
        for n in (int(x) for x in args.rows.split(",")):
            data = work / f"data-{n}"
            log = make_log(n + 100, 1000, 8, 20_000.0)
            data.mkdir(parents=True)
            pq.write_table(log.slice(0, n), data / "part-00000.parquet")
            pq.write_table(log.slice(n), data / "part-00001.parquet")
            best: dict[str, dict] = {}
            for r in range(args.rounds):
                for clock in CLOCKS if r % 2 == 0 else reversed(CLOCKS):
                    run_dir = work / f"run-{n}-{clock}-{r}"
                    got = one_run(spark, data, run_dir, clock)
                    print(json.dumps({"rows_per_step": n, "clock": clock, "round": r, **got}), flush=True)
                    if clock not in best or got["seconds"] < best[clock]["seconds"]:
                        best[clock] = got
                    shutil.rmtree(run_dir, ignore_errors=True)
            for clock, got in best.items():
                if not args.no_record:
                    results.record("driver_report", f"{clock}/{results.size(n)} rows a step", got)
            shutil.rmtree(data, ignore_errors=True)
    finally:
        with contextlib.suppress(OSError):
            shutil.rmtree(work, ignore_errors=True)
        spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

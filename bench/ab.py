"""One side of an interleaved A/B of a bench case: lowwater only, the code of the current directory.

Run it alternately from two checkouts (old, new, old, new, ...) on an idle
machine and compare the best rounds; a fresh process per run, so neither side
inherits the other's JIT-warm JVM::

    cd OLD && PYTHONPATH=$PWD/src python -m bench.ab old /tmp/ab-data --shape session
    cd NEW && PYTHONPATH=$PWD/src python -m bench.ab new /tmp/ab-data --shape session

``--conf K=V`` (repeatable) sets a Spark setting for one side: an A/B of a
setting on one checkout (``default`` vs ``--conf spark.sql.codegen.wholeStage=false``).

The first run lands the log (the bench's shapes log: 2M events, 100k keys) in
``DATA``; the others reuse it. Prints one JSON line per measured round and appends the
rounds to ``bench/results/ab.jsonl`` (case ``ab/<shape>, <tag>``).
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path

from bench import suite
from bench.results import record


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.ab", description=__doc__.split("\n\n")[0])
    ap.add_argument("tag", help="a label for this side (old / new)")
    ap.add_argument("data", type=Path, help="where the log is landed (reused when it exists)")
    ap.add_argument("--shape", choices=("tumbling", "hopping", "session"), default="session")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--conf", action="append", default=[], metavar="K=V",
                    help="a Spark setting for this side (repeatable): an A/B of a setting on one checkout")
    args = ap.parse_args(argv)
    shape = {"tumbling": suite.TUMBLING, "hopping": suite.HOPPING, "session": suite.SESSION}[args.shape]

    from lowwater.config import SparkConfig
    from lowwater.runtime.session import get_spark

    spark = get_spark(SparkConfig(master="local[2]", app_name="lowwater-ab", shuffle_partitions=4, conf={
        "spark.sql.streaming.stateStore.providerClass":
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
        "spark.driver.memory": "6g", "spark.ui.enabled": "false", **dict(c.split("=", 1) for c in args.conf)}))
    work = Path(tempfile.mkdtemp(prefix="lowwater-ab-"))
    try:
        if not args.data.exists():
            suite.land(args.data, suite.make_log(2_000_000, 100_000, suite.PARTITIONS, suite.RATE), 8)
        warm = work / "warm"
        suite.land(warm, suite.make_log(1_000_000, 1_000, suite.PARTITIONS, suite.RATE), 8)
        for i in range(2):  # JIT and caches warm before anything is measured (bench/suite.py warmup)
            suite.lowwater_run(spark, warm, suite.TUMBLING, 5, 0, 1, work / f"warm-out-{i}")
        rounds = []
        for i in range(args.rounds):
            r = suite.lowwater_run(spark, args.data, shape, 5, 0, 1, work / f"out-{i}")
            rounds.append(r)
            print(json.dumps({"tag": args.tag, "shape": args.shape, "round": i, "seconds": round(r["seconds"], 2),
                              "step_s_median": r["step_s_median"]}), flush=True)
        best = min(rounds, key=lambda r: r["seconds"])
        record("ab", f"ab/{args.shape}, {args.tag}", {
            "rounds_s": [round(r["seconds"], 2) for r in rounds], "best_s": round(best["seconds"], 2),
            "step_s_median": best["step_s_median"]})
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

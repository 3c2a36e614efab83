"""Where a steady step's time goes: its Spark jobs and stages on a timeline, the driver's profile, compilations.

Runs :mod:`bench.step_cost`'s tiny drained log (or ``--join``) once to warm up, then once measured, with
Spark's event log on, Spark's ``CodegenMetrics`` read before and after, and ``Engine.process_batch``
under cProfile. For each step it prints the driver time before each job (``gap``), each job's wall
time and its stages (tasks, wall, executor run/CPU/deserialize ms); then the compilations of the
measured run and the driver's top functions (cumulative, lowwater's and all). ADR 0049 came from it.

    nice -n 5 env PYTHONPATH=$PWD/src LOWWATER_BENCH_RESULTS=off .venv/bin/python bench/step_profile.py --rows 10000
    ... --join --rows 2000      # the join's step
    ... --pstats /tmp/step.pstats   # keep the profile for pstats

Nothing is recorded: a profile is a finding for a note or an ADR, not a benchmark figure.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a script: bench/ is importable as a package from the repo root
    sys.path.insert(0, str(REPO))

from bench import step_cost  # noqa: E402


def _events(log_dir: Path) -> tuple[dict, dict]:
    """(jobs by id: start, end, stages, description; stages by id: tasks, times, metrics) from the event log."""
    jobs: dict[int, dict] = {}
    stages: dict[int, dict] = {}
    for f in (p for p in log_dir.rglob("*") if p.is_file()):
        for line in f.open():
            head = line[:60]
            if '"SparkListenerJobStart"' in head:
                e = json.loads(line)
                jobs.setdefault(e["Job ID"], {}).update(
                    start=e["Submission Time"], stages=e["Stage IDs"],
                    desc=(e.get("Properties") or {}).get("spark.job.description", "") or "")
            elif '"SparkListenerJobEnd"' in head:
                e = json.loads(line)
                jobs.setdefault(e["Job ID"], {})["end"] = e["Completion Time"]
            elif '"SparkListenerStageCompleted"' in head:
                info = json.loads(line)["Stage Info"]
                acc = {a["Name"]: a.get("Value") for a in info.get("Accumulables", [])}
                stages[info["Stage ID"]] = {
                    "tasks": info["Number of Tasks"],
                    "wall_s": ((info.get("Completion Time") or 0) - (info.get("Submission Time") or 0)) / 1000,
                    "run_ms": acc.get("internal.metrics.executorRunTime"),
                    "cpu_ms": round((acc.get("internal.metrics.executorCpuTime") or 0) / 1e6),
                    "deserialize_ms": acc.get("internal.metrics.executorDeserializeTime"),
                }
    return jobs, stages


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=10_000, help="rows a file (a step); clicks a file with --join")
    ap.add_argument("--files", type=int, default=6)
    ap.add_argument("--join", action="store_true")
    ap.add_argument("--pstats", help="also write the driver's profile here")
    args = ap.parse_args()
    step_cost.JOIN = args.join
    here = str(REPO / "src")
    step_cost.use_tree(here)
    from lowwater.config import SparkConfig
    from lowwater.runtime.session import get_spark

    work = Path(tempfile.mkdtemp(prefix="lowwater-profile-"))
    log_dir = work / "events"
    log_dir.mkdir()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = get_spark(SparkConfig(master="local[2]", app_name="lowwater-step-profile", shuffle_partitions=2, conf={
        "spark.ui.enabled": "false", "spark.sql.adaptive.coalescePartitions.enabled": "true",
        "spark.eventLog.enabled": "true", "spark.eventLog.dir": str(log_dir), "spark.eventLog.compress": "false",
    }))
    spark.range(1).collect()
    step_cost.label_actions(spark)
    # Warm-up (JIT, Python workers) on other rows, so that the code cache holds the steps' code shapes but
    # not this run's values: a compilation of the measured run is one a steady run would pay.
    step_cost.run_once(spark, here, work, args.files, args.rows + 7)
    step_cost.use_tree = lambda src: None  # keep the loaded modules: the profile wraps the engine's class
    from lowwater.spark import engine as engine_module

    profile = cProfile.Profile()
    inner = engine_module.Engine.process_batch

    def process_batch(self, *a, **kw):  # noqa: ANN001, ANN002, ANN003, ANN202
        profile.enable()
        try:
            return inner(self, *a, **kw)
        finally:
            profile.disable()

    engine_module.Engine.process_batch = process_batch
    compiled = spark._jvm.org.apache.spark.metrics.source.CodegenMetrics.METRIC_COMPILATION_TIME()
    before_jobs = {j for _, j, _ in step_cost.job_starts(log_dir)}
    n0 = compiled.getCount()
    steps, _ = step_cost.run_once(spark, here, work, args.files, args.rows)
    compilations = compiled.getCount() - n0
    time.sleep(1.5)  # the listener bus writes the last events
    jobs, stages = _events(log_dir)
    for label, s, e in steps:
        if not label.startswith("batch"):
            continue
        print(f"== {label}: {(e - s) / 1000:.3f} s")
        t = s
        for jid in sorted(j for j in jobs if j not in before_jobs and s <= jobs[j].get("start", 0) <= e):
            j = jobs[jid]
            desc = j["desc"] if "\n" not in j["desc"] else "(the streaming query's)"
            print(f"   +{(j['start'] - s) / 1000:.3f} s, gap {(j['start'] - t) / 1000:.3f} s: job {jid} "
                  f"{(j.get('end', j['start']) - j['start']) / 1000:.3f} s  {desc[:70]}")
            for sid in j["stages"]:
                if sid in stages:
                    print(f"        stage {sid}: {stages[sid]}")
            t = j.get("end", t)
        print(f"   after the last job {(e - t) / 1000:.3f} s")
    print(f"Janino compilations in the measured run: {compilations} "
          f"(mean {compiled.getSnapshot().getMean():.1f} ms since the JVM started)")
    spark.stop()
    stats = pstats.Stats(profile)
    stats.sort_stats("cumulative").print_stats("src/lowwater", 30)
    stats.sort_stats("cumulative").print_stats(20)
    if args.pstats:
        profile.dump_stats(args.pstats)


if __name__ == "__main__":
    main()

"""A step's fixed cost: wall time and Spark jobs per micro-batch on tiny data.

The engine runs ``--drain`` on a tiny file log (``--files`` JSONL files of
``--rows`` rows, two partitions, a few far-late rows and two bad lines a file;
one file a step), in this process, with Spark's event log on. For every step
(and the drain) it prints the wall time and the Spark jobs it started, each
named after the lowwater line that asked for it (PySpark's actions and
writers are wrapped to set ``spark.job.description``, which AQE's stage jobs
inherit; else the job's ``callSite.short`` from its ``SparkListenerJobStart``),
plus ``Engine()`` and the query's start. A step is a ``foreachBatch`` call:
the source's admission, then ``Engine.process_batch`` (its own seconds in the
label). One uncounted warm-up run comes first (JIT, Python workers).

``--base DIR`` names a second ``src`` tree (e.g. ``git archive`` of an older
commit): the two are imported in turn into this one process (``lowwater`` is
purged from ``sys.modules`` between them) and alternated round by round on
the same SparkSession, so a before/after comparison shares the machine's
load. Only the driver-side code may differ between the two trees: Python
workers import ``lowwater`` from this process's ``PYTHONPATH``.

    nice -n 19 env PYTHONPATH=$PWD/src .venv/bin/python bench/step_cost.py
    mkdir -p /tmp/base && git archive HEAD~1 src | tar -x -C /tmp/base
    nice -n 19 env PYTHONPATH=$PWD/src .venv/bin/python bench/step_cost.py --base /tmp/base/src --rounds 3
    ... --verbose       # every job's call site, step by step
    ... --join          # an interval join of two sources instead (bench/join_vs_native's logs, tiny)

On a shared machine compare the ratios, not the seconds.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np

# The log generator is tree-independent (numpy and pandas only): loaded once from this tree, kept across use_tree.
from lowwater.testing.landing import land_jsonl


def land(root: Path, files: int, rows: int, seed: int = 3) -> None:
    """``files`` JSONL files of ``rows`` rows plus two bad lines each (a malformed one, one without event time)."""
    land_jsonl(root / "landing", files, rows, seed=seed, gap_ms=(50, 400), far_ms=(20_000, 60_000),
               dead_letters=True)


def config(root: Path) -> dict:
    return {
        "source": {"format": "jsonl", "path": str(root / "landing"), "partition": "partition", "offset": "offset",
                   "arrival_time": "arrival_time", "event_time": "event_time", "time_unit": "ms",
                   "max_files_per_batch": 1},
        "watermark": {"max_out_of_orderness": "2s", "idle_timeout": "1m", "partitions": [0, 1]},
        "window": {"type": "tumbling", "size": "10s", "allowed_lateness": "5s", "key": ["key"],
                   "aggregations": {"total": "sum(amount)", "biggest": "max(amount)"}},
        "late": {"policy": "side_output"},
        "output": {"path": str(root / "out")},
    }


def land_join(root: Path, files: int, rows: int) -> None:
    """Clicks and orders (``bench/join_vs_native``'s logs): ``rows`` clicks a file, ``files`` files a source."""
    if str(REPO) not in sys.path:  # run as a script: bench/ is importable as a package from the repo root
        sys.path.append(str(REPO))
    from bench.join_vs_native import land as land_parquet
    from bench.join_vs_native import make_logs

    clicks, orders = make_logs(files * rows, users=max(10, rows // 4), rate=20.0)
    land_parquet(root / "clicks", clicks, files)
    land_parquet(root / "orders", orders, files)


def config_join(root: Path) -> dict:
    """``bench/join_vs_native``'s join (inner, 0-30 s, bounds 5 s and 15 s) over :func:`land_join`'s files."""

    def source(name: str, bound: int) -> dict:
        return {"name": name, "format": "parquet", "path": str(root / name), "partition": "partition",
                "event_time": "event_time", "arrival_time": "arrival_time", "max_files_per_batch": 1,
                "watermark": {"strategy": "bounded", "max_out_of_orderness": f"{bound}s"}}

    return {
        "source": [source("clicks", 5), source("orders", 15)],
        "join": {"left": "clicks", "right": "orders", "on": ["user_id"], "lower": "0s", "upper": "30s",
                 "type": "inner", "columns": {"left": ["click_id"], "right": ["order_id"]}},
        "late": {"policy": "drop"},
        "output": {"path": str(root / "out")},
    }


REPO = Path(__file__).resolve().parents[1]
JOIN = False  # --join: the join's logs and configuration


def use_tree(src: str) -> None:
    """Make ``import lowwater`` load the package under ``src`` (purging any loaded one)."""
    for name in [m for m in sys.modules if m == "lowwater" or m.startswith("lowwater.")]:
        del sys.modules[name]
    sys.path[:] = [p for p in sys.path if p not in USED_TREES]
    sys.path.insert(0, src)
    USED_TREES.add(src)
    importlib.invalidate_caches()


USED_TREES: set[str] = set()


def run_once(spark, src: str, work: Path, files: int, rows: int) -> tuple[list[tuple[str, float, float]], float]:  # noqa: ANN001
    """One drained run with the tree ``src``; the (label, start ms, end ms) of each step, and the run's wall time.

    A step is a ``foreachBatch`` call (the source's admission, then ``Engine.process_batch``, whose own
    seconds the label gives) or the drain.
    """
    use_tree(src)
    from lowwater.config import parse_config
    from lowwater.spark.engine import Engine

    root = Path(tempfile.mkdtemp(dir=work))
    (land_join if JOIN else land)(root, files, rows)
    cfg = parse_config((config_join if JOIN else config)(root), base_dir=root)
    steps: list[tuple[str, float, float]] = []
    engine_s: dict[int, float] = {}
    t0 = time.time()
    engine = Engine(cfg, spark)
    steps.append(("Engine()", t0 * 1000, time.time() * 1000))
    inner_batch, inner_drain = engine.process_batch, engine.drain

    def process_batch(df, spark_batch, *a, **kw):  # noqa: ANN001, ANN002, ANN003, ANN202
        s = time.time()
        try:
            return inner_batch(df, spark_batch, *a, **kw)
        finally:
            engine_s[spark_batch] = time.time() - s

    def drain():  # noqa: ANN202
        s = time.time()
        try:
            return inner_drain()
        finally:
            steps.append(("drain", s * 1000, time.time() * 1000))

    engine.process_batch, engine.drain = process_batch, drain
    inner_foreach = engine.control._foreach

    def foreach(df, spark_batch):  # noqa: ANN001, ANN202 - the whole foreachBatch call: admit + step
        s = time.time()
        try:
            return inner_foreach(df, spark_batch)
        finally:
            e = time.time()
            steps.append((f"batch {spark_batch} (step {engine_s.get(spark_batch, 0):.3f} s)", s * 1000, e * 1000))

    engine.control._foreach = foreach
    t_run = time.time()
    engine.run(drain=True)
    wall = time.time() - t0
    first = min(s for label, s, _ in steps if label.startswith("batch"))
    last = max(e for _, _, e in steps)
    steps.append(("run() to the first step", t_run * 1000, first))
    steps.append(("the last step to run()'s end", last, time.time() * 1000))
    shutil.rmtree(root, ignore_errors=True)
    return steps, wall


def _what(plan: str) -> str:
    """A SQL execution's physical plan in a few words: its root, the path it writes, the scan it starts from."""
    lines = plan.splitlines()
    root = re.sub(r"\s*\(\d+\)$", "", lines[1]).strip() if len(lines) > 1 else "?"
    target = re.search(r"InsertIntoHadoopFsRelationCommand \(\d+\)\nArguments: (\S+?),", plan)
    if target:
        tail = re.sub(r"^.*/(out|lowwater)/", "", target.group(1))
        return f"write {tail}"
    nodes = [re.sub(r"^[\s:+\-*]+|\s*\(\d+\)$", "", n) for n in lines[1:] if re.search(r"\(\d+\)$", n)]
    return f"{root} <- {nodes[-1] if nodes else '?'}"


def label_actions(spark) -> None:  # noqa: ANN001
    """Name every job after the lowwater line that asked for it (``spark.job.description``, per thread).

    Wraps PySpark's actions and writers; AQE's stage jobs inherit the description.
    """
    from pyspark.sql import DataFrame, DataFrameWriter

    sc = spark.sparkContext

    def caller() -> str:
        import traceback

        for fr in reversed(traceback.extract_stack()[:-3]):
            if "/lowwater/" in fr.filename and "/bench/" not in fr.filename:
                return f"{fr.filename.split('/lowwater/', 1)[1]}:{fr.lineno} {fr.name}"
        return "?"

    def wrap(cls, name: str) -> None:  # noqa: ANN001
        inner = getattr(cls, name)

        def action(*a, **kw):  # noqa: ANN002, ANN003, ANN202
            before = sc.getLocalProperty("spark.job.description")
            sc.setLocalProperty("spark.job.description", f"{name} @ {caller()}")
            try:
                return inner(*a, **kw)
            finally:
                sc.setLocalProperty("spark.job.description", before)

        setattr(cls, name, action)

    for n in ("collect", "toArrow", "toPandas", "count", "first", "take", "head", "isEmpty", "toLocalIterator"):
        wrap(DataFrame, n)
    for n in ("parquet", "save", "json", "csv", "text"):
        wrap(DataFrameWriter, n)


def job_starts(log_dir: Path) -> list[tuple[float, int, str]]:
    """(submission ms, job id, what) of every job in the event log so far.

    ``what``: the job's ``callSite.short`` and, for a SQL job, what its execution's plan does.
    """
    out, plans = [], {}
    for f in sorted(p for p in log_dir.rglob("*") if p.is_file() and not p.name.startswith("appstatus")):
        with open(f) as fh:
            for line in fh:
                if "SQLExecutionStart" in line[:80]:
                    e = json.loads(line)
                    plans[str(e["executionId"])] = _what(e.get("physicalPlanDescription", ""))
                    continue
                if '"SparkListenerJobStart"' not in line:
                    continue
                e = json.loads(line)
                props = e.get("Properties") or {}
                site = props.get("callSite.short") or (e.get("Stage Infos") or [{}])[0].get("Stage Name", "?")
                site = re.sub(r" at (NativeMethodAccessorImpl|<unknown>).*$", "", site)
                site = re.sub(r"^\$anonfun\$withThreadLocalCaptured\$1 at .*$", "(AQE stage)", site)
                exec_id = props.get("spark.sql.execution.id")
                what = plans.get(str(exec_id), "") if exec_id is not None else ""
                if props.get("spark.job.description"):
                    what = props["spark.job.description"].replace("\n", " ")
                out.append((float(e["Submission Time"]), int(e["Job ID"]), f"{site}: {what}" if what else site))
    return sorted(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", help="a second src tree to alternate with this one (before/after)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--files", type=int, default=6)
    ap.add_argument("--rows", type=int, default=50)
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("--conf", action="append", default=[], metavar="K=V", help="a Spark setting (repeatable)")
    ap.add_argument("--join", action="store_true", help="an interval join of two sources (rows: clicks a file)")
    args = ap.parse_args()
    global JOIN  # noqa: PLW0603 - read by run_once
    JOIN = args.join
    here = str(Path(__file__).resolve().parents[1] / "src")
    trees = {"new": here} if not args.base else {"base": str(Path(args.base).resolve()), "new": here}
    work = Path(tempfile.mkdtemp(prefix="lowwater-stepcost-"))
    log_dir = work / "events"
    log_dir.mkdir()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    use_tree(here)
    from lowwater.config import SparkConfig
    from lowwater.runtime.session import get_spark

    spark = get_spark(SparkConfig(master="local[2]", app_name="lowwater-step-cost", shuffle_partitions=2, conf={
        "spark.ui.enabled": "false", "spark.sql.adaptive.coalescePartitions.enabled": "true",
        "spark.eventLog.enabled": "true", "spark.eventLog.dir": str(log_dir), "spark.eventLog.compress": "false",
        **dict(c.split("=", 1) for c in args.conf),
    }))
    summary: dict[str, list[dict]] = {k: [] for k in trees}
    try:
        spark.range(1).collect()  # the session's own first job
        label_actions(spark)
        run_once(spark, next(iter(trees.values())), work, args.files, args.rows)  # warm-up (JIT, workers): not counted
        for r in range(args.rounds):
            order = list(trees.items()) if r % 2 == 0 else list(reversed(trees.items()))
            for name, src in order:
                before = {j for _, j, _ in job_starts(log_dir)}
                steps, wall = run_once(spark, src, work, args.files, args.rows)
                time.sleep(1.0)  # the listener bus writes the last job starts
                jobs = [j for j in job_starts(log_dir) if j[1] not in before]
                per_step = []
                outside = list(jobs)
                for label, s, e in steps:
                    mine = [j for j in jobs if s <= j[0] <= e]
                    outside = [j for j in outside if not (s <= j[0] <= e)]
                    per_step.append({"step": label, "seconds": round((e - s) / 1000, 3), "jobs": len(mine),
                                     "sites": [j[2] for j in mine]})
                rec = {"round": r, "tree": name, "run_s": round(wall, 2), "jobs": len(jobs),
                       "outside_steps": len(outside),
                       "steps": [{k: v for k, v in p.items() if k != "sites"} for p in per_step]}
                print(json.dumps(rec), flush=True)
                if args.verbose:
                    prev_end = None
                    for p, (_, s, e) in zip(per_step, steps, strict=True):
                        after = prev_end is not None and s >= prev_end
                        gap = f" ({(s - prev_end) / 1000:.2f} s after the step before)" if after else ""
                        prev_end = e
                        print(f"  {p['step']}: {p['seconds']} s, {p['jobs']} jobs{gap}")
                        for site, n in Counter(p["sites"]).items():
                            print(f"      {n} x {site}")
                    print(f"  outside steps: {len(outside)} jobs")
                    for site, n in Counter(j[2] for j in outside).items():
                        print(f"      {n} x {site}")
                summary[name].append({"run_s": wall, "steps": per_step})
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    for name, runs in summary.items():
        steps = [[p for p in run["steps"] if p["step"].startswith("batch")] for run in runs]
        later = [p for st in steps for p in st[2:]]  # past the first two
        first = [st[0] for st in steps]
        print(json.dumps({
            "tree": name, "runs": len(runs), "run_s_mean": round(float(np.mean([x["run_s"] for x in runs])), 2),
            "first_step_s_mean": round(float(np.mean([p["seconds"] for p in first])), 2),
            "first_step_jobs": float(np.mean([p["jobs"] for p in first])),
            "later_step_s_mean": round(float(np.mean([p["seconds"] for p in later])), 3) if later else None,
            "later_step_jobs_mean": round(float(np.mean([p["jobs"] for p in later])), 2) if later else None,
        }), flush=True)


if __name__ == "__main__":
    main()

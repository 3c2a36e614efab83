"""``python -m bench.nexmark``: generate once, run every engine on every query, report, append.

    python -m bench.nexmark [--events N] [--engines lowwater,spark,flink-heap,flink-rocksdb] [--rounds K]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

from bench import results
from bench.nexmark import engines, truth
from bench.nexmark.engines import QUERIES, Setup
from bench.nexmark.generator import Disorder, bids, land

ENGINES = ("lowwater", "spark", "flink-heap", "flink-rocksdb")
RESULTS = Path(__file__).resolve().parents[1] / "results" / "nexmark.jsonl"


def emit(**fields: object) -> None:
    print(json.dumps(fields), flush=True)


def _spark(cores: int):  # noqa: ANN202 - a SparkSession
    from lowwater.config import SparkConfig
    from lowwater.runtime.session import get_spark

    return get_spark(SparkConfig(
        master=f"local[{cores}]", app_name="lowwater-nexmark", shuffle_partitions=cores,
        conf={
            "spark.sql.streaming.stateStore.providerClass":
                "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
            "spark.driver.memory": "6g",
            "spark.ui.enabled": "false",
        },
    ))


def run_one(engine: str, spark, query: str, setup: Setup, work: Path, cli: bool = False) -> dict:  # noqa: ANN001
    q = QUERIES[query]
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    if engine == "lowwater":
        return engines.run_lowwater_cli(q, setup, work) if cli else engines.run_lowwater(spark, q, setup, work)
    if engine == "spark":
        return engines.run_spark(spark, q, setup, work)
    return engines.run_flink(q, setup, work, "hashmap" if engine == "flink-heap" else "rocksdb")


def figures(runs: dict, rows: int, cores: int, body: dict) -> list[dict]:
    """Per engine and query: the best round's events/s per core, completeness, every round's time.

    ``body``: per query, (cutoff ms, the rows a complete answer counts in windows ending by it).
    """
    out = []
    for (engine, query), rs in runs.items():
        ok = [r for r in rs if "error" not in r]
        if not ok:
            out.append({"engine": engine, "query": query, "error": rs[-1]["error"]})
            continue
        best = min(ok, key=lambda r: r["seconds"])
        q = QUERIES[query]
        cut, expected = body[query]

        def whole(r: dict, q: engines.Query = q) -> float:
            return round(engines.completeness(q, int(r["counts"]["count"].sum()), rows), 5)

        row = {
            "engine": engine, "query": query, "seconds": round(best["seconds"], 2),
            "rounds_s": [round(r["seconds"], 2) for r in ok],
            "events_per_s_per_core": round(rows / best["seconds"] / cores),
            "completeness": whole(best),
            "completeness_rounds": sorted({whole(r) for r in ok}),
            "completeness_body": round(truth.counted_body(best["counts"], cut) / expected, 5) if expected else None,
        }
        for k in ("summary_completeness", "too_late", "steps", "via"):
            if k in best:
                row[k] = best[k]
        out.append(row)
    return out


def ratios(rows: list[dict]) -> dict:
    """lowwater's events/s per core over each other engine's, per query."""
    eps = {(r["engine"], r["query"]): r.get("events_per_s_per_core") for r in rows}
    out: dict = {}
    for query in QUERIES:
        mine = eps.get(("lowwater", query))
        for other in ENGINES[1:]:
            theirs = eps.get((other, query))
            if mine and theirs:
                out.setdefault(query, {})[f"lowwater_over_{other.replace('-', '_')}"] = round(mine / theirs, 3)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.nexmark", description="Nexmark Q5/Q7/Q11 with disorder")
    ap.add_argument("--events", type=int, default=4_000_000, help="bids generated (the rows every engine reads)")
    ap.add_argument("--engines", default=",".join(ENGINES), help=f"comma-separated subset of {', '.join(ENGINES)}")
    ap.add_argument("--queries", default=",".join(QUERIES), help="comma-separated subset of q5, q7, q11")
    ap.add_argument("--rounds", type=int, default=1, help="runs per engine and query, engine order rotated")
    ap.add_argument("--rate", type=float, default=10_000.0, help="Nexmark events per second of event time")
    ap.add_argument("--slices", type=int, default=None, help="arrival slices = micro-batches (default rows/100k)")
    ap.add_argument("--lateness-s", type=int, default=2, help="the out-of-orderness bound L of every engine")
    ap.add_argument("--idle-timeout-s", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--lowwater-cli", action="store_true",
                    help="run lowwater as `lowwater run <q>.toml --drain` subprocesses (timed with their JVM start)")
    ap.add_argument("--no-record", action="store_true", help=f"do not append to {RESULTS.name}")
    args = ap.parse_args(argv)
    chosen = [e.strip() for e in args.engines.split(",") if e.strip()]
    queries = [q.strip() for q in args.queries.split(",") if q.strip()]
    unknown = (set(chosen) - set(ENGINES)) | (set(queries) - set(QUERIES))
    if unknown:
        ap.error(f"unknown engine or query: {', '.join(sorted(unknown))}")
    cores = os.cpu_count() or 1
    disorder = Disorder()
    slices = args.slices or max(4, args.events // 100_000)

    load_start = [round(x, 2) for x in os.getloadavg()]
    work = Path(tempfile.mkdtemp(prefix="lowwater-nexmark-"))
    try:
        t0 = time.monotonic()
        frame = bids(args.events, args.rate, args.seed, disorder)
        data = land(frame, work / "data", slices, disorder.partitions)
        cut = truth.cutoff_ms(frame)
        body = {q: (cut, truth.expected_body(QUERIES[q], frame, cut)) for q in queries}
        emit(case="generate", events=args.events, slices=slices, seconds=round(time.monotonic() - t0, 1))
        setup = Setup(data, args.lateness_s, args.idle_timeout_s, cores)
        in_process = {"spark"} | (set() if args.lowwater_cli else {"lowwater"})
        spark = _spark(cores) if in_process & set(chosen) else None
        runs: dict = {(e, q): [] for e in chosen for q in queries}
        for r in range(max(1, args.rounds)):
            order = chosen[r % len(chosen):] + chosen[:r % len(chosen)]
            for query in queries:
                for engine in order:
                    try:
                        got = run_one(engine, spark, query, setup, work / "run", args.lowwater_cli)
                    except Exception as e:  # noqa: BLE001 - one engine failing is a result, not the end
                        got = {"error": f"{type(e).__name__}: {str(e)[:800]}"}
                    runs[(engine, query)].append(got)
                    shown = {k: round(v, 2) if isinstance(v, float) else v for k, v in got.items() if k != "counts"}
                    emit(case="run", round=r, engine=engine, query=query, **shown,
                         **({"counted": int(got["counts"]["count"].sum())} if "counts" in got else {}))
        rows = figures(runs, args.events, cores, body)
        setting = {
            "load_at_start": load_start, "cpu_count": cores, "events": args.events, "rate": args.rate,
            "seed": args.seed, "slices": slices, "lateness_s": args.lateness_s,
            "idle_timeout_s": args.idle_timeout_s, "partitions": disorder.partitions, "rounds": args.rounds,
            "lowwater_cli": args.lowwater_cli,
        }
        by_query = ratios(rows)
        for row in rows:
            emit(case="result", **row)
            if not args.no_record:  # one line per (query, engine): bench/results/nexmark.jsonl
                figs = {k: v for k, v in row.items() if k not in ("engine", "query")}
                if row["engine"] == "lowwater":
                    figs.update(by_query.get(row["query"], {}))
                results.record("nexmark", f"nexmark/{row['query']}/{row['engine']}", figs, **setting)
        emit(case="ratios", **by_query)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0

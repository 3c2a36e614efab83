"""The three queries and the engines that run them: lowwater, native Spark, Flink (heap, RocksDB).

Every engine reads the same JSON lines (:mod:`bench.nexmark.generator`), with
the same out-of-orderness bound ``L``, and writes its window results to files;
:func:`counts_parquet` and :func:`counts_json` read them back: (window end, count) per final result.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from bench.nexmark import flink
from bench.nexmark.generator import Landed

SCHEMA = ("partition INT, offset BIGINT, auction BIGINT, bidder BIGINT, price BIGINT, "
          "date_time BIGINT, arrival_time BIGINT")


@dataclass(frozen=True)
class Query:
    """A Nexmark query as a window: its shape in seconds, key and aggregation."""

    name: str
    type: str
    size_s: int = 0
    slide_s: int = 0
    gap_s: int = 0
    key: str | None = None
    max_price: bool = False

    @property
    def windows_per_row(self) -> int:
        """How many windows each row belongs to (a hopping window's size / slide)."""
        return self.size_s // self.slide_s if self.type == "hopping" else 1


QUERIES = {
    "q5": Query("q5", "hopping", size_s=10, slide_s=2, key="auction"),  # bids per auction
    "q7": Query("q7", "tumbling", size_s=10, max_price=True),  # highest price, one global group
    "q11": Query("q11", "session", gap_s=10, key="bidder"),  # bids per bidder session
}


@dataclass(frozen=True)
class Setup:
    """What every engine shares: the landed data, ``L``, the idle timeout, the cores."""

    data: Landed
    lateness_s: int
    idle_timeout_s: int
    cores: int


# -- lowwater -----------------------------------------------------------------------


def lowwater_toml(q: Query, s: Setup, out: Path) -> str:
    """The pipeline, as a user would write it for ``lowwater run``."""
    if q.type == "hopping":
        shape = f'type = "hopping"\nsize = "{q.size_s}s"\nslide = "{q.slide_s}s"'
    elif q.type == "session":
        shape = f'type = "session"\ngap = "{q.gap_s}s"'
    else:
        shape = f'type = "tumbling"\nsize = "{q.size_s}s"'
    key = f'key = ["{q.key}"]\n' if q.key else ""
    aggs = 'aggregations = { max_price = "max(price)" }\n' if q.max_price else ""
    parts = ", ".join(str(p) for p in range(s.data.files_per_slice))
    return f"""# Nexmark {q.name.upper()} with disorder (bench/nexmark)
[source]
format = "jsonl"
path = "{s.data.slices}"
partition = "partition"
offset = "offset"
arrival_time = "arrival_time"
event_time = "date_time"
time_unit = "ms"
max_files_per_batch = {s.data.files_per_slice}
schema = "{SCHEMA}"

[watermark]
max_out_of_orderness = "{s.lateness_s}s"
idle_timeout = "{s.idle_timeout_s}s"
partitions = [{parts}]

[window]
{shape}
allowed_lateness = "0s"
{key}{aggs}
[late]
policy = "drop"

[output]
path = "{out}"

[spark]
master = "local[{s.cores}]"
"""


def run_lowwater(spark, q: Query, s: Setup, work: Path) -> dict:  # noqa: ANN001
    """``lowwater run <q>.toml --once --drain``, in this process's SparkSession (the job timed, not the JVM)."""
    from lowwater.config import load_config
    from lowwater.spark.engine import Engine

    out = work / f"lowwater-{q.name}"
    toml = work / f"{q.name}.toml"
    toml.write_text(lowwater_toml(q, s, out))
    cfg = load_config(toml)
    t0 = time.monotonic()
    engine = Engine(cfg, spark)
    manifest = engine.run(once=True, drain=True)
    secs = time.monotonic() - t0
    summary = engine.summary(manifest)
    return {"seconds": secs, "counts": counts_parquet(out / "results", final_only=True),
            "summary_completeness": summary["completeness"], "too_late": summary["too_late"],
            "steps": len(engine.reports)}


def run_lowwater_cli(q: Query, s: Setup, work: Path) -> dict:
    """``python -m lowwater.cli run <q>.toml --drain -q`` as a subprocess: the whole process timed, JVM start too."""
    out = work / f"lowwater-{q.name}"
    toml = work / f"{q.name}.toml"
    toml.write_text(lowwater_toml(q, s, out))
    t0 = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "lowwater.cli", "run", str(toml), "--drain", "-q"],
                          capture_output=True, text=True, check=False)
    secs = time.monotonic() - t0
    if done.returncode != 0:
        tail = " | ".join((done.stderr or done.stdout).strip().splitlines()[-3:])
        raise RuntimeError(f"lowwater run {toml.name} --drain: exit {done.returncode}: {tail[-800:]}")
    summary = json.loads((out / "summary.json").read_text())
    return {"seconds": secs, "counts": counts_parquet(out / "results", final_only=True),
            "summary_completeness": summary["completeness"], "too_late": summary["too_late"], "via": "cli"}


# -- native Spark -------------------------------------------------------------------


def run_spark(spark, q: Query, s: Setup, work: Path) -> dict:  # noqa: ANN001
    """Structured Streaming: withWatermark(L) + groupBy(window), append mode, Parquet sink, availableNow."""
    from pyspark.sql import functions as F

    window_col = "session_window" if q.type == "session" else "window"
    if q.type == "session":
        window = F.session_window("ts", f"{q.gap_s} seconds")
    elif q.type == "hopping":
        window = F.window("ts", f"{q.size_s} seconds", f"{q.slide_s} seconds")
    else:
        window = F.window("ts", f"{q.size_s} seconds")
    aggs = [F.count(F.lit(1)).alias("count")] + ([F.max("price").alias("max_price")] if q.max_price else [])
    df = (
        spark.readStream.schema(SCHEMA)
        .option("maxFilesPerTrigger", s.data.files_per_slice)
        .json(str(s.data.slices))
        .withColumn("ts", F.timestamp_millis("date_time"))
        .withWatermark("ts", f"{s.lateness_s} seconds")
        .groupBy(window, *([q.key] if q.key else []))
        .agg(*aggs)
        .select(F.col(window_col + ".start").alias("window_start"), F.col(window_col + ".end").alias("window_end"),
                "*")
        .drop(window_col)
    )
    out = work / f"spark-{q.name}"
    t0 = time.monotonic()
    query = (
        df.writeStream.outputMode("append").format("parquet")
        .option("path", str(out)).option("checkpointLocation", str(work / f"spark-{q.name}-ckpt"))
        .trigger(availableNow=True).start()
    )
    query.awaitTermination()
    secs = time.monotonic() - t0
    return {"seconds": secs, "counts": counts_parquet(out, end="window_end"), "steps": len(query.recentProgress)}


# -- Flink --------------------------------------------------------------------------


def run_flink(q: Query, s: Setup, work: Path, backend: str) -> dict:
    """Flink SQL on the per-partition files (:mod:`bench.nexmark.flink_driver`)."""
    out = work / f"flink-{backend}-{q.name}"
    got = flink.run(s.data.partition_files, q.name, backend, out, work / f"flink-{backend}-{q.name}-work",
                    s.lateness_s, s.idle_timeout_s, s.cores)
    return {"seconds": got["seconds"], "counts": counts_json(out)}


# -- counting: (window_end_ms, count) per final result ------------------------------


def _end_ms(arr: pa.ChunkedArray) -> np.ndarray:
    return arr.cast(pa.timestamp("ms", tz=arr.type.tz)).cast(pa.int64()).to_numpy()


def counts_parquet(path: Path, end: str = "window_end", final_only: bool = False) -> pd.DataFrame:
    """A Parquet output's results (lowwater's: its ``final`` emissions; ``_``/``.`` files ignored)."""
    if not path.exists():
        return pd.DataFrame({"window_end_ms": [], "count": []})
    t = pq.read_table(path, columns=[end, "count", *(["kind"] if final_only else [])])
    if final_only:
        t = t.filter(pc.equal(t.column("kind"), "final"))
    return pd.DataFrame({"window_end_ms": _end_ms(t.column(end)), "count": t.column("count").to_numpy()})


def counts_json(path: Path) -> pd.DataFrame:
    """The committed JSON-lines files of a Flink filesystem sink (in-progress files start with ``.``)."""
    frames = [pd.read_json(f, lines=True, dtype={"window_end": str})
              for f in sorted(path.rglob("*")) if f.is_file() and not f.name.startswith((".", "_"))
              and f.stat().st_size]
    if not frames:
        return pd.DataFrame({"window_end_ms": [], "count": []})
    df = pd.concat(frames)
    end = pd.to_datetime(df["window_end"], utc=True, format="ISO8601").astype("datetime64[ms, UTC]").astype("int64")
    return pd.DataFrame({"window_end_ms": end.to_numpy(), "count": df["count"].to_numpy()})


def completeness(q: Query, counted: int, rows: int) -> float:
    """Rows counted in final results / rows (a hopping row counts once per window it belongs to)."""
    return counted / (rows * q.windows_per_row) if rows else 1.0

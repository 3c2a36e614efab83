"""``lowwater delays``: the numbers L and idle_timeout are chosen from.

Per partition: the distribution of ``arrival_time - event_time`` (p50, p90,
p99, p99.9, max, seconds) and the longest silence between two arrivals (for
``idle_timeout``); across partitions: how far each partition's event-time
progress trails the fastest one (median lag difference), i.e. how much a
max-based watermark would misjudge it.
"""

from __future__ import annotations

from pyspark.sql import SparkSession, Window
from pyspark.sql import functions as F

from lowwater.config import ConfigError, PipelineConfig
from lowwater.io.files import PARSE_CONF, read_batch, resolve_schema
from lowwater.spark.parse import normalise

QUANTILES = (0.5, 0.9, 0.99, 0.999)


def delay_profile(spark: SparkSession, cfg: PipelineConfig) -> list[dict]:
    """One dict per partition: rows, delay quantiles and max (s), longest arrival gap (s), skew (s)."""
    if not cfg.source.arrival_time:
        msg = "delays: --arrival-time is required (delay = arrival_time - event_time)"
        raise ConfigError(msg)
    for k, v in PARSE_CONF.items():
        spark.conf.set(k, v)
    schema = resolve_schema(spark, cfg, None)
    df = normalise(read_batch(spark, cfg.source, schema), cfg).filter(F.col("_dead").isNull())
    delay = (F.col("_arrival_us") - F.col("_event_us")) / F.lit(1e6)
    previous = F.lag("_arrival_us").over(Window.partitionBy("_part").orderBy("_arrival_us"))
    gap = (F.col("_arrival_us") - previous) / F.lit(1e6)
    stats = (
        df.select("_part", delay.alias("delay"), gap.alias("gap"))
        .groupBy("_part")
        .agg(
            F.count(F.lit(1)).alias("rows"),
            F.percentile_approx("delay", list(QUANTILES), 10_000).alias("q"),
            F.max("delay").alias("max"),
            F.max("gap").alias("longest_gap"),
        )
        .orderBy("_part")
        .collect()
    )
    out = []
    for r in stats:
        q = dict(zip(("p50", "p90", "p99", "p99_9"), r["q"], strict=True))
        out.append({"partition": r["_part"], "rows": r["rows"], **q, "max": r["max"], "longest_gap": r["longest_gap"]})
    if out:
        fastest = min(x["p50"] for x in out)
        for x in out:
            x["skew"] = x["p50"] - fastest
    return out

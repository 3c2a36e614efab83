"""``lowwater delays``: the numbers L and idle_timeout are chosen from.

Per partition: the out-of-orderness L must cover, the arrival delay, and the
longest silence between two arrivals (for ``idle_timeout``); across
partitions: how far each partition's event-time progress trails the fastest
one (median delay difference), i.e. how much a max-based watermark would
misjudge it. Times are seconds.

A row's out-of-orderness is how far its event time is behind the newest
event time of the rows that arrived on its partition before it (strictly
earlier arrival time; 0 for a row that is the newest so far): a bounded
watermark ``max event - L`` judges it on time exactly when L covers that. Its
arrival delay (``arrival_time - event_time``) is larger by however long the
partition's newest event took to arrive; it is shown, not advised on.
"""

from __future__ import annotations

from pyspark.sql import SparkSession, Window
from pyspark.sql import functions as F

from lowwater.config import ConfigError, PipelineConfig
from lowwater.io.files import PARSE_CONF, read_batch, resolve_schema
from lowwater.io.parse import normalise

QUANTILES = (0.5, 0.9, 0.99, 0.999)


def delay_profile(spark: SparkSession, cfg: PipelineConfig) -> list[dict]:
    """One dict per partition: rows, arrival-delay and out-of-orderness (``ooo_``) quantiles and max, longest
    arrival gap, skew (s)."""
    if not cfg.source.arrival_time:
        msg = "delays: --arrival-time is required (delay = arrival_time - event_time)"
        raise ConfigError(msg)
    for k, v in PARSE_CONF.items():
        spark.conf.set(k, v)
    schema = resolve_schema(spark, cfg, None)
    df = normalise(read_batch(spark, cfg.source, schema), cfg).filter(F.col("_dead").isNull())
    delay = (F.col("_arrival_us") - F.col("_event_us")) / F.lit(1e6)
    by_arrival = Window.partitionBy("_part").orderBy("_arrival_us")
    gap = (F.col("_arrival_us") - F.lag("_arrival_us").over(by_arrival)) / F.lit(1e6)
    newest = F.max("_event_us").over(by_arrival.rangeBetween(Window.unboundedPreceding, -1))
    behind = F.greatest(F.coalesce(newest - F.col("_event_us"), F.lit(0)), F.lit(0)) / F.lit(1e6)
    stats = (
        df.select("_part", delay.alias("delay"), gap.alias("gap"), behind.alias("behind"))
        .groupBy("_part")
        .agg(
            F.count(F.lit(1)).alias("rows"),
            F.percentile_approx("delay", list(QUANTILES), 10_000).alias("q"),
            F.max("delay").alias("max"),
            F.percentile_approx("behind", list(QUANTILES), 10_000).alias("ooo"),
            F.max("behind").alias("ooo_max"),
            F.max("gap").alias("longest_gap"),
        )
        .orderBy("_part")
        .collect()
    )
    out = []
    for r in stats:
        q = dict(zip(("p50", "p90", "p99", "p99_9"), r["q"], strict=True))
        ooo = dict(zip(("ooo_p50", "ooo_p90", "ooo_p99", "ooo_p99_9"), r["ooo"], strict=True))
        out.append({"partition": r["_part"], "rows": r["rows"], **q, "max": r["max"], **ooo,
                    "ooo_max": r["ooo_max"], "longest_gap": r["longest_gap"]})
    if out:
        fastest = min(x["p50"] for x in out)
        for x in out:
            x["skew"] = x["p50"] - fastest
    return out

"""The ``metrics`` output: one row per step, the same columns in Parquet, Spark and PostgreSQL.

The schema is written twice on purpose -- as Spark types (a sink that writes
through Spark, the empty schema file) and as Arrow types (the driver writes
the row itself as plain Parquet when the output path is local). Kept apart
from the engine so a sink or an operator can name it without importing the
engine.
"""

from __future__ import annotations

import time

import pyarrow as pa
from pyspark.sql import types as T

from lowwater.core.tracker import WatermarkTracker
from lowwater.spark.step import ORDER_KEYS, StepReport
from lowwater.time import NEG_INF, POS_INF, to_datetime

METRICS_SCHEMA = T.StructType([
    T.StructField("spark_batch", T.LongType()),
    T.StructField("low_watermark", T.TimestampType()),
    T.StructField("partition_watermarks", T.MapType(T.StringType(), T.TimestampType())),
    T.StructField("idle_partitions", T.ArrayType(T.StringType())),
    T.StructField("holding_partition", T.StringType()),
    T.StructField("spread_s", T.DoubleType()),
    T.StructField("watermark_lag_s", T.DoubleType()),
    T.StructField("rows", T.LongType()),
    T.StructField("on_time", T.LongType()),
    T.StructField("late_updates", T.LongType()),
    T.StructField("too_late", T.LongType()),
    T.StructField("dead_letter", T.LongType()),
    T.StructField("clipped", T.LongType()),
    T.StructField("windows_fired", T.LongType()),
    T.StructField("revisions", T.LongType()),
    T.StructField("open_windows", T.LongType()),
    T.StructField("state_bytes", T.LongType()),
    T.StructField("duration_s", T.DoubleType()),
    *[T.StructField(k, T.LongType()) for k in ORDER_KEYS],
])


METRICS_ARROW = pa.schema([
    ("spark_batch", pa.int64()),
    ("low_watermark", pa.timestamp("us", tz="UTC")),
    ("partition_watermarks", pa.map_(pa.string(), pa.timestamp("us", tz="UTC"))),
    ("idle_partitions", pa.list_(pa.string())),
    ("holding_partition", pa.string()),
    ("spread_s", pa.float64()),
    ("watermark_lag_s", pa.float64()),
    *[(k, pa.int64()) for k in (
        "rows", "on_time", "late_updates", "too_late", "dead_letter", "clipped", "windows_fired", "revisions",
        "open_windows", "state_bytes",
    )],
    ("duration_s", pa.float64()),
    *[(k, pa.int64()) for k in ORDER_KEYS],
])


def metrics_row(report: StepReport, tracker: WatermarkTracker) -> dict:
    """The step's metrics row (Python values in :data:`METRICS_ARROW`'s order): what every sink receives."""
    statuses = tracker.statuses()
    spread, holder = tracker.spread()
    w = report.watermark_us
    clock = report.extra.get("clock")
    if w <= NEG_INF or w >= POS_INF:
        lag = None
    elif clock is not None:
        lag = (clock - w) / 1e6
    else:
        lag = time.time() - w / 1e6
    acc = report.accounting
    return {
        "spark_batch": report.spark_batch,
        "low_watermark": to_datetime(w),
        "partition_watermarks": [(s.partition, to_datetime(s.watermark_us)) for s in statuses],
        "idle_partitions": [s.partition for s in statuses if not s.active],
        "holding_partition": holder,
        "spread_s": None if spread is None else spread / 1e6,
        "watermark_lag_s": lag,
        "rows": acc.rows,
        "on_time": acc.on_time,
        "late_updates": acc.late_updates,
        "too_late": acc.too_late,
        "dead_letter": acc.dead_letter,
        "clipped": acc.clipped,
        "windows_fired": report.windows_fired,
        "revisions": report.revisions,
        "open_windows": report.open_windows,
        "state_bytes": report.state_bytes,
        "duration_s": report.duration_s,
        **{k: getattr(report, k) for k in ORDER_KEYS},
    }


def metrics_table(row: dict) -> pa.Table:
    """The metrics row as the one-row Arrow table the sinks write."""
    return pa.Table.from_pylist([row], METRICS_ARROW)

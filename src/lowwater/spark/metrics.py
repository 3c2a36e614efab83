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

from lowwater.core.combine import partition_spread, source_watermarks
from lowwater.core.tracker import WatermarkTracker
from lowwater.spark.step import ORDER_KEYS, WATERMARK_KEYS, StepReport
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
    *[T.StructField(k, T.LongType()) for k in WATERMARK_KEYS],
    T.StructField("partition_lateness_s", T.MapType(T.StringType(), T.DoubleType())),
    T.StructField("source_watermarks", T.MapType(T.StringType(), T.TimestampType())),
    T.StructField("held_rows", T.LongType()),
    T.StructField("output_watermark", T.TimestampType()),
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
    *[(k, pa.int64()) for k in WATERMARK_KEYS],
    ("partition_lateness_s", pa.map_(pa.string(), pa.float64())),
    ("source_watermarks", pa.map_(pa.string(), pa.timestamp("us", tz="UTC"))),
    ("held_rows", pa.int64()),
    ("output_watermark", pa.timestamp("us", tz="UTC")),
])


def metrics_row(report: StepReport, tracker: WatermarkTracker) -> dict:
    """The step's metrics row (Python values in :data:`METRICS_ARROW`'s order): what every sink receives."""
    statuses = tracker.statuses()
    spread, holding = partition_spread(sorted(statuses, key=lambda s: (s.partition, s.source)))
    several = len(tracker.strategies) > 1

    def name(s) -> str:  # noqa: ANN001 - a PartitionStatus
        return f"{s.source}/{s.partition}" if several else s.partition

    by_source = source_watermarks(statuses)  # each source's own low watermark
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
        "partition_watermarks": [(name(s), to_datetime(s.watermark_us)) for s in statuses],
        "idle_partitions": [name(s) for s in statuses if not s.active],
        "holding_partition": None if holding is None else name(holding),
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
        **{k: getattr(report, k) for k in WATERMARK_KEYS},
        # The bound L in force per partition (bounded: its L; adaptive: the quantile's; punctuated: none).
        "partition_lateness_s": [(name(s), s.lateness_us / 1e6) for s in statuses if s.lateness_us is not None],
        "source_watermarks": [(k, to_datetime(v)) for k, v in sorted(by_source.items())] if several else None,
        "held_rows": report.held_rows,
        # What a downstream operator would see: a [join] holds it back to its oldest buffered row (SEMANTICS.md
        # §2); null for windows (their results carry window_end, no stream time of their own).
        "output_watermark": None if report.output_watermark_us is None else to_datetime(report.output_watermark_us),
    }


def metrics_table(row: dict) -> pa.Table:
    """The metrics row as the one-row Arrow table the sinks write."""
    return pa.Table.from_pylist([row], METRICS_ARROW)


def spark_schema_of(schema: pa.Schema) -> T.StructType:
    """The Spark schema of a driver-written Arrow table (``alerts/``: written through Spark when remote)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(schema)

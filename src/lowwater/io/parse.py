"""Normalise input rows: integer-µs clocks, partition, order columns, dead-letter reason.

The output of :func:`normalise` has every input column plus

* ``_event_us`` / ``_arrival_us`` -- the clocks as int64 µs (null when bad),
* ``_part`` -- the source partition as a string, ``_psort`` its sort key (a Kafka
  source of several topics: its ``topic-partition``, ADR 0043),
* ``_offset`` -- the in-partition position (null when not configured),
* ``_dead`` -- null for a good row, else the reason it goes to the dead letter.

Rules (SEMANTICS.md §5): a malformed record, a missing or unparseable event
time, or a missing partition or arrival time make a dead letter; the run goes
on. A value column's type is checked against its aggregations before the run
(``config/pipeline.check_columns``): ``sum`` of a string is a configuration
error, ``count`` and ``min``/``max`` of one are not, so no value is a dead letter.
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lowwater.config import ConfigError, PipelineConfig, SourceConfig
from lowwater.io.files import CASE_VARIANTS, CORRUPT
from lowwater.io.headers import NAIVE_TIME
from lowwater.runtime.columns import select_built
from lowwater.time import misread_time_unit

_NUMERIC = (T.ByteType, T.ShortType, T.IntegerType, T.LongType, T.FloatType, T.DoubleType, T.DecimalType)
_INTEGRAL = (T.ByteType, T.ShortType, T.IntegerType, T.LongType)


OUT_OF_RANGE = "event_time out of range"


def time_us(col: Column, dtype: T.DataType, unit_us: int, zone: str = "UTC") -> Column:
    """A timestamp column, a number in ``unit`` since the epoch, or a string of either, as µs.

    A number too large for int64 µs in ``unit`` (epoch µs read as seconds) is null,
    not an overflow error: the row is a dead letter and the first step's unit check
    (``StepPlanner.plan``, ``spark/planner.py``) names the unit that fits.

    ``zone`` (``source.time_zone``) is where naive times are: a timestamp
    without a zone (a string with no offset, a ``timestamp_ntz``, a date) is
    read as a wall-clock time there; one with a zone is an instant already.
    Text parsed to ``timestamp`` by the reader took the zone there (``io/files._reader_options``).
    """
    if isinstance(dtype, T.TimestampType):
        return F.unix_micros(col)
    if isinstance(dtype, T.TimestampNTZType | T.DateType):
        return F.unix_micros(_in_zone(col.cast("timestamp"), zone))
    if isinstance(dtype, _INTEGRAL):
        return F.try_multiply(col.cast("long"), F.lit(unit_us))
    if isinstance(dtype, _NUMERIC):
        return F.round(col.cast("double") * F.lit(float(unit_us))).try_cast("long")
    text = col.cast("string")
    as_num = text.try_cast("double")
    as_ts = F.try_to_timestamp(text)
    if zone != "UTC":  # the session's zone is UTC (runtime/session.py): a naive text was read as UTC wall time
        as_ts = F.when(text.rlike(NAIVE_TIME.pattern), _in_zone(as_ts, zone)).otherwise(as_ts)
    return (
        F.when(as_num.isNotNull(), F.round(as_num * F.lit(float(unit_us))).try_cast("long"))
        .otherwise(F.unix_micros(as_ts))
    )


def _in_zone(utc_wall: Column, zone: str) -> Column:
    """A wall-clock time read as UTC (the session's zone), moved to the instant it is in ``zone``."""
    return utc_wall if zone == "UTC" else F.to_utc_timestamp(utc_wall, zone)


def unit_matters(dtype: T.DataType) -> bool:
    """Whether ``source.time_unit`` applies to a clock column of this type (numbers, strings of numbers)."""
    return not isinstance(dtype, T.TimestampType | T.TimestampNTZType | T.DateType)


def check_time_unit(src: SourceConfig, event_us: np.ndarray, dead: pa.ChunkedArray) -> None:
    """Numeric event times must fit ``source.time_unit`` (the engine checks its first step, on the driver).

    ``event_us`` are the valid rows' event times, ``dead`` every row's dead-letter
    reason. The typical (median) event time, counting values too large for µs as
    +inf, must not look misread (:func:`~lowwater.time.misread_time_unit`); else
    a :class:`ConfigError` stops the run before the step commits.
    """
    reasons = pc.filter(dead, pc.starts_with(pc.fill_null(dead, ""), OUT_OF_RANGE))
    n = len(event_us) + len(reasons)
    if n == 0:
        return
    k = n // 2
    example = None
    if k < len(event_us):
        typical = float(np.partition(event_us, k)[k])
    else:  # most rows overflow µs: judge a raw value (the reason ends with it)
        example = reasons[0].as_py().rsplit(": ", 1)[-1]
        typical = float(example) * src.unit_us
    problem = misread_time_unit(typical, src.time_unit)
    if problem is not None:
        value = example or f"{typical / src.unit_us:.15g}"
        msg = f"source.time_unit: event times such as {value} ({src.event_time}) do not fit: {problem}"
        raise ConfigError(msg)


_ATOMIC = (*_NUMERIC, T.BooleanType, T.StringType, T.TimestampType, T.TimestampNTZType, T.DateType)


def _malformed_reason(schema: T.StructType, fmt: str) -> Column:
    """``malformed record``, or which fields had the wrong type when the record itself parses."""
    if fmt == "kafka":  # a Kafka record without a value (io/kafka.py) is a tombstone, not a malformed one
        from lowwater.io.kafka import NULL_VALUE

        return F.when(F.col(CORRUPT) == NULL_VALUE, F.lit("null value (a tombstone)")).otherwise(
            F.lit("malformed record"))
    fields = [f for f in schema.fields if f.name != CORRUPT and isinstance(f.dataType, _ATOMIC)]
    if fmt != "jsonl" or not fields:
        return F.lit("malformed record")
    clash = _case_reason(schema)
    if clash is not None:
        return F.coalesce(clash, _wrong_types(fields))
    return _wrong_types(fields)


def _case_reason(schema: T.StructType) -> Column | None:
    """Which key of a line is another spelling of a column (``io/files.CASE_VARIANTS``), else null."""
    variants = json.loads(schema[CORRUPT].metadata.get(CASE_VARIANTS, "{}")) if CORRUPT in schema.names else {}
    if not variants:
        return None
    seen = F.from_json(F.col(CORRUPT), T.StructType([T.StructField(v, T.StringType()) for v in variants])).cast(
        T.StructType([T.StructField(f"_case{i}", T.StringType()) for i in range(len(variants))]))
    return F.coalesce(*[
        F.when(seen[f"_case{i}"].isNotNull(), F.lit(
            f"malformed record: key {v!r} differs from column {c!r} only in case (Spark's column names ignore case)"))
        for i, (v, c) in enumerate(variants.items())
    ])


def _wrong_types(fields: list[T.StructField]) -> Column:
    """``malformed record: wrong type for <fields>`` where the line parses as text, else ``malformed record``."""
    as_text = F.from_json(
        F.col(CORRUPT), T.StructType([T.StructField(f.name, T.StringType()) for f in fields])
    )
    wrong = [
        F.when(as_text[f.name].isNotNull() & as_text[f.name].try_cast(f.dataType).isNull(), F.lit(f.name))
        for f in fields
        if not isinstance(f.dataType, T.StringType)
    ]
    listed = F.concat_ws(", ", *wrong) if wrong else F.lit("")
    return F.when(listed != "", F.concat(F.lit("malformed record: wrong type for "), listed)).otherwise(
        F.lit("malformed record")
    )


def _first_reason(checks: list[tuple[Column, Column | str]]) -> Column:
    expr = None
    for cond, reason in checks:
        r = reason if isinstance(reason, Column) else F.lit(reason)
        expr = F.when(cond, r) if expr is None else expr.when(cond, r)
    return expr if expr is not None else F.lit(None).cast("string")


def normalise(df: DataFrame, cfg: PipelineConfig, non_null: frozenset[str] = frozenset()) -> DataFrame:
    """Add the engine's columns (see module docstring) to a batch of raw input rows of the only source.

    ``non_null``: columns proven to hold no null (``io/footers.py``): their
    null checks are left out, so a job that needs nothing else of them does
    not read them.
    """
    return normalise_source(df, cfg.source, tuple(cfg.window.value_columns), non_null=non_null)


def normalise_source(
    df: DataFrame, src: SourceConfig, value_columns: tuple[str, ...], named: bool = False,
    non_null: frozenset[str] = frozenset(),
) -> DataFrame:
    """Add the engine's columns to a batch of one source's raw rows.

    ``named`` (a pipeline of ``[[source]]`` tables) adds what a union of sources
    needs: ``_source`` (the source's name), ``_skew_us`` (its
    ``max_future_skew``, applied per row by the executors) and a ``_psort`` that
    is a string for every source (partitions of a number type zero-padded so
    they still sort as numbers), so the sources' rows share one schema.

    The expressions depend only on the schema and the configuration: built once
    per SparkContext (``columns.memo``), not once per micro-batch.
    """
    schema = df.schema
    key = ("normalise", schema.json(), src, value_columns, named, non_null)
    return select_built(df, key, lambda: ["*", *_engine_columns(schema, src, value_columns, named, non_null)])


MARKER_WITHOUT_EVENT_TIME = "marker row without event_time"


def _engine_columns(
    schema: T.StructType, src: SourceConfig, value_columns: tuple[str, ...], named: bool,
    non_null: frozenset[str] = frozenset(),
) -> list[Column]:
    types = {f.name: f.dataType for f in schema.fields}
    ev_raw = F.col(src.event_time)
    event_us = time_us(ev_raw, types[src.event_time], src.unit_us, src.zone)
    checks: list[tuple[Column, Column | str]] = []
    if CORRUPT in types:
        checks.append((F.col(CORRUPT).isNotNull(), _malformed_reason(schema, src.format)))
    marker: Column = F.lit(False)
    if src.marker:
        # A marker carries the proven timestamp in the event-time column: without one it proves nothing.
        marker = F.coalesce(F.col(src.marker).cast("boolean"), F.lit(False))
        checks.append((marker & ev_raw.isNull(), f"{MARKER_WITHOUT_EVENT_TIME} ({src.event_time})"))
    checks.append((ev_raw.isNull(), f"missing event_time ({src.event_time})"))
    if unit_matters(types[src.event_time]):
        checks.append((
            event_us.isNull() & ev_raw.cast("string").try_cast("double").isNotNull(),
            F.concat(
                F.lit(f'{OUT_OF_RANGE} for time_unit = "{src.time_unit}" ({src.event_time}): '),
                ev_raw.cast("string"),
            ),
        ))
    checks.append((
        event_us.isNull(),
        F.concat(F.lit(f"unparseable event_time ({src.event_time}): "), ev_raw.cast("string")),
    ))
    if src.partition and src.partition not in non_null:
        checks.append((F.col(src.partition).isNull(), f"missing partition ({src.partition})"))
    arrival_us: Column = F.lit(None).cast("long")
    if src.arrival_time:
        arrival_us = time_us(F.col(src.arrival_time), types[src.arrival_time], src.unit_us, src.zone)
        # A timestamp is null in µs only when it is null; a number or a string may not parse.
        if not (src.arrival_time in non_null and not unit_matters(types[src.arrival_time])):
            checks.append((F.col(src.arrival_time).isNull(), f"missing arrival_time ({src.arrival_time})"))
            checks.append((arrival_us.isNull(), f"unparseable arrival_time ({src.arrival_time})"))
    offset: Column = F.lit(None).cast("long")
    if src.offset:
        off_type = types[src.offset]
        raw_offset = F.col(src.offset)
        offset = raw_offset.cast("string").try_cast("long")
        if isinstance(off_type, _INTEGRAL):
            offset = raw_offset.cast("long")
        if not (src.offset in non_null and isinstance(off_type, _INTEGRAL)):
            checks.append((offset.isNull(), f"missing or non-integer offset ({src.offset})"))
    part_type = types[src.partition] if src.partition else T.StringType()
    part = F.col(src.partition).cast("string") if src.partition else F.lit("0")
    psort = F.col(src.partition) if src.partition and isinstance(part_type, _NUMERIC) else part
    if named and src.partition and isinstance(part_type, _NUMERIC):
        psort = F.lpad(F.col(src.partition).cast("long").cast("string"), 20, "0")
    if src.topic_column and src.partition:
        # A Kafka source of several topics: each topic-partition its own generator (ADR 0043), named
        # as its lane and `source_file` are (core/frontier.topic_partition).
        topic = F.col(src.topic_column)
        part = psort = F.concat_ws("-", topic.cast("string"), F.col(src.partition).cast("string"))
        if src.topic_column not in non_null:
            checks.append((topic.isNull(), f"missing topic ({src.topic_column})"))
    out = [
        event_us.alias("_event_us"),
        arrival_us.alias("_arrival_us"),
        part.alias("_part"),
        psort.alias("_psort"),
        offset.alias("_offset"),
        _first_reason(checks).alias("_dead"),
        marker.alias("_marker"),
    ]
    if named:
        skew = src.watermark.max_future_skew_us
        out += [F.lit(src.name).alias("_source"), F.lit(skew).cast("long").alias("_skew_us")]
    return out


def value_column(name: str) -> Column:
    """A value column as double (strings that are numbers are accepted)."""
    return F.col(name).cast("string").try_cast("double")

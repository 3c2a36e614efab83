"""``lw.stream(df, ...)``: which columns of a streaming DataFrame play which role; a Kafka DataFrame's by default.

A DataFrame built with ``spark.readStream.format("kafka")`` that keeps the
record's ``topic``, ``partition``, ``offset`` and ``timestamp`` columns in
their roles (the default) is read as ``format = "kafka"`` reads a topic
(:func:`kafka_roles`, docs/kafka.md): each topic-partition a lane of the
arrival frontier, rows held behind the partitions that are not caught up.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from lowwater.api.args import choice, source_name, streaming_columns
from lowwater.api.args import name as column_name
from lowwater.api.pipeline import Pipeline
from lowwater.config.source import DATAFRAME, TIME_UNITS, SourceConfig

# A Kafka DataFrame's record columns (spark.readStream.format("kafka")): taken for the roles by default.
KAFKA_TOPIC, KAFKA_PARTITION, KAFKA_OFFSET, KAFKA_TIMESTAMP = "topic", "partition", "offset", "timestamp"


class _FromKafka:
    """The default of a column role: the Kafka record's column when the DataFrame has Kafka's, else none."""

    def __repr__(self) -> str:
        return "<the Kafka record's column, if any>"


FROM_KAFKA: Any = _FromKafka()
"""The default of ``lw.stream``'s column roles: the Kafka record's column if the DataFrame has Kafka's."""


def kafka_roles(src: SourceConfig, columns: Iterable[str]) -> bool:
    """Whether a DataFrame source has a Kafka record's columns in their roles (and its ``topic``).

    Then, when its plan reads one Kafka topic (``io/kafka.reader_settings``),
    the source is read as ``format = "kafka"`` reads one: the same lanes,
    readiness and caught-up rule, so the same rows give the same results.
    """
    roles = (src.partition, src.offset, src.arrival_time)
    return (src.format == DATAFRAME and roles == (KAFKA_PARTITION, KAFKA_OFFSET, KAFKA_TIMESTAMP)
            and KAFKA_TOPIC in set(columns))


def stream(
    df: Any, event_time: str, partition: Any = FROM_KAFKA, arrival: Any = FROM_KAFKA,  # noqa: ANN401
    offset: Any = FROM_KAFKA, time_unit: str = "s", time_zone: str | None = None,  # noqa: ANN401
    name: str | None = None,
) -> Pipeline:
    """A pipeline over any streaming DataFrame: which columns are the event time, partition, arrival time, offset.

    A Kafka DataFrame's ``partition``, ``offset`` and ``timestamp`` columns are
    taken for ``partition``, ``offset`` and ``arrival`` unless given (``None``:
    no such column); keeping them and ``topic``, it runs as ``format = "kafka"``
    does (each topic-partition a lane of the arrival frontier). ``time_unit``
    (``s``, ``ms``, ``us``) is for numeric time columns, ``time_zone`` for
    timestamps written without one. ``name``: the
    source's name (its ``source`` column in late rows and dead letters after a
    :meth:`Pipeline.union`).

    >>> df = spark.readStream.format("rate").load()
    >>> lw.stream(df, event_time="timestamp", offset="value").data["source"]
    {'format': 'dataframe', 'event_time': 'timestamp', 'offset': 'value', 'time_unit': 's'}
    >>> lw.stream(df, event_time="ts")
    Traceback (most recent call last):
    ValueError: stream(event_time='ts'): no such column in the DataFrame (its columns: timestamp, value)
    """
    columns = streaming_columns(df)
    kafka = KAFKA_PARTITION in columns and KAFKA_OFFSET in columns
    roles = {
        "event_time": event_time,
        "partition": (KAFKA_PARTITION if kafka else None) if partition is FROM_KAFKA else partition,
        "offset": (KAFKA_OFFSET if kafka else None) if offset is FROM_KAFKA else offset,
        "arrival_time": ((KAFKA_TIMESTAMP if kafka and KAFKA_TIMESTAMP in columns else None)
                         if arrival is FROM_KAFKA else arrival),
    }
    arg = {"event_time": "event_time", "partition": "partition", "offset": "offset", "arrival_time": "arrival"}
    source: dict[str, Any] = {"format": DATAFRAME}
    if name is not None:
        source["name"] = source_name(name)
    for role, col in roles.items():
        if col is None:
            continue
        column_name(f"stream({arg[role]}=...)", col)
        if col not in columns:
            msg = f"stream({arg[role]}={col!r}): no such column in the DataFrame (its columns: {', '.join(columns)})"
            raise ValueError(msg)
        source[role] = col
    source["time_unit"] = choice("stream(time_unit=...)", time_unit, TIME_UNITS)
    if time_zone is not None:
        source["time_zone"] = time_zone
    return Pipeline({"source": source, "watermark": {}}, df=df)



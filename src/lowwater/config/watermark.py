"""A source's watermark table: ``[watermark]`` (one ``[source]``) or ``watermark = { ... }`` (``[[source]]``).

The table's own keys (``strategy`` and each strategy's keys) are read by
:func:`lowwater.core.watermarks.strategy_from_table`, which knows every
generator; this module adds the checks that need the source's columns: an
arrival clock for idleness, clipping and adaptive ``L``; a partition column for
idleness and declared partitions; a marker column that is not the event time.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from lowwater.config.errors import ConfigError
from lowwater.core.frontier import split_topic_partition
from lowwater.core.watermarks import STRATEGIES, StrategyError, WatermarkStrategy, strategy_from_table
from lowwater.core.watermarks.protocol import setting_text

if TYPE_CHECKING:
    from lowwater.config.source import SourceConfig


def parse_strategy(table: Any, where: str) -> WatermarkStrategy:
    """The strategy of one watermark table; every error names ``<where>.<key>``."""
    if not isinstance(table, dict):
        names = " | ".join(f'"{name}"' for name in STRATEGIES)
        msg = f"{where}: expected a table {{ strategy = {names}, ... }}"
        raise ConfigError(msg)
    try:
        return strategy_from_table(table, where=where)
    except StrategyError as e:
        raise ConfigError(str(e)) from None


def check_strategy(src: SourceConfig, strategy: WatermarkStrategy, where: str) -> None:
    """Refuse a strategy the source's columns cannot drive; ``where`` is the table's key (``watermark``)."""
    at = src.where
    if strategy.idle_timeout_us is not None and not src.arrival_time:
        msg = f"{where}.idle_timeout: needs {at}.arrival_time (idleness is measured on the arrival clock)"
        raise ConfigError(msg)
    why = strategy.generator.arrival_needed_for if strategy.generator is not None else None
    if why and not src.arrival_time:
        msg = f"{where}.strategy: {strategy.kind} needs {at}.arrival_time ({why})"
        raise ConfigError(msg)
    if strategy.max_future_skew_us is not None and not src.arrival_time:
        msg = f"{where}.max_future_skew: needs {at}.arrival_time (event times are clamped to the arrival clock)"
        raise ConfigError(msg)
    if not src.partition and (strategy.declared_partitions or strategy.idle_timeout_us):
        msg = f"{where}: partitions and idle_timeout need {at}.partition"
        raise ConfigError(msg)
    if src.topic_column:
        check_topic_partitions(src, strategy, where)
    marker = strategy.marker
    if marker is not None and marker in (src.event_time, src.partition, src.offset, src.arrival_time):
        role = next(r for r in ("event_time", "partition", "offset", "arrival_time") if getattr(src, r) == marker)
        msg = (f"{where}.marker: {marker!r} is {at}.{role}; the marker is its own boolean column "
               "(a marker row carries the proven timestamp in the event-time column)")
        raise ConfigError(msg)


def check_topic_partitions(src: SourceConfig, strategy: WatermarkStrategy, where: str) -> None:
    """A Kafka source of several topics names its partitions ``topic-partition`` (ADR 0043): so must its table.

    A bare number would name one partition of every topic; a topic the source does not read (not in
    its list, not matching its pattern) would never report. Either is one line. (A replay of a
    snapshot has its topic column, not the subscription: only the form is checked there.)
    """
    kind, value = src.kafka.subscribe if src.kafka is not None else ("", "")
    topics = src.kafka.topics_text if src.kafka is not None else f"column {src.topic_column}"
    named = [(f"{where}.partitions", p) for p in strategy.declared_partitions]
    named += [(f"{where}.out_of_orderness_by_partition", p) for p, _ in strategy.per_partition_us]
    for key, name in named:
        parsed = split_topic_partition(name)
        if parsed is None:
            example = f"{value.split(',')[0]}-0" if kind == "subscribe" else "<topic>-0"
            msg = (f"{key}: {name!r} is not a topic-partition; {src.where} reads several topics ({topics}), "
                   f"each with its own partitions: name them <topic>-<partition>, e.g. {example!r}")
            raise ConfigError(msg)
        if kind and not _reads(kind, value, parsed[0]):
            msg = f"{key}: {name!r} names topic {parsed[0]!r}, which {src.where} does not read ({topics})"
            raise ConfigError(msg)


def _reads(kind: str, value: str, topic: str) -> bool:
    """Whether a subscription reads ``topic`` (a pattern is Java's regex; Python's agrees on common ones)."""
    if kind == "subscribe":
        return topic in value.split(",")
    try:
        return re.fullmatch(value, topic) is not None
    except re.error:
        return True  # a pattern Python cannot read: the broker is the judge


def describe_strategy(strategy: WatermarkStrategy) -> str:
    """A stable one-line text of every setting of ``strategy`` (fingerprints, logs).

    >>> describe_strategy(WatermarkStrategy.for_bounded_out_of_orderness(3_000_000).with_idleness(60_000_000))
    'bounded max_out_of_orderness=3s, idle_timeout=1m'
    """
    parts = [describe_generator(strategy)]
    if strategy.idle_timeout_us is not None:
        parts.append(f"idle_timeout={setting_text(strategy.idle_timeout_us)}")
    if strategy.declared_partitions:
        parts.append(f"partitions=[{', '.join(sorted(strategy.declared_partitions))}]")
    if strategy.max_future_skew_us is not None:
        parts.append(f"max_future_skew={setting_text(strategy.max_future_skew_us)}")
    return ", ".join(parts)


def describe_generator(strategy: WatermarkStrategy) -> str:
    """The generator part of :func:`describe_strategy`: the strategy's name and its own keys."""
    if strategy.generator is not None:
        return strategy.generator.describe()
    text = f"bounded max_out_of_orderness={setting_text(strategy.max_out_of_orderness_us)}"
    if strategy.per_partition_us:
        text += ", out_of_orderness_by_partition={" + ", ".join(
            f"{p}={setting_text(b)}" for p, b in sorted(strategy.per_partition_us)) + "}"
    return text

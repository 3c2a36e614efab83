"""Sources: one ``[source]`` (plus ``[watermark]``), or ``[[source]]`` tables each with its own watermark.

One source keeps the keys it always had (``source.path``, ``watermark.*``).
Several sources are an array of tables, each named and carrying an inline
watermark table; their keys are ``source.<name>.<key>``::

    [[source]]
    name = "radar"
    path = "landing/radar"
    event_time = "sensor_ts"
    arrival_time = "received_at"
    watermark = { strategy = "bounded", max_out_of_orderness = "100ms" }

Arrival order across sources is ``(arrival_time, source, partition, offset)``,
so with several sources every source needs an arrival-time column.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from lowwater.config.errors import ConfigError, check_keys, text
from lowwater.config.kafka import (
    KAFKA_KEYS,
    KAFKA_OFFSET,
    KAFKA_PARTITION,
    KAFKA_TIMESTAMP,
    KAFKA_TOPIC,
    KafkaSettings,
    parse_kafka,
)
from lowwater.config.overrides import resolve
from lowwater.config.watermark import check_strategy, parse_strategy
from lowwater.core.tracker_state import DEFAULT_SOURCE
from lowwater.core.watermarks import WatermarkStrategy
from lowwater.time import US_PER

# source.format: the built-in kinds; io/source.register_source_kind adds one (read with the file keys).
FORMATS = ["jsonl", "csv", "parquet", "kafka", "delta", "dataframe"]
# format = "dataframe": the rows come from a streaming DataFrame handed in from Python (lowwater/api/):
# no path, no schema (the DataFrame has both); ``lowwater run`` refuses it in one line.
DATAFRAME = "dataframe"
_NOT_FOR_DATAFRAME = ("path", "schema", "max_files_per_batch")
TIME_UNITS = ("s", "ms", "us")
SOURCE_KEYS = frozenset({
    "format", "path", "partition", "offset", "arrival_time", "event_time", "time_unit", "max_files_per_batch",
    "schema", "name", "time_zone",
})
NAMED_SOURCE_KEYS = SOURCE_KEYS | {"watermark"}
# A name appears in keys (source.<name>.path, --set) and in output rows: no dots, no spaces.
_NAME = re.compile(r"^[A-Za-z0-9_-]+$")


@dataclass(frozen=True)
class SourceConfig:
    """One input: where its files are, which columns play which role, and its watermark strategy.

    ``named`` is True for a ``[[source]]`` table: its keys are then spelled
    ``source.<name>.<key>`` in messages (:meth:`key`).
    """

    format: str
    path: str
    event_time: str
    partition: str | None = None
    offset: str | None = None
    arrival_time: str | None = None
    time_unit: str = "s"
    max_files_per_batch: int | None = None
    schema: str | None = None
    name: str = DEFAULT_SOURCE
    watermark: WatermarkStrategy = field(default_factory=WatermarkStrategy)
    named: bool = False
    kafka: KafkaSettings | None = None  # format = "kafka" (config/kafka.py); path is then kafka://<topics>
    # A Kafka source of several topics (or a replay of its snapshot): the column of each row's topic. Its
    # partitions are then topic-partitions, ``<topic>-<partition>`` (ADR 0043); None: partition numbers.
    topic_column: str | None = None
    # source.time_zone: the zone of timestamps written without one (None: not set, read as UTC).
    time_zone: str | None = None

    @property
    def zone(self) -> str:
        """The IANA zone naive timestamps of this source are read in (``UTC`` unless ``time_zone`` says)."""
        return self.time_zone or "UTC"

    @property
    def unit_us(self) -> int:
        return US_PER[self.time_unit]

    @property
    def marker(self) -> str | None:
        """The punctuated strategy's marker column, else None."""
        return self.watermark.marker

    @property
    def required_columns(self) -> list[str]:
        """This source's own columns (not the window's key and values), in role order."""
        cols = [self.event_time]
        cols += [c for c in (self.partition, self.offset, self.arrival_time, self.marker, self.topic_column) if c]
        return list(dict.fromkeys(cols))

    @property
    def where(self) -> str:
        """The key prefix of this source in messages: ``source`` or ``source.<name>``."""
        return f"source.{self.name}" if self.named else "source"

    def key(self, key: str) -> str:
        """A key of this source as the user spells it: ``source.path`` or ``source.radar.path``."""
        return f"{self.where}.{key}"

    @property
    def watermark_key(self) -> str:
        """Where this source's strategy is written: ``watermark`` or ``source.<name>.watermark``."""
        return self.key("watermark") if self.named else "watermark"

    def role_of(self, column: str) -> str | None:
        """The key that names ``column`` (``source.partition``, ``watermark.marker``), or None."""
        roles = {c: self.key(r) for r in ("event_time", "partition", "offset", "arrival_time")
                 if (c := getattr(self, r))}
        if self.marker:
            roles[self.marker] = f"{self.watermark_key}.marker"
        return roles.get(column)


def check_source_path(src: SourceConfig, base_dir: str) -> None:
    """A local source path must exist (checked before Spark starts; URLs are left to Spark).

    A ``format = "dataframe"`` source has no path: only Python hands one in (``lowwater/api``).
    """
    if src.format == DATAFRAME:
        msg = (f"{src.key('format')}: \"dataframe\" is a streaming DataFrame handed in from Python "
               "(lw.Pipeline.from_toml(path, df=...).start()); lowwater run reads files or Kafka")
        raise ConfigError(msg)
    if "://" in src.path or Path(src.path).exists():
        return
    msg = (f"{src.key('path')}: {src.path} does not exist (relative paths resolve against the configuration "
           f"file's directory, {base_dir})")
    raise ConfigError(msg)


def parse_sources(data: dict[str, Any], base: Path) -> tuple[tuple[SourceConfig, ...], bool]:
    """The sources and whether they were written as ``[[source]]`` (named) tables."""
    raw = data.get("source")
    if raw is None:
        msg = "missing section [source]"
        raise ConfigError(msg)
    if isinstance(raw, dict):
        check_keys("source", raw, _allowed(raw))
        src = parse_source(raw, base, name=_name(raw.get("name", DEFAULT_SOURCE)), named=False)
        strategy = parse_strategy(data.get("watermark", {}), "watermark")
        check_strategy(src, strategy, "watermark")
        return (replace(src, watermark=strategy),), False
    if not isinstance(raw, list) or not raw or not all(isinstance(t, dict) for t in raw):
        msg = "[source] must be a table, or [[source]] tables (one per source)"
        raise ConfigError(msg)
    if "watermark" in data:
        msg = ("[watermark]: with [[source]] tables each source has its own watermark table "
               "(watermark = { strategy = ..., ... } inside the [[source]])")
        raise ConfigError(msg)
    sources = tuple(_parse_named(i, t, base) for i, t in enumerate(raw))
    seen: set[str] = set()
    for src in sources:
        if src.name in seen:
            msg = f"source.name: two sources are named {src.name!r}"
            raise ConfigError(msg)
        seen.add(src.name)
    if len(sources) > 1:
        for src in sources:
            if not src.arrival_time:
                msg = (f"{src.key('arrival_time')}: with several sources every source needs arrival_time: "
                       "arrival order across sources is (arrival_time, source, partition, offset)")
                raise ConfigError(msg)
    return sources, True


def _parse_named(index: int, t: dict[str, Any], base: Path) -> SourceConfig:
    if "name" not in t:
        msg = f"source.name: required in every [[source]] table (source number {index + 1} has none)"
        raise ConfigError(msg)
    name = _name(t["name"])
    check_keys(f"source.{name}", t, (_allowed(t) | {"watermark"}) if t.get("format") == "kafka" else NAMED_SOURCE_KEYS)
    src = parse_source(t, base, name=name, named=True)
    strategy = parse_strategy(t.get("watermark", {}), src.watermark_key)
    check_strategy(src, strategy, src.watermark_key)
    return replace(src, watermark=strategy)


def _allowed(raw: dict[str, Any]) -> frozenset[str]:
    """A Kafka source's keys; a file source's key it does not take is refused by ``parse_kafka`` with a reason."""
    if raw.get("format") == "kafka":
        return KAFKA_KEYS | {"path", "partition", "offset", "arrival_time", "max_files_per_batch"}
    return SOURCE_KEYS


def _name(name: Any) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        msg = (f"source.name: {name!r} is not a plain name (letters, digits, _ and -; "
               "it is spelled in keys such as source.<name>.path)")
        raise ConfigError(msg)
    return name


def register_format(fmt: str) -> None:
    """Accept ``format = "<fmt>"`` (called by ``io/source.register_source_kind``, which knows how to open it)."""
    if fmt not in FORMATS:
        FORMATS.append(fmt)


def parse_source(s: dict[str, Any], base: Path, name: str, named: bool) -> SourceConfig:
    """One source's columns and files (its watermark is parsed by the caller)."""
    where = f"source.{name}" if named else "source"
    fmt = s.get("format", "jsonl")
    if fmt not in FORMATS:
        msg = f"{where}.format: {fmt!r} is not one of {', '.join(FORMATS)}"
        raise ConfigError(msg)
    if fmt == "kafka":
        return _parse_kafka_source(s, where, name, named)
    if fmt == DATAFRAME:
        return _parse_dataframe_source(s, where, name, named)
    for key in ("path", "event_time"):
        if key not in s:
            msg = f"{where}.{key} is required"
            raise ConfigError(msg)
    unit = _time_unit(where, s)
    mfb = s.get("max_files_per_batch")
    if mfb is not None and (not isinstance(mfb, int) or isinstance(mfb, bool) or mfb < 1):
        msg = f"{where}.max_files_per_batch: expected a positive integer, got {mfb!r}"
        raise ConfigError(msg)

    def opt(key: str) -> str | None:
        return text(where, key, s[key]) if key in s else None

    return SourceConfig(
        format=fmt,
        path=resolve(base, text(where, "path", s["path"])),
        event_time=text(where, "event_time", s["event_time"]),
        partition=opt("partition"),
        offset=opt("offset"),
        arrival_time=opt("arrival_time"),
        time_unit=unit,
        max_files_per_batch=mfb,
        schema=opt("schema"),
        name=name,
        named=named,
        time_zone=time_zone(where, s),
    )


def time_zone(where: str, s: dict[str, Any]) -> str | None:
    """``source.time_zone``: an IANA name (``America/New_York``, ``UTC``), validated here; None when not set."""
    if "time_zone" not in s:
        return None
    name = s["time_zone"]
    try:
        if not isinstance(name, str) or not name.strip():
            raise ValueError
        ZoneInfo(name)
    except (ValueError, ZoneInfoNotFoundError):
        msg = (f"{where}.time_zone: {name!r} is not a time zone name (an IANA name such as \"America/New_York\" "
               "or \"UTC\")")
        raise ConfigError(msg) from None
    return name


def _time_unit(where: str, s: dict[str, Any]) -> str:
    unit = s.get("time_unit", "s")
    if unit not in TIME_UNITS:
        msg = f"{where}.time_unit: {unit!r} is not one of {', '.join(TIME_UNITS)}"
        raise ConfigError(msg)
    return unit


def _parse_dataframe_source(s: dict[str, Any], where: str, name: str, named: bool) -> SourceConfig:
    """A streaming DataFrame from Python: only the column roles; ``path`` names it (``dataframe://<name>``)."""
    for key in _NOT_FOR_DATAFRAME:
        if key in s:
            msg = f"{where}.{key}: not for format = \"dataframe\" (the DataFrame handed in has its rows and schema)"
            raise ConfigError(msg)
    if "event_time" not in s:
        msg = f"{where}.event_time is required"
        raise ConfigError(msg)

    def opt(key: str) -> str | None:
        return text(where, key, s[key]) if key in s else None

    return SourceConfig(
        format=DATAFRAME,
        path=f"{DATAFRAME}://{name}",
        event_time=text(where, "event_time", s["event_time"]),
        partition=opt("partition"),
        offset=opt("offset"),
        arrival_time=opt("arrival_time"),
        time_unit=_time_unit(where, s),
        name=name,
        named=named,
        time_zone=time_zone(where, s),
    )


def _parse_kafka_source(s: dict[str, Any], where: str, name: str, named: bool) -> SourceConfig:
    """A Kafka topic: the record's partition, offset and timestamp play the partition, offset and arrival roles."""
    settings, schema = parse_kafka(where, s)
    if "event_time" not in s:
        msg = f"{where}.event_time is required (a field of the value, or {KAFKA_TIMESTAMP!r} for the record time)"
        raise ConfigError(msg)
    return SourceConfig(
        format="kafka",
        path=f"kafka://{settings.topics_text}",
        event_time=text(where, "event_time", s["event_time"]),
        partition=KAFKA_PARTITION,
        offset=KAFKA_OFFSET,
        arrival_time=KAFKA_TIMESTAMP,
        time_unit=_time_unit(where, s),
        schema=schema,
        name=name,
        named=named,
        kafka=settings,
        topic_column=KAFKA_TOPIC if settings.several_topics else None,
        time_zone=time_zone(where, s),
    )

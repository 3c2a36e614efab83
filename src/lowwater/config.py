"""Pipeline configuration: TOML in, validated frozen dataclasses out.

A wrong configuration is reported as one :class:`ConfigError` line that names
the key (the CLI prints it and exits with code 2); nothing reaches Spark.
"""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lowwater.core.aggregates import AggSpec, value_columns
from lowwater.core.lateness import AllowedLateness, LatePolicy
from lowwater.core.triggers import AccumulationMode, EarlyTrigger
from lowwater.core.watermarks import WatermarkStrategy
from lowwater.core.windows import HoppingWindows, SessionWindows, TumblingWindows
from lowwater.time import US_PER, to_duration_us


class ConfigError(ValueError):
    """A configuration problem, reported as one line naming the key."""


FORMATS = ("jsonl", "csv", "parquet")
ACCUMULATION_MODES = tuple(m.value for m in AccumulationMode)
WINDOW_TYPES = ("tumbling", "hopping", "session")
TIME_UNITS = ("s", "ms", "us")

_KEYS: dict[str, set[str]] = {
    "source": {
        "format", "path", "partition", "offset", "arrival_time", "event_time", "time_unit",
        "max_files_per_batch", "schema",
    },
    "watermark": {
        "max_out_of_orderness", "idle_timeout", "partitions", "out_of_orderness_by_partition",
        "max_future_skew",
    },
    "window": {
        "type", "size", "slide", "offset", "gap", "allowed_lateness", "key", "aggregations", "accumulation",
    },
    "trigger": {"early", "interval"},
    "late": {"policy"},
    "output": {"path", "checkpoint", "kind", "postgres"},
    "spark": {"master", "app_name", "conf", "shuffle_partitions"},
}


@dataclass(frozen=True)
class SourceConfig:
    format: str
    path: str
    event_time: str
    partition: str | None = None
    offset: str | None = None
    arrival_time: str | None = None
    time_unit: str = "s"
    max_files_per_batch: int | None = None
    schema: str | None = None

    @property
    def unit_us(self) -> int:
        return US_PER[self.time_unit]


@dataclass(frozen=True)
class WindowConfig:
    """``type`` is tumbling (``size``), hopping (``size``, ``slide``) or session (``gap``; ``size_us`` is 0)."""

    type: str
    size_us: int
    slide_us: int | None
    offset_us: int
    allowed_lateness_us: int
    key: tuple[str, ...]
    aggregations: tuple[AggSpec, ...]
    accumulation: str = "accumulating"
    gap_us: int | None = None

    @property
    def is_session(self) -> bool:
        return self.type == "session"

    def assigner(self) -> TumblingWindows | HoppingWindows | SessionWindows:
        if self.type == "hopping":
            assert self.slide_us is not None
            return HoppingWindows(self.size_us, self.slide_us, self.offset_us)
        if self.type == "session":
            assert self.gap_us is not None
            return SessionWindows(self.gap_us)
        return TumblingWindows(self.size_us, self.offset_us)

    @property
    def lateness(self) -> AllowedLateness:
        return AllowedLateness(self.allowed_lateness_us)

    @property
    def value_columns(self) -> list[str]:
        return value_columns(list(self.aggregations))


OUTPUT_KINDS = ("parquet", "postgres")
PG_TABLE_KEYS = ("results_table", "late_table", "dead_letter_table", "metrics_table", "batches_table")
_PG_KEYS = {"url", "schema", "retries", "backoff", *PG_TABLE_KEYS}
# Unquoted-identifier shape only: no quotes, semicolons, dots or spaces reach SQL text
# (and every identifier is still quoted with psycopg.sql.Identifier).
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
PG_URL_ENV = "LOWWATER_PG_URL"


@dataclass(frozen=True)
class PostgresConfig:
    """Where ``[output] kind = "postgres"`` delivers; ``url`` may hold a password (never print it)."""

    url: str
    schema: str = "public"
    results_table: str = "lowwater_results"
    late_table: str = "lowwater_late"
    dead_letter_table: str = "lowwater_dead_letter"
    metrics_table: str = "lowwater_metrics"
    batches_table: str = "lowwater_batches"
    retries: int = 5
    backoff_s: float = 0.5

    def __repr__(self) -> str:  # the URL may carry a password
        return f"PostgresConfig(schema={self.schema!r}, results_table={self.results_table!r})"


@dataclass(frozen=True)
class OutputConfig:
    path: str
    checkpoint: str
    kind: str = "parquet"
    postgres: PostgresConfig | None = None

    def sub(self, name: str) -> str:
        return f"{self.path.rstrip('/')}/{name}"


@dataclass(frozen=True)
class SparkConfig:
    master: str = "local[*]"
    app_name: str = "lowwater"
    conf: dict[str, str] = field(default_factory=dict)
    shuffle_partitions: int = 4


@dataclass(frozen=True)
class PipelineConfig:
    source: SourceConfig
    watermark: WatermarkStrategy
    window: WindowConfig
    late_policy: LatePolicy
    output: OutputConfig
    spark: SparkConfig
    base_dir: str = "."
    early: EarlyTrigger | None = None  # [trigger] early: provisional firings of open windows
    # [trigger] interval: continuous runs start a micro-batch every interval (Spark's
    # processing-time trigger) instead of as soon as the previous one ends.
    trigger_interval_us: int | None = None

    @property
    def required_columns(self) -> list[str]:
        """Input columns the pipeline reads; each must exist in the source."""
        cols = [self.source.event_time]
        for c in (self.source.partition, self.source.offset, self.source.arrival_time):
            if c:
                cols.append(c)
        cols += list(self.window.key) + self.window.value_columns
        return list(dict.fromkeys(cols))


def _dur(section: str, key: str, value: Any) -> int:
    try:
        return to_duration_us(value)
    except ValueError as e:
        msg = f"{section}.{key}: {e}"
        raise ConfigError(msg) from None


def _str(section: str, key: str, value: Any) -> str:
    if not isinstance(value, str) or not value:
        msg = f"{section}.{key}: expected a non-empty string, got {value!r}"
        raise ConfigError(msg)
    return value


def _postgres(p: Any) -> PostgresConfig:
    """``[output.postgres]``: URL (or ``LOWWATER_PG_URL``), validated table names, retry bounds."""
    if not isinstance(p, dict):
        msg = "output.postgres: expected a table"
        raise ConfigError(msg)
    for key in p:
        if key not in _PG_KEYS:
            msg = f"unknown key output.postgres.{key} (expected one of {', '.join(sorted(_PG_KEYS))})"
            raise ConfigError(msg)
    # The environment wins over the file, so a password need not live in the TOML.
    url = os.environ.get(PG_URL_ENV) or p.get("url")
    if not url:
        msg = f"output.postgres.url: required for output.kind = \"postgres\" (or set {PG_URL_ENV})"
        raise ConfigError(msg)
    if not isinstance(url, str) or not url.startswith(("postgresql://", "postgres://")):
        msg = "output.postgres.url: expected postgresql://user:password@host:port/database"
        raise ConfigError(msg)
    names = {}
    for key in ("schema", *PG_TABLE_KEYS):
        if key in p:
            value = p[key]
            if not isinstance(value, str) or not _IDENT.match(value):
                msg = (f"output.postgres.{key}: {value!r} is not a plain SQL identifier "
                       "(letters, digits and _, not starting with a digit, at most 63)")
                raise ConfigError(msg)
            names[key] = value
    tables = [names.get(k, getattr(PostgresConfig, k)) for k in PG_TABLE_KEYS]
    if len(set(tables)) != len(tables):
        msg = "output.postgres: the table names must differ"
        raise ConfigError(msg)
    retries = p.get("retries", 5)
    if not isinstance(retries, int) or isinstance(retries, bool) or not 0 <= retries <= 50:
        msg = f"output.postgres.retries: expected an integer 0..50, got {retries!r}"
        raise ConfigError(msg)
    backoff = p.get("backoff", "0.5s")
    backoff_us = _dur("output.postgres", "backoff", backoff)
    if backoff_us <= 0:
        msg = "output.postgres.backoff: must be positive"
        raise ConfigError(msg)
    return PostgresConfig(url=url, retries=retries, backoff_s=backoff_us / 1e6, **names)


def _flatten(table: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"spark": {"sql": {"x": 1}}}`` (unquoted dotted TOML keys) → ``{"spark.sql.x": 1}``."""
    out: dict[str, Any] = {}
    for k, v in table.items():
        name = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flatten(v, name + "."))
        else:
            out[name] = v
    return out


def _resolve(base: Path, p: str) -> str:
    """The one path rule: a relative path resolves against the configuration file's directory.

    That holds for paths written in the file and for ``--set`` values alike, so a
    configuration means the same thing from any working directory. URLs
    (``scheme://``) and absolute paths are kept as written.
    """
    if "://" in p or p.startswith("/"):
        return p
    return str((base / p).resolve())


def check_source_path(src: SourceConfig, base_dir: str) -> None:
    """A local ``source.path`` must exist (checked before Spark starts; URLs are left to Spark)."""
    if "://" in src.path or Path(src.path).exists():
        return
    msg = (f"source.path: {src.path} does not exist (relative paths resolve against the configuration "
           f"file's directory, {base_dir})")
    raise ConfigError(msg)


def parse_override(text: str) -> tuple[list[str], Any]:
    """``section.key=value`` → (path, value); the value is read as TOML if it parses."""
    if "=" not in text:
        msg = f"--set {text!r}: expected section.key=value"
        raise ConfigError(msg)
    key, raw = text.split("=", 1)
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw
    path = key.strip().split(".")
    if len(path) < 2:
        msg = f"--set {text!r}: the key must be section.key"
        raise ConfigError(msg)
    return path, value


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    for text in overrides:
        path, value = parse_override(text)
        node = data
        for part in path[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                msg = f"--set {text!r}: {part} is not a section"
                raise ConfigError(msg)
        node[path[-1]] = value
    return data


def load_config(path: str | Path, overrides: list[str] | None = None) -> PipelineConfig:
    """Read and validate a ``lowwater run`` TOML file."""
    p = Path(path)
    try:
        data = tomllib.loads(p.read_text())
    except FileNotFoundError:
        msg = f"configuration file not found: {p}"
        raise ConfigError(msg) from None
    except tomllib.TOMLDecodeError as e:
        msg = f"{p}: not valid TOML: {e}"
        raise ConfigError(msg) from None
    data = apply_overrides(data, overrides or [])
    return parse_config(data, base_dir=p.resolve().parent)


def parse_config(data: dict[str, Any], base_dir: Path | str = ".") -> PipelineConfig:
    """Validate a configuration dict; every error names its key."""
    base = Path(base_dir)
    for section, value in data.items():
        if section not in _KEYS:
            msg = f"unknown section [{section}] (expected one of {', '.join(sorted(_KEYS))})"
            raise ConfigError(msg)
        if not isinstance(value, dict):
            msg = f"[{section}] must be a table"
            raise ConfigError(msg)
        for key in value:
            if key not in _KEYS[section]:
                msg = f"unknown key {section}.{key} (expected one of {', '.join(sorted(_KEYS[section]))})"
                raise ConfigError(msg)
    for section in ("source", "window", "output"):
        if section not in data:
            msg = f"missing section [{section}]"
            raise ConfigError(msg)

    s = data["source"]
    fmt = s.get("format", "jsonl")
    if fmt not in FORMATS:
        msg = f"source.format: {fmt!r} is not one of {', '.join(FORMATS)}"
        raise ConfigError(msg)
    if "path" not in s:
        msg = "source.path is required"
        raise ConfigError(msg)
    if "event_time" not in s:
        msg = "source.event_time is required"
        raise ConfigError(msg)
    unit = s.get("time_unit", "s")
    if unit not in TIME_UNITS:
        msg = f"source.time_unit: {unit!r} is not one of {', '.join(TIME_UNITS)}"
        raise ConfigError(msg)
    mfb = s.get("max_files_per_batch")
    if mfb is not None and (not isinstance(mfb, int) or isinstance(mfb, bool) or mfb < 1):
        msg = f"source.max_files_per_batch: expected a positive integer, got {mfb!r}"
        raise ConfigError(msg)
    source = SourceConfig(
        format=fmt,
        path=_resolve(base, _str("source", "path", s["path"])),
        event_time=_str("source", "event_time", s["event_time"]),
        partition=_str("source", "partition", s["partition"]) if "partition" in s else None,
        offset=_str("source", "offset", s["offset"]) if "offset" in s else None,
        arrival_time=_str("source", "arrival_time", s["arrival_time"]) if "arrival_time" in s else None,
        time_unit=unit,
        max_files_per_batch=mfb,
        schema=_str("source", "schema", s["schema"]) if "schema" in s else None,
    )

    w = data.get("watermark", {})
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(
        _dur("watermark", "max_out_of_orderness", w.get("max_out_of_orderness", "0s"))
    )
    if "idle_timeout" in w:
        t = _dur("watermark", "idle_timeout", w["idle_timeout"])
        if t <= 0:
            msg = "watermark.idle_timeout: must be positive"
            raise ConfigError(msg)
        if not source.arrival_time:
            msg = "watermark.idle_timeout: needs source.arrival_time (idleness is measured on the arrival clock)"
            raise ConfigError(msg)
        strategy = strategy.with_idleness(t)
    if "partitions" in w:
        parts = w["partitions"]
        if not isinstance(parts, list) or not parts:
            msg = "watermark.partitions: expected a non-empty list"
            raise ConfigError(msg)
        strategy = strategy.with_partitions([str(x) for x in parts])
    if "out_of_orderness_by_partition" in w:
        table = w["out_of_orderness_by_partition"]
        if not isinstance(table, dict):
            msg = "watermark.out_of_orderness_by_partition: expected a table partition = duration"
            raise ConfigError(msg)
        strategy = strategy.with_bounds(
            {str(k): _dur("watermark", f"out_of_orderness_by_partition.{k}", v) for k, v in table.items()}
        )
    if "max_future_skew" in w:
        if not source.arrival_time:
            msg = "watermark.max_future_skew: needs source.arrival_time"
            raise ConfigError(msg)
        strategy = strategy.with_max_future_skew(_dur("watermark", "max_future_skew", w["max_future_skew"]))
    if not source.partition and (strategy.declared_partitions or strategy.idle_timeout_us):
        msg = "watermark: partitions and idle_timeout need source.partition"
        raise ConfigError(msg)

    win = data["window"]
    wtype = win.get("type", "tumbling")
    if wtype not in WINDOW_TYPES:
        msg = f"window.type: {wtype!r} is not one of {', '.join(WINDOW_TYPES)}"
        raise ConfigError(msg)
    gap = None
    if wtype == "session":
        for k in ("size", "slide", "offset"):
            if k in win:
                msg = f"window.{k}: not for type = \"session\" (a session is sized by window.gap)"
                raise ConfigError(msg)
        if "gap" not in win:
            msg = "window.gap is required for a session window"
            raise ConfigError(msg)
        gap = _dur("window", "gap", win["gap"])
        if gap <= 0:
            msg = "window.gap: must be positive"
            raise ConfigError(msg)
    elif "gap" in win:
        msg = "window.gap: only for type = \"session\""
        raise ConfigError(msg)
    elif "size" not in win:
        msg = "window.size is required"
        raise ConfigError(msg)
    size = 0 if wtype == "session" else _dur("window", "size", win["size"])
    if size <= 0 and wtype != "session":
        msg = "window.size: must be positive"
        raise ConfigError(msg)
    slide = None
    if wtype == "hopping":
        if "slide" not in win:
            msg = "window.slide is required for a hopping window"
            raise ConfigError(msg)
        slide = _dur("window", "slide", win["slide"])
        if slide <= 0 or size % slide:
            msg = "window.slide: must be positive and divide window.size"
            raise ConfigError(msg)
    elif "slide" in win:
        msg = "window.slide: only for type = \"hopping\""
        raise ConfigError(msg)
    keys = win.get("key", [])
    if isinstance(keys, str):
        keys = [keys]
    if not isinstance(keys, list) or not all(isinstance(k, str) and k for k in keys):
        msg = "window.key: expected a list of column names"
        raise ConfigError(msg)
    aggs_raw = win.get("aggregations", {})
    if not isinstance(aggs_raw, dict):
        msg = "window.aggregations: expected a table name = \"func(column)\""
        raise ConfigError(msg)
    aggs = []
    reserved = {"count", "window_start", "window_end", "kind", "revision", "watermark", "batch_id"}
    for name, expr in aggs_raw.items():
        if name in reserved or name in keys:
            msg = f"window.aggregations.{name}: the name is taken by an output column"
            raise ConfigError(msg)
        try:
            aggs.append(AggSpec.parse(name, expr))
        except ValueError as e:
            msg = f"window.aggregations.{name}: {e}"
            raise ConfigError(msg) from None
    accumulation = win.get("accumulation", "accumulating")
    if accumulation not in ACCUMULATION_MODES:
        msg = f"window.accumulation: {accumulation!r} is not one of {', '.join(ACCUMULATION_MODES)}"
        raise ConfigError(msg)
    window = WindowConfig(
        type=wtype,
        size_us=size,
        slide_us=slide,
        offset_us=_dur("window", "offset", win.get("offset", "0s")),
        allowed_lateness_us=_dur("window", "allowed_lateness", win.get("allowed_lateness", "0s")),
        key=tuple(keys),
        aggregations=tuple(aggs),
        accumulation=accumulation,
        gap_us=gap,
    )

    early = None
    trig = data.get("trigger", {})
    if "early" in trig:
        try:
            early = EarlyTrigger.parse(trig["early"])
        except ValueError as e:
            msg = f"trigger.early: {e}"
            raise ConfigError(msg) from None
    interval = None
    if "interval" in trig:
        interval = _dur("trigger", "interval", trig["interval"])
        if interval < 1000:
            msg = f"trigger.interval: must be at least 1ms, got {trig['interval']!r}"
            raise ConfigError(msg)

    policy_raw = data.get("late", {}).get("policy", "side_output")
    try:
        policy = LatePolicy(policy_raw)
    except ValueError:
        msg = f"late.policy: {policy_raw!r} is not one of drop, side_output"
        raise ConfigError(msg) from None

    o = data["output"]
    if "path" not in o:
        msg = "output.path is required"
        raise ConfigError(msg)
    out_path = _resolve(base, _str("output", "path", o["path"]))
    ckpt = f"{out_path}/_checkpoint"
    if "checkpoint" in o:
        ckpt = _resolve(base, _str("output", "checkpoint", o["checkpoint"]))
    kind = o.get("kind", "parquet")
    if kind not in OUTPUT_KINDS:
        msg = f"output.kind: {kind!r} is not one of {', '.join(OUTPUT_KINDS)}"
        raise ConfigError(msg)
    pg = _postgres(o.get("postgres", {})) if kind == "postgres" else None
    if kind != "postgres" and "postgres" in o:
        msg = "output.postgres: only with output.kind = \"postgres\""
        raise ConfigError(msg)
    output = OutputConfig(out_path, ckpt, kind, pg)

    sp = data.get("spark", {})
    conf = sp.get("conf", {})
    if not isinstance(conf, dict):
        msg = "spark.conf: expected a table of spark.* settings"
        raise ConfigError(msg)
    conf = _flatten(conf)
    for k in conf:
        if not str(k).startswith("spark."):
            msg = f"spark.conf.{k}: only spark.* settings are allowed"
            raise ConfigError(msg)
    sparkc = SparkConfig(
        master=_str("spark", "master", sp.get("master", "local[*]")),
        app_name=_str("spark", "app_name", sp.get("app_name", "lowwater")),
        conf={str(k): str(v) for k, v in conf.items()},
        shuffle_partitions=int(sp.get("shuffle_partitions", 4)),
    )
    return PipelineConfig(source, strategy, window, policy, output, sparkc, str(base), early, interval)

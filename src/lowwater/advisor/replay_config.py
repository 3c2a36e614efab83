"""The configuration a replay (``lowwater whatif`` / ``delays``) reads: ``--config`` first, flags override.

INPUT and the source flags (``--format``, ``--event-time``, ``--arrival-time``,
``--partition``, ``--offset``, ``--time-unit``, ``--idle-timeout``,
``--partitions``) describe *one* log:

* a single ``[source]``, or a single ``[[source]]`` table: INPUT (a file, a
  directory or a glob) replaces its ``path`` and the flags its keys; without
  INPUT the configured path is read, under the same file/directory/glob rules;
* several ``[[source]]`` tables: each source is read from its own configured
  ``path`` with its own format and columns. INPUT or a source flag would not
  say which source it means, so either is one line and exit 2.

Without ``--config`` INPUT is required. A Kafka source (``format = "kafka"``)
is replayed from a snapshot of its topic given as INPUT (:func:`_kafka_snapshot`);
the topic itself is not read.
"""

from __future__ import annotations

import glob
import tomllib
from dataclasses import replace
from pathlib import Path
from typing import Any

from lowwater.config import ConfigError, PipelineConfig, parse_config
from lowwater.config.kafka import (
    KAFKA_OFFSET,
    KAFKA_PARTITION,
    KAFKA_TIMESTAMP,
    KAFKA_TOPIC,
    several_topics,
    subscription,
)
from lowwater.config.watermark import check_strategy

EXTENSIONS = {".jsonl": "jsonl", ".json": "jsonl", ".ndjson": "jsonl", ".csv": "csv", ".parquet": "parquet",
              ".pq": "parquet"}


def split(text: str | None) -> list[str]:
    """``a, b,c`` -> ``["a", "b", "c"]``."""
    return [t.strip() for t in (text or "").split(",") if t.strip()]


def input_format(input_path: str) -> str | None:
    """The format a log's file names say (``.csv``, ``.jsonl``, ``.parquet``), or ``None`` if they do not.

    INPUT may be a file, a directory or a glob; a directory speaks when all its
    files share one known extension.
    """
    p = Path(input_path)
    if glob.has_magic(input_path) or p.is_file():
        return EXTENSIONS.get(p.suffix.lower())
    if p.is_dir():
        found = {EXTENSIONS.get(f.suffix.lower()) for f in p.rglob("*") if f.is_file() and f.name[0] not in "._"}
        return found.pop() if len(found) == 1 else None
    return None


def check_input(input_path: str, what: str = "INPUT") -> None:
    """A log must name something: a file, a directory, or a glob matching files."""
    if glob.has_magic(input_path):
        if "{" not in input_path and not any(Path(f).is_file() for f in glob.glob(input_path)):
            raise ConfigError(f"{what} {input_path}: the pattern matches no files")
    elif not Path(input_path).exists():
        raise ConfigError(f"{what} {input_path}: no such file or directory")


def _load(config: Path | None) -> tuple[dict[str, Any], Path]:
    if config is None:
        return {}, Path.cwd()
    try:
        return tomllib.loads(config.read_text()), config.resolve().parent
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise ConfigError(f"--config {config}: {e}") from None


def _one_log(src: dict[str, Any], wm: dict[str, Any], input_path: str | None, base: Path,
             flags: dict[str, str | None], idle_timeout: str | None, partitions: str | None) -> bool:
    """Point the only source at its log and apply the source flags (in place).

    True for a snapshot of a Kafka source of several topics: its partitions are topic-partitions.
    """
    where = "source" if "name" not in src else f"source.{src['name']}"
    by_topic = False
    if src.get("format") == "kafka":
        by_topic = _kafka_snapshot(src, where, input_path)
    if input_path is not None:
        check_input(input_path)
        src["path"] = str(Path(input_path).absolute())
        what = "INPUT"
    elif "path" in src:
        src["path"] = str(base / src["path"]) if not Path(src["path"]).is_absolute() else src["path"]
        if "://" not in src["path"]:
            check_input(src["path"], f"{where}.path")
        what = f"{where}.path"
    else:
        raise ConfigError("INPUT is required (or --config with a source path)")
    for k, v in flags.items():
        if v is not None:
            src[k] = v
    if "format" not in src:
        by_name = input_format(src["path"])
        if by_name is None and Path(src["path"]).is_file():
            raise ConfigError(f"{what} {src['path']}: cannot tell its format from the extension; pass --format")
        src["format"] = by_name or "jsonl"
    if "event_time" not in src:
        raise ConfigError("--event-time is required (or --config with source.event_time)")
    if idle_timeout is not None:
        wm["idle_timeout"] = idle_timeout
    if partitions is not None:
        wm["partitions"] = split(partitions)
    return by_topic


def _kafka_snapshot(src: dict[str, Any], where: str, input_path: str | None) -> bool:
    """A Kafka source read as files of its records (in place): the value's fields and the ``kafka_*`` columns.

    A snapshot holds the rows as the engine reads them (``io/kafka.py``), so the roles are the record's
    columns; the files' own format and columns are read as any INPUT's (``--format``, inference).
    True when the source reads several topics: then ``kafka_topic`` names each row's topic-partition
    with ``kafka_partition``, as the engine's generators do (ADR 0043).
    """
    if input_path is None:
        raise ConfigError(
            f'{where}.format = "kafka": a replay reads files, not the topic: pass a snapshot of it as INPUT '
            f"(rows of the value's fields and the record's {KAFKA_PARTITION}, {KAFKA_OFFSET} and "
            f"{KAFKA_TIMESTAMP} columns, e.g. lowwater whatif snapshot/ --config ...)")
    by_topic = several_topics(subscription(where, src))
    kept = ("name", "event_time", "time_unit", "time_zone", "watermark")
    for k in [k for k in src if k not in kept]:
        del src[k]
    src.update(partition=KAFKA_PARTITION, offset=KAFKA_OFFSET, arrival_time=KAFKA_TIMESTAMP)
    return by_topic


def _window(win: dict[str, Any], window: str | None, slide: str | None, gap: str | None, key: str | None) -> None:
    if gap is not None:
        if window is not None or slide is not None:
            raise ConfigError("--gap (session windows) cannot be combined with --window/--slide")
        for k in ("size", "slide", "offset"):
            win.pop(k, None)
        win["type"] = "session"
        win["gap"] = gap
    if window is not None:
        win.pop("gap", None)
        win["size"] = window
        win["type"] = "hopping" if slide else "tumbling"
    if slide is not None:
        win["slide"] = slide
        win["type"] = "hopping"
    if win.get("type") != "session":
        win.setdefault("size", "10s")
    if key is not None:
        win["key"] = split(key)
    win.pop("aggregations", None)


def replay_config(
    input_path: str | None,
    config: Path | None,
    fmt: str | None,
    event_time: str | None,
    arrival_time: str | None,
    partition: str | None,
    offset: str | None,
    key: str | None,
    time_unit: str | None,
    window: str | None,
    slide: str | None,
    idle_timeout: str | None,
    partitions: str | None,
    gap: str | None = None,
    several: bool = True,
) -> PipelineConfig:
    """A pipeline configuration for the replay (see the module for INPUT's rules).

    ``several``: whether the command reads several sources (``whatif``) or one (``delays``).
    """
    data, base = _load(config)
    options = {"format": fmt, "event_time": event_time, "arrival_time": arrival_time, "partition": partition,
               "offset": offset, "time_unit": time_unit, "key": key, "window": window, "slide": slide,
               "idle_timeout": idle_timeout, "partitions": partitions, "gap": gap}
    return replay_of(data, base, input_path, options, several)


REPLAY_FLAGS = ("format", "event_time", "arrival_time", "partition", "offset", "time_unit")


def replay_of(data: dict[str, Any], base: Path, input_path: str | None, options: dict[str, str | None],
              several: bool = True) -> PipelineConfig:
    """:func:`replay_config` of a configuration dict (the file's, or a Python pipeline's: changed in place).

    ``options``: the flags by :func:`replay_config`'s names without ``fmt`` (``format``); a missing one is unset.
    """
    flags = {k: options.get(k) for k in REPLAY_FLAGS}
    idle_timeout, partitions = options.get("idle_timeout"), options.get("partitions")
    tables = data.get("source")
    by_topic = False
    if isinstance(tables, list) and len(tables) > 1 and all(isinstance(t, dict) for t in tables):
        names = ", ".join(str(t.get("name", "?")) for t in tables)
        if not several:
            raise ConfigError(f"--config has {len(tables)} sources ({names}); this command reads one source only")
        if input_path is not None:
            raise ConfigError(f"INPUT {input_path}: --config has {len(tables)} sources ({names}), each read from "
                              "its own source.<name>.path; leave out INPUT")
        given = [f"--{k.replace('_', '-')}" for k, v in {**flags, "idle_timeout": idle_timeout,
                                                         "partitions": partitions}.items() if v is not None]
        if given:
            raise ConfigError(f"{', '.join(given)}: --config has {len(tables)} sources ({names}); "
                              "set these keys in each [[source]] table")
        for t in tables:
            path = t.get("path")
            if isinstance(path, str) and "://" not in path:
                check_input(path if Path(path).is_absolute() else str(base / path), f"source.{t.get('name')}.path")
    elif isinstance(tables, list) and len(tables) == 1 and isinstance(tables[0], dict):
        by_topic = _one_log(tables[0], tables[0].setdefault("watermark", {}), input_path, base, flags, idle_timeout,
                            partitions)
    else:
        src = data.setdefault("source", {})
        if not isinstance(src, dict):
            raise ConfigError("[source] must be a table, or [[source]] tables (one per source)")
        by_topic = _one_log(src, data.setdefault("watermark", {}), input_path, base, flags, idle_timeout, partitions)
    _window(data.setdefault("window", {}), options.get("window"), options.get("slide"), options.get("gap"),
            options.get("key"))
    data.setdefault("output", {"path": "whatif-unused"})
    data.pop("late", None)
    cfg = parse_config(data, base_dir=base)
    if by_topic:  # a snapshot of several topics: topic-partitions, declared ones too (ADR 0043)
        src_ = replace(cfg.source, topic_column=KAFKA_TOPIC)
        check_strategy(src_, src_.watermark, src_.watermark_key)
        cfg = replace(cfg, sources=(src_,))
    return cfg

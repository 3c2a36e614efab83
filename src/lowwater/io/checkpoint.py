"""What a checkpoint accepts on a restart: the same configuration, and no input after a drain.

A checkpoint's state and outputs were computed with one configuration.
Restarting it with a different window size, key, watermark bound, ... would
mix two pipelines in one set of outputs, silently. So the first run stores a
**fingerprint** -- a flat dict of named keys (``window.size``, ``source.schema``,
...), each rendered as a string -- in ``<checkpoint>/lowwater/fingerprint.json``,
and every later run compares its own key by key: a change refuses with one
line naming the key, its old and new values and how to start fresh.
``lowwater reconcile`` reads the same fingerprint (:func:`check_outputs_match`)
and refuses a configuration the outputs were not computed with.

Only what shapes state and outputs is fingerprinted (:func:`fingerprint`):
the source (format, path, schema, column roles, time unit, time zone), the watermark
settings, the window (type, size, slide, offset, gap, allowed lateness, keys,
aggregations in their order, accumulation) and the early trigger. Everything
else -- Spark settings, ``max_files_per_batch``, ``trigger.interval``,
``late.policy``, the PostgreSQL sink and its credentials -- may change between
runs. A new key is one more entry in the dict; ``[[source]]`` tables give
``source.<name>.…`` keys (:func:`fingerprint`).

A **drained** checkpoint (``--drain``: the input was declared finished, ``W =
+inf``) refuses a micro-batch with rows (:func:`admit_after_drain`) unless the
run continues explicitly (``--after-drain``); the rows are then judged against
``W = +inf``, so they are all too late, with ``core.lateness.DRAINED_REASON``.
"""

from __future__ import annotations

import json
import logging
from typing import Protocol

from lowwater.config import ConfigError, PipelineConfig, SourceConfig, describe_generator, describe_strategy
from lowwater.time import format_duration_us

log = logging.getLogger("lowwater")

FINGERPRINT_FILE = "fingerprint.json"
FINGERPRINT_VERSION = 1


class DrainedInputError(ConfigError):
    """New rows reached a drained checkpoint (one line, exit 2, like a configuration error)."""


class TextFiles(Protocol):
    """What the fingerprint needs from :class:`lowwater.runtime.fs.HadoopFS`."""

    def exists(self, path: str) -> bool: ...
    def read_text(self, path: str) -> str: ...
    def write_text_atomic(self, path: str, text: str) -> None: ...


def start_fresh(cfg: PipelineConfig) -> str:
    """The advice every refusal ends with."""
    return (f"to start fresh, use a new output.path, or delete {cfg.output.checkpoint} "
            f"(and the outputs under {cfg.output.path})")


def _dur(us: int | None) -> str:
    if us is None:
        return "unset"
    return format_duration_us(us) if us else "0s"


def _opt(value: str | None) -> str:
    return "unset" if value is None else value


def _partition(src: SourceConfig) -> str:
    """The partition role; a Kafka source of several topics names it per topic (ADR 0043).

    A checkpoint of such a source written when its generators were per partition number
    says the bare column: it is refused (one line) rather than remapped.
    """
    if src.topic_column:
        return f"{src.partition} of each topic (topic-partition)"
    return _opt(src.partition)


def fingerprint(cfg: PipelineConfig, schema: str | dict[str, str]) -> dict[str, str]:
    """Every setting that shapes state and outputs, as named string values.

    ``schema`` is the input schema the run reads (``StructType.simpleString()``):
    one string for a single ``[source]``, or a dict source name → schema string
    for ``[[source]]`` tables (a single string is accepted when there is one source).

    A single ``[source]`` gives the keys it always gave (``source.path``,
    ``watermark.max_out_of_orderness``, ...), so existing checkpoints are still
    accepted; a strategy other than bounded adds ``watermark.strategy``.
    ``[[source]]`` tables give ``source.<name>.<key>`` per source, with the
    whole strategy as one text in ``source.<name>.watermark``, and
    ``source.path`` lists the sources' names: it is the key both layouts share,
    so switching between them, or adding or removing a source, is refused.
    """
    keys = _single_source_keys(cfg, schema) if not cfg.named_sources else _named_source_keys(cfg, schema)
    if cfg.join is not None:  # only a join pipeline has these keys: other fingerprints are unchanged
        j = cfg.join
        keys["join"] = (f"{j.left} x {j.right} on {', '.join(j.on)} within "
                        f"[{j.bounds.lower_us}, {j.bounds.upper_us}] us, {j.type.value}, "
                        f"columns {list(j.left_columns)} / {list(j.right_columns)}")
        if j.kind != "interval":  # a temporal join (core/temporal_join.py)
            keys["join"] = f"{j.kind.value} " + keys["join"]
        if j.window is not None:  # the window after the join (config/join_window.py)
            w = j.window
            keys["join"] += (f"; then {w.type} {_dur(w.size_us)} slide {_dur(w.slide_us)} offset {_dur(w.offset_us)} "
                             f"lateness {_dur(w.allowed_lateness_us)} key {list(w.key)} "
                             f"aggregations {', '.join(f'{a.name} = {a.text}' for a in w.aggregations)}, "
                             f"{w.accumulation}")
    win, early = cfg.window, cfg.early
    return {
        **keys,
        "window.type": win.type,
        "window.size": _dur(win.size_us) if not win.is_session else "unset",
        "window.slide": _dur(win.slide_us),
        "window.offset": _dur(win.offset_us),
        "window.gap": _dur(win.gap_us),
        "window.allowed_lateness": _dur(win.allowed_lateness_us),
        "window.key": ", ".join(win.key) or "unset",
        "window.aggregations": ", ".join(f"{a.name} = {a.text}" for a in win.aggregations) or "unset",
        "window.accumulation": win.accumulation,
        "trigger.early": "unset" if early is None else (
            f"every {early.every_rows} rows" if early.every_rows is not None else f"every {_dur(early.every_us)}"),
    }


def _schema_of(schema: str | dict[str, str], src: SourceConfig) -> str:
    if isinstance(schema, str):
        return schema
    if src.name not in schema and len(schema) == 1:
        return next(iter(schema.values()))
    return schema[src.name]


def _single_source_keys(cfg: PipelineConfig, schema: str | dict[str, str]) -> dict[str, str]:
    src, wm = cfg.source, cfg.watermark
    keys = {
        "source.format": src.format,
        "source.path": src.path,
        "source.schema": _schema_of(schema, src),
        "source.event_time": src.event_time,
        "source.partition": _partition(src),
        "source.offset": _opt(src.offset),
        "source.arrival_time": _opt(src.arrival_time),
        "source.time_unit": src.time_unit,
        **({"source.time_zone": src.zone} if src.zone != "UTC" else {}),
        "watermark.max_out_of_orderness": _dur(wm.max_out_of_orderness_us),
        "watermark.out_of_orderness_by_partition": ", ".join(
            f"{p}={_dur(b)}" for p, b in sorted(wm.per_partition_us)) or "unset",
        "watermark.idle_timeout": _dur(wm.idle_timeout_us),
        "watermark.partitions": ", ".join(sorted(wm.declared_partitions)) or "unset",
        "watermark.max_future_skew": _dur(wm.max_future_skew_us),
    }
    if wm.kind != "bounded":  # only then, so a bounded checkpoint's fingerprint is what it always was
        # A key both sides have must change, or a switch from bounded would go unnoticed (new keys are not compared).
        keys["watermark.max_out_of_orderness"] = f"unset (strategy = {wm.kind})"
        keys["watermark.strategy"] = describe_generator(wm)
    return keys


def _named_source_keys(cfg: PipelineConfig, schema: str | dict[str, str]) -> dict[str, str]:
    keys = {"source.path": "[[source]] " + ", ".join(s.name for s in cfg.sources)}
    for src in cfg.sources:
        keys.update({
            src.key("format"): src.format,
            src.key("path"): src.path,
            src.key("schema"): _schema_of(schema, src),
            src.key("event_time"): src.event_time,
            src.key("partition"): _partition(src),
            src.key("offset"): _opt(src.offset),
            src.key("arrival_time"): _opt(src.arrival_time),
            src.key("time_unit"): src.time_unit,
            **({src.key("time_zone"): src.zone} if src.zone != "UTC" else {}),
            src.key("watermark"): describe_strategy(src.watermark),
        })
    return keys


# Keys written only when not at their default (so older fingerprints stay as they were): absent means the default.
ABSENT_MEANS = {"time_zone": "UTC"}


def _value(fp: dict[str, str], key: str) -> str | None:
    return fp.get(key, ABSENT_MEANS.get(key.rsplit(".", 1)[-1]))


def differences(saved: dict[str, str], current: dict[str, str]) -> list[str]:
    """Keys whose values differ, in the current fingerprint's order (keys new on either side are not compared,
    except those of :data:`ABSENT_MEANS`, whose absence is their default)."""
    keys = [*current, *[k for k in saved if k not in current and k.rsplit(".", 1)[-1] in ABSENT_MEANS]]
    out = []
    for k in keys:
        old, new = _value(saved, k), _value(current, k)
        if old is not None and new is not None and old != new:
            out.append(k)
    return out


def _saved(fs: TextFiles, path: str, cfg: PipelineConfig) -> dict[str, str]:
    try:
        return json.loads(fs.read_text(path))["keys"]
    except (ValueError, KeyError, TypeError):
        msg = f"output.checkpoint: {path} is damaged (not a lowwater fingerprint); {start_fresh(cfg)}"
        raise ConfigError(msg) from None


def _refuse_changes(saved: dict[str, str], current: dict[str, str], what: str, advice: str) -> None:
    """One line naming the first changed key, its old and new values, and ``advice``."""
    changed = differences(saved, current)
    if changed:
        key = changed[0]
        more = f" (also changed: {', '.join(changed[1:])})" if len(changed) > 1 else ""
        msg = (f"{key}: changed from {_value(saved, key)!r} to {_value(current, key)!r} since this checkpoint was "
               f"started{more}; "
               f"{what} computed with the old value; {advice}")
        raise ConfigError(msg)


def check_fingerprint(fs: TextFiles, lw_dir: str, cfg: PipelineConfig, current: dict[str, str], started: bool) -> None:
    """Refuse an incompatible change of a started checkpoint; store the fingerprint otherwise.

    ``started``: the checkpoint has planned or committed input (Spark offsets or a
    manifest). Before that nothing was computed, so the fingerprint is (re)written.
    """
    path = f"{lw_dir.rstrip('/')}/{FINGERPRINT_FILE}"
    doc = {"version": FINGERPRINT_VERSION, "keys": current}
    if not started or not fs.exists(path):
        if started:
            log.warning("%s: no configuration fingerprint (a checkpoint of an older lowwater): adopting this "
                        "run's configuration; later changes are checked against it", cfg.output.checkpoint)
        fs.write_text_atomic(path, json.dumps(doc, indent=2, sort_keys=True))
        return
    saved = _saved(fs, path, cfg)
    _refuse_changes(saved, current, "its state and outputs were", start_fresh(cfg))
    added = [k for k in current if k not in saved]
    if added:  # a newer lowwater fingerprints more: record the new keys as they are now
        log.warning("%s: recording fingerprint keys this checkpoint did not have: %s",
                    cfg.output.checkpoint, ", ".join(added))
        fs.write_text_atomic(path, json.dumps({"version": FINGERPRINT_VERSION, "keys": {**saved, **current}},
                                              indent=2, sort_keys=True))


def check_outputs_match(fs: TextFiles, lw_dir: str, cfg: PipelineConfig, current: dict[str, str]) -> None:
    """For a job that reads a pipeline's outputs (``reconcile``): refuse a configuration that differs from the
    one they were computed with, read-only (a checkpoint with no fingerprint yet has nothing to compare)."""
    path = f"{lw_dir.rstrip('/')}/{FINGERPRINT_FILE}"
    if fs.exists(path):
        _refuse_changes(_saved(fs, path, cfg), current, "the pipeline's outputs were",
                        "use the configuration the stream runs with")


def admit_after_drain(cfg: PipelineConfig, rows: int, after_drain: bool) -> None:
    """A micro-batch with ``rows`` reached a drained checkpoint: refuse, or say how it will be judged."""
    if not after_drain:
        msg = (f"output.checkpoint: {cfg.output.checkpoint} was drained (the input was declared finished, "
               f"W = +inf) and {rows} new row(s) arrived; nothing was processed. Rerun with --after-drain to "
               f"judge them against W = +inf (all too late, reason: input declared finished), or {start_fresh(cfg)}")
        raise DrainedInputError(msg)
    log.warning("%d new row(s) after the drain (--after-drain): judged against W = +inf, so all too late",
                rows)

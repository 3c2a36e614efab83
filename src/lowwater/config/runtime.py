"""``[trigger]``, ``[late]`` and ``[spark]``: when steps run, what happens to late rows, Spark's settings."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from lowwater.config.errors import ConfigError, duration, text
from lowwater.core.lateness import LatePolicy
from lowwater.core.triggers import EarlyTrigger

TRIGGER_KEYS = frozenset({"early", "interval"})
LATE_KEYS = frozenset({"policy"})
SPARK_KEYS = frozenset({"master", "app_name", "conf", "shuffle_partitions"})


@dataclass(frozen=True)
class SparkConfig:
    master: str = "local[*]"
    app_name: str = "lowwater"
    conf: dict[str, str] = field(default_factory=dict)
    shuffle_partitions: int = 4


def parse_trigger(trig: dict[str, Any]) -> tuple[EarlyTrigger | None, int | None]:
    """``[trigger]``: the early firings of open windows, and the continuous runs' step interval (µs)."""
    early = None
    if "early" in trig:
        try:
            early = EarlyTrigger.parse(trig["early"])
        except ValueError as e:
            msg = f"trigger.early: {e}"
            raise ConfigError(msg) from None
    interval = None
    if "interval" in trig:
        interval = duration("trigger", "interval", trig["interval"])
        if interval < 1000:
            msg = f"trigger.interval: must be at least 1ms, got {trig['interval']!r}"
            raise ConfigError(msg)
    return early, interval


def parse_late(late: dict[str, Any]) -> LatePolicy:
    """``[late] policy``: drop too-late rows, or write them to ``late/`` (the default)."""
    raw = late.get("policy", "side_output")
    try:
        return LatePolicy(raw)
    except ValueError:
        msg = f"late.policy: {raw!r} is not one of drop, side_output"
        raise ConfigError(msg) from None


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


def parse_spark(sp: dict[str, Any]) -> SparkConfig:
    """``[spark]`` and ``[spark.conf]`` (only ``spark.*`` settings)."""
    conf = sp.get("conf", {})
    if not isinstance(conf, dict):
        msg = "spark.conf: expected a table of spark.* settings"
        raise ConfigError(msg)
    conf = _flatten(conf)
    for k in conf:
        if not str(k).startswith("spark."):
            msg = f"spark.conf.{k}: only spark.* settings are allowed"
            raise ConfigError(msg)
    return SparkConfig(
        master=text("spark", "master", sp.get("master", "local[*]")),
        app_name=text("spark", "app_name", sp.get("app_name", "lowwater")),
        conf={str(k): str(v) for k, v in conf.items()},
        shuffle_partitions=int(sp.get("shuffle_partitions", 4)),
    )

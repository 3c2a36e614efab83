"""``[trigger]``, ``[late]`` and ``[spark]``: when steps run, what happens to late rows, Spark's settings.

``[spark.s3]`` says where ``s3a://`` paths live (an S3-compatible endpoint, path-style
addressing, credentials); ``io/s3.py`` turns it into Hadoop's ``fs.s3a.*`` settings.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from lowwater.config.errors import ConfigError, check_keys, duration, text
from lowwater.core.lateness import LatePolicy
from lowwater.core.triggers import EarlyTrigger

TRIGGER_KEYS = frozenset({"early", "interval"})
LATE_KEYS = frozenset({"policy"})
SPARK_KEYS = frozenset({"master", "app_name", "conf", "shuffle_partitions", "s3"})
S3_KEYS = frozenset({"endpoint", "region", "path_style_access", "access_key", "secret_key"})
# The environment wins over the file, so a secret need not live in the TOML (S3A reads the same two).
S3_KEY_ENV = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")


@dataclass(frozen=True)
class S3Config:
    """``[spark.s3]``: the store behind ``s3a://`` paths (unset: AWS S3 and S3A's own credential chain)."""

    endpoint: str | None = None
    region: str | None = None
    path_style_access: bool | None = None
    access_key: str | None = field(default=None, repr=False)
    secret_key: str | None = field(default=None, repr=False)

    def hadoop_conf(self) -> dict[str, str]:
        """The ``fs.s3a.*`` settings this table stands for (credentials only when both are given)."""
        out: dict[str, str] = {}
        if self.endpoint is not None:
            out["fs.s3a.endpoint"] = self.endpoint
            if self.endpoint.startswith("http://"):
                out["fs.s3a.connection.ssl.enabled"] = "false"
        if self.region is not None:
            out["fs.s3a.endpoint.region"] = self.region
        if self.path_style_access is not None:
            out["fs.s3a.path.style.access"] = str(self.path_style_access).lower()
        if self.access_key and self.secret_key:
            out["fs.s3a.access.key"] = self.access_key
            out["fs.s3a.secret.key"] = self.secret_key
        return out


@dataclass(frozen=True)
class SparkConfig:
    master: str = "local[*]"
    app_name: str = "lowwater"
    conf: dict[str, str] = field(default_factory=dict)
    shuffle_partitions: int = 4
    s3: S3Config = S3Config()


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


def parse_s3(raw: Any) -> S3Config:  # noqa: ANN401 - a TOML value
    """``[spark.s3]``: each key a string but ``path_style_access`` (a boolean)."""
    if not isinstance(raw, dict):
        msg = "spark.s3: expected a table (endpoint, region, path_style_access, access_key, secret_key)"
        raise ConfigError(msg)
    check_keys("spark.s3", raw, S3_KEYS)
    style = raw.get("path_style_access")
    if style is not None and not isinstance(style, bool):
        msg = f"spark.s3.path_style_access: expected true or false, got {style!r}"
        raise ConfigError(msg)
    strings = {k: text("spark.s3", k, raw[k]) for k in ("endpoint", "region", "access_key", "secret_key") if k in raw}
    endpoint = strings.get("endpoint")
    if endpoint is not None and not endpoint.startswith(("http://", "https://")):
        msg = f"spark.s3.endpoint: expected an http:// or https:// URL, got {endpoint!r}"
        raise ConfigError(msg)
    key = os.environ.get(S3_KEY_ENV[0]) or strings.get("access_key")
    secret = os.environ.get(S3_KEY_ENV[1]) or strings.get("secret_key")
    if bool(key) != bool(secret):
        msg = "spark.s3: access_key and secret_key go together (or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)"
        raise ConfigError(msg)
    return S3Config(endpoint, strings.get("region"), style, key, secret)


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
        s3=parse_s3(sp.get("s3", {})),
        master=text("spark", "master", sp.get("master", "local[*]")),
        app_name=text("spark", "app_name", sp.get("app_name", "lowwater")),
        conf={str(k): str(v) for k, v in conf.items()},
        shuffle_partitions=_partitions(sp.get("shuffle_partitions", 4)),
    )


def _partitions(value: Any) -> int:
    """``[spark] shuffle_partitions``: a whole number, 1 or more (digits in a string are taken, as before)."""
    try:
        n = None if isinstance(value, (bool, float)) else int(value)
    except (TypeError, ValueError):
        n = None
    if n is None or n < 1:
        msg = f"spark.shuffle_partitions: expected a whole number, 1 or more, got {value!r}"
        raise ConfigError(msg)
    return n

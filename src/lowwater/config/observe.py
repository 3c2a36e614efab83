"""``[observe]`` and ``[alerts]``: where the metrics model (``observe/model.py``) goes besides ``metrics/``.

Every key is optional and nothing is exported or evaluated by default, so an
existing configuration runs exactly as before; an ``[alerts]`` section, even
empty, turns the alert rules on with their defaults (``core/alerts.py``).
None of these keys is fingerprinted: they may change between runs of one
checkpoint.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lowwater.config.errors import ConfigError, check_keys, duration, table, text
from lowwater.core.alerts import AlertRules

OBSERVE_KEYS = frozenset({"prometheus_port", "prometheus_host", "prometheus_textfile", "pipeline", "spark_progress",
                          "spark_progress_interval"})
DEFAULT_PROGRESS_INTERVAL_US = 10_000_000  # Flink's metric reporters default to 10 s too


@dataclass(frozen=True)
class ObserveConfig:
    """The exporters: a Prometheus endpoint (port 0 = any free port) and/or textfile, and Spark's own progress."""

    prometheus_port: int | None = None
    prometheus_host: str = "127.0.0.1"
    # Rewritten (atomically) after every committed step, for node_exporter's textfile collector: a --once run
    # ends before any scrape of its endpoint would see its last step (docs/observability.md, Prometheus).
    prometheus_textfile: str | None = None
    pipeline: str | None = None  # the `pipeline` label; default: the output path
    spark_progress: bool = False  # the figures as observed metrics of a companion query (observe/spark_progress.py)
    spark_progress_interval_us: int = DEFAULT_PROGRESS_INTERVAL_US  # the companion's trigger


def parse_observe(raw: Any, base: Path | None = None) -> ObserveConfig:
    """``[observe]``: each error names its key; a relative ``prometheus_textfile`` resolves against ``base``."""
    t = table("observe", raw)
    check_keys("observe", t, OBSERVE_KEYS)
    port = t.get("prometheus_port")
    if port is not None and (isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535):
        msg = f"observe.prometheus_port: expected a port number 0..65535 (0: any free port), got {port!r}"
        raise ConfigError(msg)
    progress = t.get("spark_progress", False)
    if not isinstance(progress, bool):
        msg = f"observe.spark_progress: expected true or false, got {progress!r}"
        raise ConfigError(msg)
    interval = duration("observe", "spark_progress_interval",
                        t.get("spark_progress_interval", "10s"))
    if interval < 1_000_000:
        msg = f"observe.spark_progress_interval: expected at least 1s, got {t['spark_progress_interval']!r}"
        raise ConfigError(msg)
    textfile = None
    if "prometheus_textfile" in t:
        textfile = text("observe", "prometheus_textfile", t["prometheus_textfile"])
        if not textfile.endswith(".prom"):
            msg = (f"observe.prometheus_textfile: {textfile!r}: node_exporter's textfile collector reads only "
                   "files named *.prom")
            raise ConfigError(msg)
        textfile = str((base or Path(".")) / textfile)
        if not Path(textfile).parent.is_dir():
            msg = f"observe.prometheus_textfile: {textfile}: its directory does not exist"
            raise ConfigError(msg)
    return ObserveConfig(
        prometheus_port=port,
        prometheus_textfile=textfile,
        prometheus_host=text("observe", "prometheus_host", t.get("prometheus_host", "127.0.0.1")),
        pipeline=text("observe", "pipeline", t["pipeline"]) if "pipeline" in t else None,
        spark_progress=progress,
        spark_progress_interval_us=interval,
    )


ALERT_KEYS = frozenset({
    "lag_factor", "lag_steps", "lag_min_steps", "late_rate", "late_steps", "spread_steps", "idle_for", "holding_for",
    "regression", "dead_letter_rate", "webhook", "webhook_timeout", "webhook_retries",
})


@dataclass(frozen=True)
class AlertsConfig:
    """``[alerts]``: the rules' thresholds and an optional webhook (JSON POST of every firing and resolving)."""

    rules: AlertRules = AlertRules()
    webhook: str | None = None
    webhook_timeout_s: float = 2.0
    webhook_retries: int = 3


def _number(key: str, value: Any, minimum: float, integer: bool = False) -> float | int | None:
    """A threshold, or ``false`` (the rule is off); the error names ``alerts.key``."""
    if value is False:
        return None
    kind = int if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kind) or value < minimum:
        what = "an integer" if integer else "a number"
        msg = f"alerts.{key}: expected {what} >= {minimum:g} (or false to switch the rule off), got {value!r}"
        raise ConfigError(msg)
    return value


def parse_alerts(raw: Any) -> AlertsConfig | None:
    """``[alerts]`` (None when the section is absent: no rule is evaluated)."""
    if raw is None:
        return None
    t = table("alerts", raw)
    check_keys("alerts", t, ALERT_KEYS)
    d = AlertRules()
    kw: dict[str, Any] = {}
    for key, minimum, integer in (("lag_factor", 1.0, False), ("late_rate", 0.0, False),
                                  ("dead_letter_rate", 0.0, False), ("spread_steps", 1, True)):
        if key in t:
            kw[key] = _number(key, t[key], minimum, integer)
    for key in ("lag_steps", "lag_min_steps", "late_steps"):
        if key in t:
            v = _number(key, t[key], 1, integer=True)
            if v is None:
                msg = f"alerts.{key}: expected an integer >= 1, got false"
                raise ConfigError(msg)
            kw[key] = v
    for key, field_ in (("idle_for", "idle_for_us"), ("holding_for", "holding_for_us")):
        if key in t:
            kw[field_] = None if t[key] is False else duration("alerts", key, t[key])
    if "regression" in t:
        if not isinstance(t["regression"], bool):
            msg = f"alerts.regression: expected true or false, got {t['regression']!r}"
            raise ConfigError(msg)
        kw["regression"] = t["regression"]
    webhook = text("alerts", "webhook", t["webhook"]) if "webhook" in t else None
    if webhook is not None and not webhook.startswith(("http://", "https://")):
        msg = f"alerts.webhook: expected an http:// or https:// URL, got {webhook!r}"
        raise ConfigError(msg)
    timeout = duration("alerts", "webhook_timeout", t.get("webhook_timeout", "2s")) / 1e6
    retries = _number("webhook_retries", t.get("webhook_retries", 3), 0, integer=True)
    if timeout <= 0:
        msg = "alerts.webhook_timeout: must be positive"
        raise ConfigError(msg)
    return AlertsConfig(rules=AlertRules(**{**d.__dict__, **kw}), webhook=webhook, webhook_timeout_s=timeout,
                        webhook_retries=int(retries or 0))

"""``[source] format = "kafka"``: the keys of a Kafka topic read with Spark's own connector.

A Kafka source has no path and no column roles to choose: the record's
``partition`` is the source partition, its ``offset`` the offset and its
``timestamp`` the arrival time (SEMANTICS.md §1). They reach the engine as the
columns :data:`KAFKA_COLUMNS` next to the fields parsed from the value, so
late rows and dead letters carry the topic, partition and offset they came from.

    [source]
    format = "kafka"
    bootstrap_servers = "broker1:9092,broker2:9092"
    topic = "payments"                    # or topics = [...], or subscribe_pattern = "pay.*"
    starting_offsets = "earliest"         # earliest | latest | {payments = {"0" = 42, "1" = -2}}
    max_offsets_per_trigger = 10000       # optional
    fail_on_data_loss = true              # Spark's failOnDataLoss
    broker_timeout = "3m"                 # optional: how long a broker that does not answer is waited for
    value_format = "json"                 # json | csv | raw (the value as the string column `value`)
    schema = "id STRING, amount DOUBLE, event_time DOUBLE"
    event_time = "event_time"             # a field of the value, or "kafka_timestamp"
    kafka = { "security.protocol" = "SASL_SSL", "sasl.mechanism" = "PLAIN" }   # passed as kafka.<key>

Option values under ``kafka`` may hold secrets: they never appear in a
message, a log line or the checkpoint's fingerprint.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from lowwater.config.errors import ConfigError, duration, text

VALUE_FORMATS = ("json", "csv", "raw")
KAFKA_TOPIC, KAFKA_PARTITION, KAFKA_OFFSET, KAFKA_TIMESTAMP, KAFKA_KEY = (
    "kafka_topic", "kafka_partition", "kafka_offset", "kafka_timestamp", "kafka_key",
)
# The record's own columns, after the value's fields: name -> Spark type.
KAFKA_COLUMNS = {
    KAFKA_TOPIC: "STRING", KAFKA_PARTITION: "INT", KAFKA_OFFSET: "BIGINT", KAFKA_TIMESTAMP: "TIMESTAMP",
    KAFKA_KEY: "STRING",
}
RAW_SCHEMA = "value STRING"
KAFKA_KEYS = frozenset({
    "format", "name", "bootstrap_servers", "topic", "topics", "subscribe_pattern", "starting_offsets",
    "max_offsets_per_trigger", "fail_on_data_loss", "value_format", "schema", "event_time", "time_unit", "kafka",
    "broker_timeout", "time_zone",
})
_ATTEMPTS = 3  # Spark's default fetchOffset.numRetries
# Options lowwater sets itself: passing them under `kafka` would break the offsets it checkpoints.
_OWN = {"group.id", "auto.offset.reset", "key.deserializer", "value.deserializer", "enable.auto.commit",
        "interceptor.classes", "key.serializer", "value.serializer"}


@dataclass(frozen=True)
class KafkaSettings:
    """Where and how a Kafka source subscribes (Spark's Kafka options, see :meth:`options`)."""

    bootstrap_servers: str
    subscribe: tuple[str, str]  # ("subscribe", "a,b") | ("subscribePattern", "pay.*")
    starting_offsets: str = "earliest"
    max_offsets_per_trigger: int | None = None
    fail_on_data_loss: bool = True
    value_format: str = "json"
    broker_timeout_ms: int | None = None  # unset: Spark's and Kafka's own timeouts (docs/kafka.md)
    # kafka.* pass-through, (key, value) pairs; values may be secrets: kept out of repr.
    client: tuple[tuple[str, str], ...] = field(default=(), repr=False)

    @property
    def topics_text(self) -> str:
        """What is read, as a message shows it: ``payments`` or ``pattern pay.*``."""
        kind, value = self.subscribe
        return value if kind == "subscribe" else f"pattern {value}"

    @property
    def several_topics(self) -> bool:
        """Whether the source can deliver more than one topic: several topics, or a pattern (ADR 0043).

        Then its partitions are named ``topic-partition``; a single topic's keep their numbers.
        """
        return several_topics(self.subscribe)

    def options(self) -> dict[str, str]:
        """The options of ``spark.readStream.format("kafka")``."""
        opts = {
            "kafka.bootstrap.servers": self.bootstrap_servers,
            self.subscribe[0]: self.subscribe[1],
            "startingOffsets": self.starting_offsets,
            "failOnDataLoss": "true" if self.fail_on_data_loss else "false",
            "includeHeaders": "false",
        }
        if self.max_offsets_per_trigger is not None:
            opts["maxOffsetsPerTrigger"] = str(self.max_offsets_per_trigger)
        if self.broker_timeout_ms is not None:
            opts.update(broker_wait_options(self.broker_timeout_ms))
        opts.update({f"kafka.{k}": v for k, v in self.client})
        return opts


def settings_from_options(options: dict[str, str]) -> KafkaSettings | None:
    """The settings of a Kafka reader a user built (``spark.readStream.format("kafka").option(...)``).

    The inverse of :meth:`KafkaSettings.options` for what the engine asks the
    broker itself (``io/kafka_logs.py``: the servers, the topics, the client's
    ``kafka.*`` options); None without servers or a subscription. Spark's
    ``assign`` (``{"topic": [0, 1]}``) reads as a subscription to its topics.
    """
    low = {k.lower(): v for k, v in options.items()}  # Spark's option names ignore case
    servers = low.get("kafka.bootstrap.servers")
    subscribe: tuple[str, str] | None = None
    if low.get("subscribe"):
        subscribe = ("subscribe", ",".join(t.strip() for t in low["subscribe"].split(",") if t.strip()))
    elif low.get("subscribepattern"):
        subscribe = ("subscribePattern", low["subscribepattern"])
    elif low.get("assign"):
        try:
            topics = json.loads(low["assign"])
        except json.JSONDecodeError:
            topics = None
        if isinstance(topics, dict) and topics:
            subscribe = ("subscribe", ",".join(str(t) for t in topics))
    if not servers or subscribe is None:
        return None
    client = tuple(sorted((k[6:], v) for k, v in options.items()
                          if k.lower().startswith("kafka.") and k[6:].lower() not in {*_OWN, "bootstrap.servers"}))
    return KafkaSettings(bootstrap_servers=servers, subscribe=subscribe,
                         starting_offsets=low.get("startingoffsets", "latest"),
                         fail_on_data_loss=low.get("failondataloss", "true").lower() != "false", client=client)


def broker_wait_options(timeout_ms: int) -> dict[str, str]:
    """The connector's options that make a query wait about ``timeout_ms`` for a broker, then fail.

    Planning a micro-batch asks the broker for the latest offsets with Kafka's
    admin client; Spark's connector makes ``fetchOffset.numRetries`` (3)
    attempts, ``fetchOffset.retryIntervalMs`` (1 s) apart, each bounded by
    the client's ``default.api.timeout.ms``: a third of the timeout each
    (``request.timeout.ms`` may not exceed it). Reading a planned range on
    an executor waits up to ``kafkaConsumer.pollTimeoutMs`` for its records.
    """
    attempt_ms = max(1_000, timeout_ms // _ATTEMPTS)
    return {
        "fetchOffset.numRetries": str(_ATTEMPTS),
        "fetchOffset.retryIntervalMs": "1000",
        "kafka.default.api.timeout.ms": str(attempt_ms),
        "kafka.request.timeout.ms": str(min(30_000, attempt_ms)),
        "kafkaConsumer.pollTimeoutMs": str(timeout_ms),
    }


def _flatten(prefix: str, value: Any, out: dict[str, Any]) -> None:
    """TOML reads ``kafka.security.protocol = "x"`` as nested tables: back to dotted keys."""
    if isinstance(value, dict):
        for k, v in value.items():
            _flatten(f"{prefix}.{k}" if prefix else str(k), v, out)
    else:
        out[prefix] = value


def _starting_offsets(where: str, value: Any) -> str:
    if isinstance(value, str):
        if value in ("earliest", "latest"):
            return value
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            value = None
    if isinstance(value, dict) and value and all(
        isinstance(parts, dict) and all(str(p).lstrip("-").isdigit() and isinstance(o, int) and not isinstance(
            o, bool) for p, o in parts.items())
        for parts in value.values()
    ):
        return json.dumps({t: {str(p): o for p, o in parts.items()} for t, parts in value.items()})
    msg = (f"{where}.starting_offsets: expected \"earliest\", \"latest\" or per-partition offsets "
           f"{{topic = {{\"0\" = 42}}}} (-2 earliest, -1 latest), got {value!r}")
    raise ConfigError(msg)


def subscription(where: str, s: dict[str, Any]) -> tuple[str, str]:
    """What a ``[source]`` table subscribes to: ``("subscribe", "a,b")`` or ``("subscribePattern", "pay.*")``."""
    given = [k for k in ("topic", "topics", "subscribe_pattern") if k in s]
    if len(given) != 1:
        msg = f"{where}.topic: give exactly one of topic, topics or subscribe_pattern (got {len(given)})"
        raise ConfigError(msg)
    if given[0] == "topic":
        return ("subscribe", text(where, "topic", s["topic"]))
    if given[0] == "topics":
        topics = s["topics"]
        if not isinstance(topics, list) or not topics or not all(isinstance(t, str) and t for t in topics):
            msg = f"{where}.topics: expected a non-empty list of topic names, got {topics!r}"
            raise ConfigError(msg)
        return ("subscribe", ",".join(topics))
    return ("subscribePattern", text(where, "subscribe_pattern", s["subscribe_pattern"]))


def several_topics(subscribe: tuple[str, str]) -> bool:
    """Whether a subscription can deliver more than one topic: several topics, or a pattern (ADR 0043)."""
    kind, value = subscribe
    return kind != "subscribe" or "," in value


def parse_kafka(where: str, s: dict[str, Any]) -> tuple[KafkaSettings, str]:
    """The Kafka settings of one ``[source]`` table and the value's schema (``schema``, or ``value STRING``)."""
    for key in ("path", "partition", "offset", "arrival_time", "max_files_per_batch"):
        if key in s:
            msg = (f"{where}.{key}: not a key of a Kafka source (the record's partition, offset and timestamp are "
                   f"the partition, offset and arrival time; columns {KAFKA_PARTITION}, {KAFKA_OFFSET}, "
                   f"{KAFKA_TIMESTAMP})")
            raise ConfigError(msg)
    if "bootstrap_servers" not in s:
        msg = f"{where}.bootstrap_servers is required (host:port[,host:port...])"
        raise ConfigError(msg)
    servers = text(where, "bootstrap_servers", s["bootstrap_servers"])
    subscribe = subscription(where, s)
    mopt = s.get("max_offsets_per_trigger")
    if mopt is not None and (not isinstance(mopt, int) or isinstance(mopt, bool) or mopt < 1):
        msg = f"{where}.max_offsets_per_trigger: expected a positive integer, got {mopt!r}"
        raise ConfigError(msg)
    timeout_ms = None
    if "broker_timeout" in s:
        timeout_ms = duration(where, "broker_timeout", s["broker_timeout"]) // 1000
        if timeout_ms < 3_000:
            msg = f"{where}.broker_timeout: at least 3s (three attempts of 1s or more), got {s['broker_timeout']!r}"
            raise ConfigError(msg)
    fodl = s.get("fail_on_data_loss", True)
    if not isinstance(fodl, bool):
        msg = f"{where}.fail_on_data_loss: expected true or false, got {fodl!r}"
        raise ConfigError(msg)
    vfmt = s.get("value_format", "json")
    if vfmt not in VALUE_FORMATS:
        msg = f"{where}.value_format: {vfmt!r} is not one of {', '.join(VALUE_FORMATS)}"
        raise ConfigError(msg)
    if vfmt == "raw":
        if "schema" in s:
            msg = f"{where}.schema: a raw value is the one column `{RAW_SCHEMA}`; leave schema out"
            raise ConfigError(msg)
        schema = RAW_SCHEMA
    elif "schema" not in s:
        msg = f"{where}.schema is required for value_format = {vfmt!r} (e.g. \"id STRING, event_time DOUBLE\")"
        raise ConfigError(msg)
    else:
        schema = text(where, "schema", s["schema"])
    flat: dict[str, Any] = {}
    raw_client = s.get("kafka", {})
    if not isinstance(raw_client, dict):
        msg = f"{where}.kafka: expected a table of Kafka client options, e.g. {{ \"security.protocol\" = \"SSL\" }}"
        raise ConfigError(msg)
    _flatten("", raw_client, flat)
    client = []
    for k, v in flat.items():
        if k in _OWN or k == "bootstrap.servers":
            msg = f"{where}.kafka.{k}: set by lowwater or Spark's connector (offsets live in the checkpoint)"
            raise ConfigError(msg)
        if not isinstance(v, str | int | bool):
            msg = f"{where}.kafka.{k}: expected a string, number or boolean"  # the value may be a secret
            raise ConfigError(msg)
        client.append((k, str(v).lower() if isinstance(v, bool) else str(v)))
    settings = KafkaSettings(
        bootstrap_servers=servers,
        subscribe=subscribe,
        starting_offsets=_starting_offsets(where, s.get("starting_offsets", "earliest")),
        max_offsets_per_trigger=mopt,
        fail_on_data_loss=fodl,
        value_format=vfmt,
        broker_timeout_ms=timeout_ms,
        client=tuple(sorted(client)),
    )
    return settings, schema

"""``[source] format = "kafka"``: the keys, the options Spark's connector gets, one line per mistake."""

from __future__ import annotations

import json

import pytest

from lowwater.config import ConfigError, load_config

SOURCE = """
[source]
format = "kafka"
bootstrap_servers = "b1:9092,b2:9092"
topic = "payments"
schema = "id STRING, amount DOUBLE, event_time DOUBLE"
event_time = "event_time"
{extra}
"""

REST = """
[watermark]
max_out_of_orderness = "3s"

[window]
type = "tumbling"
size = "10s"
aggregations = { total = "sum(amount)" }

[output]
path = "out"
"""


def cfg(tmp_path, extra: str = "", source: str = SOURCE, overrides: list[str] | None = None):  # noqa: ANN201
    p = tmp_path / "p.toml"
    p.write_text(source.format(extra=extra) + REST)
    return load_config(p, overrides)


def test_a_kafka_source_has_the_records_roles_and_sparks_options(tmp_path):
    c = cfg(tmp_path, 'max_offsets_per_trigger = 500\nkafka = { "security.protocol" = "SASL_SSL", '
                      '"sasl.jaas.config" = "secret-pw-123" }')
    src = c.source
    assert (src.partition, src.offset, src.arrival_time) == ("kafka_partition", "kafka_offset", "kafka_timestamp")
    assert src.path == "kafka://payments" and src.schema == "id STRING, amount DOUBLE, event_time DOUBLE"
    opts = src.kafka.options()
    assert opts["kafka.bootstrap.servers"] == "b1:9092,b2:9092" and opts["subscribe"] == "payments"
    assert opts["startingOffsets"] == "earliest" and opts["failOnDataLoss"] == "true"
    assert opts["maxOffsetsPerTrigger"] == "500" and opts["kafka.security.protocol"] == "SASL_SSL"
    assert opts["kafka.sasl.jaas.config"] == "secret-pw-123"
    assert "secret-pw-123" not in repr(c)  # secrets pass through, never printed


def test_topics_patterns_offsets_and_dotted_client_keys(tmp_path):
    src = cfg(tmp_path, source=SOURCE.replace('topic = "payments"', 'topics = ["a", "b"]'),
              extra='starting_offsets = { a = { "0" = 42, "1" = -2 } }\nfail_on_data_loss = false\n'
                    'kafka.security.protocol = "SSL"').source
    opts = src.kafka.options()
    assert opts["subscribe"] == "a,b" and json.loads(opts["startingOffsets"]) == {"a": {"0": 42, "1": -2}}
    assert opts["failOnDataLoss"] == "false" and opts["kafka.security.protocol"] == "SSL"
    pattern = cfg(tmp_path, source=SOURCE.replace('topic = "payments"', 'subscribe_pattern = "pay.*"')).source
    assert pattern.kafka.options()["subscribePattern"] == "pay.*" and pattern.path == "kafka://pattern pay.*"
    raw = cfg(tmp_path, source=SOURCE.replace('schema = "id STRING, amount DOUBLE, event_time DOUBLE"\n', "")
              .replace('event_time = "event_time"', 'event_time = "kafka_timestamp"'),
              extra='value_format = "raw"').source
    assert raw.schema == "value STRING" and raw.event_time == "kafka_timestamp"
    over = cfg(tmp_path, overrides=["source.topic=other", 'source.kafka.client.id="lw"']).source.kafka.options()
    assert over["subscribe"] == "other" and over["kafka.client.id"] == "lw"


def test_a_users_reader_options_read_back_as_the_settings_they_come_from(tmp_path):
    from lowwater.config.kafka import settings_from_options

    src = cfg(tmp_path, source=SOURCE.replace('topic = "payments"', 'topics = ["a", "b"]'),
              extra='fail_on_data_loss = false\nkafka.security.protocol = "SSL"').source
    assert settings_from_options(src.kafka.options()) == src.kafka  # the inverse of options()
    user = settings_from_options({"Kafka.Bootstrap.Servers": "b1:9092", "SUBSCRIBEPATTERN": "pay.*",
                                  "kafka.group.id": "mine", "kafka.sasl.mechanism": "PLAIN"})
    assert user is not None and user.subscribe == ("subscribePattern", "pay.*") and user.bootstrap_servers == "b1:9092"
    assert user.client == (("sasl.mechanism", "PLAIN"),)  # the connector's own options stay its own
    assigned = settings_from_options({"kafka.bootstrap.servers": "b", "assign": '{"a": [0, 1], "b": [2]}'})
    assert assigned is not None and assigned.subscribe == ("subscribe", "a,b")
    assert settings_from_options({"subscribe": "a"}) is None  # no servers: not a reader lowwater can ask
    assert settings_from_options({"kafka.bootstrap.servers": "b"}) is None


@pytest.mark.parametrize(("edit", "message"), [
    (("bootstrap_servers = \"b1:9092,b2:9092\"\n", ""), "source.bootstrap_servers is required"),
    (("topic = \"payments\"", 'topic = "p"\ntopics = ["q"]'), "source.topic: give exactly one of"),
    (("topic = \"payments\"", 'topics = []'), "source.topics: expected a non-empty list"),
    (("format = \"kafka\"", 'format = "kafka"\npath = "x"'), "source.path: not a key of a Kafka source"),
    (("format = \"kafka\"", 'format = "kafka"\npartition = "p"'), "source.partition: not a key of a Kafka source"),
    (("format = \"kafka\"", 'format = "kafka"\nvalue_format = "avro"'), "source.value_format: 'avro' is not one"),
    (("format = \"kafka\"", 'format = "kafka"\nvalue_format = "raw"'), "source.schema: a raw value is the one"),
    (('schema = "id STRING, amount DOUBLE, event_time DOUBLE"\n', ""), "source.schema is required"),
    (("format = \"kafka\"", 'format = "kafka"\nstarting_offsets = "oldest"'), "source.starting_offsets: expected"),
    (("format = \"kafka\"", 'format = "kafka"\nmax_offsets_per_trigger = 0'), "source.max_offsets_per_trigger"),
    (("format = \"kafka\"", 'format = "kafka"\nfail_on_data_loss = "no"'), "source.fail_on_data_loss"),
    (("format = \"kafka\"", 'format = "kafka"\nkafka."group.id" = "g"'), "source.kafka.group.id: set by"),
    (("format = \"kafka\"", 'format = "kafka"\nbrokers = "x"'), "unknown key source.brokers"),
    (("format = \"kafka\"", 'format = "kafka"\nbroker_timeout = "2s"'), "source.broker_timeout: at least 3s"),
    (("format = \"kafka\"", 'format = "kafka"\nbroker_timeout = "soon"'), "source.broker_timeout: "),
    (('event_time = "event_time"', ""), "source.event_time is required"),
])
def test_kafka_errors_name_the_key(tmp_path, edit, message):
    with pytest.raises(ConfigError, match="^" + message.replace(".", r"\.").replace("*", r"\*")):
        cfg(tmp_path, source=SOURCE.replace(*edit))


def test_a_secret_in_a_bad_client_option_is_not_echoed(tmp_path):
    with pytest.raises(ConfigError) as e:
        cfg(tmp_path, extra='kafka."sasl.jaas.config" = ["secret-pw-123"]')
    assert "source.kafka.sasl.jaas.config" in str(e.value) and "secret-pw-123" not in str(e.value)


def test_kafka_among_several_sources_has_its_own_keys_and_watermark(tmp_path):
    p = tmp_path / "p.toml"
    kafka = ('[[source]]\nname = "k"\nformat = "kafka"\nbootstrap_servers = "b:9092"\ntopic = "t"\n'
             'schema = "x DOUBLE"\nevent_time = "x"\n'
             'watermark = { max_out_of_orderness = "7s", partitions = [0, 1] }\n')
    files = ('[[source]]\nname = "f"\npath = "in"\nevent_time = "x"\narrival_time = "a"\n'
             'watermark = { max_out_of_orderness = "1s" }\n')
    rest = REST.replace('[watermark]\nmax_out_of_orderness = "3s"\n', "")
    p.write_text(kafka + files + rest)
    cfg_ = load_config(p)
    k, f = cfg_.sources
    assert cfg_.multi_source and k.kafka is not None and f.kafka is None
    assert (k.partition, k.arrival_time, k.watermark.max_out_of_orderness_us) == ("kafka_partition", "kafka_timestamp",
                                                                                  7_000_000)
    p.write_text(kafka.replace('topic = "t"\n', 'topic = "t"\npath = "x"\n') + files + rest)
    with pytest.raises(ConfigError, match=r"^source\.k\.path: not a key of a Kafka source"):
        load_config(p)


def test_broker_timeout_bounds_how_long_the_connector_waits_for_a_broker(tmp_path):
    """Unset: Spark's and Kafka's own timeouts (no option added); set: three attempts of a third each."""
    assert not any("timeout" in k.lower() or "fetchOffset" in k for k in cfg(tmp_path).source.kafka.options())
    opts = cfg(tmp_path, 'broker_timeout = "90s"').source.kafka.options()
    assert (opts["fetchOffset.numRetries"], opts["fetchOffset.retryIntervalMs"]) == ("3", "1000")
    assert (opts["kafka.default.api.timeout.ms"], opts["kafka.request.timeout.ms"]) == ("30000", "30000")
    assert opts["kafkaConsumer.pollTimeoutMs"] == "90000"
    short = cfg(tmp_path, 'broker_timeout = "6s"\nkafka = { "request.timeout.ms" = 1500 }').source.kafka.options()
    assert short["kafka.default.api.timeout.ms"] == "2000" and short["kafka.request.timeout.ms"] == "1500"
    long = cfg(tmp_path, 'broker_timeout = "10m"').source.kafka.options()
    assert long["kafka.default.api.timeout.ms"] == "200000" and long["kafka.request.timeout.ms"] == "30000"


def _several(tmp_path, subscription: str, watermark: str):  # noqa: ANN202
    """A Kafka source reading ``subscription`` with ``watermark`` lines added to its table."""
    p = tmp_path / "p.toml"
    p.write_text(SOURCE.replace('topic = "payments"', subscription).format(extra="")
                 + REST.replace('max_out_of_orderness = "3s"\n', f'max_out_of_orderness = "3s"\n{watermark}\n'))
    return load_config(p)


def test_a_source_that_can_read_several_topics_names_its_partitions_by_topic(tmp_path):
    """ADR 0043: several topics or a pattern (or Spark's assign of several): topic-partitions; one topic: numbers."""
    from lowwater.config.kafka import settings_from_options
    from lowwater.io.checkpoint import check_fingerprint, differences, fingerprint

    one = _several(tmp_path, 'topic = "payments"', "partitions = [0, 1]").source
    assert not one.kafka.several_topics and one.watermark.declared_partitions == ("0", "1")
    assert not _several(tmp_path, 'topics = ["payments"]', "").source.kafka.several_topics
    cfg_two = _several(tmp_path, 'topics = ["orders", "pay-ments"]',
                   'partitions = ["orders-0", "pay-ments-0"]\nout_of_orderness_by_partition = { "orders-1" = "9s" }')
    two = cfg_two.source
    assert two.kafka.several_topics and two.watermark.declared_partitions == ("orders-0", "pay-ments-0")
    pattern = _several(tmp_path, 'subscribe_pattern = "pay.*"', 'partitions = ["payments-0"]').source
    assert pattern.kafka.several_topics  # a pattern may match more topics later: named by topic from the start
    assigned = [settings_from_options({"kafka.bootstrap.servers": "b", "assign": a})
                for a in ('{"a": [0, 1]}', '{"a": [0], "b": [0]}')]
    assert [s.several_topics for s in assigned] == [False, True]
    # The checkpoint's fingerprint says so: one written when partition numbers were shared is refused
    # (io/checkpoint._refuse_changes names this key), a single topic's is what it always was.
    fp = fingerprint(cfg_two, "struct<a:int>")
    assert fp["source.partition"] == "kafka_partition of each topic (topic-partition)"
    assert differences({**fp, "source.partition": "kafka_partition"}, fp) == ["source.partition"]
    files = {"lw/fingerprint.json": json.dumps({"version": 1, "keys": {**fp, "source.partition": "kafka_partition"}})}
    disk = type("Disk", (), {"exists": lambda _, q: q in files, "read_text": lambda _, q: files[q]})()
    with pytest.raises(ConfigError) as e:
        check_fingerprint(disk, "lw", cfg_two, fp, started=True)
    assert str(e.value).startswith("source.partition: changed from 'kafka_partition' to 'kafka_partition of each "
                                   "topic (topic-partition)' since this checkpoint was started; its state and ")
    single = _several(tmp_path, 'topic = "payments"', "")
    assert fingerprint(single, "struct<a:int>")["source.partition"] == "kafka_partition"


@pytest.mark.parametrize(("subscription", "watermark", "message"), [
    ('topics = ["orders", "payments"]', "partitions = [0, 1]",
     "watermark.partitions: '0' is not a topic-partition; source reads several topics (orders,payments), each with "
     "its own partitions: name them <topic>-<partition>, e.g. 'orders-0'"),
    ('topics = ["orders", "payments"]', 'out_of_orderness_by_partition = { "1" = "5s" }',
     "watermark.out_of_orderness_by_partition: '1' is not a topic-partition; source reads several topics"),
    ('topics = ["orders", "payments"]', 'partitions = ["orders-0", "refunds-0"]',
     "watermark.partitions: 'refunds-0' names topic 'refunds', which source does not read (orders,payments)"),
    ('subscribe_pattern = "pay.*"', "partitions = [0]",
     "watermark.partitions: '0' is not a topic-partition; source reads several topics (pattern pay.*), each with "
     "its own partitions: name them <topic>-<partition>, e.g. '<topic>-0'"),
    ('subscribe_pattern = "pay.*"', 'partitions = ["orders-0"]',
     "watermark.partitions: 'orders-0' names topic 'orders', which source does not read (pattern pay.*)"),
])
def test_declared_partitions_of_several_topics_are_topic_partitions(tmp_path, subscription, watermark, message):
    with pytest.raises(ConfigError) as e:
        _several(tmp_path, subscription, watermark)
    assert str(e.value).startswith(message) and "\n" not in str(e.value)


def test_a_kafka_table_of_several_topics_among_sources_names_its_own_keys(tmp_path):
    p = tmp_path / "p.toml"
    kafka = ('[[source]]\nname = "k"\nformat = "kafka"\nbootstrap_servers = "b:9092"\ntopics = ["t", "u"]\n'
             'schema = "x DOUBLE"\nevent_time = "x"\nwatermark = {{ max_out_of_orderness = "7s", {parts} }}\n')
    files = ('[[source]]\nname = "f"\npath = "in"\nevent_time = "x"\narrival_time = "a"\npartition = "p"\n'
             'watermark = { partitions = [0, 1] }\n')  # a file source's partitions stay its own names
    rest = REST.replace('[watermark]\nmax_out_of_orderness = "3s"\n', "")
    p.write_text(kafka.format(parts='partitions = ["t-0", "u-0"]') + files + rest)
    k, f = load_config(p).sources
    assert (k.topic_column, f.topic_column) == ("kafka_topic", None) and "kafka_topic" in k.required_columns
    assert f.watermark.declared_partitions == ("0", "1")
    p.write_text(kafka.format(parts="partitions = [0]") + files + rest)
    with pytest.raises(ConfigError, match=r"^source\.k\.watermark\.partitions: '0' is not a topic-partition; "
                                          r"source\.k reads several topics \(t,u\)"):
        load_config(p)

"""A Kafka topic as the engine's stream, read with Spark's own Kafka connector.

Spark's connector owns the offsets: it checkpoints each micro-batch's
per-partition offset ranges (``<checkpoint>/spark/offsets``) before the batch
runs and replays exactly those ranges after a crash, so a replayed step reads
the same records -- the property the landing directory gets from its file log.
``admit`` turns one micro-batch of records into input rows: the value parsed
with ``source.schema`` (json, csv, or the raw string), then the record's own
columns (``kafka_topic``, ``kafka_partition``, ``kafka_offset``,
``kafka_timestamp``, ``kafka_key``). The engine's column roles are fixed
(``config/kafka.py``): partition, offset and arrival time are the record's.

A value that does not parse keeps its text in ``_corrupt_record`` and becomes
a dead letter (``malformed record``; a null value -- a tombstone -- says so),
with its topic, partition and offset as columns; ``source_file`` is Kafka's
``topic-partition`` and the order within it is the offset.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pyspark.errors import AnalysisException
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType, _parse_datatype_string

from lowwater.config import ConfigError, PipelineConfig, SourceConfig
from lowwater.config.kafka import (
    KAFKA_COLUMNS,
    KAFKA_KEY,
    KAFKA_OFFSET,
    KAFKA_PARTITION,
    KAFKA_TIMESTAMP,
    KAFKA_TOPIC,
    KafkaSettings,
    settings_from_options,
)
from lowwater.io.files import CORRUPT
from lowwater.io.source import Admitted
from lowwater.runtime import jars

NULL_VALUE = "<null value>"  # the raw text of a dead letter whose record had no value (a tombstone)
CONNECTOR = "org.apache.spark:spark-sql-kafka-0-10_2.13"
# Where scripts/bootstrap.sh puts the connector's jars (jars/pom.xml): .jars/<JARS>; $JARS_ENV overrides.
JARS, JARS_ENV = "connector", "LOWWATER_KAFKA_JARS"


def value_schema(src: SourceConfig) -> StructType:
    """``source.schema`` (the value's fields) parsed; one line if it does not parse or names a record column."""
    try:
        parsed = _parse_datatype_string(src.schema or "")
    except Exception as e:  # noqa: BLE001 - Spark's parser raises many types
        msg = f"{src.key('schema')}: cannot parse {src.schema!r}: {str(e).splitlines()[0]}"
        raise ConfigError(msg) from None
    if not isinstance(parsed, StructType):
        msg = f"{src.key('schema')}: expected a list of `name TYPE` columns"
        raise ConfigError(msg)
    for f in parsed.fields:
        if f.name in KAFKA_COLUMNS or f.name == CORRUPT:
            msg = f"{src.key('schema')}: the value's field {f.name!r} clashes with the record's own column; rename it"
            raise ConfigError(msg)
    return parsed


def kafka_schema(src: SourceConfig) -> StructType:
    """The input schema the engine sees: the value's fields, then the record's columns."""
    fields = list(value_schema(src).fields)
    record = _parse_datatype_string(", ".join(f"{n} {t}" for n, t in KAFKA_COLUMNS.items()))
    return StructType(fields + list(record.fields))


def kafka_rows_layout(schema: StructType) -> StructType:
    """The schema of :meth:`KafkaSource.rows`: ``schema`` (:func:`kafka_schema`), then the corrupt text and order."""
    return StructType([*schema.fields, StructField(CORRUPT, StringType()), StructField("_file", StringType()),
                       StructField("_block", LongType())])


def jars_dir() -> Path:
    """Where the connector's jars are looked for: ``LOWWATER_KAFKA_JARS``, else ``.jars/connector``."""
    return jars.folder(JARS_ENV, JARS)


def connector_jars() -> list[str]:
    """The local jars of Spark's Kafka connector (empty when they were not fetched)."""
    return jars.local_jars(JARS_ENV, JARS)


def jars_for(cfg: PipelineConfig) -> list[str]:
    """What ``spark.jars`` needs for ``cfg``: the connector when a source is Kafka, unless the user brings it.

    A user with their own cluster passes the connector as a package
    (``[spark.conf] "spark.jars.packages"``) or their own ``spark.jars``; then
    nothing is added. Else the jars fetched by ``scripts/bootstrap.sh`` must be
    there, or the run stops in one line before Spark starts.
    """
    if not any(s.kafka for s in cfg.sources):
        return []
    own = " ".join(cfg.spark.conf.get(k, "") for k in ("spark.jars.packages", "spark.jars"))
    if "spark-sql-kafka" in own:
        return []
    found = connector_jars()
    if not any("spark-sql-kafka" in Path(j).name for j in found):
        import pyspark

        raise ConfigError(jars.missing("source.format", "kafka needs Spark's Kafka connector", JARS_ENV, JARS,
                                       f"{CONNECTOR}:{pyspark.__version__}"))
    return found


def reader_settings(df: DataFrame) -> KafkaSettings | None:
    """The Kafka reader a user's streaming DataFrame reads (``spark.readStream.format("kafka")``), if one.

    Read from the DataFrame's plan: its one streaming Kafka relation's options
    (:func:`~lowwater.config.kafka.settings_from_options`). None when the plan
    reads no Kafka topic, or another stream beside it, or cannot be read from
    Python (a Spark Connect DataFrame has no JVM plan here).
    """
    try:
        jvm = df.sparkSession._jvm  # noqa: SLF001 - the driver JVM holds the plan
        leaves = jvm.scala.jdk.javaapi.CollectionConverters.asJava(
            df._jdf.queryExecution().logical().collectLeaves())  # noqa: SLF001
        streams = [leaf for leaf in leaves if "Streaming" in str(leaf.nodeName())]
        if len(streams) != 1 or streams[0].nodeName() != "StreamingRelationV2" or str(
                streams[0].sourceName()).lower() != "kafka":
            return None
        options = dict(streams[0].extraOptions().asCaseSensitiveMap())
    except Exception:  # noqa: BLE001 - py4j raises many types; no plan to read is not a Kafka DataFrame
        return None
    return settings_from_options(options)


# How Spark's connector says records are gone (its message, and its error conditions in
# error/kafka-error-conditions.json), and how a Kafka client says the broker or topic is not there.
_DATA_LOSS = ("data may have been lost", "failOnDataLoss", "KAFKA_DATA_LOSS", "PARTITIONS_DELETED",
              "START_OFFSET_RESET", "PARTITION_OFFSET_CHANGED", "COULD_NOT_READ_OFFSET_RANGE")
_UNREACHABLE = ("TimeoutException", "UnknownTopicOrPartition", "Timed out waiting")
_NO_CLIENT = ("Failed to create new KafkaAdminClient", "Failed to construct kafka consumer")


def kafka_failure(cfg: PipelineConfig, e: BaseException) -> str | None:
    """One line for a query that failed on Kafka's side (records gone, no broker), else None (not Kafka's)."""
    src = next((s for s in cfg.sources if s.kafka), None)
    if src is None or src.kafka is None:
        return None
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    where = f"{src.key('topic')} {src.kafka.topics_text!r} at {src.kafka.bootstrap_servers}"
    if any(c in ln for ln in lines for c in _DATA_LOSS):
        reason = next((ln for ln in lines if ln.startswith("Reason:")), lines[0])
        return (f"{where}: records the checkpoint expects are gone (topic deleted, truncated or recreated): "
                f"{reason[:300]}; the query stopped instead of skipping them (fail_on_data_loss = true); set "
                f"{src.key('fail_on_data_loss')} = false to skip what is gone (uncounted), or start a new checkpoint")
    client = next((ln for ln in lines if any(c in ln for c in _NO_CLIENT)), None)
    if client is not None:
        return (f"{where}: Spark's Kafka client could not be created with the options under {src.key('kafka')} "
                f"({_bare(client)}); e.g. default.api.timeout.ms may not be below request.timeout.ms")
    first = next((ln for ln in lines if any(c in ln for c in _UNREACHABLE)), None)
    if first is None:
        return None
    if src.kafka.broker_timeout_ms:
        waited = f"waited about {src.kafka.broker_timeout_ms / 1000:g}s ({src.key('broker_timeout')})"
    elif any(k == "default.api.timeout.ms" for k, _ in src.kafka.client):
        waited = f"waited as {src.key('kafka')}.default.api.timeout.ms says"
    else:
        waited = f"waited Spark's default, about 3 min; see {src.key('broker_timeout')}"
    return (f"{where}: Kafka did not answer or does not have the topic ({waited}): {_bare(first)}; nothing "
            "was skipped: run the same command again when the broker is back")


def _bare(line: str) -> str:
    """Spark's line about a failed query without its wrapping (query ids, SQLSTATE): the Kafka client's words."""
    line = re.sub(r"^\[STREAM_FAILED\] Query \[[^\]]*\] terminated with exception: ", "", line)
    return re.sub(r" SQLSTATE: \w+$", "", line)[:300]


class KafkaSource:
    """``[source] format = "kafka"`` as a :class:`~lowwater.io.source.StreamSource`."""

    def __init__(self, spark: SparkSession, src: SourceConfig, schema: StructType, state_dir: str) -> None:  # noqa: ARG002
        assert src.kafka is not None
        self.spark = spark
        self.src = src
        self.settings = src.kafka
        self.schema = schema
        self.values = value_schema(src)

    def stream(self) -> DataFrame:
        reader = self.spark.readStream.format("kafka")
        for k, v in self.settings.options().items():
            reader = reader.option(k, v)
        try:
            return reader.load()
        except AnalysisException as e:
            if "kafka" in str(e).lower() and "find" in str(e).lower():
                import pyspark

                msg = (f"source.format: Spark has no Kafka connector on its classpath ({str(e).splitlines()[0]}); "
                       f"start the session with spark.jars.packages = {CONNECTOR}:{pyspark.__version__} "
                       "(or run scripts/bootstrap.sh)")
                raise ConfigError(msg) from None
            raise

    def admit(self, batch: DataFrame) -> Admitted:
        """The micro-batch's records as input rows (the same records when Spark replays the batch)."""
        return Admitted(self.rows(batch))

    def rows(self, records: DataFrame) -> DataFrame:
        """Kafka records (``key, value, topic, partition, offset, timestamp, ...``) as input rows."""
        value = F.col("value").cast("string")
        fields, corrupt = self._parse(value)
        corrupt = F.when(F.col("value").isNull(), F.lit(NULL_VALUE)).otherwise(corrupt)
        return records.select(
            *fields,
            F.col("topic").alias(KAFKA_TOPIC),
            F.col("partition").cast("int").alias(KAFKA_PARTITION),
            F.col("offset").cast("long").alias(KAFKA_OFFSET),
            F.col("timestamp").cast("timestamp").alias(KAFKA_TIMESTAMP),
            F.col("key").cast("string").alias(KAFKA_KEY),
            corrupt.alias(CORRUPT),
            F.concat_ws("-", F.col("topic"), F.col("partition").cast("string")).alias("_file"),
            F.col("offset").cast("long").alias("_block"),
        )

    def _parse(self, value: Column) -> tuple[list[Column], Column]:
        """The value's fields and the corrupt-record text (null when the value parsed)."""
        fmt = self.settings.value_format
        if fmt == "raw":
            return [value.alias("value")], F.lit(None).cast("string")
        full = StructType([*self.values.fields, StructField(CORRUPT, StringType(), True)])
        opts = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT}
        if self.src.zone != "UTC":  # a TIMESTAMP field written without an offset: a wall-clock time there
            opts["timeZone"] = self.src.zone
        if fmt == "json":
            parsed = F.from_json(value, full, opts)
        else:
            ddl = ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in full.fields)
            parsed = F.from_csv(value, ddl, opts)
        names = [f.name for f in self.values.fields]
        fields = [parsed[n].alias(n) for n in names]
        # from_json gives a null struct for a value that is not an object (e.g. `42`): corrupt too.
        corrupt = F.when(parsed.isNull(), value).otherwise(parsed[CORRUPT])
        return fields, corrupt

    @contextmanager
    def watching(self, poll_s: float | None) -> Iterator[None]:  # noqa: ARG002 - Spark's connector polls the broker
        yield

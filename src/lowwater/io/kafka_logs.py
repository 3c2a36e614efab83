"""Which Kafka partitions are caught up at a step: the arrival frontier's ``logs`` (core/frontier.py).

A micro-batch of Spark's Kafka connector ends, per partition, at the offsets
Spark wrote to ``<checkpoint>/spark/offsets/<batch>`` before running it (the
same file a replay reads, so a replayed step sees the same ends). A partition
is *caught up* when that end reaches the partition's end offset (the offset
of its next record) asked of the broker when the step runs: nothing more can
be delivered that was appended before. Otherwise it has a backlog and holds
the frontier at its latest delivered arrival. Asking when the step runs, not
when Spark planned it, only ever sees more records, so a partition is never
taken for caught up while records it had then are unread.

The end offsets come from the driver JVM's ``kafka-clients`` (the connector's
own dependency, on the classpath with it), through one consumer per engine
with the source's ``kafka.*`` options, so a secured cluster is reached exactly
as the connector reaches it. The consumer never subscribes or commits: it only
asks ``endOffsets``.
"""

from __future__ import annotations

import json
import logging
import re

from pyspark.sql import SparkSession

from lowwater.config import ConfigError, PipelineConfig, SourceConfig
from lowwater.core.frontier import kafka_lane
from lowwater.runtime.fs import HadoopFS

log = logging.getLogger("lowwater")

_BYTES = "org.apache.kafka.common.serialization.ByteArrayDeserializer"


def kafka_offsets_lines(text: str) -> list[dict[str, dict[int, int]]]:
    """The Kafka sources' end offsets in an offsets file of Spark's checkpoint, in the file's order.

    The file is ``v1``, the batch's metadata, then one line per source of
    the query (``-`` for a source without an offset yet): a Kafka source's is
    ``{"topic": {"0": 42, ...}}``; other sources' lines have another shape.
    """
    out: list[dict[str, dict[int, int]]] = []
    for line in text.splitlines()[2:]:
        try:
            data = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(data, dict) and data and all(
            isinstance(v, dict) and all(str(p).lstrip("-").isdigit() and isinstance(o, int) for p, o in v.items())
            for v in data.values()
        ):
            out.append({str(t): {int(p): int(o) for p, o in parts.items()} for t, parts in data.items()})
    return out


def _subscribed(src: SourceConfig, topics: list[str]) -> bool:
    assert src.kafka is not None
    kind, value = src.kafka.subscribe
    if kind == "subscribe":
        return set(topics) <= set(value.split(","))
    return all(re.fullmatch(value, t) for t in topics)


class KafkaLogs:
    """Per step, every Kafka partition's lane and whether it is caught up (``{lane: caught_up}``)."""

    def __init__(self, spark: SparkSession, cfg: PipelineConfig) -> None:
        self.spark = spark
        self.sources = [s for s in cfg.sources if s.kafka is not None]
        self.offsets_dir = f"{cfg.output.checkpoint.rstrip('/')}/spark/offsets"
        self.fs = HadoopFS(spark)
        self._consumers: dict[str, object] = {}

    def ends(self, spark_batch: int) -> dict[str, dict[str, dict[int, int]]]:
        """Per Kafka source, the batch's end offsets ``{topic: {partition: offset}}`` from Spark's checkpoint."""
        path = f"{self.offsets_dir}/{spark_batch}"
        lines = kafka_offsets_lines(self.fs.read_text(path)) if self.fs.exists(path) else []
        out: dict[str, dict[str, dict[int, int]]] = {}
        for src in self.sources:
            line = next((ln for ln in lines if _subscribed(src, list(ln))), None)
            if line is not None:
                lines.remove(line)
                out[src.name] = line
        return out

    def logs(self, spark_batch: int) -> dict[str, bool]:
        """``{lane: caught up}`` for every partition of every Kafka source at this step."""
        out: dict[str, bool] = {}
        for name, topics in self.ends(spark_batch).items():
            src = next(s for s in self.sources if s.name == name)
            latest = self.end_offsets(src, topics)
            by_topic = src.topic_column is not None  # several topics: lanes named as the rows' (ADR 0043)
            for topic, parts in topics.items():
                for p, end in parts.items():
                    out[kafka_lane(name, p, topic, by_topic)] = end >= latest.get((topic, p), 0)
        return out

    def end_offsets(self, src: SourceConfig, topics: dict[str, dict[int, int]]) -> dict[tuple[str, int], int]:
        """The broker's end offset of each partition, asked now (Kafka's ``endOffsets``)."""
        jvm = self.spark._jvm  # noqa: SLF001 - the driver JVM, where the connector's kafka-clients is
        consumer = self._consumer(src)
        wanted = jvm.java.util.ArrayList()
        for topic, parts in topics.items():
            for p in parts:
                wanted.add(jvm.org.apache.kafka.common.TopicPartition(topic, int(p)))
        try:
            ends = consumer.endOffsets(wanted, jvm.java.time.Duration.ofSeconds(60))
        except Exception as e:  # noqa: BLE001 - py4j wraps the Kafka client's exception
            first = str(e).strip().splitlines()[0][:300] if str(e).strip() else type(e).__name__
            msg = f"{src.key('topic')}: cannot ask Kafka for the partitions' end offsets: {first}"
            raise ConfigError(msg) from None
        out = {}
        for tp in ends.keySet().toArray():
            out[(str(tp.topic()), int(tp.partition()))] = int(ends.get(tp))
        return out

    def _consumer(self, src: SourceConfig):  # noqa: ANN202 - a py4j KafkaConsumer
        if src.name not in self._consumers:
            assert src.kafka is not None
            jvm = self.spark._jvm  # noqa: SLF001
            props = jvm.java.util.Properties()
            for k, v in {**dict(src.kafka.client), "bootstrap.servers": src.kafka.bootstrap_servers,
                         "key.deserializer": _BYTES, "value.deserializer": _BYTES,
                         "enable.auto.commit": "false"}.items():
                props.setProperty(k, v)
            self._consumers[src.name] = jvm.org.apache.kafka.clients.consumer.KafkaConsumer(props)
        return self._consumers[src.name]

    def close(self) -> None:
        for consumer in self._consumers.values():
            try:
                consumer.close()
            except Exception:  # noqa: BLE001 - closing a consumer whose broker is gone
                log.debug("closing a Kafka consumer failed", exc_info=True)
        self._consumers.clear()

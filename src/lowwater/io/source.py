"""What the engine needs from a source: a streaming DataFrame and, per micro-batch, its input rows.

The engine runs ``source.stream()`` with ``foreachBatch`` and hands each
micro-batch to ``source.admit``, which returns the input rows (with the
``_file``/``_block`` ordering columns) and what the batch brought. The
landing directory (``io/landing.py``) and a Kafka topic (``io/kafka.py``)
implement the same three methods.

Before the stream opens, a kind declares what the engine must know of its
rows (:class:`SourceKind`): a schema it fixes itself, the layout ``admit``
gives, whether each partition is a lane of the arrival frontier, and how to
tell at a step which lanes are caught up. The engine asks these of every
source the same way (``spark/inputs.py``); it never asks which kind it has.

A new source kind is one module implementing :class:`StreamSource` and one
:func:`register_source_kind` line: ``format = "<kind>"`` then opens it (its
configuration takes a file source's keys; with ``schema`` given, nothing is
inferred from files; its kind the defaults of :class:`SourceKind` unless it
passes its own). Several ``[[source]]`` tables still take landing
directories and Kafka topics only (``io/sources.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Protocol

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from lowwater.config import PipelineConfig, SourceConfig
from lowwater.config.source import FORMATS, register_format
from lowwater.core.frontier import Lanes
from lowwater.runtime.fs import HadoopFS


@dataclass(frozen=True)
class Admitted:
    """One micro-batch's input: its rows and the files they come from.

    ``out_of_order`` names the files that landed after a file with a later
    name had been admitted (read out of name order); ``out_of_order_rows``
    counts their rows.
    """

    rows: DataFrame
    files: tuple[str, ...] = ()
    out_of_order: tuple[str, ...] = ()
    out_of_order_rows: int = 0


class StreamSource(Protocol):
    """A source of micro-batches for the engine's streaming query."""

    def stream(self) -> DataFrame:
        """The streaming DataFrame the query runs ``foreachBatch`` on (offsets checkpointed by Spark)."""
        ...

    def admit(self, batch: DataFrame) -> Admitted:
        """The input rows of one micro-batch (the same for a batch replayed after a crash)."""
        ...

    def watching(self, poll_s: float | None) -> AbstractContextManager[None]:
        """While the query runs: keep discovering new input every ``poll_s`` (None: only what is there now)."""
        ...


class CaughtUp(Protocol):
    """Per step, which lanes of some sources have nothing landed and unread (``{lane: caught up}``)."""

    def logs(self, spark_batch: int, stream: StreamSource | None) -> dict[str, bool]:
        """At Spark batch ``spark_batch`` of the running ``stream`` (None: a step run without the query)."""
        ...

    def close(self) -> None:
        """Let go of what asking needed (a Kafka consumer)."""
        ...


class SourceKind:
    """What a kind of source declares before its stream opens; the defaults: a stream whose rows are one lane.

    ``partition_lanes``: each of a source's partitions is a lane of the arrival frontier of its own
    (``core/frontier.Lanes``): cut independently, so rows may be held even with one source (Kafka's
    partitions, cut by offsets). Else the source is one lane, released by its ``idle_timeout``.
    ``read_whole``: a micro-batch is fetched once and laid out whole (a Kafka batch), not re-read per job.
    """

    partition_lanes = False
    read_whole = False

    def fixed_schema(self, src: SourceConfig) -> StructType | None:  # noqa: ARG002 - the default fixes none
        """The input schema the kind fixes itself (None: ``source.schema``, else inferred from the files)."""
        return None

    def layout(self, schema: StructType) -> StructType | None:  # noqa: ARG002 - the default declares none
        """The schema of the rows ``admit`` gives, when the engine must hold them (None: not declared)."""
        return None

    def caught_up(self, spark: SparkSession, cfg: PipelineConfig) -> CaughtUp | None:  # noqa: ARG002
        """How to tell which of ``cfg``'s sources of this kind are caught up at a step (None: nothing to tell)."""
        return None

    def check_resumable(self, fs: HadoopFS, spark_checkpoint: str, cfg: PipelineConfig) -> None:
        """Refuse, in one line, a checkpoint whose offsets this kind cannot resume (default: any will do)."""


class _FileBacklogs:
    """The landing directories of a ``[[source]]`` pipeline that may go idle: caught up once their log is read."""

    def __init__(self, spark: SparkSession, cfg: PipelineConfig) -> None:
        from lowwater.io.file_backlog import FileBacklogs

        self.backlogs = FileBacklogs(HadoopFS(spark), cfg)

    def logs(self, spark_batch: int, stream: StreamSource | None) -> dict[str, bool]:
        landed = getattr(stream, "landed", None)  # the running query's file logs (io/sources.py)
        return self.backlogs.logs(spark_batch, landed()) if landed is not None else {}

    def close(self) -> None:
        """Nothing held."""


class LandingKind(SourceKind):
    """A landing directory (``io/landing.py``): its file log tells whether it still has files unread."""

    def check_resumable(self, fs: HadoopFS, spark_checkpoint: str, cfg: PipelineConfig) -> None:
        from lowwater.io.landing import check_resumable

        if all(source_kind(s) is self for s in cfg.sources):  # else another kind's offsets share the file
            check_resumable(fs, spark_checkpoint, cfg)  # offsets of an older lowwater's source

    def caught_up(self, spark: SparkSession, cfg: PipelineConfig) -> CaughtUp | None:
        idle = any(source_kind(s) is self and s.watermark.idle_timeout_us is not None for s in cfg.sources)
        return _FileBacklogs(spark, cfg) if cfg.multi_source and idle else None


class KafkaKind(SourceKind):
    """A Kafka topic (``io/kafka.py``): its partitions are lanes, caught up when Spark's batch reached their end."""

    partition_lanes = True
    read_whole = True

    def fixed_schema(self, src: SourceConfig) -> StructType | None:
        from lowwater.io.kafka import kafka_schema

        return kafka_schema(src)  # the value's fields and the record's columns

    def layout(self, schema: StructType) -> StructType | None:
        from lowwater.io.kafka import kafka_rows_layout

        return kafka_rows_layout(schema)

    def caught_up(self, spark: SparkSession, cfg: PipelineConfig) -> CaughtUp | None:
        from lowwater.io.kafka_logs import KafkaLogs

        return _KafkaCaughtUp(KafkaLogs(spark, cfg))


class _KafkaCaughtUp:
    def __init__(self, logs) -> None:  # noqa: ANN001 - io/kafka_logs.KafkaLogs
        self.kafka = logs

    def logs(self, spark_batch: int, stream: StreamSource | None) -> dict[str, bool]:  # noqa: ARG002
        return self.kafka.logs(spark_batch)

    def close(self) -> None:
        self.kafka.close()


# (session, the source's configuration, its input schema, its state directory) -> the opened source
SourceOpener = Callable[[SparkSession, SourceConfig, StructType, str], StreamSource]
SOURCE_KINDS: dict[str, SourceOpener] = {}  # source.format -> how to open it
KINDS: dict[str, SourceKind] = {}  # source.format -> what it declares
BUILT_IN = ("jsonl", "csv", "parquet", "kafka")  # the kinds a [[source]] union reads (io/sources.py)


def register_source_kind(fmt: str, opener: SourceOpener, kind: SourceKind | None = None) -> None:
    """Make ``format = "<fmt>"`` a source kind that ``opener`` opens and ``kind`` declares (default: one lane)."""
    if fmt in SOURCE_KINDS:
        msg = f"source format {fmt!r} is registered already"
        raise ValueError(msg)
    register_format(fmt)
    SOURCE_KINDS[fmt] = opener
    KINDS[fmt] = kind if kind is not None else SourceKind()


def unregister_source_kind(fmt: str) -> None:
    """Undo :func:`register_source_kind` (a test's toy source)."""
    del SOURCE_KINDS[fmt]
    del KINDS[fmt]
    FORMATS.remove(fmt)


def source_kind(src: SourceConfig) -> SourceKind:
    """What ``src``'s kind declares; a source with Kafka settings reads Kafka (a Kafka DataFrame too, ADR 0040)."""
    return KINDS.get("kafka" if src.kafka is not None else src.format, _PLAIN)


def lanes_of(cfg: PipelineConfig) -> Lanes:
    """The lanes of ``cfg``'s arrival frontier, as its sources' kinds declare them (one source: a union of one)."""
    by_partition = tuple(s.name for s in cfg.sources if source_kind(s).partition_lanes)
    own = {s.name: s.watermark.idle_timeout_us for s in cfg.sources if s.name not in by_partition}
    return Lanes(own, by_partition, None if cfg.named_sources else cfg.source.name)


def open_source(spark: SparkSession, src: SourceConfig, schema: StructType, state_dir: str) -> StreamSource:
    """The source ``source`` configures (its kind's opener), its state under ``state_dir``."""
    return SOURCE_KINDS[src.format](spark, src, schema, state_dir)


def _landing(spark: SparkSession, src: SourceConfig, schema: StructType, state_dir: str) -> StreamSource:
    from lowwater.io.landing import LandingSource

    return LandingSource(spark, src, schema, state_dir)


def _kafka(spark: SparkSession, src: SourceConfig, schema: StructType, state_dir: str) -> StreamSource:
    from lowwater.io.kafka import KafkaSource

    return KafkaSource(spark, src, schema, state_dir)


_PLAIN, _LANDING = SourceKind(), LandingKind()  # a handed-in DataFrame's kind: _PLAIN
for _fmt in ("jsonl", "csv", "parquet"):
    register_source_kind(_fmt, _landing, _LANDING)
register_source_kind("kafka", _kafka, KafkaKind())
# a Delta table's commit log as the landing's file log (io/delta_log.py)
register_source_kind("delta", _landing, _LANDING)

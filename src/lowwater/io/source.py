"""What the engine needs from a source: a streaming DataFrame and, per micro-batch, its input rows.

The engine runs ``source.stream()`` with ``foreachBatch`` and hands each
micro-batch to ``source.admit``, which returns the input rows (with the
``_file``/``_block`` ordering columns) and what the batch brought. The
landing directory (``io/landing.py``) and a Kafka topic (``io/kafka.py``)
implement the same three methods.

A new source kind is one module implementing :class:`StreamSource` and one
:func:`register_source_kind` line: ``format = "<kind>"`` then opens it (its
configuration takes a file source's keys; with ``schema`` given, nothing is
inferred from files). Several ``[[source]]`` tables still take landing
directories and Kafka topics only (``io/sources.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Protocol

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from lowwater.config import SourceConfig
from lowwater.config.source import FORMATS, register_format


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


# (session, the source's configuration, its input schema, its state directory) -> the opened source
SourceOpener = Callable[[SparkSession, SourceConfig, StructType, str], StreamSource]
SOURCE_KINDS: dict[str, SourceOpener] = {}  # source.format -> how to open it
BUILT_IN = ("jsonl", "csv", "parquet", "kafka")  # the kinds a [[source]] union reads (io/sources.py)


def register_source_kind(fmt: str, opener: SourceOpener) -> None:
    """Make ``format = "<fmt>"`` a source kind that ``opener`` opens."""
    if fmt in SOURCE_KINDS:
        msg = f"source format {fmt!r} is registered already"
        raise ValueError(msg)
    register_format(fmt)
    SOURCE_KINDS[fmt] = opener


def unregister_source_kind(fmt: str) -> None:
    """Undo :func:`register_source_kind` (a test's toy source)."""
    del SOURCE_KINDS[fmt]
    FORMATS.remove(fmt)


def open_source(spark: SparkSession, src: SourceConfig, schema: StructType, state_dir: str) -> StreamSource:
    """The source ``source`` configures (its kind's opener), its state under ``state_dir``."""
    return SOURCE_KINDS[src.format](spark, src, schema, state_dir)


def _landing(spark: SparkSession, src: SourceConfig, schema: StructType, state_dir: str) -> StreamSource:
    from lowwater.io.landing import LandingSource

    return LandingSource(spark, src, schema, state_dir)


def _kafka(spark: SparkSession, src: SourceConfig, schema: StructType, state_dir: str) -> StreamSource:
    from lowwater.io.kafka import KafkaSource

    return KafkaSource(spark, src, schema, state_dir)


for _fmt in BUILT_IN:
    register_source_kind(_fmt, _kafka if _fmt == "kafka" else _landing)
register_source_kind("delta", _landing)  # a Delta table's commit log as the landing's file log (io/delta_log.py)

"""What the engine needs from a source: a streaming DataFrame and, per micro-batch, its input rows.

The engine runs ``source.stream()`` with ``foreachBatch`` and hands each
micro-batch to ``source.admit``, which returns the input rows (with the
``_file``/``_block`` ordering columns) and what the batch brought. The
landing directory (``io/landing.py``) and a Kafka topic (``io/kafka.py``)
implement the same three methods.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Protocol

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from lowwater.config import SourceConfig


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


def open_source(spark: SparkSession, src: SourceConfig, schema: StructType, state_dir: str) -> StreamSource:
    """The source ``source`` configures (the landing directory or a Kafka topic), its state under ``state_dir``."""
    if src.kafka is not None:
        from lowwater.io.kafka import KafkaSource

        return KafkaSource(spark, src, schema, state_dir)
    from lowwater.io.landing import LandingSource

    return LandingSource(spark, src, schema, state_dir)

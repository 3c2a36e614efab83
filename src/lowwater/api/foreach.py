"""``lw.foreach_batch(fn)``: the user's function as one more sink, called once per step before it commits.

It is the last of the engine's sinks (``io/sink.py``), so by the time it is
delivered the step's frames are in the Parquet outputs; it hands ``fn`` the
step's results, revisions, late rows and dead letters as DataFrames read back
from there, with the step id. The step commits only after ``fn`` returns: a
crash before that replays the step, and ``fn`` is called again with the same
``step`` and the same rows, so a function that replaces what it wrote for
that step (``DELETE ... WHERE step = ?`` then insert, or overwrite a
partition) gives the same table as a run without the crash. If ``fn``
raises, the step fails uncommitted (and is retried on restart).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from lowwater.io.outputs import EMPTY_STEP, ParquetOutputs

__all__ = ["StepBatch"]  # what a user's function gets (the API reference's page); the sink is Pipeline.start's
FRAMES = ("results", "late", "dead_letter")


@dataclass(frozen=True)
class StepBatch:
    """One committed-to-be step's outputs.

    ``results``: every emission (``kind`` final, revision, retraction; ``early``
    firings too); ``revisions``: the revisions and retractions among them;
    ``late``: too-late rows (with their watermark, window and reason);
    ``dead_letter``: rows that could not be read; ``metrics``: the step's
    metrics row (watermark, lag, counts). ``spark_batch``: Spark's batch id.
    """

    step: int
    """lowwater's step id: the same when a step is replayed after a crash (write idempotently by it)."""
    spark_batch: int
    """Spark's batch id of the micro-batch."""
    results: DataFrame
    """Every emission of the step (``kind``: final, revision, retraction, early)."""
    late: DataFrame
    """The step's too-late rows, with their watermark, window and reason."""
    dead_letter: DataFrame
    """The step's rows that could not be read, with why."""
    metrics: dict[str, Any]
    """The step's metrics row: watermarks, lag, counts."""

    @property
    def revisions(self) -> DataFrame:
        """The revisions and retractions among :attr:`results`."""
        return self.results.filter(F.col("kind").isin("revision", "retraction"))


class ForeachBatchSink:
    """Calls ``fn(StepBatch)`` at each step's delivery (after the Parquet output wrote the step)."""

    def __init__(self, outputs: ParquetOutputs, fn: Callable[[StepBatch], None]) -> None:
        self.outputs = outputs
        self.fn = fn
        self.wrote: set[str] = set()

    def prepare(self, kind: str, empty: DataFrame | pa.Table, spark_schema: StructType | None) -> None:
        """Nothing of its own to create: it reads the Parquet outputs."""

    def begin_step(self, step: int) -> None:  # noqa: ARG002 - the protocol's argument
        self.wrote = set()

    def write(self, kind: str, step: int, frame: DataFrame) -> None:  # noqa: ARG002 - read back at delivery
        self.wrote.add(kind)

    def clear(self, kind: str, step: int) -> None:
        """The step has no rows of ``kind``: it gets an empty frame."""

    def write_rows(self, kind: str, step: int, table: pa.Table, spark_schema: StructType) -> None:
        """The metrics row reaches ``fn`` as a dict (:meth:`deliver`)."""

    def deliver(self, step: int, spark_batch: int, metrics: dict[str, Any]) -> None:
        frames = {k: self.outputs.read(k, step if k in self.wrote else EMPTY_STEP) for k in FRAMES}
        self.fn(StepBatch(step, spark_batch, frames["results"], frames["late"], frames["dead_letter"], dict(metrics)))

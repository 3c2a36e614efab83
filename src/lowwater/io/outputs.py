"""Parquet outputs under ``output.path``, one directory per step.

Every step writes ``<kind>/batch_id=<step>`` with mode ``overwrite``, so a step
replayed after a crash replaces what its first attempt wrote instead of adding
to it: results, late rows, dead letters and metrics stay exactly-once. Read
them with ``spark.read.parquet(path)`` or ``pandas.read_parquet(path)``
(``batch_id`` comes from the directory).

Every file of an output has the same schema: timestamps are Parquet
``TIMESTAMP(MICROS, isAdjustedToUTC=true)`` (not Spark's default INT96, which
readers see as naive nanoseconds), ``timestamp_ntz`` columns stay
``isAdjustedToUTC=false``, and every column is nullable (Spark writes a
column it knows cannot be null, e.g. a literal, as ``required``, so the same
column could be ``required`` in one step and ``optional`` in another). Each output also holds one empty file,
``<kind>/batch_id=-1/part-*.parquet``, written once when the output is
created: readers ignore files starting with ``_`` or ``.``, so this is what
gives an output that never had a row its columns (a ``batch_id = -1`` row
never exists).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from lowwater.runtime.columns import select_built
from lowwater.runtime.fs import HadoopFS

KINDS = ("results", "late", "dead_letter", "metrics")
EMPTY_STEP = -1  # ``batch_id=-1`` holds each output's empty schema file
# Session settings of every Parquet write: UTC-adjusted microsecond timestamps.
OUTPUT_CONF = {"spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS"}


def nullable(df: DataFrame) -> DataFrame:
    """``df`` with every column nullable, values unchanged (one Parquet schema per output, whatever the step).

    ``DataFrame.to`` cannot do it (a literal stays non-nullable), and Spark folds
    an always-true condition away; ``spark_partition_id() >= 0`` is never false
    but is not foldable, so ``CASE WHEN`` it ``THEN c END`` stays nullable.
    """
    schema = df.schema
    if all(f.nullable for f in schema.fields):
        return df

    def build() -> list[Column]:
        guard = F.spark_partition_id() >= 0
        return [F.col(f"`{f.name}`") if f.nullable else F.when(guard, F.col(f"`{f.name}`")).alias(f.name)
                for f in schema.fields]

    return select_built(df, ("nullable", schema.json()), build)  # built once per schema and context


class ParquetOutputs:
    """Writes a step's frames idempotently under ``root``: the first of a pipeline's sinks (``io/sink.py``).

    Overwriting ``<kind>/batch_id=<step>`` is what makes it exactly-once, so
    it has nothing to do when a step begins or is delivered.
    """

    def __init__(self, spark: SparkSession, root: str) -> None:
        self.spark = spark
        self.root = root.rstrip("/")
        self.fs = HadoopFS(spark)
        for k, v in OUTPUT_CONF.items():
            spark.conf.set(k, v)

    def path(self, kind: str, step: int | None = None) -> str:
        base = f"{self.root}/{kind}"
        return base if step is None else f"{base}/batch_id={step}"

    def begin_step(self, step: int) -> None:
        """Nothing to forget: every write of the step overwrites its directory."""

    def write(self, kind: str, step: int, df: DataFrame) -> None:
        """Write the step's frame (replacing what an earlier attempt of the step wrote)."""
        nullable(df).write.mode("overwrite").parquet(self.path(kind, step))

    def read(self, kind: str, step: int) -> DataFrame:
        """What :meth:`write` wrote for the step (the Python API's ``foreach_batch`` hands it to the user)."""
        return self.spark.read.parquet(self.path(kind, step))

    def write_rows(self, kind: str, step: int, table: pa.Table, spark_schema: StructType) -> None:
        """A handful of driver-side rows (metrics): plain Parquet when the path is local, else Spark."""
        target = self.path(kind, step)
        local = self.fs.local_path(target)
        if local is None:
            rows = table.to_pylist(maps_as_pydicts="strict")  # a map as a dict: Spark refuses Arrow's (k, v) list
            self.write(kind, step, self.spark.createDataFrame(rows, spark_schema))
            return
        d = Path(local)
        if d.exists():
            shutil.rmtree(d)
        d.mkdir(parents=True)
        pq.write_table(table, d / "part-00000.parquet")

    def prepare(self, kind: str, empty: DataFrame | pa.Table, spark_schema: StructType | None = None) -> None:
        """Give ``kind`` its empty schema file (once: nothing happens if it is there).

        ``empty`` is a zero-row frame shaped exactly as the step's frames of
        ``kind`` are (a DataFrame, or an Arrow table for driver-written rows).
        """
        if self.fs.exists(self.path(kind, EMPTY_STEP)) and not self._older_schema(kind, empty):
            return
        if isinstance(empty, pa.Table):
            assert spark_schema is not None
            self.write_rows(kind, EMPTY_STEP, empty, spark_schema)
            return
        nullable(empty).coalesce(1).write.mode("overwrite").parquet(self.path(kind, EMPTY_STEP))

    def _older_schema(self, kind: str, empty: DataFrame | pa.Table) -> bool:
        """A local driver-written output (metrics) whose schema file lacks a column added since (rewritten).

        Readers that take the schema from the first file (pyarrow, pandas) then see the new column, null
        in the steps written before it existed.
        """
        local = self.fs.local_path(self.path(kind, EMPTY_STEP))
        if not isinstance(empty, pa.Table) or local is None:
            return False
        files = sorted(Path(local).glob("*.parquet"))
        return bool(files) and not set(empty.schema.names) <= set(pq.read_schema(files[0]).names)

    def clear(self, kind: str, step: int) -> None:
        """Remove what an earlier attempt of ``step`` may have left (it had output, this one has none)."""
        self.fs.delete(self.path(kind, step))

    def deliver(self, step: int, spark_batch: int, metrics: dict[str, Any]) -> None:
        """Nothing to deliver: the step's directories are in place once written."""

    def write_summary(self, summary: dict) -> str:
        path = f"{self.root}/summary.json"
        self.fs.write_text_atomic(path, json.dumps(summary, indent=2, sort_keys=True) + "\n")
        return path

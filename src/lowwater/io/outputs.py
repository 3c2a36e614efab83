"""Parquet outputs under ``output.path``, one directory per step.

Every step writes ``<kind>/batch_id=<step>`` with mode ``overwrite``, so a step
replayed after a crash replaces what its first attempt wrote instead of adding
to it: results, late rows, dead letters and metrics stay exactly-once. Read
them with ``spark.read.parquet(path)`` (``batch_id`` comes from the directory).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Protocol

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from lowwater.spark.fs import HadoopFS

KINDS = ("results", "late", "dead_letter", "metrics")
STAGED = ("results", "late", "dead_letter")  # what a transactional sink receives row by row


class StagingSink(Protocol):
    """A sink that takes a step's rows before the step commits (``io.postgres.PostgresSink``)."""

    def stage(self, kind: str, step: int, df: DataFrame) -> int: ...


class ParquetOutputs:
    """Writes a step's frames idempotently under ``root``."""

    def __init__(self, spark: SparkSession, root: str) -> None:
        self.spark = spark
        self.root = root.rstrip("/")
        self.fs = HadoopFS(spark)
        self.sink: StagingSink | None = None

    def path(self, kind: str, step: int | None = None) -> str:
        base = f"{self.root}/{kind}"
        return base if step is None else f"{base}/batch_id={step}"

    def write(self, kind: str, step: int, df: DataFrame) -> None:
        """Write the step's frame; a staging sink then copies what was written (one computation)."""
        path = self.path(kind, step)
        df.write.mode("overwrite").parquet(path)
        if self.sink is not None and kind in STAGED:
            self.sink.stage(kind, step, self.spark.read.parquet(path))

    def write_rows(self, kind: str, step: int, table: pa.Table, spark_schema: StructType) -> None:
        """A handful of driver-side rows (metrics): plain Parquet when the path is local, else Spark."""
        target = self.path(kind, step)
        local = self.fs.local_path(target)
        if local is None:
            self.write(kind, step, self.spark.createDataFrame(table.to_pylist(), spark_schema))
            return
        d = Path(local)
        if d.exists():
            shutil.rmtree(d)
        d.mkdir(parents=True)
        pq.write_table(table, d / "part-00000.parquet")

    def clear(self, kind: str, step: int) -> None:
        """Remove what an earlier attempt of ``step`` may have left (it had output, this one has none)."""
        self.fs.delete(self.path(kind, step))

    def write_summary(self, summary: dict) -> str:
        path = f"{self.root}/summary.json"
        self.fs.write_text_atomic(path, json.dumps(summary, indent=2, sort_keys=True) + "\n")
        return path

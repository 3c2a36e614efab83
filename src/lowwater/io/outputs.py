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

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from lowwater.spark.fs import HadoopFS

KINDS = ("results", "late", "dead_letter", "metrics")


class ParquetOutputs:
    """Writes a step's frames idempotently under ``root``."""

    def __init__(self, spark: SparkSession, root: str) -> None:
        self.spark = spark
        self.root = root.rstrip("/")
        self.fs = HadoopFS(spark)

    def path(self, kind: str, step: int | None = None) -> str:
        base = f"{self.root}/{kind}"
        return base if step is None else f"{base}/batch_id={step}"

    def write(self, kind: str, step: int, df: DataFrame) -> None:
        df.write.mode("overwrite").parquet(self.path(kind, step))

    def write_rows(self, kind: str, step: int, table: pa.Table, spark_schema: StructType) -> None:
        """A handful of driver-side rows (metrics): plain Parquet when the path is local, else Spark."""
        target = self.path(kind, step)
        local = target[len("file:"):] if target.startswith("file:") else target
        if "://" in local:
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

"""Parquet outputs under ``output.path``, one directory per step.

Every step writes ``<kind>/batch_id=<step>`` with mode ``overwrite``, so a step
replayed after a crash replaces what its first attempt wrote instead of adding
to it: results, late rows, dead letters and metrics stay exactly-once. Read
them with ``spark.read.parquet(path)`` (``batch_id`` comes from the directory).
"""

from __future__ import annotations

import json

from pyspark.sql import DataFrame, SparkSession

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

    def clear(self, kind: str, step: int) -> None:
        """Remove what an earlier attempt of ``step`` may have left (it had output, this one has none)."""
        self.fs.delete(self.path(kind, step))

    def write_summary(self, summary: dict) -> str:
        path = f"{self.root}/summary.json"
        self.fs.write_text_atomic(path, json.dumps(summary, indent=2, sort_keys=True) + "\n")
        return path

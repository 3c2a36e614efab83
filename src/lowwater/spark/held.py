"""Rows delivered but not yet judged: held behind the arrival frontier (several sources).

With several sources a row may be judged only once no other source can still
deliver a row before it in arrival order (``core/frontier.py``). The rows a
step cannot judge yet are written, normalised, as version ``step`` under
``<checkpoint>/lowwater/held/v<step>`` and the step's manifest names that
version; the next step reads them back in front of its new rows. Like the
window state, a replayed step reads the version its previous manifest names
and overwrites its own, so a crash between the write and the commit changes
nothing. Versions no recent manifest names are deleted.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lowwater.runtime.fs import HadoopFS
from lowwater.spark.state import Manifest

CARRIED = "_carried"  # True on rows read back from the held store (not delivered by this step)


class HeldRows:
    """The held-rows store of one checkpoint (``root``: any Hadoop path)."""

    def __init__(self, spark: SparkSession, root: str, layout: T.StructType) -> None:
        self.spark = spark
        self.root = root.rstrip("/")
        self.layout = layout  # the union's normalised schema (io/sources.union_layout)
        self.fs = HadoopFS(spark)

    def path(self, version: int) -> str:
        return f"{self.root}/v{version:012d}"

    def read(self, manifest: Manifest) -> DataFrame | None:
        """The rows ``manifest`` holds, flagged as carried (None when it holds none)."""
        if not manifest.held_rows:
            return None
        df = self.spark.read.schema(self.layout).parquet(self.path(int(manifest.held["version"])))
        return df.withColumn(CARRIED, F.lit(True))

    def frame(self, rows: DataFrame) -> DataFrame:
        """The columns a held version keeps of ``rows``."""
        return rows.select(*self.layout.fieldNames())

    def write(self, step: int, rows: DataFrame, count: int) -> dict | None:
        """Hold ``rows`` (``count`` of them, known to the planner) as version ``step``; the manifest's entry."""
        if not count:
            return None
        self.frame(rows).write.mode("overwrite").parquet(self.path(step))
        return self.entry(step, count)

    @staticmethod
    def entry(step: int, count: int) -> dict:
        """The manifest's entry for ``count`` rows held as version ``step`` (however they were written)."""
        return {"version": step, "rows": count}

    def collect_garbage(self, keep: set[int]) -> None:
        """Delete held versions older than every kept one and not named by a kept manifest."""
        if not self.fs.exists(self.root):
            return
        oldest = min(keep, default=0)
        for name in self.fs.list_names(self.root):
            if name.startswith("v") and name[1:].isdigit():
                v = int(name[1:])
                if v not in keep and v < oldest:
                    self.fs.delete(f"{self.root}/{name}")

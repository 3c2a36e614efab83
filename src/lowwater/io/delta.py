"""Delta Lake sink: every output as a Delta table under ``<output>/delta/<kind>``, exactly once.

One of the pipeline's sinks (``io/sink.py``), beside the Parquet output (which
stays the engine's own output: reconcile, the dashboard and what-if read it).
It writes the frames it is given, not the Parquet files, as plain Spark
``format("delta")`` appends with the JVM jars of ``jars/pom.xml``'s ``delta``
profile (no ``delta-spark`` Python package: its pin would move PySpark's).

**Exactly once** (ADR 0026): every append carries Delta's idempotent-write
options ``txnAppId = lowwater-<pipeline id>-<kind>`` and ``txnVersion =
<step>``. Delta records the pair in the commit, and an append whose version
is not above the last one recorded for its app id is skipped. A step
replayed after a crash (anywhere before the manifest) therefore adds nothing
to a table it already reached and completes the ones it did not:
``DESCRIBE HISTORY`` shows each step once per table. The pipeline id is a
random id kept in the checkpoint (``<checkpoint>/lowwater/delta_app_id``), so
a new checkpoint on the same output starts new app ids instead of being
skipped as "already written".

``results_current`` holds the latest emission per window (key columns and
window bounds; retractions excluded; a final before a provisional of the
same revision), maintained by one ``MERGE`` per step made idempotent the same
way (Delta's session-level ``txnAppId``/``txnVersion``). Every table carries
``batch_id`` (the step) as a column, so it reads exactly as the Parquet
output does with ``spark.read.parquet``; tables are not partitioned (readers
prune on ``window_start`` through Delta's per-file statistics).
"""

from __future__ import annotations

import threading
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from lowwater.config import ConfigError, PipelineConfig
from lowwater.io.outputs import nullable
from lowwater.runtime import jars
from lowwater.runtime.fs import HadoopFS

EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"
# The settings a session needs for MERGE and DESCRIBE HISTORY on path tables (static: set at start-up);
# snapshotPartitions: Delta's default (50) makes every log replay of a small table 50 tasks (a user's
# [spark.conf] value wins, e.g. for tables with a long log).
SESSION_CONF = {
    "spark.sql.extensions": EXTENSION,
    "spark.sql.catalog.spark_catalog": CATALOG,
    "spark.databricks.delta.snapshotPartitions": "2",
}
ARTIFACT = "io.delta:delta-spark_4.2_2.13:4.4.0"
# Where scripts/bootstrap.sh puts Delta's jars (jars/pom.xml, profile "delta"): .jars/<JARS>; $JARS_ENV overrides.
JARS, JARS_ENV = "delta", "LOWWATER_DELTA_JARS"
CURRENT = "results_current"
STEP = "batch_id"
_TXN = ("spark.databricks.delta.write.txnAppId", "spark.databricks.delta.write.txnVersion")


def jars_dir() -> Path:
    """Where Delta's jars are looked for: ``LOWWATER_DELTA_JARS``, else ``.jars/delta``."""
    return jars.folder(JARS_ENV, JARS)


def delta_session(cfg: PipelineConfig) -> tuple[list[str], dict[str, str]]:
    """What a session needs for ``cfg``: Delta's jars and settings when ``[output] kind = "delta"``.

    The user's own ``spark.jars.packages``/``spark.jars`` naming delta-spark
    wins (nothing added); else the jars fetched by ``scripts/bootstrap.sh``
    must be there, or the run stops in one line before Spark starts.
    """
    if cfg.output.kind != "delta":
        return [], {}
    conf = {k: v for k, v in SESSION_CONF.items() if k not in cfg.spark.conf}
    own = " ".join(cfg.spark.conf.get(k, "") for k in ("spark.jars.packages", "spark.jars"))
    if "delta-spark" in own:
        return [], conf
    found = jars.local_jars(JARS_ENV, JARS)
    if not any(Path(j).name.startswith("delta-spark") for j in found):
        raise ConfigError(jars.missing("output.kind", '"delta" needs Delta Lake\'s jars', JARS_ENV, JARS, ARTIFACT))
    return found, conf


def check_session(spark: SparkSession) -> None:
    """One line when the session was started without Delta's extension (e.g. an existing session)."""
    if EXTENSION not in (spark.conf.get("spark.sql.extensions", "") or ""):
        msg = (f'output.kind: "delta" needs a SparkSession started with spark.sql.extensions = {EXTENSION} '
               f"and spark.sql.catalog.spark_catalog = {CATALOG} (lowwater run sets both)")
        raise ConfigError(msg)


def app_id(fs: HadoopFS, lw_dir: str) -> str:
    """The pipeline's id in Delta's idempotent writes: random, made once, kept in the checkpoint."""
    path = f"{lw_dir.rstrip('/')}/delta_app_id"
    if not fs.exists(path):
        fs.create_new(path, f"lowwater-{uuid.uuid4().hex}")
    return fs.read_text(path).strip()


class DeltaSink:
    """Appends each step's frames to ``<root>/delta/<kind>`` idempotently, and MERGEs ``results_current``."""

    def __init__(self, spark: SparkSession, root: str, keys: tuple[str, ...], app: str) -> None:
        check_session(spark)
        self.spark = spark
        self.root = f"{root.rstrip('/')}/delta"
        self.keys = tuple(keys)
        self.app = app
        # The operator writes results and late rows side by side: Delta commits of this sink go one at a
        # time, so the session-level txn settings of a MERGE never meet another sink write's commit.
        self._one = threading.Lock()

    def path(self, kind: str) -> str:
        return f"{self.root}/{kind}"

    def txn(self, kind: str) -> str:
        return f"{self.app}-{kind}"

    def prepare(self, kind: str, empty: DataFrame | pa.Table, spark_schema: StructType | None = None) -> None:
        """Create ``kind``'s table (and ``results_current``) with its columns, once; new columns are added."""
        frame = empty if isinstance(empty, DataFrame) else self.spark.createDataFrame([], spark_schema)
        with self._one:
            self._append(kind, frame, None)
            if kind == "results":
                self._append(CURRENT, frame, None)

    def begin_step(self, step: int) -> None:
        """Nothing to forget: an earlier attempt's appends are recognised by their ``txnVersion``."""

    def write(self, kind: str, step: int, frame: DataFrame) -> None:
        """Append the step's rows (skipped by Delta if this step reached the table before a crash)."""
        if kind != "results":
            with self._one:
                self._append(kind, frame, step)
            return
        mine = not frame.is_cached  # appended, then merged: computed once (Sinks may have persisted it)
        rows = frame.persist() if mine else frame
        try:
            with self._one:
                self._append(kind, rows, step)
                self._merge_current(rows, step)
        finally:
            if mine:
                rows.unpersist()

    def clear(self, kind: str, step: int) -> None:
        """No rows of ``kind``: nothing to append (an earlier attempt's rows, if any, are the step's)."""

    def write_rows(self, kind: str, step: int, table: pa.Table, spark_schema: StructType) -> None:
        """Driver-side rows (the metrics row, a join's pairs) appended like a frame."""
        self.write(kind, step, self.spark.createDataFrame(table, spark_schema))  # Arrow: maps stay maps

    def deliver(self, step: int, spark_batch: int, metrics: dict[str, Any]) -> None:
        """Nothing left: each append committed (once) when written."""

    def _append(self, kind: str, frame: DataFrame, step: int | None) -> None:
        """One Delta commit of ``frame`` with ``batch_id`` (``step``; None: creating the table, no rows)."""
        out = nullable(frame.withColumn(STEP, F.lit(step).cast("long")))
        writer = out.write.format("delta").mode("append").option("mergeSchema", "true")
        if step is not None:
            writer = writer.option("txnAppId", self.txn(kind)).option("txnVersion", step)
        elif self._exists(kind) and set(out.columns) <= set(self._columns(kind)):
            return  # the table is there with every column
        writer.save(self.path(kind))

    def _exists(self, kind: str) -> bool:
        return HadoopFS(self.spark).exists(f"{self.path(kind)}/_delta_log")

    def _columns(self, kind: str) -> list[str]:
        return self.spark.read.format("delta").load(self.path(kind)).columns

    def _merge_current(self, rows: DataFrame, step: int) -> None:
        """The step's latest emission per window replaces an older one in ``results_current`` (once per step).

        Order as PostgreSQL's ``_current`` view: revision, then a final or
        correction before a provisional; a later step wins a tie.
        """
        window = [*self.keys, "window_start", "window_end"]
        rank = F.when(F.col("kind") == "provisional", 0).otherwise(1)
        best = Window.partitionBy(*[F.col(f"`{c}`") for c in window]).orderBy(
            F.col("revision").desc(), rank.desc())
        latest = (rows.filter(F.col("kind") != "retraction").withColumn("_n", F.row_number().over(best))
                  .filter("_n = 1").drop("_n").withColumn(STEP, F.lit(step).cast("long")))
        view = f"lowwater_delta_step_{uuid.uuid4().hex}"
        nullable(latest).createOrReplaceTempView(view)
        on = " AND ".join(f"t.`{c}` <=> s.`{c}`" for c in window)
        newer = ("s.revision > t.revision OR (s.revision = t.revision AND "
                 "NOT (s.kind = 'provisional' AND t.kind <> 'provisional'))")
        conf = self.spark.conf
        conf.set(_TXN[0], self.txn(CURRENT))
        conf.set(_TXN[1], str(step))
        try:
            target = self.path(CURRENT).replace("`", "``")
            self.spark.sql(f"MERGE INTO delta.`{target}` t USING {view} s ON {on} "
                           f"WHEN MATCHED AND ({newer}) THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *")
        finally:
            for k in _TXN:
                conf.unset(k)
            self.spark.catalog.dropTempView(view)

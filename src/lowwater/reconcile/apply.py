"""``reconcile --apply``: corrections as further emissions, so every sink's fold shows the batch truth.

For each differing window the stream has fired (an ``open`` window is left
alone: the stream will still fire it, and a correction now would be
overtaken), one emission with ``kind = "correction"`` and ``revision`` one
past the window's last, whose content follows the accumulation mode (so a
consumer's usual fold, ``core/reconcile.rule``, gives the batch truth):

* ``accumulating``: the full batch truth;
* ``discarding``: the change -- batch minus stream for counts and sums; the
  batch's own ``min``/``max`` (a fold by min/max reaches it unless the stream
  counted a row the batch does not have, e.g. a clipped row's moved window;
  ``avg`` is the batch's, it has no fold);
* ``retracting``: a ``retraction`` of the stream's current value (with its
  revision), then the full batch truth.

**Exactly once.** The corrections are one step of the pipeline's sinks,
numbered ``CORRECTION_BASE + n`` (``n`` = 1 + the corrections already in the
sink the stream value was read from), so they never meet an engine step's
number: ``results/batch_id=<step>`` is overwritten whole (Parquet), and
PostgreSQL gets them through the engine's one-transaction protocol (stage,
then one transaction that checks ``lowwater_batches``), Delta as an append
and a ``results_current`` MERGE keyed by the number (``io/delta.py``). A second ``--apply``
finds nothing to correct and writes nothing: twice equals once. An
``--apply`` that died between the Parquet write and the PostgreSQL delivery
computes the same corrections under the same number and completes them.
"""

from __future__ import annotations

import json

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from lowwater.config import PipelineConfig
from lowwater.core.reconcile import ADD, rule
from lowwater.io.outputs import ParquetOutputs
from lowwater.reconcile.stream import output_funcs
from lowwater.runtime.fs import HadoopFS
from lowwater.time import output_us

CORRECTION_BASE = 1_000_000_000_000
RECORD_DIR = "_corrections"  # under results/: Spark and pandas skip names starting with "_"


def _record_dir(cfg: PipelineConfig) -> str:
    return f"{cfg.output.path.rstrip('/')}/results/{RECORD_DIR}"


def covered_files(spark: SparkSession, cfg: PipelineConfig) -> list[tuple[int, str]] | None:
    """(step, path): the log files each correction step saw (None: nothing was ever corrected)."""
    fs = HadoopFS(spark)
    names = [n for n in fs.list_names(_record_dir(cfg)) if n.endswith(".json")]
    if not names:
        return None
    rows = []
    for n in names:
        record = json.loads(fs.read_text(f"{_record_dir(cfg)}/{n}"))
        rows += [(int(record["step"]), p) for p in record["files"]]
    return rows


def correction_step(emissions: DataFrame) -> int:
    """The step number of this apply: one past the corrections already in the sink read."""
    last = emissions.filter(F.col("batch_id") >= CORRECTION_BASE).agg(F.max("batch_id")).first()[0]
    return CORRECTION_BASE + 1 if last is None else int(last) + 1


def corrections(cfg: PipelineConfig, differing: DataFrame, watermark_us: int, schema_of: DataFrame) -> DataFrame:
    """The correction rows (and retracting mode's retractions) of the fired differing windows, as ``results``."""
    mode = cfg.window.accumulation
    # Fired and past its allowed lateness (the stream will never revise it again), and the batch truth changes it.
    freed = F.unix_micros("window_end") + F.lit(cfg.window.allowed_lateness_us) <= F.lit(watermark_us)
    fired = differing.filter((F.col("status") != "open") & freed & F.col("batch_differs"))
    types = {f.name: f.dataType for f in schema_of.schema.fields}
    keys = list(cfg.window.key)
    wm = output_us(watermark_us)
    watermark = F.lit(None).cast("timestamp") if wm is None else F.timestamp_micros(F.lit(wm))

    def row(kind: str, revision: Column, value) -> Column:  # noqa: ANN001 - column name -> Column
        return F.struct(*[F.col(k).alias(k) for k in keys], F.col("window_start").alias("window_start"),
                        F.col("window_end").alias("window_end"),
                        *[value(c).cast(types[c]).alias(c) for c in output_funcs(cfg)],
                        F.lit(kind).alias("kind"), revision.cast("long").alias("revision"),
                        watermark.alias("watermark"))

    def corrected(c: str) -> Column:
        batch, stream = F.col(f"batch_{c}"), F.col(f"stream_{c}")
        if mode == "discarding" and rule(mode, output_funcs(cfg)[c]) == ADD:
            zero = F.lit(0).cast(types[c])
            return F.coalesce(batch, zero) - F.coalesce(stream, zero)
        return batch

    next_rev = F.col("last_revision") + 1
    rows = [row("correction", next_rev, corrected)]
    if mode == "retracting":
        retract = row("retraction", F.col("last_revision"), lambda c: F.col(f"stream_{c}"))
        rows.insert(0, F.when(F.col("last_revision") >= 0, retract))
    out = fired.select(F.explode(F.array(*rows)).alias("_r")).filter(F.col("_r").isNotNull()).select("_r.*")
    return out.select(*[c for c in schema_of.columns if c != "batch_id"])


def apply_corrections(spark: SparkSession, cfg: PipelineConfig, result) -> int:  # noqa: ANN001 - Reconciliation
    """Write the corrections to every sink of the pipeline as one step; the number of rows written."""
    if cfg.window.is_session:
        from lowwater.config import ConfigError

        raise ConfigError("reconcile --apply: session windows are not corrected yet (their bounds differ "
                          "between the batch and the stream); run without --apply")
    emitted = result.emissions
    rows = corrections(cfg, result.frame, result.position.watermark_us, emitted).persist()
    n = rows.count()
    if n == 0:
        rows.unpersist()
        return 0
    step = correction_step(emitted)
    # Which files this correction saw: a row landing later is not in it (reconcile/job.py, _covered).
    files = sorted(set(result.extra["files"]))
    HadoopFS(spark).write_text_atomic(f"{_record_dir(cfg)}/{step}.json", json.dumps({"step": step, "files": files}))
    outputs = ParquetOutputs(spark, cfg.output.path)
    outputs.write("results", step, rows)
    if cfg.output.postgres is not None:
        from lowwater.io.postgres import PostgresSink

        pg = PostgresSink(cfg.output.postgres, cfg.output.path, cfg.window.key)
        pg.begin_step(step)
        pg.write("results", step, rows)
        pg.deliver(step, -1, None)
    if cfg.output.kind == "delta":
        from lowwater.io.delta import DeltaSink, app_id

        # Their own app id: a correction's number is above every engine step's, and Delta would skip a later
        # engine step under the same id (ADR 0026). A second --apply reuses the number and is skipped.
        app = app_id(HadoopFS(spark), f"{cfg.output.checkpoint.rstrip('/')}/lowwater")
        DeltaSink(spark, cfg.output.path, cfg.window.key, f"{app}-correction").write("results", step, rows)
    rows.unpersist()
    return n

"""What the stream emitted, folded per window by the accumulation mode (``core/reconcile.rule``).

The emissions are read from ``results/`` (Parquet), or, when the pipeline
delivers to PostgreSQL, from its results table (this pipeline's rows: the
table consumers read; ``<results>_current`` is its latest-revision view).
The PostgreSQL rows are fetched by the driver (psycopg) into a DataFrame:
results are one row per emission, orders of magnitude fewer than log rows.
"""

from __future__ import annotations

import pandas as pd
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lowwater.config import PipelineConfig
from lowwater.core.reconcile import ADD, KIND_RANK, LATEST, MAX, MIN, SIGNED, rule


def output_funcs(cfg: PipelineConfig) -> dict[str, str]:
    """Every output aggregate column and its function: ``count`` (the window's rows) first."""
    return {"count": "count", **{a.name: a.func for a in cfg.window.aggregations}}


def read_parquet(spark: SparkSession, path: str) -> DataFrame:
    return spark.read.parquet(path)


def read_postgres(spark: SparkSession, cfg: PipelineConfig, schema: T.StructType) -> DataFrame:
    """This pipeline's rows of the PostgreSQL results table, with the Parquet results' schema."""
    import psycopg
    from psycopg import sql

    from lowwater.io.postgres import PIPELINE, STEP

    pg = cfg.output.postgres
    assert pg is not None
    names = [f.name for f in schema.fields]
    query = sql.SQL("SELECT {} FROM {} WHERE {} = %s").format(
        sql.SQL(", ").join(sql.Identifier(n) if n != "batch_id" else sql.Identifier(STEP) for n in names),
        sql.Identifier(pg.schema, pg.results_table), sql.Identifier(PIPELINE))
    with psycopg.connect(pg.url, connect_timeout=5) as conn:
        cur = conn.execute(query, (cfg.output.path,))
        frame = pd.DataFrame(cur.fetchall(), columns=names)
    if frame.empty:
        return spark.createDataFrame([], schema)
    for f in schema.fields:  # timestamptz comes back as datetimes with a zone; Spark takes them as instants
        if isinstance(f.dataType, T.TimestampType):
            frame[f.name] = pd.to_datetime(frame[f.name], utc=True)
    return spark.createDataFrame(frame.astype(object).where(frame.notna(), None), schema)


def _order() -> Column:
    """The emission order (revision, kind rank, step) packed into one long.

    One long, not a struct, so that ``max_by`` keeps a fixed-width buffer and
    Spark folds the emissions with its hash aggregate (a struct ordering makes
    it sort every row). Room: steps below 2^40 (corrections are numbered from
    10^12), four kind ranks, revisions below 2^21 per window.
    """
    rank = F.coalesce(*[F.when(F.col("kind") == k, F.lit(r + 1)) for k, r in KIND_RANK.items()], F.lit(2))
    return (F.shiftleft(F.col("revision").cast("long"), 42) + F.shiftleft(rank.cast("long"), 40)
            + F.col("batch_id").cast("long"))


def fold_aggs(cfg: PipelineConfig, schema: T.StructType) -> list[Column]:
    """The fold of a window's emissions as aggregates: ``s_<column>``, ``_last_rev``, ``_corr_step``.

    They may run over a frame with other rows too (the log's tally, in
    ``attribution.per_window``): those have null emission columns, which
    every aggregate here skips (``max_by`` skips a null ordering).
    """
    mode = cfg.window.accumulation
    retraction = F.col("kind") == "retraction"
    order = F.when(~retraction, _order())
    aggs = [F.max("revision").alias("_last_rev"),
            F.max(F.when(F.col("kind") == "correction", F.col("batch_id").cast("long"))).alias("_corr_step")]
    for col, func in output_funcs(cfg).items():
        r = rule(mode, func)
        c = F.col(col)
        if r is None:
            aggs.append(F.lit(None).cast(schema[col].dataType).alias(f"s_{col}"))
        elif r == LATEST:
            aggs.append(F.max_by(c, order).alias(f"s_{col}"))
        elif r == SIGNED:
            aggs.append(F.sum(F.when(retraction, -c).otherwise(c)).cast(schema[col].dataType).alias(f"s_{col}"))
        elif r == ADD:
            aggs.append(F.sum(c).cast(schema[col].dataType).alias(f"s_{col}"))
        elif r in (MIN, MAX):
            aggs.append((F.min(c) if r == MIN else F.max(c)).alias(f"s_{col}"))
    return aggs


def corrected(cfg: PipelineConfig, emissions: DataFrame) -> DataFrame:
    """The windows with a correction (keys, ``_ws``, ``_we``) and the step of the latest (``_corr_step``): a few."""
    return emissions.filter(F.col("kind") == "correction").groupBy(
        *cfg.window.key, F.unix_micros("window_start").alias("_ws"), F.unix_micros("window_end").alias("_we")).agg(
        F.max(F.col("batch_id").cast("long")).alias("_corr_step"))

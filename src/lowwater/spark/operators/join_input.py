"""What the interval join's keyed pass reads: the step's rows with their row clock, the state, by key bucket.

:func:`attach_row_clock` is the seam to the row clock: it gives each judged
row its ``_w`` (``W(r)``, µs) and ``_seq`` (the global arrival sequence
number) from the driver's plan (``StepPlan.lookup``, broadcast, looked up by
row id on the executors); from there on the join reads only the columns. A
row clock computed on the executors (ADR 0024) replaces this one function.

Rows and buffered rows are put in one layout (``operators/join_pass.state_columns``)
with their key bucket, ``pmod(hash(keys), BUCKETS)``: Spark's Murmur3 of the
key values, so a buffered row's bucket is recomputed from its ``k_`` columns
(state written with another bucket count, or before buckets, is re-bucketed).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa
from pyspark.broadcast import Broadcast
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.pandas.types import to_arrow_schema

from lowwater.config.join import JoinConfig
from lowwater.spark.contrib import PER_ROW

BUCKETS = 16  # key buckets of the join's state: a step reads and rewrites only those it touches or frees


def attach_row_clock(rows: DataFrame, lookup: Broadcast) -> DataFrame:
    """``rows`` (with ``_rid``) plus ``_w`` and ``_seq`` from the plan's lookup (row ids sorted, W, seq)."""
    schema = T.StructType([*rows.schema.fields, T.StructField("_w", T.LongType(), False),
                           T.StructField("_seq", T.LongType(), False)])
    arrow_schema = to_arrow_schema(schema, timezone="UTC")

    def fn(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        rids, ws, seqs = lookup.value
        for b in batches:
            rid = b.column("_rid").to_numpy()
            i = np.minimum(np.searchsorted(rids, rid), max(len(rids) - 1, 0))
            if len(rid) and (len(rids) == 0 or not np.array_equal(rids[i], rid)):
                msg = "row ids differ from the driver's plan: the micro-batch was not re-read identically"
                raise RuntimeError(msg)
            arrays = [*b.columns, pa.array(ws[i], pa.int64()), pa.array(seqs[i], pa.int64())]
            yield pa.RecordBatch.from_arrays([a.cast(f.type) for a, f in zip(arrays, arrow_schema, strict=True)],
                                             schema=arrow_schema)

    return rows.mapInArrow(fn, schema)


def bucket_of(frame: DataFrame, names: list[str]) -> Column:
    """A key's state bucket (the same for a row and for its buffered copy: the hash sees values, not names).

    ``-0.0`` hashes unlike ``0.0`` but the core matches them (Python's ``==``): float keys are normalised.
    """
    if not names:
        return F.lit(0)
    types = {f.name: f.dataType for f in frame.schema.fields}
    cols = [F.when(F.col(c) == F.lit(0.0), F.lit(0.0).cast(types[c])).otherwise(F.col(c))
            if isinstance(types[c], T.FloatType | T.DoubleType) else F.col(c) for c in names]
    return F.pmod(F.hash(*cols), F.lit(BUCKETS)).cast("int")


def join_columns(parsed: DataFrame, join: JoinConfig, clip: bool) -> DataFrame:
    """The step's valid rows with the columns the join reads (before the row clock is attached)."""
    chosen = list(dict.fromkeys([*join.on, *join.left_columns, *join.right_columns]))
    cols = ["_rid", "_source", "_event_us", *chosen]
    if clip:
        cols += ["_arrival_us", PER_ROW]
    return parsed.filter(F.col("_dead").isNull()).select(*dict.fromkeys(cols))


def new_rows(clocked: DataFrame, join: JoinConfig) -> DataFrame:
    """The step's clocked rows in the state layout, with ``_role = 1``, the clock columns and the bucket."""
    left = F.col("_source") == F.lit(join.left)
    cols = [F.when(left, F.lit("left")).otherwise(F.lit("right")).alias("side")]
    cols += [F.col(c).alias(f"k_{c}") for c in join.on]
    cols += [F.col("_event_us").alias("event_us"), F.col("_seq").alias("seq"),
             F.lit(None).cast("boolean").alias("matched")]
    cols += [F.when(left, F.col(c)).alias(f"left_{c}") for c in join.left_columns]
    cols += [F.when(~left, F.col(c)).alias(f"right_{c}") for c in join.right_columns]
    cols += [bucket_of(clocked, list(join.on)).alias("_bucket"), F.lit(1).alias("_role"), "_rid", "_w"]
    cols += [c for c in ("_arrival_us", PER_ROW) if c in clocked.columns]
    return clocked.select(*cols)


def state_rows(state: DataFrame, join: JoinConfig, names: list[str]) -> DataFrame:
    """Buffered rows read back, with ``_role = 0`` and their bucket recomputed from the keys."""
    return state.select(*names, bucket_of(state, [f"k_{c}" for c in join.on]).alias("_bucket"),
                        F.lit(0).alias("_role"))

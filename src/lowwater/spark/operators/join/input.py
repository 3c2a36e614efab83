"""What the interval join's keyed pass reads: the step's rows with their row clock, the state, by key bucket.

The step's judged rows come with their row clock as columns (``spark/clocked.py``:
``_w`` = ``W(r)``, ``_seq`` and ``_seq_minor`` their arrival order within the
step), from either row clock; the state keeps each row's arrival key with the
step that judged it (``executor.ORDER``), which orders rows across steps
without a global sequence number.

Rows and buffered rows are put in one layout (``executor.state_columns``)
with their key bucket, ``pmod(hash(keys), BUCKETS)``: Spark's Murmur3 of the
key values, so a buffered row's bucket is recomputed from its ``k_`` columns
(state written with another bucket count, or before buckets, is re-bucketed).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lowwater.config.join import JoinConfig
from lowwater.runtime.columns import step_value
from lowwater.spark.operators.windowed.executor import PER_ROW

BUCKETS = 16  # key buckets of the join's state: a step reads and rewrites only those it touches or frees


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


def join_columns(join: JoinConfig, clip: bool) -> list[str]:
    """The columns of the step's rows the join reads (the row clock adds ``_w``, ``_seq``, ``_seq_minor``)."""
    chosen = list(dict.fromkeys([*join.on, *join.left_columns, *join.right_columns]))
    cols = ["_rid", "_source", "_event_us", *chosen]
    if clip:
        cols += ["_arrival_us", PER_ROW]
    return list(dict.fromkeys(cols))


def new_rows(clocked: DataFrame, join: JoinConfig, step: int) -> DataFrame:
    """The step's clocked rows in the state layout, with ``_role = 1``, the clock columns and the bucket."""
    left = F.col("_source") == F.lit(join.left)
    cols = [F.when(left, F.lit("left")).otherwise(F.lit("right")).alias("side")]
    cols += [F.col(c).alias(f"k_{c}") for c in join.on]
    cols += [F.col("_event_us").alias("event_us"), F.col("_seq").alias("seq"),
             F.col("_seq_minor").alias("seq_minor"), step_value(step).alias("seq_step"),
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

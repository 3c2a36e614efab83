"""Reconcile's side of the aggregates kept beyond sums (ADR 0039): by-time inputs, collections and sketches.

The batch truth folds them with the partials of ``core/partials.py`` in Spark SQL, as the windowed
operator's state merge does (``spark/aggtypes``):

* a **by-time input** (``first_by_time``/``last_by_time``; a ``collect_list`` entry) is the struct
  ``(e, a, p, o, f, b, r, v)``: the event µs the row is placed by, then the log's arrival order --
  arrival µs, partition, offset, file, block, row id, the order of the ``drop`` replay and of the
  engine within a step (``core/judge.arrival_order``), which across steps is the engine's own order
  when files are named in arrival order (SEMANTICS.md §8) -- then the value. Its min/max is the row
  first/last by (event time, arrival), ties broken as the engine breaks them. A moved pair (a clipped
  row, where the stream counted it) is placed by its clipped time (:func:`placed`), and so is every row of a session;
* a **collection** (``count_distinct``, ``collect_set``, ``collect_list``): the distinct values, sorted,
  or the by-time structs in order, merged by ``aggtypes.collection_merge``;
* a **sketch** (``approx_count_distinct``, ``approx_percentile``): Spark's ``hll_sketch_agg`` (lg K 12)
  or ``kll_sketch_agg_double`` (k 200) of the values, merged by ``aggtypes.sketch_merge``. They are
  compared with the stream's within their documented error (``core/reconcile.within_sketch_error``):
  the stream's sketch is a merge of the sketches of its cuts.

These need each row's arrival order and the too-late copies matched exactly (a late copy is the latest
of identical rows: ``W(r)`` only rises along arrival order), so their pipelines read a persisted log
with row ids, as sessions and ``drop`` do (``job.py``).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lowwater.config import PipelineConfig
from lowwater.core.aggregates import BY_TIME_FUNCS, COLLECTIONS
from lowwater.core.partials import BY_TIME, HLL, HLL_LG_K, KLL, KLL_K, LIST, SET
from lowwater.reconcile.log import MOVED
from lowwater.spark.aggtypes import collection_merge, sketch_merge, value_expr, value_kind

KEPT = (SET, LIST, HLL, KLL)  # inputs whose sum field holds a collection or a sketch
ORDER = (("a", "_arrival_us"), ("p", "_psort"), ("o", "_offset"), ("f", "_file"), ("b", "_block"), ("r", "_rid"))


def needs_rows(cfg: PipelineConfig) -> bool:
    """Whether the pipeline has an aggregate reconciled here: by time, a collection or a sketch."""
    return any(a.func in BY_TIME_FUNCS or a.func in COLLECTIONS for a in cfg.window.aggregations)


def _timed(col: Column, dt: T.DataType) -> Column:
    return F.struct(F.col("_event_us").alias("e"), *[F.col(c).alias(n) for n, c in ORDER],
                    value_expr(col, dt).alias("v"))


def _hashed(col: Column, dt: T.DataType) -> Column:
    """A value as ``hll_sketch_agg`` takes it: integers and ordinals as bigint, text as itself, others as text
    (``-0.0`` as ``0.0``, one value as the engine's sketch has it)."""
    v = value_expr(col, dt)
    kind = value_kind(dt)
    if kind in ("int", "ordinal", "present", "text"):
        return v
    if kind == "float":
        v = F.when(v == F.lit(0.0), F.lit(0.0)).otherwise(v)
    return v.cast("string")


def input_col(col: Column, dt: T.DataType, of: str) -> Column | None:
    """Value input ``of`` of a log row as reconcile folds it (None: not one of these; ``aggtypes.input_expr``)."""
    if of == BY_TIME:
        return _timed(col, dt)
    if of == LIST:  # an entry is null where the value is: skipped
        return F.when(col.isNotNull(), _timed(col, dt))
    if of == SET:
        return value_expr(col, dt)
    if of == HLL:
        return _hashed(col, dt)
    if of == KLL:
        return value_expr(col, dt).cast("double")
    return None


def placed(cfg: PipelineConfig, pairs: DataFrame) -> DataFrame:
    """``pairs`` whose by-time inputs of a moved pair carry the clipped time (the stream judged it there); a
    session's every pair (``sessions.pairs``: the batch sessions are built on the clipped times too)."""
    timed = [i for i, (_, of) in enumerate(cfg.window.value_inputs) if of in (BY_TIME, LIST)]
    if not timed:
        return pairs
    moved = F.lit(True) if cfg.window.is_session else F.col("_role") == F.lit(MOVED)
    return pairs.withColumns({f"_v{i}": F.when(moved & F.col(f"_v{i}").isNotNull(),
                                               F.col(f"_v{i}").withField("e", F.col("_clip_us")))
                              .otherwise(F.col(f"_v{i}")) for i in timed})


def fold_sql(of: str, v: str) -> str:
    """The tally's fold of a kept input's values ``v`` into its sum field (SQL text)."""
    if of == SET:
        return f"array_sort(collect_set({v}))"
    if of == LIST:
        return f"array_sort(collect_list({v}))"
    if of == HLL:
        return f"hll_sketch_agg({v}, {HLL_LG_K})"
    return f"kll_sketch_agg_double({v}, {KLL_K})"


def merge(of: str, col: Column) -> Column:
    """The merge of a kept input's sum fields over rows (nulls skipped), as the engine's state merge."""
    if of in (HLL, KLL):
        return sketch_merge(col, of)
    return collection_merge(F.collect_list(col), of)

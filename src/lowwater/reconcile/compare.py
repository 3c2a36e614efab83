"""Per window: the batch truth, the expected stream value, the rows by cause, and the stream's fold, side by side.

One ``groupBy(key, window)`` over the (row, window) pairs computes, with
conditional aggregates (no second pass over the log):

* the batch truth (``t_<column>``): every ``truth`` pair;
* the expected stream value (``e_<column>``): the pairs the stream counted --
  ``truth`` pairs with no cause, plus ``moved`` pairs of clipped rows it read
  and admitted (core/reconcile.py, *The explanation rule*);
* per cause, its rows and its value for ``count`` and each ``sum`` aggregate
  (``<cause>_rows``, ``<cause>_<column>``; clipped rows count ``+`` in the
  window of their written time and ``-`` in the one they were moved to).

Aggregates are read from the partial layout of ``core/partials.py`` through
``spark/aggtypes.result_expr``, so they have the stream's own types. Then a
full outer join with the stream's fold (``reconcile/stream.py``) on (keys,
window) gives each window its status: ``open`` (not fired: ``end > W`` of the
stream's last step; in flight as a whole), ``unexplained`` (a fired window
whose stream value is not the expected one), else ``explained``.
"""

from __future__ import annotations

from functools import reduce

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lowwater.config import PipelineConfig
from lowwater.core.partials import ROWS, Field
from lowwater.core.reconcile import CAUSES, REL_TOLERANCE
from lowwater.reconcile.log import MOVED, TRUTH
from lowwater.reconcile.position import StreamPosition
from lowwater.reconcile.stream import output_funcs
from lowwater.spark.aggtypes import result_expr
from lowwater.time import NEG_INF

COUNTS = ("count",)


def causes(pairs: DataFrame, late: DataFrame, policy: str, position: StreamPosition) -> DataFrame:
    """``pairs`` plus ``_cause`` (one of ``CAUSES`` or null: counted) and ``_sign``; ``none`` pairs are neither side.

    A window the stream has not fired (``end > W``) is in flight as a whole: its
    rows that no other cause explains are ``in_flight``.
    """
    w = position.watermark_us
    open_ = F.lit(True) if w <= NEG_INF else F.col("_we") > F.lit(w)
    stream_side = (F.col("_role") == MOVED) | ~F.col("_clipped")
    joined = pairs.join(late.withColumn("_late", F.lit(True)), ["_rid", "_ws"], "left")
    is_late = stream_side & F.coalesce(F.col("_late"), F.lit(False))
    too_late = "too_late" if policy == "side_output" else "dropped"
    truth = (F.when(F.col("_unread"), F.lit("in_flight")).when(F.col("_clipped"), F.lit("clipped"))
             .when(is_late, F.lit(too_late)).when(open_, F.lit("in_flight")))
    moved = F.when(F.col("_unread") | is_late | open_, F.lit("none")).otherwise(F.lit("clipped"))
    role = F.col("_role") == TRUTH
    # A corrected window holds the batch truth of the rows its correction saw: those are counted.
    covered = F.coalesce(F.col("_covered"), F.lit(False))
    truth = F.when(covered, F.lit(None).cast("string")).otherwise(truth)
    moved = F.when(covered, F.lit("none")).otherwise(moved)
    return joined.withColumn("_cause", F.when(role, truth).otherwise(moved)).withColumn(
        "_sign", F.when(role, F.lit(1)).otherwise(F.lit(-1)))


def _partial(cond: Column, n_values: int, prefix: str) -> list[Column]:
    out = [F.count(F.when(cond, F.lit(1))).alias(f"{prefix}_n")]
    for i in range(n_values):
        v = F.when(cond, F.col(f"_v{i}"))
        out += [F.sum(v).alias(f"{prefix}_s{i}"), F.min(v).alias(f"{prefix}_mn{i}"),
                F.max(v).alias(f"{prefix}_mx{i}"), F.count(v).alias(f"{prefix}_nn{i}")]
    return out


def _outputs(cfg: PipelineConfig, types: dict[str, T.DataType], prefix: str) -> list[Column]:
    values = cfg.window.value_columns
    out = [F.col(f"{prefix}_n").cast("long").alias(f"{prefix[1:]}_count")]
    for a in cfg.window.aggregations:
        i = values.index(a.column)

        def col(f: Field, i: int = i) -> Column:
            return F.col(f"{prefix}{f.column(i)}" if f is not ROWS else f"{prefix}_n")

        out.append(result_expr(a.func, types[a.column], col).alias(f"{prefix[1:]}_{a.name}"))
    return out


def per_window(cfg: PipelineConfig, pairs: DataFrame, types: dict[str, T.DataType]) -> DataFrame:
    """One row per (keys, window) of the log: ``t_*``, ``e_*`` and the cause columns."""
    n = len(cfg.window.value_columns)
    counted = (F.col("_cause").isNull() & (F.col("_role") == TRUTH)) | (
        (F.col("_cause") == "clipped") & (F.col("_role") == MOVED))
    aggs = _partial(F.col("_role") == TRUTH, n, "_t") + _partial(counted, n, "_e")
    values = cfg.window.value_columns
    for c in CAUSES:
        hit = F.col("_cause") == c
        aggs.append(F.sum(F.when(hit, F.col("_sign")).otherwise(0)).cast("long").alias(f"{c}_rows"))
        for a in cfg.window.aggregations:
            v = F.col(f"_v{values.index(a.column)}")
            if a.func == "sum":
                aggs.append(F.sum(F.when(hit, F.col("_sign") * v)).alias(f"{c}_{a.name}"))
            elif a.func == "count":
                aggs.append(F.sum(F.when(hit & v.isNotNull(), F.col("_sign")).otherwise(0)).cast("long")
                            .alias(f"{c}_{a.name}"))
    grouped = pairs.filter(F.col("_cause").isNull() | (F.col("_cause") != "none")).groupBy(
        *cfg.window.key, "_ws", "_we").agg(*aggs)
    keep = [*cfg.window.key, "_ws", "_we", *[c for c in grouped.columns if not c.startswith(("_t_", "_e_"))
                                             and c not in (*cfg.window.key, "_ws", "_we")]]
    return grouped.select(*keep, *_outputs(cfg, types, "_t"), *_outputs(cfg, types, "_e"))


def _same(a: Column, b: Column, dt: T.DataType) -> Column:
    if isinstance(dt, T.DoubleType | T.FloatType):
        close = F.abs(a - b) <= F.lit(REL_TOLERANCE) * F.greatest(F.lit(1.0), F.abs(a), F.abs(b))
        return a.eqNullSafe(b) | F.coalesce(close, F.lit(False))
    return a.eqNullSafe(b)


def side_by_side(cfg: PipelineConfig, windows: DataFrame, stream: DataFrame, position: StreamPosition) -> DataFrame:
    """Full outer join of the log's windows and the stream's fold; differences, status and ``_differs``."""
    keys = list(cfg.window.key)
    s = stream.withColumn("_ws", F.unix_micros("window_start")).withColumn("_we", F.unix_micros("window_end"))
    s = s.drop("window_start", "window_end")
    s = s.select(*[F.col(k).alias(f"_sk_{k}") for k in keys], "_ws", "_we",
                                                    *[c for c in s.columns if c not in (*keys, "_ws", "_we")])
    cond = reduce(lambda x, y: x & y, [F.col(k).eqNullSafe(F.col(f"_sk_{k}")) for k in keys],
                  F.lit(True)) & (windows["_ws"] == s["_ws"]) & (windows["_we"] == s["_we"])
    j = windows.join(s, cond, "full_outer")
    out = j.select(
        *[F.coalesce(F.col(k), F.col(f"_sk_{k}")).alias(k) for k in keys],
        F.coalesce(windows["_ws"], s["_ws"]).alias("_ws"), F.coalesce(windows["_we"], s["_we"]).alias("_we"),
        *[c for c in j.columns if c not in (*keys, "_ws", "_we") and not c.startswith("_sk_")],
    )
    differs, wrong = F.lit(False), F.lit(False)
    cols = []
    for col, func in output_funcs(cfg).items():
        dt = out.schema[f"t_{col}"].dataType
        t, e, st = F.col(f"t_{col}"), F.col(f"e_{col}"), F.col(f"s_{col}")
        if func in COUNTS:
            t, e, st = (F.coalesce(x, F.lit(0).cast(dt)) for x in (t, e, st))
        st = st.cast(dt)
        differs = differs | ~_same(t, st, dt)
        wrong = wrong | ~_same(e, st, dt)
        cols += [t.alias(f"batch_{col}"), st.alias(f"stream_{col}")]
        if func in ("count", "sum", "avg", "min", "max"):
            zero = F.lit(0).cast(dt)
            cols += [(F.coalesce(t, zero) - F.coalesce(st, zero)).alias(f"diff_{col}"),
                     F.when(~_same(e, st, dt), F.coalesce(e, zero) - F.coalesce(st, zero)).alias(f"unexplained_{col}")]
    w = position.watermark_us
    is_open = F.lit(True) if w <= NEG_INF else F.col("_we") > F.lit(w)
    status = F.when(is_open, F.lit("open")).when(wrong, F.lit("unexplained")).otherwise(F.lit("explained"))
    cause_cols = [c for c in out.columns if c.startswith(CAUSES)]
    return out.select(
        *keys, F.timestamp_micros("_ws").alias("window_start"), F.timestamp_micros("_we").alias("window_end"),
        "_ws", "_we", status.alias("status"), *cols, *[F.coalesce(F.col(c), F.lit(0).cast(out.schema[c].dataType))
                                                       .alias(c) for c in cause_cols],
        F.coalesce(F.col("_last_rev"), F.lit(-1)).alias("_last_rev"),
        (F.col("_we") + F.lit(cfg.window.allowed_lateness_us) <= F.lit(w)).alias("_freed"),
        (differs | (wrong & ~is_open)).alias("_differs"), differs.alias("_truth_differs"),
    )

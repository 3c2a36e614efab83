"""Per window: the log's side and the stream's fold (one row each, ``attribution.per_window``), compared.

Each window gets its differences and its status: ``open`` (not fired: ``end > W`` of the
stream's last step; in flight as a whole), ``unexplained`` (a fired window
whose stream value is not the expected one), else ``explained``.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lowwater.config import PipelineConfig
from lowwater.core.reconcile import CAUSES, REL_TOLERANCE, rule
from lowwater.reconcile.position import StreamPosition
from lowwater.reconcile.stream import output_funcs
from lowwater.time import NEG_INF

COUNTS = ("count",)


def _same(a: Column, b: Column, dt: T.DataType, scale: Column | None = None) -> Column:
    """Equal; doubles to a relative ``REL_TOLERANCE`` of the largest of 1, ``|a|``, ``|b|`` and ``scale``.

    ``scale``: the window's ``sum(|v|)`` for a sum (per row for an average),
    ``m_<column>`` (``attribution.magnitudes``): summing the same doubles in
    another order, or taking the ``late/`` rows back out of a total, is off
    by a few ulps of that, which can be far more than of the result.
    """
    if isinstance(dt, T.DoubleType | T.FloatType):
        big = F.greatest(F.lit(1.0), F.abs(a), F.abs(b), *([F.coalesce(scale, F.lit(0.0))] if scale is not None
                                                            else []))
        close = F.abs(a - b) <= F.lit(REL_TOLERANCE) * big
        return a.eqNullSafe(b) | F.coalesce(close, F.lit(False))
    return a.eqNullSafe(b)


def side_by_side(cfg: PipelineConfig, out: DataFrame, position: StreamPosition) -> DataFrame:
    """Each window's batch, expected and stream values (``attribution.per_window``): differences and status."""
    keys = list(cfg.window.key)
    differs, wrong = F.lit(False), F.lit(False)
    cols = []
    for col, func in output_funcs(cfg).items():
        dt = out.schema[f"t_{col}"].dataType
        t, e, st = F.col(f"t_{col}"), F.col(f"e_{col}"), F.col(f"s_{col}")
        if func in COUNTS:
            t, e, st = (F.coalesce(x, F.lit(0).cast(dt)) for x in (t, e, st))
        st = st.cast(dt)
        scale = None
        if f"m_{col}" in out.columns:
            scale = F.col(f"m_{col}")
            if func == "avg":
                scale = scale / F.greatest(F.lit(1), F.col("t_count"))
        cols += [t.alias(f"batch_{col}"), st.alias(f"stream_{col}")]
        if rule(cfg.window.accumulation, func) is None:  # not folded (a discarding avg): shown, not compared
            cols += [F.lit(None).cast(dt).alias(f"diff_{col}"), F.lit(None).cast(dt).alias(f"unexplained_{col}")]
            continue
        differs = differs | ~_same(t, st, dt, scale)
        wrong = wrong | ~_same(e, st, dt, scale)
        if func in ("count", "sum", "avg", "min", "max"):
            zero = F.lit(0).cast(dt)
            cols += [(F.coalesce(t, zero) - F.coalesce(st, zero)).alias(f"diff_{col}"),
                     F.when(~_same(e, st, dt, scale), F.coalesce(e, zero) - F.coalesce(st, zero))
                     .alias(f"unexplained_{col}")]
    w = position.watermark_us
    is_open = F.lit(True) if w <= NEG_INF else F.col("_we") > F.lit(w)
    status = F.when(is_open, F.lit("open")).when(wrong, F.lit("unexplained")).otherwise(F.lit("explained"))
    cause_cols = [c for c in out.columns if c.startswith(CAUSES)]
    return out.select(
        *keys, F.timestamp_micros("_ws").alias("window_start"), F.timestamp_micros("_we").alias("window_end"),
        "_ws", "_we", status.alias("status"), *cols, *[F.coalesce(F.col(c), F.lit(0).cast(out.schema[c].dataType))
                                                       .alias(c) for c in cause_cols],
        F.coalesce(F.col("_last_rev"), F.lit(-1)).alias("_last_rev"), "_dead_n", "_clipped_n",
        (F.col("_we") + F.lit(cfg.window.allowed_lateness_us) <= F.lit(w)).alias("_freed"),
        (differs | (wrong & ~is_open)).alias("_differs"), differs.alias("_truth_differs"),
    )

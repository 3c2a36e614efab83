"""Per window: the log's side and the stream's fold (one row each, ``attribution.per_window``), compared.

Each window gets its differences and its status: ``open`` (not fired: ``end > W`` of the
stream's last step; in flight as a whole), ``unexplained`` (a fired window
whose stream value is not the expected one), else ``explained``.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import types as T

from lowwater.config import PipelineConfig
from lowwater.core.reconcile import CAUSES, REL_TOLERANCE, rule
from lowwater.reconcile.position import StreamPosition
from lowwater.reconcile.stream import output_funcs
from lowwater.spark.sqltext import cast, q

COUNTS = ("count",)


def _same(a: str, b: str, dt: T.DataType, scale: str | None = None) -> str:
    """Equal; doubles to a relative ``REL_TOLERANCE`` of the largest of 1, ``|a|``, ``|b|`` and ``scale``.

    ``scale``: the window's ``sum(|v|)`` for a sum (per row for an average),
    ``m_<column>`` (``attribution.magnitudes``): summing the same doubles in
    another order, or taking the ``late/`` rows back out of a total, is off
    by a few ulps of that, which can be far more than of the result.
    """
    if isinstance(dt, T.DoubleType | T.FloatType):
        big = ", ".join(["1.0D", f"abs({a})", f"abs({b})", *([f"coalesce({scale}, 0.0D)"] if scale else [])])
        close = f"abs({a} - {b}) <= CAST({REL_TOLERANCE!r} AS DOUBLE) * greatest({big})"
        return f"(({a} <=> {b}) OR coalesce({close}, false))"
    return f"({a} <=> {b})"


def side_by_side(cfg: PipelineConfig, out: DataFrame, position: StreamPosition) -> DataFrame:
    """Each window's batch, expected and stream values (``attribution.per_window``): differences and status."""
    differs, wrong = ["false"], ["false"]
    cols = []
    for col, func in output_funcs(cfg).items():
        dt = out.schema[f"t_{col}"].dataType
        t, e, st = q(f"t_{col}"), q(f"e_{col}"), q(f"s_{col}")
        if func in COUNTS:
            t, e, st = (f"coalesce({x}, {cast('0', dt)})" for x in (t, e, st))
        st = cast(st, dt)
        scale = None
        if f"m_{col}" in out.columns:
            scale = q(f"m_{col}")
            if func == "avg":
                scale = f"({scale} / greatest(1, t_count))"
        cols += [f"{t} AS {q(f'batch_{col}')}", f"{st} AS {q(f'stream_{col}')}"]
        if rule(cfg.window.accumulation, func) is None:  # not folded (a discarding avg): shown, not compared
            cols += [f"{cast('NULL', dt)} AS {q(f'diff_{col}')}", f"{cast('NULL', dt)} AS {q(f'unexplained_{col}')}"]
            continue
        differs.append(f"NOT {_same(t, st, dt, scale)}")
        wrong.append(f"NOT {_same(e, st, dt, scale)}")
        if not isinstance(dt, T.NumericType):  # a min/max of strings or dates: compared, no difference to show
            cols += [f"{cast('NULL', dt)} AS {q(f'diff_{col}')}", f"{cast('NULL', dt)} AS {q(f'unexplained_{col}')}"]
        elif func in ("count", "sum", "avg", "min", "max"):
            zero = cast("0", dt)
            cols += [f"coalesce({t}, {zero}) - coalesce({st}, {zero}) AS {q(f'diff_{col}')}",
                     f"CASE WHEN NOT {_same(e, st, dt, scale)} THEN coalesce({e}, {zero}) - coalesce({st}, {zero}) "
                     f"END AS {q(f'unexplained_{col}')}"]
    is_open = position.open_window()
    differs_, wrong_ = " OR ".join(differs), " OR ".join(wrong)
    status = f"CASE WHEN {is_open} THEN 'open' WHEN {wrong_} THEN 'unexplained' ELSE 'explained' END"
    cause_cols = [c for c in out.columns if c.startswith(CAUSES)]
    return out.selectExpr(
        *[q(k) for k in cfg.window.key], "timestamp_micros(_ws) AS window_start", "timestamp_micros(_we) AS window_end",
        "_ws", "_we", f"{status} AS status", *cols,
        *[f"coalesce({q(c)}, {cast('0', out.schema[c].dataType)}) AS {q(c)}" for c in cause_cols],
        # The revision of the window's last emission (-1: none), which a correction continues; whether the
        # batch truth differs from it (a correction changes the window). Both are reconcile/ columns.
        "coalesce(_last_rev, -1) AS last_revision", f"{differs_} AS batch_differs", "_dead_n", "_clipped_n",
        f"({differs_}) OR (({wrong_}) AND NOT ({is_open})) AS _differs",
    )

"""Per window: the log's side and the stream's fold (one row each, ``attribution.per_window``), compared.

Each window gets its differences and its status: ``open`` (not fired: ``end > W`` of the
stream's last step; in flight as a whole), ``unexplained`` (a fired window
whose stream value is not the expected one), else ``explained``.

An aggregate that cannot be compared is named in the window's ``not_compared``
(:func:`uncomparable`): a discarding average (a delta's average has no fold),
and a session's average over several heads with a null among its rows
(``sessions.fold``: the heads' averages are weighted by rows). A sketch is compared within its documented
error (``core/reconcile.within_sketch_error``), also for ``batch_differs``: a window is not corrected for a
sketch's own noise.
"""

from __future__ import annotations

from decimal import Decimal

from pyspark.sql import DataFrame
from pyspark.sql import types as T

from lowwater.config import PipelineConfig
from lowwater.core.partials import KLL_K
from lowwater.core.reconcile import CAUSES, HLL_EXACT, HLL_RSE, LATEST, MERGED_BY_HEADS, REL_TOLERANCE, SKETCHES, rule
from lowwater.reconcile.position import StreamPosition
from lowwater.reconcile.stream import output_funcs
from lowwater.runtime.sqltext import cast, expr, q

COUNTS = ("count",)


def uncomparable(cfg: PipelineConfig) -> list[str]:
    """The output columns that some window may leave uncompared (named in its ``not_compared``)."""
    mode, session = cfg.window.accumulation, cfg.window.is_session
    return [col for col, func in output_funcs(cfg).items()
            if rule(mode, func) is None or (session and func in MERGED_BY_HEADS and rule(mode, func) == LATEST)]


def _same(a: str, b: str, dt: T.DataType, scale: str | None = None, merged: str | None = None) -> str:
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
    if merged and isinstance(dt, T.DecimalType):  # each head's average was rounded to the last digit
        unit = cast(f"'{Decimal(1).scaleb(-dt.scale):f}'", dt)
        return f"(({a} <=> {b}) OR coalesce({merged} AND abs({a} - {b}) <= {unit}, false))"
    return f"({a} <=> {b})"


def _sketch_same(col: str, func: str, side: str, a: str, b: str) -> str:
    """``core/reconcile.within_sketch_error`` in SQL: ``a`` (the batch's or expected value, ``side`` t or e) and the
    stream's ``b`` of a sketch."""
    if func == "approx_count_distinct":
        big = f"greatest({a}, {b})"
        near = f"{big} > {HLL_EXACT} AND abs({a} - {b}) <= CAST({6 * HLL_RSE!r} AS DOUBLE) * {big}"
    else:  # approx_percentile: exact up to KLL_K values, else between the sketch's quantiles at p -+ tolerance
        n, lo, hi = (q(f"_q{x}_{side}_{col}") for x in ("n", "lo", "hi"))
        near = f"coalesce({n}, 0) > {KLL_K} AND {b} BETWEEN {lo} AND {hi}"
    return f"(({a} <=> {b}) OR coalesce({near}, false))"


def _pieces(cfg: PipelineConfig, out: DataFrame, col: str, func: str, src: str = "s_",
            heads: str = "_heads") -> tuple:
    """SQL text of one output column's batch, expected and stream values (the stream's from ``src``), its type,
    its tolerance scale, and for a session's average its merged and not-compared conditions."""
    dt = out.schema[f"t_{col}"].dataType
    t, e, st = q(f"t_{col}"), q(f"e_{col}"), q(f"{src}{col}")
    if func in COUNTS:
        t, e, st = (f"coalesce({x}, {cast('0', dt)})" for x in (t, e, st))
    st = cast(st, dt)
    scale = None
    if f"m_{col}" in out.columns:
        scale = q(f"m_{col}")
        if func == "avg":
            scale = f"({scale} / greatest(1, t_count))"
    merged = skip = None
    if col in uncomparable(cfg) and rule(cfg.window.accumulation, func) is not None:  # a session's avg
        merged = f"coalesce({heads}, 0) > 1"
        skip = f"({merged} AND coalesce({q(f'_nulls_{col}')}, false))"
    return t, e, st, dt, scale, merged, skip


def _reading(cfg: PipelineConfig, out: DataFrame) -> DataFrame:
    """Accumulating sessions with a second reading of their heads (``a_<column>``, ``core/reconcile.readings``):
    the stream value is the second reading's where the first does not explain the window and it does."""
    def explains(src: str, heads: str) -> str:
        ok = []
        for col, func in output_funcs(cfg).items():
            _, e, st, dt, scale, merged, skip = _pieces(cfg, out, col, func, src, heads)
            ok.append(f"({skip} OR {_same(e, st, dt, scale, merged)})" if skip else _same(e, st, dt, scale, merged))
        return " AND ".join(ok)

    alt = f"NOT ({explains('s_', '_heads')}) AND ({explains('a_', '_aheads')})"
    latest = [c for c in output_funcs(cfg) if f"a_{c}" in out.columns]
    return out.withColumn("_alt", expr(alt)).withColumns(
        {**{f"s_{c}": expr(f"CASE WHEN _alt THEN {q(f'a_{c}')} ELSE {q(f's_{c}')} END") for c in latest},
         "_heads": expr("CASE WHEN _alt THEN _aheads ELSE _heads END")})


def side_by_side(cfg: PipelineConfig, out: DataFrame, position: StreamPosition) -> DataFrame:
    """Each window's batch, expected and stream values (``attribution.per_window``): differences and status."""
    if "a_count" in out.columns:
        out = _reading(cfg, out)
    differs, wrong = ["false"], ["false"]
    cols, skipped = [], []
    for col, func in output_funcs(cfg).items():
        t, e, st, dt, scale, merged, skip = _pieces(cfg, out, col, func)
        if skip:
            st = f"CASE WHEN {skip} THEN {cast('NULL', dt)} ELSE {st} END"
            skipped.append((col, skip))
        cols += [f"{t} AS {q(f'batch_{col}')}", f"{st} AS {q(f'stream_{col}')}"]
        if rule(cfg.window.accumulation, func) is None:  # not folded (a discarding avg): shown, not compared
            cols += [f"{cast('NULL', dt)} AS {q(f'diff_{col}')}", f"{cast('NULL', dt)} AS {q(f'unexplained_{col}')}"]
            skipped.append((col, "true"))
            continue
        guard = f"NOT {skip} AND " if skip else ""
        same_t, same_e = (_sketch_same(col, func, side, x, st) if func in SKETCHES
                          else _same(x, st, dt, scale, merged) for side, x in (("t", t), ("e", e)))
        differs.append(f"({guard}NOT {same_t})")
        wrong.append(f"({guard}NOT {same_e})")
        if not isinstance(dt, T.NumericType):  # a min/max of strings or dates: compared, no difference to show
            cols += [f"{cast('NULL', dt)} AS {q(f'diff_{col}')}", f"{cast('NULL', dt)} AS {q(f'unexplained_{col}')}"]
        else:
            zero = cast("0", dt)
            diff = f"coalesce({t}, {zero}) - coalesce({st}, {zero})"
            cols += [f"{f'CASE WHEN {skip} THEN NULL ELSE {diff} END' if skip else diff} AS {q(f'diff_{col}')}",
                     f"CASE WHEN {guard}NOT {same_e} THEN coalesce({e}, {zero}) - "
                     f"coalesce({st}, {zero}) END AS {q(f'unexplained_{col}')}"]
    is_open = position.open_window()
    differs_, wrong_ = " OR ".join(differs), " OR ".join(wrong)
    status = f"CASE WHEN {is_open} THEN 'open' WHEN {wrong_} THEN 'unexplained' ELSE 'explained' END"
    cause_cols = [c for c in out.columns if c.startswith(CAUSES)]
    names = ", ".join(f"CASE WHEN {cond} THEN '{col}' END" for col, cond in skipped)
    not_compared = f"nullif(concat_ws(',', {names}), '')" if skipped else "CAST(NULL AS STRING)"
    return out.selectExpr(
        *[q(k) for k in cfg.window.key], "timestamp_micros(_ws) AS window_start", "timestamp_micros(_we) AS window_end",
        "_ws", "_we", f"{status} AS status", *cols, f"{not_compared} AS not_compared",
        *[f"coalesce({q(c)}, {cast('0', out.schema[c].dataType)}) AS {q(c)}" for c in cause_cols],
        # The revision of the window's last emission (-1: none), which a correction continues; whether the
        # batch truth differs from it (a correction changes the window). Both are reconcile/ columns.
        "coalesce(_last_rev, -1) AS last_revision", f"{differs_} AS batch_differs", "_dead_n", "_clipped_n",
        f"({differs_}) OR (({wrong_}) AND NOT ({is_open})) AS _differs",
    )

"""Where each row of a window went: its cause, then the windows' truth, expected stream value and causes.

Two aggregations, so that the log is scanned once and never cached:

1. :func:`tally` -- one ``groupBy`` over the log's (row, window) pairs into
   partials (``core/partials.py``: rows, and per value column the sum, min,
   max or non-null count the aggregations read) per (keys, window, role,
   and the flags its cause is made of); :func:`causes` names the cause of each
   tally row. Its output is a few rows per window plus one per too-late row
   matched by hash.
2. :func:`per_window` -- each tally row split into its late portion and the
   rest (:func:`split`, a projection), then one ``groupBy(keys, window)`` over
   those partials and the stream's emissions (``stream.fold_aggs``: no join), with
   conditional merges:

   * the batch truth (``t_<column>``): every ``truth`` pair;
   * the expected stream value (``e_<column>``): the pairs the stream counted
     -- ``truth`` pairs with no cause, plus ``moved`` pairs of clipped rows it
     read and admitted (core/reconcile.py, *The explanation rule*);
   * per cause, its rows and its value for ``count`` and each ``sum``
     aggregate (``<cause>_rows``, ``<cause>_<column>``; clipped rows count
     ``+`` in the window of their written time and ``-`` in the one they were
     moved to).

**Too-late rows taken back out** (``late.as_pairs``, counts/sums/averages)
are ``late/``'s own rows, marked ``_neg``: each becomes its late portion
(whole, in its late cause) and the same partial negated in the cause it
would have had, so the window's expected value loses it (:func:`_portions`).

**Too-late rows matched by hash** (``late.mark``) carry ``_lh`` (their row
hash) and ``_copies`` (how many copies ``late/`` holds); their partial groups
rows identical in every column. If the log holds more identical rows than
``late/`` copies, only ``_copies`` of them are late: the group is split into
a late portion and the rest, whose partials are the same value scaled
(identical rows have identical values). Pairs matched exactly (row id:
``drop`` and sessions) have no ``_lh``: the whole group is late.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lowwater.config import PipelineConfig
from lowwater.core.aggregates import input_index
from lowwater.core.partials import COLUMN, KLL, OUTPUTS, ROWS, SUM, Field
from lowwater.core.reconcile import CAUSES, MERGED_BY_HEADS, QUANTILE_TOLERANCE
from lowwater.reconcile import kept
from lowwater.reconcile.log import DEAD, MOVED, TRUTH
from lowwater.reconcile.position import StreamPosition
from lowwater.runtime.sqltext import cast, expr, q
from lowwater.spark.aggtypes import result_expr

# A cause as a small int (CAUSES' order; null: counted), compared in every per-window aggregate.
CODE = {c: i for i, c in enumerate(CAUSES)}
NONE = len(CAUSES)  # a moved pair that is on neither side (its row is not counted where it was moved)


def causes(pairs: DataFrame, policy: str, position: StreamPosition) -> DataFrame:
    """``pairs`` (or their :func:`tally`) plus ``_cn`` (the cause of a pair that is not too late; null: counted)
    and ``_cl`` (if it is).

    ``_cl`` differs from ``_cn`` only on pairs marked ``_late``. A window the
    stream has not fired (``end > W``) is in flight as a whole: its rows that no
    other cause explains are ``in_flight``.
    """
    open_ = position.open_window()
    too_late = CODE["too_late" if policy == "side_output" else "dropped"]
    in_flight, clipped = CODE["in_flight"], CODE["clipped"]

    def cause(is_late: str) -> str:
        truth = (f"CASE WHEN _unread THEN {in_flight} WHEN _clipped THEN {clipped} WHEN {is_late} THEN {too_late} "
                 f"WHEN {open_} THEN {in_flight} END")
        moved = f"CASE WHEN _unread OR {is_late} OR {open_} THEN {NONE} ELSE {clipped} END"
        # A corrected window holds the batch truth of the rows its correction saw: those are counted.
        covered = "coalesce(_covered, false)"
        return (f"CASE WHEN _role = {DEAD} THEN {NONE} WHEN _role = {TRUTH} "
                f"THEN (CASE WHEN {covered} THEN CAST(NULL AS INT) ELSE {truth} END) "
                f"ELSE (CASE WHEN {covered} THEN {NONE} ELSE {moved} END) END")

    return pairs.withColumn("_cn", expr(cause("false"))).withColumn(
        "_cl", expr(f"CASE WHEN coalesce(_late, false) THEN {cause('true')} ELSE _cn END"))


def fields(cfg: PipelineConfig) -> list[tuple[str, int]]:
    """The partial fields (prefix, value index) the aggregations read: only those are computed."""
    inputs = cfg.window.value_inputs
    out: dict[tuple[str, int], None] = {}
    for a in cfg.window.aggregations:
        where = input_index(inputs, a)
        for r in OUTPUTS[a.func].reads:
            out[(r.field.prefix, where(r.of))] = None
            if r.field is SUM:  # a sum is null over no value (``_partial``): its non-null count decides
                out[("_nn", where(r.of))] = None
    return list(out)


_FOLD = {"_s": "sum", "_mn": "min", "_mx": "max", "_nn": "count"}
_MERGE = {"_s": "sum", "_mn": "min", "_mx": "max", "_nn": "sum"}


# Packed into one int key, role in the high bits. ``_neg``: a ``late/`` row taken back out (``late.as_pairs``).
_FLAGS = ("_role", "_neg", "_clipped", "_unread", "_covered", "_late")
_BITS = (16, 8, 4, 2, 1)


def tally(cfg: PipelineConfig, pairs: DataFrame, by_window: bool = False) -> DataFrame:
    """Partials (``_n`` and the :func:`fields` ``_s{i}``...) per (keys, window, role, what decides the cause, match).

    Grouped by the flags a cause is made of (``_clipped``, ``_unread``,
    ``_covered``, ``_late``), not by the cause: :func:`causes` runs on the
    tally's few rows, not on every pair. The role and flags are one int
    key, and a tumbling or hopping window is its start alone (its end
    follows): fewer, fixed-width keys for the aggregation to hash and shuffle.

    ``by_window``: the caller knows that every pair of a window has the same
    flags (nothing can be clipped, unread, corrected or matched late: the
    common case, ``job.reconcile``). Grouped by keys and window start alone,
    the tally comes out partitioned by window, which :func:`per_window` then
    keeps: its aggregation runs in the tally's own tasks, with no second
    shuffle of every window.
    """
    matched = "_lh" in pairs.columns  # else no pair is matched to late/ by hash: no copies to count
    aggs = ["count(1) AS _n", *(["max(_copies) AS _copies"] if matched else [])]
    ofs = [of for _, of in cfg.window.value_inputs]
    aggs += [f"{kept.fold_sql(ofs[i], f'_v{i}') if f == '_s' and ofs[i] in kept.KEPT else f'{_FOLD[f]}(_v{i})'} "
             f"AS {f}{i}" for f, i in fields(cfg)]
    mags = magnitudes(cfg, pairs)
    aggs += [f"sum(abs(_v{i})) AS _a{i}" for i in mags]
    late = "coalesce(_late, false)" if "_late" in pairs.columns else "false"
    neg = "_neg" if "_neg" in pairs.columns else "false"
    flags = (neg, "_clipped", "_unread", "_covered", late)
    packed = " + ".join(["CAST(_role AS INT) * 32", *[f"CASE WHEN {flag} THEN {bit} ELSE 0 END"
                                                      for bit, flag in zip(_BITS, flags, strict=True)]])
    keys, sessions = list(cfg.window.key), cfg.window.is_session
    if by_window:  # the flags are the window's (a dead letter's null window is a group of its own)
        grouped = pairs.groupBy(*keys, "_ws").agg(*[expr(a) for a in (f"max({packed}) AS _flags", *aggs)])
    else:
        grouped = pairs.groupBy(*keys, "_ws", *(["_we"] if sessions else []), expr(packed, "_flags"),
                                *(["_lh"] if matched else [])).agg(*[expr(a) for a in aggs])
    lh = ["_lh", "_copies"] if matched else ["CAST(NULL AS BIGINT) AS _lh", "CAST(NULL AS BIGINT) AS _copies"]
    we = "_we" if sessions else f"_ws + {cfg.window.size_us} AS _we"
    unpacked = ["shiftright(_flags, 5) AS _role", *[f"(_flags & {bit}) != 0 AS {name}"
                                                    for bit, name in zip(_BITS, _FLAGS[1:], strict=True)]]
    return grouped.selectExpr(*[q(k) for k in keys], "_ws", we, *unpacked, *lh, "_n",
                              *[f"{f}{i}" for f, i in fields(cfg)], *[f"_a{i}" for i in mags])


def as_tally(cfg: PipelineConfig, pairs: DataFrame, like: T.StructType) -> DataFrame:
    """Each of a few ``pairs`` as a tally row of its own (``_n`` = 1), with the columns and types of ``like``
    (:func:`tally`'s output): a projection, no aggregation.

    For ``late/``'s rows taken back out (``late.as_pairs``): unioned into the
    log's scan they kept Spark from fusing the scan with the tally's
    aggregation (a quarter of the scan's time at 10 M rows); after the tally
    they are a few more rows of it. The partials are additive, so the
    per-window merge gives the same totals either way.
    """
    late = F.coalesce(F.col("_late"), F.lit(False)) if "_late" in pairs.columns else F.lit(False)
    neg = F.col("_neg") if "_neg" in pairs.columns else F.lit(False)
    flags = dict(zip(_FLAGS[1:], (neg, F.col("_clipped"), F.col("_unread"), F.col("_covered"), late), strict=True))

    def partial(f: str, i: int) -> Column:
        v = F.col(f"_v{i}")
        if f == "_nn":
            return F.when(v.isNotNull(), F.lit(1)).otherwise(F.lit(0))
        return F.abs(v) if f == "_a" else v

    cols = {k: F.col(k) for k in cfg.window.key}
    cols |= {"_ws": F.col("_ws"), "_we": F.col("_we"), "_role": F.col("_role"), **flags,
             "_lh": F.lit(None), "_copies": F.lit(None), "_n": F.lit(1)}
    cols |= {f"{f}{i}": partial(f, i) for f, i in fields(cfg)}
    cols |= {c: partial("_a", int(c[2:])) for c in like.names if re.fullmatch(r"_a\d+", c)}
    return pairs.select(*[cols[f.name].cast(f.dataType).alias(f.name) for f in like.fields])


def magnitudes(cfg: PipelineConfig, pairs: DataFrame) -> list[int]:
    """The value columns summed as doubles (a ``sum`` or ``avg``): their rows' ``sum(|v|)`` (``_a{i}``) scales
    the tolerance a window's sums are compared with (``compare.py``): sums of the same doubles in another
    order, or with the ``late/`` rows taken back out, differ by a few ulps of that, not of the result."""
    values = cfg.window.value_columns
    out = {values.index(a.column) for a in cfg.window.aggregations if a.func in ("sum", "avg")}
    return sorted(i for i in out if isinstance(pairs.schema[f"_v{i}"].dataType, T.DoubleType))


class _Portion:
    """The late part (``late``) or the rest of a tally row, as SQL text of its partial columns."""

    def __init__(self, rows: str, cause: str, negated: str) -> None:
        self.rows, self.cause, self.negated = rows, cause, negated

    def value(self, field: str, i: int, dt: T.DataType, whole_only: bool = False) -> str:
        """The portion's ``field`` of value column ``i``: the whole partial, nothing, or a share of identical rows.

        A share only happens to rows identical in every column: a sum is
        ``rows`` times the one value (``sum / n``), a non-null count ``rows`` or
        0, a min or max the value itself. ``whole_only``: a collection or sketch, whose rows are matched late
        exactly (``kept.py``): its portion is the whole partial or nothing.
        """
        col, rows = f"{field}{i}", f"({self.rows})"
        whole, empty = f"{rows} = _n", f"{rows} = 0"
        if whole_only:
            return f"CASE WHEN NOT ({empty}) THEN {col} END"
        if field in ("_s", "_a"):
            one = f"{col} div _n" if isinstance(dt, T.LongType) else f"{col} / _n"
            share = cast(f"({one}) * {rows}", dt)
            return (f"CASE WHEN {whole} THEN {col} WHEN {self.negated} THEN -{col} WHEN {empty} "
                    f"THEN {cast('NULL', dt)} ELSE {share} END")
        if field == "_nn":
            share = f"CASE WHEN {col} > 0 THEN {rows} ELSE 0 END"
            return (f"CAST(CASE WHEN {whole} THEN {col} WHEN {self.negated} THEN -{col} WHEN {empty} THEN 0 "
                    f"ELSE {share} END AS BIGINT)")
        return f"CASE WHEN NOT ({empty}) THEN {col} END"  # min, max: identical rows share them (never negated)


def _portions(cfg: PipelineConfig) -> list[_Portion]:
    """The late portion and the rest; a ``late/`` row taken back out (``_neg``) is its pair whole in its late
    cause, plus the same pair negated in the cause it would have had (so the window's sums lose it)."""
    late_rows = "CASE WHEN NOT _late THEN CAST(0 AS BIGINT) WHEN _lh IS NULL THEN _n ELSE least(_n, _copies) END"
    rest = f"CASE WHEN _neg THEN -_n ELSE _n - ({late_rows}) END"
    return [_Portion(late_rows, "_cl", "false"), _Portion(rest, "_cn", "_neg")]


def split(cfg: PipelineConfig, tallied: DataFrame, marked: bool = True) -> DataFrame:
    """Each tally row as its late portion (cause ``_cl``) and the rest (cause ``_cn``): one ``_cause`` per row.

    A projection (and an ``explode`` of two) over the small tally, so the
    per-window aggregate reads one cause per row: half the expressions to
    plan, compile and run. ``marked=False``: no row is marked late (the
    log's own pairs when ``late/`` is taken out apart), so each row is its rest
    alone: a projection, no ``explode``.
    """
    tf = fields(cfg)
    vtypes = {i: tallied.schema[f"_s{i}"].dataType for f, i in tf if f == "_s"}

    mags = [int(c[2:]) for c in tallied.columns if re.fullmatch(r"_a\d+", c)]

    ofs = [of for _, of in cfg.window.value_inputs]

    def named(p: _Portion) -> list[tuple[str, str]]:
        return [("_n", p.rows), ("_cause", p.cause),
                *[(f"{f}{i}", p.value(f, i, vtypes.get(i, T.LongType()), f == "_s" and ofs[i] in kept.KEPT))
                  for f, i in tf],
                *[(f"_a{i}", p.value("_a", i, T.DoubleType())) for i in mags]]

    def part(p: _Portion) -> str:
        return "named_struct(" + ", ".join(f"'{n}', {v}" for n, v in named(p)) + ")"

    late, rest = _portions(cfg)
    keep = [*cfg.window.key, "_ws", "_we", "_role", "_neg", "_clipped"]
    if not marked:
        return tallied.select(*keep, *[expr(v, n) for n, v in named(rest)])
    # Always both (a portion of no rows is filtered out): an explode of a plain array is generated code; one
    # chosen per row by a ``when`` built an array object per row (1.1 s of 10 M rows' 500,000 windows).
    out = tallied.select(*keep, expr(f"explode(array({part(late)}, {part(rest)}))", "_p"))
    return out.select(*keep, "_p.*").filter("_n != 0")


def _partial(cfg: PipelineConfig, cond: str, prefix: str) -> list[str | Column]:
    """The partial columns (``{prefix}_n`` and the :func:`fields`) of the split rows where ``cond`` holds."""
    out: list[str | Column] = [f"coalesce(sum(CASE WHEN {cond} THEN _n END), 0) AS {prefix}_n"]
    ofs = [of for _, of in cfg.window.value_inputs]

    def merged(field: str, i: int) -> str:
        return f"{_MERGE[field]}(CASE WHEN {cond} THEN {field}{i} END)"

    for field, i in fields(cfg):
        if field == "_s" and ofs[i] in kept.KEPT:  # a collection or sketch: its own merge, null over no value
            some = expr(f"coalesce({merged('_nn', i)}, 0) != 0")
            out.append(F.when(some, kept.merge(ofs[i], F.when(expr(cond), F.col(f"_s{i}")))).alias(f"{prefix}_s{i}"))
            continue
        m = merged(field, i)
        if field == "_nn":
            m = f"coalesce({m}, 0)"
        elif field == "_s":
            # Null over no value, as Spark's sum: late/ rows taken back out leave x + (-x) = 0, not "no rows".
            m = f"CASE WHEN coalesce({merged('_nn', i)}, 0) != 0 THEN {m} END"
        out.append(f"{m} AS {prefix}{field}{i}")
    return out


def _outputs(cfg: PipelineConfig, types: dict[str, T.DataType], prefix: str) -> list[Column]:
    inputs = cfg.window.value_inputs
    out = [F.col(f"{prefix}_n").cast("long").alias(f"{prefix[1:]}_count")]
    for a in cfg.window.aggregations:
        where = input_index(inputs, a)

        def col(f: Field, of: str = COLUMN, where: Callable[[str], int] = where) -> Column:
            return F.col(f"{prefix}{f.column(where(of))}" if f is not ROWS else f"{prefix}_n")

        out.append(result_expr(a.func, types[a.column], col, a.fraction).alias(f"{prefix[1:]}_{a.name}"))
    return out


def per_window(cfg: PipelineConfig, tallied: DataFrame, types: dict[str, T.DataType], stream: DataFrame,
               stream_aggs: list[Column], by_window: bool = False, taken: DataFrame | None = None,
               marked: bool = True, possible: frozenset[str] = frozenset(CAUSES)) -> DataFrame:
    """One row per (keys, window) of the log or the stream: ``t_*``, ``e_*``, the causes and the stream's fold.

    Plus one row with no window (``_ws`` null) holding the dead letters
    (``_dead_n``); ``_clipped_n`` counts clipped rows (the summary reads both).

    ``stream``: the emissions (keys, ``_ws``, ``_we`` and the results'
    columns), folded by ``stream_aggs`` (``stream.fold_aggs``) in the same
    ``groupBy`` as the tally: one shuffle of both, no join.

    ``by_window``: ``tallied`` is partitioned by (keys, window start)
    (:func:`tally`); the emissions are shuffled the same way, and Spark
    aggregates each window where its tally rows already are.

    ``taken``: ``late/``'s rows taken back out, as tally rows with their causes
    (``as_tally``, then :func:`causes`; partitioned like ``tallied`` when
    ``by_window``); ``marked=False``: no row of ``tallied`` is marked late
    (:func:`split`).

    ``possible``: the causes a row of this pipeline can have (``in_flight`` always); the others are constant
    columns, not aggregates: each aggregate is a buffer that every row of the window updates.
    """
    values = cfg.window.value_columns
    rows = split(cfg, tallied, marked)
    if taken is not None:
        rows = rows.unionByName(split(cfg, taken))
    truth, moved = f"_role = {TRUTH}", f"_role = {MOVED}"
    sign = f"CASE WHEN {truth} THEN 1 ELSE -1 END"
    counted = f"(_cause IS NULL AND {truth}) OR (_cause = {CODE['clipped']} AND {moved})"
    logged = f"({truth} AND NOT _neg)"  # the log's own pairs (not a late/ row taken back out)
    aggs = _partial(cfg, logged, "_t")  # the truth: every row, whatever its cause
    mags = {int(c[2:]) for c in rows.columns if re.fullmatch(r"_a\d+", c)}
    aggs += [f"sum(CASE WHEN {logged} THEN _a{values.index(a.column)} END) AS {q(f'm_{a.name}')}"
             for a in cfg.window.aggregations if a.func in ("sum", "avg") and values.index(a.column) in mags]
    # A window is compared when a pair is on one side: a truth pair, or a moved one the stream counted.
    aggs.append(f"sum(CASE WHEN coalesce(_cause != {NONE}, true) THEN _n END) AS _present")
    aggs += _partial(cfg, counted, "_e")
    by_cause_names: list[str] = []  # in CAUSES' order, aggregated or not
    absent = {}  # a cause no row can have: its value over no row, after the aggregation (no buffer to update)
    for c in CAUSES:
        hit, out = f"_cause = {CODE[c]}", (aggs if c in possible else None)
        by_cause = {f"{c}_rows": (f"CAST(sum(CASE WHEN {hit} THEN {sign} * _n ELSE 0 END) AS BIGINT)", "0")}
        for a in cfg.window.aggregations:
            i = values.index(a.column)
            if a.func == "sum":  # null over no row, typed as a cause that is always possible
                by_cause[f"{c}_{a.name}"] = (f"sum(CASE WHEN {hit} THEN {sign} * _s{i} END)",
                                             f"CASE WHEN false THEN {q(f'in_flight_{a.name}')} END")
            elif a.func == "count":
                by_cause[f"{c}_{a.name}"] = (f"CAST(sum(CASE WHEN {hit} THEN {sign} * _nn{i} ELSE 0 END) AS BIGINT)",
                                             "0")
        by_cause_names.extend(by_cause)
        for name, (agg, zero) in by_cause.items():
            if out is not None:
                out.append(f"{agg} AS {q(name)}")
            else:
                absent[name] = f"CAST({zero} AS BIGINT)" if zero == "0" else zero
    aggs += ["count(_em) AS _emissions", f"sum(CASE WHEN _role = {DEAD} THEN _n END) AS _dead_n"]
    if "clipped" in possible:
        aggs.append(f"sum(CASE WHEN {logged} AND _clipped THEN _n END) AS _clipped_n")
    else:
        absent["_clipped_n"] = "CAST(NULL AS BIGINT)"
    if by_window:
        stream = stream.repartition(*cfg.window.key, "_ws")
    both = rows.unionByName(stream.withColumn("_em", F.lit(True)), allowMissingColumns=True)
    grouped = both.groupBy(*cfg.window.key, "_ws", "_we").agg(
        *[expr(a) if isinstance(a, str) else a for a in aggs], *stream_aggs)
    grouped = grouped.filter(" OR ".join(f"coalesce({c}, 0) > 0" for c in ("_present", "_emissions", "_dead_n")))
    if absent:
        grouped = grouped.selectExpr("*", *[f"{v} AS {q(k)}" for k, v in absent.items()])
    if cfg.window.is_session:  # an average of several heads is weighted by rows: only with no null among them
        grouped = grouped.selectExpr("*", *[f"_e_n != _e_nn{values.index(a.column)} AS {q(f'_nulls_{a.name}')}"
                                            for a in cfg.window.aggregations if a.func == "avg"],
                                     *[f"true AS {q(f'_nulls_{a.name}')}" for a in cfg.window.aggregations
                                       if a.func in MERGED_BY_HEADS and a.func != "avg"])
    skip = {*cfg.window.key, "_ws", "_we", "_present", *by_cause_names}
    keep = [*cfg.window.key, "_ws", "_we", *[c for c in grouped.columns if not c.startswith(("_t_", "_e_"))
                                             and c not in skip], *by_cause_names]
    return grouped.select(*keep, *_outputs(cfg, types, "_t"), *_outputs(cfg, types, "_e"), *_quantile_bounds(cfg))


def _quantile_bounds(cfg: PipelineConfig) -> list[Column]:
    """Per ``approx_percentile``: the batch and expected sketches' values count (``_qn_t_<c>``, ``_qn_e_<c>``) and
    quantiles at ``p -+`` the tolerance (``_qlo_*``, ``_qhi_*``), which the stream's value must lie between
    (``core/reconcile.within_sketch_error``)."""
    inputs, out = cfg.window.value_inputs, []
    for a in cfg.window.aggregations:
        if a.func != "approx_percentile":
            continue
        i = input_index(inputs, a)(KLL)
        p = float(a.fraction or 0.0)
        lo, hi = max(0.0, p - QUANTILE_TOLERANCE), min(1.0, p + QUANTILE_TOLERANCE)
        for side in ("t", "e"):
            sketch = F.col(f"_{side}_s{i}")
            out += [F.col(f"_{side}_nn{i}").alias(f"_qn_{side}_{a.name}"),
                    F.kll_sketch_get_quantile_double(sketch, F.lit(lo)).alias(f"_qlo_{side}_{a.name}"),
                    F.kll_sketch_get_quantile_double(sketch, F.lit(hi)).alias(f"_qhi_{side}_{a.name}")]
    return out

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

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lowwater.config import PipelineConfig
from lowwater.core.partials import OUTPUTS, ROWS, Field
from lowwater.core.reconcile import CAUSES
from lowwater.reconcile.log import DEAD, MOVED, TRUTH
from lowwater.reconcile.position import StreamPosition
from lowwater.spark.aggtypes import result_expr
from lowwater.time import NEG_INF

# A cause as a small int (CAUSES' order; null: counted), compared in every per-window aggregate.
CODE = {c: i for i, c in enumerate(CAUSES)}
NONE = len(CAUSES)  # a moved pair that is on neither side (its row is not counted where it was moved)


def _code(cause: str) -> Column:
    return F.lit(CODE[cause])


def causes(pairs: DataFrame, policy: str, position: StreamPosition) -> DataFrame:
    """``pairs`` (or their :func:`tally`) plus ``_cn`` (the cause of a pair that is not too late; null: counted)
    and ``_cl`` (if it is).

    ``_cl`` differs from ``_cn`` only on pairs marked ``_late``. A window the
    stream has not fired (``end > W``) is in flight as a whole: its rows that no
    other cause explains are ``in_flight``.
    """
    w = position.watermark_us
    open_ = F.lit(True) if w <= NEG_INF else F.col("_we") > F.lit(w)
    too_late = "too_late" if policy == "side_output" else "dropped"
    role = F.col("_role") == TRUTH
    covered = F.coalesce(F.col("_covered"), F.lit(False))

    def cause(is_late: Column) -> Column:
        truth = (F.when(F.col("_unread"), _code("in_flight")).when(F.col("_clipped"), _code("clipped"))
                 .when(is_late, _code(too_late)).when(open_, _code("in_flight")))
        moved = F.when(F.col("_unread") | is_late | open_, F.lit(NONE)).otherwise(_code("clipped"))
        # A corrected window holds the batch truth of the rows its correction saw: those are counted.
        truth = F.when(covered, F.lit(None).cast("int")).otherwise(truth)
        moved = F.when(covered, F.lit(NONE)).otherwise(moved)
        return F.when(F.col("_role") == DEAD, F.lit(NONE)).when(role, truth).otherwise(moved)

    late = F.coalesce(F.col("_late"), F.lit(False))
    return pairs.withColumn("_cn", cause(F.lit(False))).withColumn(
        "_cl", F.when(late, cause(F.lit(True))).otherwise(F.col("_cn")))


def fields(cfg: PipelineConfig) -> list[tuple[str, int]]:
    """The partial fields (prefix, value index) the aggregations read: only those are computed."""
    values = cfg.window.value_columns
    out: dict[tuple[str, int], None] = {}
    for a in cfg.window.aggregations:
        o = OUTPUTS[a.func]
        for f in (o.field, o.per):
            if f is not None:
                out[(f.prefix, values.index(a.column))] = None
        if o.field.prefix == "_s":  # a sum is null over no value (``_partial``): its non-null count decides
            out[("_nn", values.index(a.column))] = None
    return list(out)


_FOLD = {"_s": F.sum, "_mn": F.min, "_mx": F.max, "_nn": F.count}
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
    aggs = [F.count(F.lit(1)).alias("_n"), *([F.max("_copies").alias("_copies")] if matched else [])]
    aggs += [_FOLD[f](F.col(f"_v{i}")).alias(f"{f}{i}") for f, i in fields(cfg)]
    mags = magnitudes(cfg, pairs)
    aggs += [F.sum(F.abs(F.col(f"_v{i}"))).alias(f"_a{i}") for i in mags]
    late = F.coalesce(F.col("_late"), F.lit(False)) if "_late" in pairs.columns else F.lit(False)
    neg = F.col("_neg") if "_neg" in pairs.columns else F.lit(False)
    packed = F.col("_role").cast("int") * F.lit(32)
    flags = (neg, F.col("_clipped"), F.col("_unread"), F.col("_covered"), late)
    for bit, flag in zip(_BITS, flags, strict=True):
        packed = packed + F.when(flag, F.lit(bit)).otherwise(F.lit(0))
    sessions = cfg.window.is_session
    if by_window:  # the flags are the window's (a dead letter's null window is a group of its own)
        grouped = pairs.groupBy(*cfg.window.key, "_ws").agg(F.max(packed).alias("_flags"), *aggs)
    else:
        grouped = pairs.groupBy(*cfg.window.key, "_ws", *(["_we"] if sessions else []), packed.alias("_flags"),
                                *(["_lh"] if matched else [])).agg(*aggs)
    if not matched:
        grouped = grouped.withColumn("_lh", F.lit(None).cast("long")).withColumn("_copies", F.lit(None).cast("long"))
    we = F.col("_we") if sessions else F.col("_ws") + F.lit(cfg.window.size_us)
    flags = F.col("_flags")
    unpacked = [F.shiftright(flags, 5).alias("_role")] + [
        (flags.bitwiseAND(F.lit(bit)) != 0).alias(name) for bit, name in zip(_BITS, _FLAGS[1:], strict=True)]
    return grouped.select(*cfg.window.key, "_ws", we.alias("_we"), *unpacked, "_lh", "_copies", "_n",
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
    """The late part (``late``) or the rest of a tally row, as partial columns."""

    def __init__(self, rows: Column, cause: Column, negated: Column) -> None:
        self.rows, self.cause, self.negated = rows, cause, negated

    def _whole(self) -> Column:
        return self.rows == F.col("_n")

    def value(self, field: str, i: int, dt: T.DataType) -> Column:
        """The portion's ``field`` of value column ``i``: the whole partial, nothing, or a share of identical rows.

        A share only happens to rows identical in every column: a sum is
        ``rows`` times the one value (``sum / n``), a non-null count ``rows`` or
        0, a min or max the value itself.
        """
        col = F.col(f"{field}{i}")
        empty = self.rows == 0
        if field in ("_s", "_a"):
            if isinstance(dt, T.LongType):
                one = F.expr(f"{field}{i} div _n")
            else:
                one = col / F.col("_n")
            share = (one * self.rows).cast(dt)
            return (F.when(self._whole(), col).when(self.negated, -col).when(empty, F.lit(None).cast(dt))
                    .otherwise(share))
        if field == "_nn":
            share = F.when(col > 0, self.rows).otherwise(F.lit(0))
            return (F.when(self._whole(), col).when(self.negated, -col).when(empty, F.lit(0)).otherwise(share)
                    .cast("long"))
        return F.when(~empty, col)  # min, max: identical rows share them (never negated: late.subtractable)


def _portions(cfg: PipelineConfig) -> list[_Portion]:
    """The late portion and the rest; a ``late/`` row taken back out (``_neg``) is its pair whole in its late
    cause, plus the same pair negated in the cause it would have had (so the window's sums lose it)."""
    late_rows = F.when(~F.col("_late"), F.lit(0).cast("long")).when(
        F.col("_lh").isNull(), F.col("_n")).otherwise(F.least(F.col("_n"), F.col("_copies")))
    neg = F.col("_neg")
    rest = F.when(neg, -F.col("_n")).otherwise(F.col("_n") - late_rows)
    return [_Portion(late_rows, F.col("_cl"), F.lit(False)), _Portion(rest, F.col("_cn"), neg)]


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

    def part(p: _Portion) -> Column:
        return F.struct(p.rows.alias("_n"), p.cause.alias("_cause"),
                        *[p.value(f, i, vtypes.get(i, T.LongType())).alias(f"{f}{i}") for f, i in tf],
                        *[p.value("_a", i, T.DoubleType()).alias(f"_a{i}") for i in mags])

    late, rest = _portions(cfg)
    keep = [*cfg.window.key, "_ws", "_we", "_role", "_neg", "_clipped"]
    if not marked:
        return tallied.select(*keep, part(rest).alias("_p")).select(*keep, "_p.*")
    # Always both (a portion of no rows is filtered out): an explode of a plain array is generated code; one
    # chosen per row by a ``when`` built an array object per row (1.1 s of 10 M rows' 500,000 windows).
    both = F.array(part(late), part(rest))
    out = tallied.select(*keep, F.explode(both).alias("_p"))
    return out.select(*keep, "_p.*").filter(F.col("_n") != 0)


def _partial(cfg: PipelineConfig, cond: Column, prefix: str) -> list[Column]:
    """The partial columns (``{prefix}_n`` and the :func:`fields`) of the split rows where ``cond`` holds."""
    out = [F.coalesce(F.sum(F.when(cond, F.col("_n"))), F.lit(0)).alias(f"{prefix}_n")]

    def merged(field: str, i: int) -> Column:
        return {"sum": F.sum, "min": F.min, "max": F.max}[_MERGE[field]](F.when(cond, F.col(f"{field}{i}")))

    for field, i in fields(cfg):
        m = merged(field, i)
        if field == "_nn":
            m = F.coalesce(m, F.lit(0))
        elif field == "_s":
            # Null over no value, as Spark's sum: late/ rows taken back out leave x + (-x) = 0, not "no rows".
            m = F.when(F.coalesce(merged("_nn", i), F.lit(0)) != 0, m)
        out.append(m.alias(f"{prefix}{field}{i}"))
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


def per_window(cfg: PipelineConfig, tallied: DataFrame, types: dict[str, T.DataType], stream: DataFrame,
               stream_aggs: list[Column], by_window: bool = False, taken: DataFrame | None = None,
               marked: bool = True) -> DataFrame:
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
    """
    values = cfg.window.value_columns
    rows = split(cfg, tallied, marked)
    if taken is not None:
        rows = rows.unionByName(split(cfg, taken))
    truth, moved = F.col("_role") == TRUTH, F.col("_role") == MOVED
    sign = F.when(truth, F.lit(1)).otherwise(F.lit(-1))
    cause = F.col("_cause")
    counted = (cause.isNull() & truth) | ((cause == CODE["clipped"]) & moved)
    logged = truth & ~F.col("_neg")  # the log's own pairs (not a late/ row taken back out)
    aggs = _partial(cfg, logged, "_t")  # the truth: every row, whatever its cause
    mags = {int(c[2:]) for c in rows.columns if re.fullmatch(r"_a\d+", c)}
    aggs += [F.sum(F.when(logged, F.col(f"_a{values.index(a.column)}"))).alias(f"m_{a.name}")
             for a in cfg.window.aggregations if a.func in ("sum", "avg") and values.index(a.column) in mags]
    # A window is compared when a pair is on one side: a truth pair, or a moved one the stream counted.
    aggs.append(F.sum(F.when(F.coalesce(cause != NONE, F.lit(True)), F.col("_n"))).alias("_present"))
    aggs += _partial(cfg, counted, "_e")
    for c in CAUSES:
        hit = cause == CODE[c]
        aggs.append(F.sum(F.when(hit, sign * F.col("_n")).otherwise(0)).cast("long").alias(f"{c}_rows"))
        for a in cfg.window.aggregations:
            i = values.index(a.column)
            if a.func == "sum":
                aggs.append(F.sum(F.when(hit, sign * F.col(f"_s{i}"))).alias(f"{c}_{a.name}"))
            elif a.func == "count":
                aggs.append(F.sum(F.when(hit, sign * F.col(f"_nn{i}")).otherwise(0)).cast("long")
                            .alias(f"{c}_{a.name}"))
    aggs += [*stream_aggs, F.count(F.col("_em")).alias("_emissions"),
             F.sum(F.when(F.col("_role") == DEAD, F.col("_n"))).alias("_dead_n"),
             F.sum(F.when(logged & F.col("_clipped"), F.col("_n"))).alias("_clipped_n")]
    if by_window:
        stream = stream.repartition(*cfg.window.key, "_ws")
    both = rows.unionByName(stream.withColumn("_em", F.lit(True)), allowMissingColumns=True)
    grouped = both.groupBy(*cfg.window.key, "_ws", "_we").agg(*aggs)
    present = [F.coalesce(F.col(c), F.lit(0)) > 0 for c in ("_present", "_emissions", "_dead_n")]
    grouped = grouped.filter(present[0] | present[1] | present[2])
    keep = [*cfg.window.key, "_ws", "_we", *[c for c in grouped.columns if not c.startswith(("_t_", "_e_"))
                                             and c not in (*cfg.window.key, "_ws", "_we", "_present")]]
    return grouped.select(*keep, *_outputs(cfg, types, "_t"), *_outputs(cfg, types, "_e"))

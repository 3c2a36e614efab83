"""Session windows: the batch truth's sessions over the whole log, and the stream's sessions folded into them.

**Batch sessions** (SEMANTICS.md §3, over every valid row whatever its
lateness): per key, rows sorted by event time; a row at least ``gap`` after
the previous one starts a new session ``[first, last + gap)``. A window
function over the key (``lag``, a running sum), so it spreads over executors
by key. Sessions use the event time the stream judged (clipped): a session's
bounds come from its rows, so the stream's sessions must be built on the same
times to fall inside the batch's; clipping is then not a cause for sessions.

**The stream's sessions** all lie inside one batch session each: a stream
session holds rows closer than ``gap``, and the batch has every one of those
rows (plus more). An emission is mapped to the batch session of the row at
its ``window_start`` (a session starts at its first row). Inside a batch
session the stream may have emitted several intervals: components merged
later, sessions split by freeing, sessions a too-late or unread row would
have bridged. The fold is ``core/reconcile.fold_session``'s: per emitted
interval by the mode's rule, then over the intervals of the batch session --
``add`` and ``signed`` columns over every interval (deltas, retractions),
``latest`` columns over the *heads* (``core/reconcile.heads``: retracting,
an interval with an emission not retracted; else one not contained in an
emitted interval of a later revision): their counts and sums add, mins and
maxes fold, averages merge weighted by the heads' counts (``_heads`` says how
many: ``compare.py`` leaves a merged average out when a row of its column is
null, and compares a merged decimal average to one unit of its last digit);
a by-time value, a distinct count, a collection or a sketch (ADR 0039) is its
one head's, and left out over several (``core/reconcile.MERGED_BY_HEADS``).
The batch side recomputes them as for windows (``kept.py``): the pairs carry
the log's arrival order and the too-late copies are matched by row id.
Accumulating mode also folds the second reading of ``core/reconcile.readings``
(``a_<column>``, ``_aheads``): ``compare.py`` takes it where it explains the
window and the first does not.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.window import Window

from lowwater.config import PipelineConfig
from lowwater.core.aggregates import BY_TIME_FUNCS, COLLECTIONS
from lowwater.core.reconcile import ADD, LATEST, MAX, MIN, SIGNED, rule
from lowwater.reconcile import stream
from lowwater.reconcile.log import TRUTH
from lowwater.runtime.sqltext import expr
from lowwater.time import NEG_INF

KEPT_FUNCS = (*BY_TIME_FUNCS, *COLLECTIONS)  # a head's finished value: one head's is the session's (ADR 0039)


def pairs(cfg: PipelineConfig, rows: DataFrame) -> DataFrame:
    """Each valid row with its batch session ``_ws``/``_we`` (role ``truth``; ``_clipped`` is not a cause here)."""
    keys = list(cfg.window.key)
    gap = int(cfg.window.gap_us or 0)
    by_key = Window.partitionBy(*keys).orderBy("_clip_us", "_rid")
    prev = F.lag("_clip_us").over(by_key)
    starts = F.when(prev.isNull() | (F.col("_clip_us") - prev >= F.lit(gap)), 1).otherwise(0)
    numbered = rows.withColumn("_new", starts).withColumn(
        "_sid", F.sum("_new").over(by_key.rowsBetween(Window.unboundedPreceding, Window.currentRow)))
    session = Window.partitionBy(*keys, "_sid")
    return (numbered.withColumn("_ws", F.min("_clip_us").over(session))
            .withColumn("_we", F.max("_clip_us").over(session) + F.lit(gap))
            .withColumn("_role", F.lit(TRUTH)).withColumn("_clipped", F.lit(False)).drop("_new", "_sid"))


def proto_pairs(session_pairs: DataFrame) -> DataFrame:
    """The pairs as ``late/`` names a too-late session row: its proto-window ``[t, t + gap)``."""
    return session_pairs.withColumn("_ws", F.col("_clip_us"))


def late_in_sessions(too_late: DataFrame, session_pairs: DataFrame) -> DataFrame:
    """Too-late rows (``_rid``) as pairs of their batch session (``_rid``, ``_ws``)."""
    return too_late.select("_rid").join(session_pairs.select("_rid", "_ws"), "_rid")


def _null_safe(keys: list[str], left: str, right: str) -> Column:
    cond = F.lit(True)
    for k in keys:
        cond = cond & F.col(f"{left}{k}").eqNullSafe(F.col(f"{right}{k}"))
    return cond


def fold(cfg: PipelineConfig, emitted: DataFrame, session_pairs: DataFrame) -> DataFrame:
    """The stream value per batch session, with ``window_start``/``window_end`` the batch session's bounds and
    ``_heads`` the number of its heads."""
    keys = list(cfg.window.key)
    starts = session_pairs.select(*[F.col(k).alias(f"_b_{k}") for k in keys], F.col("_clip_us").alias("_bt"),
                                  F.col("_ws").alias("_bws"), F.col("_we").alias("_bwe")).distinct()
    em = emitted.select(*[F.col(c).alias(f"_e_{c}") if c in keys else F.col(c) for c in emitted.columns])
    cond = _null_safe(keys, "_e_", "_b_") & (F.unix_micros(em["window_start"]) == F.col("_bt"))
    mapped = em.join(starts, cond, "left").select(
        *[F.col(f"_e_{k}").alias(k) for k in keys],
        F.coalesce(F.col("_bws"), F.unix_micros("window_start")).alias("_bws"),
        F.coalesce(F.col("_bwe"), F.unix_micros("window_end")).alias("_bwe"),
        *[c for c in emitted.columns if c not in keys])
    group = [*keys, "_bws", "_bwe", "window_start", "window_end"]
    per_interval = mapped.groupBy(*group).agg(*stream.fold_aggs(cfg, mapped.schema), *[expr(a) for a in (
        # emissions not retracted (retracting: > 0 for a head), the revision the latest stands for, and the
        # earliest step watermark of an emission (undefined: the lowest)
        "sum(CASE WHEN kind = 'retraction' THEN -1 ELSE 1 END) AS _net",
        "max(CASE WHEN kind = 'retraction' THEN NULL WHEN kind = 'provisional' THEN revision - 1 "
        "ELSE revision END) AS _erev",
        f"min(CASE WHEN kind != 'retraction' THEN coalesce(unix_micros(watermark), {NEG_INF}L) END) AS _wmin")])
    mode = cfg.window.accumulation
    readings = {"s_": "_net > 0"} if mode == "retracting" else {"s_": _not_replaced(), "a_": _not_replaced(cfg)}
    if mode != "retracting":  # the intervals before each in its batch session: the ones that may contain it
        inside = Window.partitionBy(*keys, "_bws").orderBy(F.col("window_start"), F.col("window_end").desc())
        before = F.collect_list(F.struct(F.unix_micros("window_end").alias("_we"), "_erev", "_wmin")).over(
            inside.rowsBetween(Window.unboundedPreceding, -1))
        per_interval = per_interval.withColumn("_before", before)
    if mode != "accumulating":  # one reading (discarding: only the row count of its heads uses it)
        readings.pop("a_", None)
    flagged = per_interval.withColumns({f"_h{p}": expr(h) for p, h in readings.items()})
    aggs = [F.max("_last_rev").alias("_last_rev"), F.max("_corr_step").alias("_corr_step")]
    for p in readings:
        aggs += _latest(cfg, F.col(f"_h{p}"), p, per_interval.schema)
    grouped = flagged.groupBy(*keys, "_bws", "_bwe").agg(*aggs)
    return grouped.select(
        *keys, F.timestamp_micros("_bws").alias("window_start"), F.timestamp_micros("_bwe").alias("window_end"),
        *[c for c in grouped.columns if c not in (*keys, "_bws", "_bwe")])


def _not_replaced(cfg: PipelineConfig | None = None) -> str:
    """A head (``core/reconcile.heads``): no interval before it in its batch session contains it with a later
    revision -- or, given ``cfg`` (the second reading, ``core/reconcile.readings``), none *surely* merged it
    (ends where it ends, or emitted at a watermark below its end + the grace)."""
    contains = "i._we >= unix_micros(window_end) AND coalesce(i._erev, -2) > coalesce(_erev, -2)"
    if cfg is not None:
        grace = int(cfg.window.allowed_lateness_us)
        contains += (f" AND (i._we = unix_micros(window_end) OR i._wmin < unix_micros(window_end) + {grace}L)")
    return f"NOT exists(_before, i -> {contains})"


def _latest(cfg: PipelineConfig, top: Column, prefix: str, schema: T.StructType) -> list[Column]:
    """The batch session's stream value by one reading of its heads (``top``): ``{prefix}<column>``, and its
    number of heads (``_heads``, ``_aheads``). A second reading (``a_``) has the ``latest`` columns only."""
    mode = cfg.window.accumulation
    aggs = [F.sum(top.cast("int")).alias("_heads" if prefix == "s_" else f"_{prefix[0]}heads")]
    for col, func in stream.output_funcs(cfg).items():
        r, s = rule(mode, func), F.col(f"s_{col}")
        if r in (ADD, SIGNED, MIN, MAX) and prefix != "s_":
            continue
        if r in (ADD, SIGNED):
            agg = F.sum(s)
        elif r == MIN or (r == LATEST and func == "min"):
            agg = F.min(F.when(top, s) if r == LATEST else s)
        elif r == MAX or (r == LATEST and func == "max"):
            agg = F.max(F.when(top, s) if r == LATEST else s)
        elif r == LATEST and func in ("count", "sum", "count_if"):
            agg = F.sum(F.when(top, s))
        elif r == LATEST and func in KEPT_FUNCS:  # one head's (core: fold_session); several: not compared
            agg = F.when(F.sum(top.cast("int")) == 1, F.max(F.when(top, s)))
        elif r == LATEST:  # avg: one head's, or the heads' weighted by their counts (core: fold_session)
            n = F.when(top & s.isNotNull(), F.col("s_count"))
            d = s.cast("double")  # a decimal's too: Spark's decimal products and quotients give up its scale
            agg = F.when(F.sum(top.cast("int")) == 1, F.max(F.when(top, s))).otherwise(
                F.sum(F.when(top, d * F.col("s_count"))) / F.sum(n))
        elif prefix == "s_":
            agg = F.lit(None)
        else:
            continue
        aggs.append(agg.cast(schema[f"s_{col}"].dataType).alias(f"{prefix}{col}"))
    return aggs

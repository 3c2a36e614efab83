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
later (the merged interval contains them) and, rarely, sessions split by
freeing (disjoint rows). So the fold has two levels: per emitted interval by
the mode's rule, then over the intervals of the batch session -- ``add`` and
``signed`` columns over every interval (deltas, retractions), ``latest``
columns over the *maximal* intervals only (not contained in another emitted
one): their counts and sums add, mins and maxes fold, an ``avg`` is read
only when one maximal interval is left (else null: it cannot be merged).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.window import Window

from lowwater.config import PipelineConfig
from lowwater.core.reconcile import ADD, LATEST, MAX, MIN, SIGNED, rule
from lowwater.reconcile import stream
from lowwater.reconcile.log import TRUTH


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
    """The stream value per batch session, with ``window_start``/``window_end`` the batch session's bounds."""
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
    per_interval = stream.fold(cfg, mapped, [*keys, "_bws", "_bwe", "window_start", "window_end"])
    inside = Window.partitionBy(*keys, "_bws").orderBy(F.col("window_start"), F.col("window_end").desc())
    before = F.max("window_end").over(inside.rowsBetween(Window.unboundedPreceding, -1))
    flagged = per_interval.withColumn("_max", before.isNull() | (F.col("window_end") > before))
    top = F.col("_max")
    aggs = [F.max("_last_rev").alias("_last_rev"), F.max("_corr_step").alias("_corr_step")]
    for col, func in stream.output_funcs(cfg).items():
        r, s = rule(cfg.window.accumulation, func), F.col(f"s_{col}")
        if r in (ADD, SIGNED):
            agg = F.sum(s)
        elif r == MIN or (r == LATEST and func == "min"):
            agg = F.min(F.when(top, s) if r == LATEST else s)
        elif r == MAX or (r == LATEST and func == "max"):
            agg = F.max(F.when(top, s) if r == LATEST else s)
        elif r == LATEST and func in ("count", "sum"):
            agg = F.sum(F.when(top, s))
        elif r == LATEST:  # avg: only from a single maximal interval
            agg = F.when(F.sum(top.cast("int")) == 1, F.max(F.when(top, s)))
        else:
            agg = F.lit(None)
        aggs.append(agg.cast(per_interval.schema[f"s_{col}"].dataType).alias(f"s_{col}"))
    return flagged.groupBy(*keys, "_bws", "_bwe").agg(*aggs).select(
        *keys, F.timestamp_micros("_bws").alias("window_start"), F.timestamp_micros("_bwe").alias("window_end"),
        *[c for c in ["_last_rev", "_corr_step", *[f"s_{c}" for c in stream.output_funcs(cfg)]]])

"""Window state transitions on Spark: merge, fire, revise, free.

The per-row verdicts come from ``lowwater.core``; this module only folds them
into mergeable aggregates with Spark SQL (so the work is distributed by key)
and applies the firing rules of SEMANTICS.md §4 at the step's watermark:

* ``base``      = stored state ⊕ this step's on-time partials, per (key, window);
* ``finals``    = windows of ``base`` not fired yet whose end <= W: revision 0;
* ``revisions`` = one per late-update row, in arrival order (``_seq``):
  ``base ⊕ late rows up to and including it``, numbered after the stored one;
* ``new state`` = ``base ⊕ all late rows``, minus windows whose grace passed.

State columns: the key columns, ``window_start``/``window_end`` (µs), ``_n``
(rows), per value column ``i``: ``_s{i}`` sum, ``_mn{i}`` min, ``_mx{i}`` max,
``_nn{i}`` non-null count, and ``_fired``, ``_rev`` (last revision number).
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lowwater.core.aggregates import AggSpec

SEQ_BASE = -(2**62)


@dataclass(frozen=True)
class StateLayout:
    """Names and types of the state and emission columns for one pipeline."""

    keys: tuple[str, ...]
    key_types: tuple[T.DataType, ...]
    values: tuple[str, ...]
    aggregations: tuple[AggSpec, ...]

    @property
    def window_cols(self) -> list[str]:
        return [*self.keys, "window_start", "window_end"]

    def partial_cols(self) -> list[str]:
        cols = ["_n"]
        for i in range(len(self.values)):
            cols += [f"_s{i}", f"_mn{i}", f"_mx{i}", f"_nn{i}"]
        return cols

    def schema(self) -> T.StructType:
        fields = [T.StructField(k, t, True) for k, t in zip(self.keys, self.key_types, strict=True)]
        fields += [T.StructField("window_start", T.LongType()), T.StructField("window_end", T.LongType())]
        fields.append(T.StructField("_n", T.LongType()))
        for i in range(len(self.values)):
            fields += [
                T.StructField(f"_s{i}", T.DoubleType()),
                T.StructField(f"_mn{i}", T.DoubleType()),
                T.StructField(f"_mx{i}", T.DoubleType()),
                T.StructField(f"_nn{i}", T.LongType()),
            ]
        fields += [T.StructField("_fired", T.BooleanType()), T.StructField("_rev", T.LongType())]
        return T.StructType(fields)

    def as_state_partials(self, partials: DataFrame) -> DataFrame:
        """On-time partials as state rows: not fired, revision 0."""
        return partials.withColumn("_fired", F.lit(False)).withColumn("_rev", F.lit(0).cast("long"))

    def _merge_aggs(self, rev: Column) -> list[Column]:
        aggs: list[Column] = [F.sum("_n").alias("_n")]
        for i in range(len(self.values)):
            aggs += [F.sum(f"_s{i}").alias(f"_s{i}"), F.min(f"_mn{i}").alias(f"_mn{i}"),
                     F.max(f"_mx{i}").alias(f"_mx{i}"), F.sum(f"_nn{i}").alias(f"_nn{i}")]
        return [*aggs, F.bool_or("_fired").alias("_fired"), rev.alias("_rev")]

    def merge(self, parts: list[DataFrame]) -> DataFrame:
        """Combine partials of the same (key, window): sums add, mins/maxes fold."""
        cols = [*self.window_cols, *self.partial_cols(), "_fired", "_rev"]
        union = parts[0].select(*cols)
        for p in parts[1:]:
            union = union.unionByName(p.select(*cols))
        return union.groupBy(*self.window_cols).agg(*self._merge_aggs(F.sum("_rev")))

    # -- emissions -----------------------------------------------------------------

    def emission(self, df: DataFrame, kind: str, revision: Column, watermark_us: int | None, step: int) -> DataFrame:
        """Shape a partial-aggregate frame as result rows."""
        out: list[Column] = [F.col(k) for k in self.keys]
        out += [F.timestamp_micros("window_start").alias("window_start"),
                F.timestamp_micros("window_end").alias("window_end"),
                F.col("_n").alias("count")]
        for a in self.aggregations:
            i = self.values.index(a.column)
            expr = {
                "sum": F.col(f"_s{i}"),
                "min": F.col(f"_mn{i}"),
                "max": F.col(f"_mx{i}"),
                "avg": F.col(f"_s{i}") / F.col(f"_nn{i}"),
                "count": F.col(f"_nn{i}"),
            }[a.func]
            out.append(expr.cast("long" if a.func == "count" else "double").alias(a.name))
        wm = F.timestamp_micros(F.lit(watermark_us)) if watermark_us is not None else F.lit(None).cast("timestamp")
        # batch_id is not a data column: it is the output directory (``batch_id=<step>``).
        out += [F.lit(kind).alias("kind"), revision.cast("long").alias("revision"), wm.alias("watermark")]
        return df.select(*out)


def step_windows(
    layout: StateLayout,
    state: DataFrame | None,
    on_time: DataFrame | None,
    late: DataFrame | None,  # late-update partials, one per pair, with ``_seq``
    watermark_us: int,
    grace_us: int,
    emit_watermark_us: int | None,
    step: int,
    cache: list[DataFrame],
    accumulation: str = "accumulating",
) -> tuple[DataFrame | None, DataFrame | None]:
    """Apply one step: returns (emissions, new state with ``_bucket``).

    Frames this function persists are appended to ``cache``; the caller
    unpersists them when the step is committed. ``accumulation`` says what a
    revision carries: the full value (``accumulating``), only the late pair
    (``discarding``), or the full value preceded by a ``retraction`` row of the
    previous one (``retracting``).
    """
    parts = [p for p in (state, layout.as_state_partials(on_time) if on_time is not None else None) if p is not None]
    base = layout.merge(parts) if parts else None
    emissions: list[DataFrame] = []
    if base is not None:
        base = base.persist()
        cache.append(base)
        finals = base.filter(~F.col("_fired") & (F.col("window_end") <= F.lit(watermark_us)))
        emissions.append(layout.emission(finals, "final", F.lit(0), emit_watermark_us, step))
    late_p = late
    if late_p is not None:
        cols = [*layout.window_cols, *layout.partial_cols()]
        lp = late_p.select(*cols, "_seq", F.lit(None).cast("long").alias("_rev"), F.lit(1).alias("_is_late"))
        pieces = lp
        if base is not None:
            pieces = base.select(*cols, F.lit(SEQ_BASE).cast("long").alias("_seq"), "_rev",
                                 F.lit(0).alias("_is_late")).unionByName(lp)
        ordered = Window.partitionBy(*layout.window_cols).orderBy("_seq")
        w = ordered.rowsBetween(Window.unboundedPreceding, Window.currentRow)
        before = ordered.rowsBetween(Window.unboundedPreceding, -1)

        def folded(frame: Window, prefix: str) -> list[Column]:
            cols = [F.sum("_n").over(frame).alias(f"{prefix}_n")]
            for i in range(len(layout.values)):
                cols += [F.sum(f"_s{i}").over(frame).alias(f"{prefix}_s{i}"),
                         F.min(f"_mn{i}").over(frame).alias(f"{prefix}_mn{i}"),
                         F.max(f"_mx{i}").over(frame).alias(f"{prefix}_mx{i}"),
                         F.sum(f"_nn{i}").over(frame).alias(f"{prefix}_nn{i}")]
            return cols

        partial = layout.partial_cols()
        revision = F.coalesce(F.max("_rev").over(w), F.lit(0)) + F.sum("_is_late").over(w)
        revised = pieces.select(
            *layout.window_cols, *partial, *folded(w, "cum"), *folded(before, "prev"),
            revision.alias("_revision"), "_is_late",
        ).filter(F.col("_is_late") == 1)
        if accumulation == "discarding":
            # Only what arrived since the previous emission: the late pair itself.
            value = revised.select(*layout.window_cols, *partial, "_revision")
        else:
            value = revised.select(*layout.window_cols, *[F.col(f"cum{c}").alias(c) for c in partial], "_revision")
        if accumulation == "retracting":
            # Retract the previous full value (when there was one) before the new one.
            prev = revised.filter(F.col("prev_n") > 0).select(
                *layout.window_cols, *[F.col(f"prev{c}").alias(c) for c in partial], "_revision"
            )
            emissions.append(layout.emission(prev, "retraction", F.col("_revision") - 1, emit_watermark_us, step))
        emissions.append(layout.emission(value, "revision", F.col("_revision"), emit_watermark_us, step))
    emitted = None
    if emissions:
        emitted = emissions[0]
        for e in emissions[1:]:
            emitted = emitted.unionByName(e)
    new_parts = []
    if base is not None:
        new_parts.append(base)
    if late_p is not None:
        new_parts.append(late_p.withColumn("_fired", F.lit(True)).withColumn("_rev", F.lit(1).cast("long")))
    if not new_parts:
        return emitted, None
    new_state = layout.merge(new_parts) if len(new_parts) > 1 or late_p is not None else new_parts[0]
    new_state = (
        new_state.withColumn("_fired", F.col("_fired") | (F.col("window_end") <= F.lit(watermark_us)))
        .filter(F.col("window_end") + F.lit(grace_us) > F.lit(watermark_us))
        .withColumn("_bucket", F.col("window_end"))
    )
    return emitted, new_state

"""Window state transitions on Spark: merge, fire early, fire, revise, free.

The per-row verdicts come from ``lowwater.core``; this module only folds them
into mergeable aggregates with Spark SQL (so the work is distributed by key)
and applies the firing rules of SEMANTICS.md §4 at the step's watermark:

* ``base``      = stored state ⊕ this step's on-time partials, per (key, window);
* ``provisional`` (only with an early trigger) = open windows of ``base``
  (not fired, end > W) whose pending rows make the trigger due;
* ``finals``    = windows of ``base`` not fired yet whose end <= W: revision 0;
* ``revisions`` = one per late-update row, in arrival order (``_seq``):
  ``base ⊕ late rows up to and including it``, numbered after the stored one;
* ``new state`` = ``base ⊕ all late rows``, minus windows whose grace passed.

What each pane carries per accumulation mode is the rule of
``core/pane_rules.py`` (the one :class:`~lowwater.core.panes.Pane` follows),
applied here to all windows of a step at once: :meth:`StateLayout.reads`.

State columns: the key columns, ``window_start``/``window_end`` (µs), the
partial in the layout of ``core/partials.py`` (``_n`` rows, per value column
``i``: ``_s{i}`` sum, ``_mn{i}`` min, ``_mx{i}`` max, ``_nn{i}`` non-null
count; its table says how each field merges and which field each aggregate
reads), and ``_fired``, ``_rev`` (last revision number).
With an early trigger only (none of these exist without one):

* ``_pn``: rows admitted since the window's last emission;
* a mode whose panes carry the pending rows (discarding): ``_p_s{i}``, ...
  the partial of those pending rows (what the next emission carries);
* a mode that retracts: ``_e_n``, ``_e_s{i}``, ... the full value of the last
  emission (what the next one retracts; null before the first);
* ``every <duration>``: ``_since`` (µs of processing time of the last emission,
  or of the step that first gave the window pending rows) and ``_due``
  (``_since`` while rows are pending, else null; its min per bucket goes into
  the manifest, so a step reads a waiting bucket only when it may be due).

Once a window has fired its full value is its last emitted value, so the extra
columns are reset (``_pn = 0``, the rest null) and revisions work as before.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lowwater.core import partials
from lowwater.core.aggregates import AggSpec, input_index, value_inputs
from lowwater.core.pane_rules import rule_of
from lowwater.core.partials import COLUMN, HLL, KLL, LIST, SET
from lowwater.core.triggers import AccumulationMode, EarlyTrigger, EmissionKind
from lowwater.runtime.columns import grouped_agg, memo, recent, select, select_built, step_value
from lowwater.spark.aggtypes import (
    collection_merge,
    field_type,
    input_expr,
    input_type,
    result_expr,
    sketch_merge,
)

SEQ_BASE = -(2**62)
ROWS = partials.ROWS.column()  # ``_n``: the window's ``count`` result column
PENDING_ROWS = "_pn"  # rows admitted since the window's last emission (early triggers)
_SQL = {"sum": F.sum, "min": F.min, "max": F.max}  # a field's merge, as a Spark SQL aggregate


@dataclass(frozen=True)
class StateLayout:
    """Names and types of the state and emission columns for one pipeline."""

    keys: tuple[str, ...]
    key_types: tuple[T.DataType, ...]
    values: tuple[str, ...]
    aggregations: tuple[AggSpec, ...]
    accumulation: str = AccumulationMode.ACCUMULATING.value
    early: EarlyTrigger | None = None
    value_types: tuple[T.DataType, ...] = ()  # input types of ``values`` (default: doubles)
    inputs: tuple[str, ...] = ()  # what each value input is of its column (``partials.INPUTS``; default: itself)

    @classmethod
    def of(
        cls, keys: tuple[str, ...], key_types: tuple[T.DataType, ...], aggregations: tuple[AggSpec, ...],
        types: dict[str, T.DataType], accumulation: str = AccumulationMode.ACCUMULATING.value,
        early: EarlyTrigger | None = None,
    ) -> StateLayout:
        """The layout of ``aggregations`` over columns typed ``types``: one value input per
        ``core/aggregates.value_inputs`` (the columns, then their squares or true values)."""
        inputs = value_inputs(list(aggregations))
        return cls(keys=keys, key_types=key_types, values=tuple(c for c, _ in inputs), aggregations=aggregations,
                   accumulation=accumulation, early=early, value_types=tuple(types[c] for c, _ in inputs),
                   inputs=tuple(of for _, of in inputs))

    def input_of(self, i: int) -> str:
        return self.inputs[i] if self.inputs else COLUMN

    def column_type(self, i: int) -> T.DataType:
        """The type of value input ``i``'s column, as read from a row."""
        return self.value_types[i] if self.value_types else T.DoubleType()

    def value_type(self, i: int) -> T.DataType:
        """The type of value input ``i`` (its column's, or its square's...): it types the partials (``aggtypes``)."""
        return input_type(self.column_type(i), self.input_of(i))

    def value_expr(self, i: int) -> Column:
        """Value input ``i`` of a row as it travels, in Spark SQL (``aggtypes.input_expr``)."""
        return input_expr(F.col(self.values[i]), self.column_type(i), self.input_of(i))

    def partial_fields(self) -> list[tuple[str, partials.Field, int | None]]:
        """The partial's columns: (name, field, value column or None), in the layout of ``core/partials.py``."""
        return partials.layout(len(self.values))

    def partial_types(self) -> dict[str, T.DataType]:
        """The partial's columns typed after the value columns (``spark/aggtypes.py``)."""
        return {c: field_type(f, self.value_type(i or 0)) for c, f, i in self.partial_fields()}

    @property
    def window_cols(self) -> list[str]:
        return [*self.keys, "window_start", "window_end"]

    def partial_cols(self) -> list[str]:
        return partials.columns(len(self.values))

    # -- early-trigger state (empty without a trigger) -------------------------------

    @property
    def pending_partial(self) -> bool:
        """With early firings, a mode whose panes carry the pending rows keeps their partial (discarding)."""
        return self.early is not None and rule_of(self.accumulation).keeps_pending

    @property
    def emitted_partial(self) -> bool:
        """With early firings, a mode that retracts keeps the last emitted value (retracting)."""
        return self.early is not None and rule_of(self.accumulation).keeps_emitted

    @property
    def timed(self) -> bool:
        return self.early is not None and self.early.every_us is not None

    @staticmethod
    def pending_of(col: str) -> str:
        """The pending-partial column of a partial column (``_n`` -> ``_pn``, ``_s0`` -> ``_p_s0``)."""
        return PENDING_ROWS if col == ROWS else f"_p{col}"

    @staticmethod
    def emitted_of(col: str) -> str:
        return f"_e{col}"

    def extra_cols(self) -> list[str]:
        """Early-trigger state columns that are merged like partials (``_due`` is derived, not merged)."""
        if self.early is None:
            return []
        cols = [PENDING_ROWS]
        if self.pending_partial:
            cols += [self.pending_of(c) for c in self.partial_cols()[1:]]
        if self.emitted_partial:
            cols += [self.emitted_of(c) for c in self.partial_cols()]
        if self.timed:
            cols.append("_since")
        return cols

    def field_of(self) -> dict[str, partials.Field]:
        """The partial field each partial and extra column holds (a pending or emitted copy: its column's)."""
        out: dict[str, partials.Field] = {}
        for c, f, _ in self.partial_fields():
            out[c] = out[self.pending_of(c)] = out[self.emitted_of(c)] = f
        return out

    def merge_fn(self, col: str):  # noqa: ANN201 - a pyspark aggregate function
        """How a state column combines: as its field merges (``_since``, a clock, by min; a collection's sum by
        ``aggtypes.collection_merge``)."""
        if col == "_since":
            return F.min
        of = self.collections().get(col)
        if of in (HLL, KLL):
            return lambda c: sketch_merge(F.col(c), of)
        if of is not None:
            return lambda c: collection_merge(F.collect_list(c), of)
        return _SQL[self.field_of()[col].merge]

    def merge_over(self, col: str, frame: Window) -> Column:
        """:meth:`merge_fn` of a partial column over a window ``frame`` (the revision fold)."""
        of = self.collections().get(col)
        if of in (HLL, KLL):
            return sketch_merge(F.col(col), of).over(frame)
        if of is not None:
            return collection_merge(F.collect_list(col).over(frame), of)
        return _SQL[self.field_of()[col].merge](col).over(frame)

    def collections(self) -> dict[str, str]:
        """The sum columns (and their pending/emitted copies) that hold a collection or sketch: column -> its input."""
        out: dict[str, str] = {}
        for c, f, i in self.partial_fields():
            if i is not None and f is partials.SUM and self.input_of(i) in (SET, LIST, HLL, KLL):
                out[c] = out[self.pending_of(c)] = out[self.emitted_of(c)] = self.input_of(i)
        return out

    def pending_counts(self) -> set[str]:
        """The pending copies of the count fields (``_pn``, ``_p_nn{i}``): 0, not null, when nothing is pending."""
        return {self.pending_of(c) for c, f, _ in self.partial_fields() if f.counts}

    def merge_cols(self) -> list[str]:
        return [*self.window_cols, *self.partial_cols(), *self.extra_cols(), "_fired", "_rev"]

    def schema(self) -> T.StructType:
        types = {**self.partial_types(), PENDING_ROWS: T.LongType(), "_since": T.LongType(), "_due": T.LongType()}
        for c in self.partial_cols():
            types.setdefault(self.pending_of(c), types[c])
            types[self.emitted_of(c)] = types[c]
        fields = [T.StructField(k, t, True) for k, t in zip(self.keys, self.key_types, strict=True)]
        fields += [T.StructField("window_start", T.LongType()), T.StructField("window_end", T.LongType())]
        fields += [T.StructField(c, types[c]) for c in self.partial_cols()]
        fields += [T.StructField("_fired", T.BooleanType()), T.StructField("_rev", T.LongType())]
        fields += [T.StructField(c, types[c]) for c in self.extra_cols()]
        if self.timed:
            fields.append(T.StructField("_due", T.LongType()))
        return T.StructType(fields)

    def _extras(self, fresh: dict[str, Column]) -> list[Column]:
        """The extra columns of rows entering the state; those not in ``fresh`` are null (0 for counts)."""
        out, counts = [], self.pending_counts()
        for c in self.extra_cols():
            zero = F.lit(0) if c in counts else F.lit(None)
            out.append(fresh.get(c, zero).cast(self.schema()[c].dataType).alias(c))
        return out

    def as_state_partials(self, on_time: DataFrame, admit_us: int | None = None) -> DataFrame:
        """On-time partials as state rows: not fired, revision 0, all of them pending since ``admit_us``."""
        if self.early is None:  # nothing depends on the step: the column list is built once
            return select_built(on_time, ("state_partials", self), lambda: [
                *self.window_cols, *self.partial_cols(), F.lit(False).alias("_fired"),
                F.lit(0).cast("long").alias("_rev"),
            ])
        fresh: dict[str, Column] = {self.pending_of(c): F.col(c) for c in self.partial_cols()}
        fresh["_since"] = step_value(admit_us)
        return on_time.select(
            *self.window_cols, *self.partial_cols(), F.lit(False).alias("_fired"), F.lit(0).cast("long").alias("_rev"),
            *self._extras(fresh),
        )

    def as_state_late(self, late: DataFrame) -> DataFrame:
        """Late-update pairs as state rows: fired, one revision each."""
        return select_built(late, ("state_late", self), lambda: [
            *self.window_cols, *self.partial_cols(), F.lit(True).alias("_fired"), F.lit(1).cast("long").alias("_rev"),
            *self._extras({}),
        ])

    def _merge_aggs(self, rev: Column) -> list[Column]:
        # A Spark sum widens decimals (p + 10 per sum): cast back, so the state keeps its schema.
        schema = self.schema()
        aggs: list[Column] = [self.merge_fn(c)(c).cast(schema[c].dataType).alias(c)
                              for c in [*self.partial_cols(), *self.extra_cols()]]
        return [*aggs, F.bool_or("_fired").alias("_fired"), rev.alias("_rev")]

    def merge(self, parts: list[DataFrame]) -> DataFrame:
        """Combine partials of the same (key, window): sums add, mins/maxes fold."""
        names = self.merge_cols()
        union = select(parts[0], names)
        for p in parts[1:]:
            union = union.unionByName(select(p, names))
        return grouped_agg(union, ("merge", self), self.window_cols, lambda: self._merge_aggs(F.sum("_rev")))

    def due(self, watermark_us: int, now_us: int | None) -> Column:
        """Spark SQL mirror of :meth:`EarlyTrigger.is_due` for the open windows of ``base``."""
        assert self.early is not None
        open_ = ~F.col("_fired") & (F.col("window_end") > step_value(watermark_us)) & (F.col(PENDING_ROWS) > 0)
        if self.early.every_rows is not None:
            return open_ & (F.col(PENDING_ROWS) >= F.lit(self.early.every_rows))
        return open_ & (step_value(now_us) - F.col("_since") >= F.lit(self.early.every_us))

    def after_emission(self, base: DataFrame, fires: Column, now_us: int | None) -> DataFrame:
        """Reset the early-trigger state of windows that emitted (``_early``) or fired this step."""
        if self.early is None:
            return base
        early, done = F.col("_early"), fires | F.col("_fired")
        out: list[Column] = [*self.window_cols, *self.partial_cols(), "_fired", "_rev"]
        pending_counts = self.pending_counts()
        for c in self.extra_cols():
            col = F.col(c)
            if c in pending_counts:
                out.append(F.when(early | done, F.lit(0)).otherwise(col).cast("long").alias(c))
            elif c == "_since":
                since = F.when(done, F.lit(None)).when(early, step_value(now_us)).otherwise(col)
                out.append(since.cast("long").alias(c))
            elif c.startswith("_e"):  # what the provisional carried: the full value (a rule that retracts does)
                full = F.col(c[2:])
                out.append(F.when(done, F.lit(None)).when(early, full).otherwise(col).cast(self.schema()[c].dataType)
                           .alias(c))
            else:  # the pending partial
                out.append(F.when(early | done, F.lit(None)).otherwise(col).cast(self.schema()[c].dataType).alias(c))
        return base.select(*out)

    # -- emissions -----------------------------------------------------------------

    def reads(self, kind: str, mode: str | None = None) -> tuple[list[str] | None, list[str]]:
        """The columns a pane of ``kind`` reads, one per partial column, by its mode's rule (``core/pane_rules``):
        (its retraction's, None if none; its value's). A provisional or on-time pane reads the state row (without
        an early trigger nothing was emitted before it: the full value, nothing retracted); a revision reads the
        revision fold of :func:`step_windows` (``cum``: up to and including the late row, which is what is
        pending; ``prev``: before it)."""
        rule, parts = rule_of(mode or self.accumulation), self.partial_cols()
        if kind == EmissionKind.REVISION:
            retract = [f"prev{c}" for c in parts] if rule.retracts else None
            return retract, rule.value([f"cum{c}" for c in parts], parts)
        if self.early is None:
            return None, parts
        value = [self.pending_of(c) for c in parts] if rule.keeps_pending else parts
        return ([self.emitted_of(c) for c in parts] if rule.keeps_emitted else None), value

    def as_partials(self, df: DataFrame, names: list[str], *extra: str) -> DataFrame:
        """``df`` with the columns ``names`` read as the partial columns, and ``extra`` (``df`` itself if no change)."""
        parts = self.partial_cols()
        if names == parts and not extra:
            return df
        return select_built(df, ("as_partials", self, tuple(names), extra), lambda: [
            *self.window_cols, *[c if n == c else F.col(n).alias(c) for n, c in zip(names, parts, strict=True)],
            *extra])

    def panes(self, df: DataFrame, kind: str, watermark_us: int | None, step: int) -> list[DataFrame]:
        """The rows a provisional or on-time pane of the windows of ``df`` (state rows) writes (:meth:`reads`)."""
        retract, value = self.reads(kind)
        out = []
        if retract is not None:
            prev = self.as_partials(df.filter(F.col(retract[0]).isNotNull()), retract)
            out.append(self.emission(prev, EmissionKind.RETRACTION.value, "0", watermark_us, step))
        out.append(self.emission(self.as_partials(df, value), kind, "0", watermark_us, step))
        return out

    def emission(self, df: DataFrame, kind: str, revision: str, watermark_us: int | None, step: int) -> DataFrame:
        """Shape a partial-aggregate frame as result rows; ``revision`` is a SQL expression of ``df``'s columns.

        The columns depend on the layout, ``kind``, ``revision`` and the watermark: built once for each (the
        last few watermarks kept), so a step's emissions are a few py4j calls, not one a column."""

        def build() -> list[Column]:
            wm = F.timestamp_micros(step_value(watermark_us)) if watermark_us is not None else F.lit(None).cast(
                "timestamp")
            # batch_id is not a data column: it is the output directory (``batch_id=<step>``).
            return [*memo(("emission_values", self), self.result_values), F.lit(kind).alias("kind"),
                    F.expr(revision).cast("long").alias("revision"), wm.alias("watermark")]

        return select_built(df, ("emission", self, kind, revision, watermark_us), build, recent)

    def result_values(self) -> list[Column]:
        """The result columns that do not depend on the step: keys, window, count (rows), aggregates."""
        out: list[Column] = [F.col(k) for k in self.keys]
        out += [F.timestamp_micros("window_start").alias("window_start"),
                F.timestamp_micros("window_end").alias("window_end"),
                F.col(ROWS).alias("count")]
        return [*out, *self.aggregate_columns()]

    def aggregate_columns(self) -> list[Column]:
        """The configured aggregates from the partial columns, typed as Spark SQL types them (``aggtypes``)."""
        out = []
        pairs = list(zip(self.values, [self.input_of(i) for i in range(len(self.values))], strict=True))
        for a in self.aggregations:
            where = input_index(pairs, a)
            expr = result_expr(a.func, self.column_type(where(COLUMN)),
                               lambda f, of=COLUMN, where=where: F.col(f.column(where(of))), a.fraction)
            out.append(expr.alias(a.name))
        return out


def step_windows(
    layout: StateLayout,
    state: DataFrame | None,
    on_time: DataFrame | None,
    late: DataFrame | None,  # late-update partials, one per pair, with ``_seq``, ``_seq_minor`` (arrival order)
    watermark_us: int,
    grace_us: int,
    emit_watermark_us: int | None,
    step: int,
    cache: list[DataFrame],
    accumulation: str | None = None,
    now_us: int | None = None,
    admit_us: int | None = None,
) -> tuple[DataFrame | None, DataFrame | None]:
    """Apply one step: returns (emissions, new state with ``_bucket``).

    Frames this function persists are appended to ``cache``; the caller
    unpersists them when the step is committed. What a pane carries is the
    rule of the accumulation mode (the layout's unless ``accumulation`` is
    given; :meth:`StateLayout.reads`). With an early trigger (``layout.early``),
    open windows it makes due emit a ``provisional`` pane; ``now_us`` is the
    processing time the trigger is evaluated at and ``admit_us`` the one this
    step's rows were admitted at.
    """
    mode = accumulation or layout.accumulation
    if mode != layout.accumulation and layout.early is not None:
        msg = f"accumulation {mode!r} differs from the state layout's {layout.accumulation!r}"
        raise ValueError(msg)
    on_state = layout.as_state_partials(on_time, admit_us) if on_time is not None else None
    parts = [p for p in (state, on_state) if p is not None]
    base = layout.merge(parts) if parts else None
    emissions: list[DataFrame] = []
    fires = ~F.col("_fired") & (F.col("window_end") <= step_value(watermark_us))
    if base is not None:
        if layout.early is not None:
            base = base.withColumn("_early", layout.due(watermark_us, now_us))
        base = base.persist()
        cache.append(base)
        if layout.early is not None:
            emissions += layout.panes(base.filter(F.col("_early")), EmissionKind.PROVISIONAL.value, emit_watermark_us,
                                      step)
        emissions += layout.panes(base.filter(fires), EmissionKind.FINAL.value, emit_watermark_us, step)
    if late is not None:
        cols = [*layout.window_cols, *layout.partial_cols()]
        # Every column list below depends on the layout only: built once (``select_built``), reused each step.
        lp = select_built(late, ("late_pieces", layout), lambda: [
            *cols, "_seq", "_seq_minor", F.lit(None).cast("long").alias("_rev"), F.lit(1).alias("_is_late")])
        pieces = lp
        if base is not None:
            pieces = select_built(base, ("state_pieces", layout), lambda: [
                *cols, F.lit(SEQ_BASE).cast("long").alias("_seq"), F.lit(0).cast("long").alias("_seq_minor"),
                "_rev", F.lit(0).alias("_is_late")]).unionByName(lp)
        revised = select_built(pieces, ("revised", layout), lambda: _revision_fold(layout))
        revised = revised.filter(memo(("is_late",), lambda: F.col("_is_late") == 1))
        retract, carried = layout.reads(EmissionKind.REVISION, mode)
        value = layout.as_partials(revised, carried, "_revision")
        if retract is not None:  # the previous value (when there was one), withdrawn before the new one
            prev = layout.as_partials(revised.filter(F.col(retract[0]) > 0), retract, "_revision")
            emissions.append(layout.emission(prev, "retraction", "_revision - 1", emit_watermark_us, step))
        emissions.append(layout.emission(value, "revision", "_revision", emit_watermark_us, step))
    emitted = None
    if emissions:
        emitted = emissions[0]
        for e in emissions[1:]:
            emitted = emitted.unionByName(e)
    new_parts = []
    if base is not None:
        new_parts.append(layout.after_emission(base, fires, now_us))
    if late is not None:
        new_parts.append(layout.as_state_late(late))
    if not new_parts:
        return emitted, None
    new_state = layout.merge(new_parts) if len(new_parts) > 1 or late is not None else new_parts[0]
    new_state = (
        new_state.withColumn("_fired", F.col("_fired") | (F.col("window_end") <= step_value(watermark_us)))
        .filter(F.col("window_end") + F.lit(grace_us) > step_value(watermark_us))
    )
    if layout.timed:
        new_state = new_state.withColumn("_due", F.when(~F.col("_fired") & (F.col(PENDING_ROWS) > 0), F.col("_since")))
    return emitted, select_built(new_state, ("state_rows", layout), lambda: [
        *[f.name for f in layout.schema().fields], F.col("window_end").alias("_bucket"),
    ])


def _revision_fold(layout: StateLayout) -> list[Column]:
    """The revision fold's columns over the late pieces: per window in arrival order, each partial up to and
    including the row (``cum``) and before it (``prev``), and the row's revision."""
    ordered = Window.partitionBy(*layout.window_cols).orderBy("_seq", "_seq_minor")
    w = ordered.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    before = ordered.rowsBetween(Window.unboundedPreceding, -1)

    def folded(frame: Window, prefix: str) -> list[Column]:
        return [layout.merge_over(c, frame).alias(f"{prefix}{c}") for c, _, _ in layout.partial_fields()]

    revision = F.coalesce(F.max("_rev").over(w), F.lit(0)) + F.sum("_is_late").over(w)
    return [*layout.window_cols, *layout.partial_cols(), *folded(w, "cum"), *folded(before, "prev"),
            revision.alias("_revision"), "_is_late"]

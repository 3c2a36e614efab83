"""The interval join on Spark (``[join]``): the core state machine run per key bucket on the executors.

A step carries out a :class:`~lowwater.spark.step.StepPlan` (whose row clock
gives every judged row its ``W(r)`` from the tracker over both sources, the
join's watermark of SEMANTICS.md §9: the executors' clock where the pipeline
allows, ``spark/row_clock.py``, else the driver's) without any per-row work on
the driver:

1. **rows**: the judged rows' join columns, their row clock attached as
   columns (``input.py``: ``_w``, ``_seq``, ``_seq_minor``) and their key bucket;
2. **buckets**: the state is Parquet buckets by key hash in the versioned
   store, with a summary per bucket beside the counts (``join/m<step>.json``:
   the bounds ``W`` must pass to free its rows, its earliest event time, open
   and pending rows per side). A step reads the buckets its rows touch and
   those ``W`` starts to free; a bucket ``W`` frees whole is dropped unread
   (its pending rows counted unmatched) unless a left outer join owes rows
   from it; the others keep their version;
3. **keyed pass** (``executor.py``): rows and read state shuffled by
   bucket, the core join run per task; pairs, unmatched left rows, too-late
   row ids, the new state, per-bucket summaries and count deltas come back,
   persisted; the state write runs it and observes the summaries and counts
   (``observed.py``: no job of their own);
4. **write** (``writes.py``: with Parquet the only sink, state, ``joined`` and the dead letters
   and held rows the engine hands over in one fused job) through the sinks: ``joined``, ``late`` (too-late rows whole,
   joined back to the micro-batch by row id, ``reason = too_late_for_join``),
   ``join_metrics`` (the held output watermark: ``min(W, earliest buffered event
   time)``, an aggregate of the bucket summaries), and the state as version
   ``step`` of the buckets written; the engine's manifest names the versions,
   so a crash or a replayed batch restarts from the same state (§8).

The driver learns only the summed count deltas and per-bucket summaries.
The join's semantics live in ``core/join.py`` (ADR 0031).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from functools import partial, reduce

import pyarrow as pa
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lowwater.config.join import JoinConfig
from lowwater.core.accounting import Accounting
from lowwater.core.join import TOO_LATE_FOR_JOIN, JoinType, Side, SideCounts
from lowwater.core.lateness import LatePolicy
from lowwater.core.temporal_join import JoinKind
from lowwater.runtime.columns import watermark_ts
from lowwater.runtime.jobs import without_aqe
from lowwater.spark.fused_write import Output
from lowwater.spark.operators.join.executor import (
    make_join_pass,
    out_schema,
    state_columns,
)
from lowwater.spark.operators.join.input import BUCKETS, bucket_of, join_columns, new_rows, state_rows
from lowwater.spark.operators.join.observed import BucketSummary, Pass
from lowwater.spark.operators.join.writes import JoinWrites, fusable
from lowwater.spark.operators.protocol import OperatorContext
from lowwater.spark.operators.windowed.executor import PER_ROW, clipping
from lowwater.spark.operators.windowed.fold import StateLayout
from lowwater.spark.operators.windowed.operator import window_results
from lowwater.spark.state import KEEP_MANIFESTS, Bucket, BucketStateStore, Manifest
from lowwater.spark.step import OperatorResult, StepPlan
from lowwater.time import POS_INF, to_datetime

log = logging.getLogger("lowwater")

# Above this many rows per key bucket a step is taken to touch every bucket (a bucket left untouched
# is then read and rewritten unchanged): finding out would cost a Spark job, more than the rewrite.
# Below it the executors' clock tells which (pass 1, ``plan.touched``), else a job over the rows does.
SPREAD = 4

JOIN_METRICS = "join_metrics"
JOIN_METRICS_SCHEMA = T.StructType([
    T.StructField("step", T.LongType()),
    T.StructField("watermark", T.TimestampType()),
    T.StructField("output_watermark", T.TimestampType()),
    T.StructField("open_left", T.LongType()),
    T.StructField("open_right", T.LongType()),
    T.StructField("emitted", T.LongType()),
    T.StructField("counts", T.MapType(T.StringType(), T.MapType(T.StringType(), T.LongType()))),
])
JOIN_METRICS_ARROW = pa.schema([
    ("step", pa.int64()),
    ("watermark", pa.timestamp("us", tz="UTC")),
    ("output_watermark", pa.timestamp("us", tz="UTC")),
    ("open_left", pa.int64()),
    ("open_right", pa.int64()),
    ("emitted", pa.int64()),
    ("counts", pa.map_(pa.string(), pa.map_(pa.string(), pa.int64()))),
])


class JoinOperator:
    """``[join]``: an interval join of two sources (the operator ``join``, ``config/join.JOIN_WINDOW``)."""

    driver_clock_only: str | None = None  # either row clock serves it: it reads only the clock's columns
    writes_beside = True  # it writes plan.beside (dead letters, held rows) with its state, in one job (writes.py)
    window_verdicts = False  # it judges its rows from W(r): the driver's clock assigns no window (planner.py)

    def __init__(self, ctx: OperatorContext, layout: StateLayout) -> None:
        assert ctx.cfg.join is not None
        self.cfg, self.spark, self.sinks, self.inputs = ctx.cfg, ctx.spark, ctx.sinks, ctx.inputs
        self.join: JoinConfig = ctx.cfg.join
        self.types = {f.name: f.dataType for f in ctx.inputs.fields}
        self.state_dir = ctx.state_dir.rstrip("/")
        self.store = BucketStateStore(ctx.spark, ctx.state_dir, self.state_schema())
        self.layout = layout  # results/ is prepared with its (empty) window columns, as for every pipeline
        self.clip = clipping(ctx.cfg)[0]
        self.out_schema = out_schema(self.join, self.types)
        self._prepared = False
        self.last: tuple[Pass, int] | None = None  # the last step's pass and held output W (join/windows.py)
        # plan.beside (dead letters, held rows) and their rows, for the step's _advance to write
        self.handed: tuple[tuple[Output, ...], int] = ((), 0)
        self.writes = JoinWrites(self.join, ctx.sinks, self.store, self._state_names())

    # -- layouts ---------------------------------------------------------------------

    def _state_names(self) -> list[str]:
        return [n for n, _ in state_columns(self.join, self.types)]

    def state_schema(self) -> T.StructType:
        cols = [*state_columns(self.join, self.types), ("_bucket", T.IntegerType())]
        return T.StructType([T.StructField(n, t) for n, t in cols])

    def empty_results(self) -> DataFrame:
        return window_results(self.spark, self.layout)

    def row_columns(self) -> list[str] | None:
        """What the keyed pass reads of a row (the late and dead-letter rows are re-read whole by row id)."""
        return join_columns(self.join, self.clip)

    def touch_column(self, frame: DataFrame) -> Column:
        """A row's key bucket: the executors' clock returns the buckets the step's rows touch (``plan.touched``)."""
        return bucket_of(frame, list(self.join.on))

    def joined_schema(self) -> T.StructType:
        """joined/: the keys, the left side's chosen columns, the right side's, both event times, the watermark."""
        fields = [T.StructField(c, self.types[c]) for c in self.join.output_columns()]
        times = ("left_event_time", "right_event_time", "watermark")
        return T.StructType([*fields, *[T.StructField(c, T.TimestampType()) for c in times]])

    def _prepare(self) -> None:
        if not self._prepared:
            empty = self.spark.createDataFrame([], self.joined_schema())
            for s in self.sinks.sinks:
                s.prepare("joined", empty, None)
                s.prepare(JOIN_METRICS, JOIN_METRICS_ARROW.empty_table(), JOIN_METRICS_SCHEMA)
            self._prepared = True

    # -- counts and bucket summaries beside the manifest --------------------------------

    def _counts_path(self, step: int) -> str:
        return f"{self.state_dir}/join/v{step:012d}.json"

    def _summaries_path(self, step: int) -> str:
        return f"{self.state_dir}/join/m{step:012d}.json"

    def _load(self, prev: Manifest) -> tuple[dict[Side, SideCounts], dict[int, BucketSummary] | None]:
        """Each side's counts after ``prev`` and its buckets' summaries (None: state written before them)."""
        fs = self.store.fs
        counts = {Side.LEFT: SideCounts(), Side.RIGHT: SideCounts()}
        if prev.step < 0:
            return counts, {}
        if fs.exists(self._counts_path(prev.step)):
            data = json.loads(fs.read_text(self._counts_path(prev.step)))
            counts = {Side(k): SideCounts(**v) for k, v in data.items()}
        if not fs.exists(self._summaries_path(prev.step)):
            return counts, None
        data = json.loads(fs.read_text(self._summaries_path(prev.step)))
        if data.get("buckets") != BUCKETS:
            return counts, None
        return counts, {int(b): BucketSummary(*v) for b, v in data["summaries"].items()}

    def _save(self, step: int, counts: dict[Side, SideCounts], summaries: dict[int, BucketSummary]) -> None:
        fs = self.store.fs
        fs.write_text_atomic(self._counts_path(step), json.dumps({s.value: c.as_dict() for s, c in counts.items()}))
        data = {"buckets": BUCKETS, "summaries": {str(b): list(vars(m).values()) for b, m in sorted(summaries.items())}}
        fs.write_text_atomic(self._summaries_path(step), json.dumps(data))
        old = step - 2 * KEEP_MANIFESTS  # no kept manifest is that old
        for path in (self._counts_path(old), self._summaries_path(old)):
            if old >= 0 and fs.exists(path):
                fs.delete(path)

    # -- which buckets a step reads -------------------------------------------------------

    def _plan_buckets(
        self, prev: Manifest, summaries: dict[int, BucketSummary] | None, touched: set[int] | None,
        watermark_us: int, counts: dict[Side, SideCounts],
    ) -> tuple[set[int], set[int]]:
        """(buckets to read, buckets dropped unread); the dropped buckets' pending rows are counted unmatched."""
        read, dropped = set(), set()
        # A left outer join owes its unmatched rows; a temporal join matches its left rows when W frees them.
        owes = self.join.type == JoinType.LEFT_OUTER or self.join.kind == JoinKind.TEMPORAL
        for b in prev.buckets:
            m = None if summaries is None else summaries.get(b)
            if m is None or touched is None or b in touched:
                read.add(b)
            elif watermark_us > m.max_free and not (owes and m.pending_left):
                dropped.add(b)
                for side, n in ((Side.LEFT, m.pending_left), (Side.RIGHT, m.pending_right)):
                    counts[side].pending -= n
                    counts[side].unmatched += n
            elif watermark_us > m.min_free:
                read.add(b)
        return read, dropped

    def _keyed_pass(
        self, rows: DataFrame | None, prev: Manifest, read: set[int], watermark_us: int, cache: list[DataFrame],
    ) -> Pass:
        """The executors' pass over the step's rows and the read buckets, persisted (nothing runs yet)."""
        parts = []
        state = self.store.read(prev, read) if read else None
        if state is not None:
            parts.append(state_rows(state, self.join, self._state_names()))
        if rows is not None:
            parts.append(rows)
        if not parts:
            return Pass()
        union = reduce(lambda a, b: a.unionByName(b, allowMissingColumns=True), parts)
        for c in ("_rid", "_w", "_arrival_us", PER_ROW):
            if c not in union.columns:
                union = union.withColumn(c, F.lit(None).cast("long"))
        fn = make_join_pass(self.join, self.out_schema, watermark_us, self.clip, clipping(self.cfg)[1])
        out = union.repartition("_bucket").mapInArrow(fn, self.out_schema).persist()
        cache.append(out)
        return Pass(out=out)

    # -- a step and the drain ----------------------------------------------------------------

    def _advance(
        self, prev: Manifest, step: int, watermark_us: int, rows: DataFrame | None, n_rows: int,
        dead: dict[Side, int], cache: list[DataFrame], late_rows: Callable[[DataFrame], DataFrame] | None,
        known: frozenset[int] | None = None,
    ) -> tuple[Pass, dict[int, Bucket], int]:
        """One step (or the drain): read, pass, write; (the pass, the manifest's buckets, the held output W).

        ``known``: the buckets the rows touch, when the executors' clock told (``plan.touched``). What the
        engine handed over (``self.handed``) is written with the state (``writes.py``).
        """
        beside, beside_rows = self.handed
        self.handed = ((), 0)
        t0 = time.monotonic()
        counts, summaries = self._load(prev)
        touched: set[int] | None = set()  # None: every bucket (not worth a job to find out)
        if rows is not None and n_rows <= SPREAD * BUCKETS:
            touched = set(known) if known is not None else {
                int(r[0]) for r in rows.select("_bucket").distinct().collect()}
        elif rows is not None:
            touched = None
        t1 = time.monotonic()
        read, dropped = self._plan_buckets(prev, summaries, touched, watermark_us, counts)
        # The write runs the pass (its counts and summaries come with it). AQE is off while the pass is
        # persisted (its cached plan is planned then) and written: its exchange is a stage of the write's
        # job, not a job of its own, as the row clock's pass 1 (ADR 0047). Where it can, that one job
        # writes joined/ and what the engine handed over too (``writes.py``).
        self._prepare()
        fused = fusable(self.sinks, self.store, step)
        with without_aqe(self.spark):
            got = self._keyed_pass(rows, prev, read, watermark_us, cache)
            if fused:
                sized = n_rows + sum(prev.buckets[b].rows for b in read if b in prev.buckets) + beside_rows
                written = self.writes.fused(step, got, list(beside), sized)
            else:
                written = self.writes.state(step, got, list(beside))
        t2 = time.monotonic()
        for side, n in dead.items():
            counts[side].rows += n
            counts[side].dead_letter += n
        for side, d in got.deltas.items():
            for f, v in d.items():
                setattr(counts[side], f, getattr(counts[side], f) + v)
        kept = {b: s for b, s in (summaries or {}).items() if b in prev.buckets and b not in read | dropped}
        kept.update(got.summaries)
        self._check(counts, kept)
        buckets = {b: prev.buckets[b] for b in kept if b not in got.summaries}
        buckets.update(written)
        self.writes.outputs(step, got, late_rows, joined=not fused)
        missing = set(got.summaries) - set(buckets)
        if missing:
            msg = f"join: state buckets {sorted(missing)} were summarised but not written"
            raise RuntimeError(msg)
        self._save(step, counts, kept)
        t3 = time.monotonic()
        log.debug("step %d join: buckets touched %.2fs (%s), %d read, %d dropped, pass and state %.2fs, "
                  "joined and late %.2fs",
                  step, t1 - t0, "all" if touched is None else len(touched), len(read), len(dropped), t2 - t1, t3 - t2)
        held = min([watermark_us, *(s.min_event for s in kept.values())])
        metrics = {
            "step": step,
            "watermark": to_datetime(watermark_us),
            "output_watermark": to_datetime(held),
            "open_left": sum(s.open_left for s in kept.values()),
            "open_right": sum(s.open_right for s in kept.values()),
            "emitted": got.emitted,
            "counts": [(side.value, list(c.as_dict().items())) for side, c in counts.items()],
        }
        self.sinks.write_rows(JOIN_METRICS, step, pa.Table.from_pylist([metrics], JOIN_METRICS_ARROW),
                              JOIN_METRICS_SCHEMA)
        self.last = (got, held)
        return got, buckets, held

    @staticmethod
    def _check(counts: dict[Side, SideCounts], summaries: dict[int, BucketSummary]) -> None:
        """Each side's identity (SEMANTICS.md §9), and its pending rows are the unmatched rows its buckets hold."""
        for side, c in counts.items():
            c.check(side.value)
            held = sum(s.pending_left if side == Side.LEFT else s.pending_right for s in summaries.values())
            if held != c.pending:
                msg = f"join: {held} unmatched rows buffered on the {side} side, counted {c.pending}"
                raise AssertionError(msg)

    def step(
        self, parsed: DataFrame, plan: StepPlan, prev: Manifest, step: int, cache: list[DataFrame],
    ) -> OperatorResult:
        n_valid = plan.data_rows
        rows = None
        if n_valid:
            assert plan.rows is not None
            rows = new_rows(plan.rows.frame_with_clock(join_columns(self.join, self.clip)), self.join, step)
            if plan.touched is None and n_valid <= SPREAD * BUCKETS:  # read twice: buckets touched, then the pass
                rows = rows.persist()
                cache.append(rows)
        dead = self._dead_per_side(plan, step)
        self.handed = (plan.beside, plan.dead + plan.held)
        late_rows = partial(self._late_frame, parsed) if self.cfg.late_policy == LatePolicy.SIDE_OUTPUT else None
        got, buckets, held = self._advance(prev, step, plan.watermark, rows, n_valid, dead, cache, late_rows,
                                           plan.touched)
        if got.new_rows != n_valid:
            msg = f"step {step}: the join judged {got.new_rows} rows, the row clock gave {n_valid}"
            raise RuntimeError(msg)
        too_late = sum(d.get("too_late", 0) for d in got.deltas.values())
        accounting = Accounting(rows=n_valid + plan.dead, on_time=n_valid - too_late, too_late=too_late,
                                dead_letter=plan.dead)
        accounting.check()
        return OperatorResult(accounting=accounting, buckets=buckets, windows_fired=got.emitted,
                              output_watermark_us=held)

    def _dead_per_side(self, plan: StepPlan, step: int) -> dict[Side, int]:
        """The step's dead letters per side, as the row clock counted them per source (no job of its own)."""
        dead = {Side.LEFT: 0, Side.RIGHT: 0}
        if not plan.dead:
            return dead
        if plan.dead_by_source is None:
            msg = f"step {step}: {plan.dead} dead letters, not counted per source by the row clock"
            raise RuntimeError(msg)
        for source, n in plan.dead_by_source.items():
            side = self.join.side_of(source)
            if side is not None:
                dead[Side(side)] += n
        if sum(dead.values()) != plan.dead:
            msg = f"step {step}: {plan.dead} dead letters, {sum(dead.values())} of them counted on a side of the join"
            raise RuntimeError(msg)
        return dead

    def _late_frame(self, parsed: DataFrame, tl: DataFrame) -> DataFrame:
        """The too-late rows whole (every input column), each with its ``W(r)`` and the reason."""
        rows = parsed.filter(F.col("_dead").isNull()).join(F.broadcast(tl), "_rid")
        return rows.select(
            *[F.col(c) for c in self.inputs.fieldNames()],
            watermark_ts("_w").alias("watermark"),
            F.lit(None).cast("timestamp").alias("window_start"),
            F.lit(None).cast("timestamp").alias("window_end"),
            F.lit(TOO_LATE_FOR_JOIN).alias("reason"),
            F.col("_file").alias("source_file"),
        )

    def drain(self, prev: Manifest, step: int, cache: list[DataFrame]) -> OperatorResult:
        """``W = +inf``: every buffered row is freed; a left outer join emits its unmatched left rows."""
        got, buckets, held = self._advance(prev, step, POS_INF, None, 0, {}, cache, None)
        return OperatorResult(accounting=Accounting(), buckets=buckets, windows_fired=got.emitted,
                              output_watermark_us=held)

    def summary(self, manifest: Manifest) -> dict:
        """Each side's accounting (SEMANTICS.md §9) for ``summary.json``."""
        path = self._counts_path(manifest.step)
        if manifest.step < 0 or not self.store.fs.exists(path):
            return {}
        counts = json.loads(self.store.fs.read_text(path))
        return {"join": {side: {**c, "balanced": SideCounts(**c).balanced} for side, c in counts.items()}}

"""Session windows on Spark: the driver side of the session :class:`WindowOperator`.

Sessions merge, so a row's verdict depends on the state of its key, and the
driver cannot decide it from ``W(r)`` alone. A session step is therefore:

1. the driver's plan (``spark/planner.py``, as for every window type) gives
   ``W(r)`` and the arrival sequence number of every row, broadcast by row id;
2. one keyed pass (``executor.py``) runs the core state machine
   per key over the live state and the step's rows, persisted once;
3. the driver checks that the executors' verdicts add up to its valid-row
   count, writes results and late rows through the sinks (too-late row ids
   joined back to the re-read micro-batch for the whole input row), and the
   state as one bucket of the versioned store, committed through the step's
   manifest by the engine.

Every live session is read and rewritten each step; that state is bounded by
``gap + L + G`` times the row rate (times the keys), see docs/design.md.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lowwater.core.accounting import Accounting
from lowwater.core.lateness import DRAINED_REASON, TOO_LATE_REASON, LatePolicy
from lowwater.runtime.columns import watermark_ts
from lowwater.runtime.jobs import side_by_side
from lowwater.spark.aggtypes import value_cast, value_expr
from lowwater.spark.clocked import CLOCK_COLUMNS
from lowwater.spark.operators.protocol import OperatorContext
from lowwater.spark.operators.sessions.executor import COUNTS, make_session_step, out_schema, state_schema
from lowwater.spark.operators.sessions.values import special_inputs
from lowwater.spark.operators.windowed.executor import PER_ROW, clipping
from lowwater.spark.operators.windowed.fold import StateLayout
from lowwater.spark.operators.windowed.operator import window_results
from lowwater.spark.state import Bucket, BucketStateStore, Manifest
from lowwater.spark.step import OperatorResult, StepPlan
from lowwater.time import POS_INF, output_us

log = logging.getLogger("lowwater")

BUCKET = 0  # all live sessions are one bucket of the versioned store


class SessionOperator:
    """Session windows: every live session is one bucket, read and rewritten by each step's keyed pass."""

    driver_clock_only: str | None = None  # either row clock serves it

    def __init__(self, ctx: OperatorContext, layout: StateLayout) -> None:
        self.cfg, self.spark, self.sinks, self.inputs, self.clock = ctx.cfg, ctx.spark, ctx.sinks, ctx.inputs, ctx.clock
        self.layout = layout
        self.out_schema = out_schema(layout)
        self.store = BucketStateStore(ctx.spark, ctx.state_dir, self.state_schema())

    def state_schema(self) -> T.StructType:
        return state_schema(self.layout)

    def empty_results(self) -> DataFrame:
        return window_results(self.spark, self.layout)

    def summary(self, manifest: Manifest) -> dict:
        """Nothing beside the engine's accounting."""
        return {}

    # -- Spark frames --------------------------------------------------------------

    def row_columns(self) -> list[str]:
        """What the keyed pass reads of a row (the executors' clock lays out only these)."""
        return list(dict.fromkeys([*self.layout.keys, *self.layout.values, "_event_us", "_rid", "_arrival_us",
                                   PER_ROW]))

    def _rows(self, plan: StepPlan, clip: bool) -> DataFrame:
        """The step's data rows with their ``W(r)`` and arrival order (``spark/clocked.py``), as the pass reads them."""
        assert plan.rows is not None
        need = [*self.layout.keys, *self.layout.values, "_event_us", "_rid"]
        if clip:
            need.append("_arrival_us")
            if clipping(self.cfg)[1] == PER_ROW:
                need.append(PER_ROW)
        framed = plan.rows.frame_with_clock(list(dict.fromkeys(need)))
        cols = [F.col(k) for k in self.layout.keys]
        cols += [self._value(j).alias(f"_v{j}") for j in range(len(self.layout.values))]
        cols += [F.col("_event_us"), F.col("_rid"), F.lit(1).alias("_role"), *(F.col(c) for c in CLOCK_COLUMNS)]
        if clip:
            cols.append(F.col("_arrival_us"))
            if clipping(self.cfg)[1] == PER_ROW:
                cols.append(F.col(PER_ROW))
        return framed.select(*cols)

    def _value(self, j: int):  # noqa: ANN202 - a Column
        """Value input ``j`` of a row as the pass reads it: Spark SQL computes a number's (``aggtypes.input_expr``);
        a by-time input, collection or sketch is built by the machine from the value itself and the row's arrival
        (``partials.input_value``), so the pass gets the value as it travels."""
        lay = self.layout
        if j in special_inputs(lay):
            return value_expr(F.col(lay.values[j]), lay.column_type(j))
        return lay.value_expr(j)

    def _value_type(self, j: int) -> T.DataType:
        lay = self.layout
        return value_cast(lay.column_type(j) if j in special_inputs(lay) else lay.value_type(j))

    def _run(
        self, rows: DataFrame | None, prev: Manifest, watermark_us: int, clip: bool, step: int = 0,
    ) -> DataFrame | None:
        """The persisted output frame of the keyed pass (None when there is nothing to run)."""
        state = self.store.read(prev, {BUCKET})
        keys = list(self.layout.keys)
        parts = []
        if state is not None:
            packed = [c for c in state.columns if c not in keys]
            parts.append(state.select(*keys, F.to_json(F.struct(*packed)).alias("_state"), F.lit(0).alias("_role")))
        if rows is not None:
            parts.append(rows.withColumn("_state", F.lit(None).cast("string")))
        if not parts:
            return None
        union = parts[0]
        for p in parts[1:]:
            union = union.unionByName(p, allowMissingColumns=True)
        row_cols = {"_rid": "long", "_event_us": "long", "_arrival_us": "long", PER_ROW: "long",
                    **dict.fromkeys(CLOCK_COLUMNS, "long")}
        row_cols.update({f"_v{j}": self._value_type(j) for j in range(len(self.layout.values))})
        for c, typ in row_cols.items():
            if c not in union.columns:
                union = union.withColumn(c, F.lit(None).cast(typ))
        union = union.repartition(*keys) if keys else union.repartition(1)
        fn = make_session_step(
            self.layout,
            int(self.cfg.window.gap_us or 0),
            self.cfg.window.allowed_lateness_us,
            self.cfg.window.accumulation,
            clipping(self.cfg)[1],
            clip,
            watermark_us,
            self.cfg.early,
            self.clock(),  # processing time for the early trigger (injectable, as for tumbling)
            self.out_schema,
            step,
        )
        return union.mapInArrow(fn, self.out_schema).persist()

    def _results(self, out: DataFrame, emit_wm: int | None) -> DataFrame:
        """Emission rows as result rows (the columns of the tumbling path)."""
        lay = self.layout
        df = out.filter(F.col("_out") == "E")
        cols = lay.result_values()  # the tumbling path's columns, typed as it types them (spark/aggtypes.py)
        wm = F.timestamp_micros(F.lit(emit_wm)) if emit_wm is not None else F.lit(None).cast("timestamp")
        cols += [F.col("_kind").alias("kind"), F.col("_rev").alias("revision"), wm.alias("watermark")]
        return df.select(*cols)

    def _finish(
        self, out: DataFrame | None, step: int, emit_wm: int | None,
        late_rows: Callable[[list[int]], DataFrame | None] | None = None,
    ) -> tuple[list[int], dict]:
        """Write results and state (and, given ``late_rows``, the late rows the counts call for); the counts and
        the manifest's buckets."""
        counts = [0] * len(COUNTS)
        t0 = time.monotonic()
        if out is not None:
            got = out.filter(F.col("_out") == "C").agg(*[F.sum(c).alias(c) for c in COUNTS]).collect()[0]
            counts = [int(got[c] or 0) for c in COUNTS]
        t1 = time.monotonic()

        def write_results() -> None:
            self.sinks.write_or_clear("results", step, self._results(out, emit_wm) if counts[6] else None)

        def write_state() -> dict[int, Bucket]:
            buckets: dict[int, Bucket] = {}
            if out is not None and counts[3]:
                names = self.state_schema().fieldNames()
                state = out.filter(F.col("_out") == "S").select(*names).withColumn("_bucket", F.lit(BUCKET))
                for b, (rows, size) in self.store.write(step, state).items():
                    buckets[b] = Bucket(version=step, fired=False, rows=rows, bytes=size)
            return buckets

        def write_late() -> None:
            assert late_rows is not None
            self.sinks.write_or_clear("late", step, late_rows(counts))

        # All read the persisted output of the keyed pass and do not depend on each other.
        writes = [write_results, write_state] + ([write_late] if late_rows is not None else [])
        buckets = side_by_side(*writes)[1]
        t2 = time.monotonic()
        log.debug("step %d sessions: keyed pass + counts %.2fs, results, state, late %.2fs", step, t1 - t0, t2 - t1)
        return counts, buckets

    # -- a step and the drain ------------------------------------------------------------

    def step(
        self, parsed: DataFrame, plan: StepPlan, prev: Manifest, step: int, cache: list[DataFrame],
    ) -> OperatorResult:
        cfg = self.cfg
        w_new = plan.watermark
        n_valid = plan.data_rows
        clip = clipping(cfg)[0]
        rows = self._rows(plan, clip) if n_valid else None
        out = self._run(rows, prev, w_new, clip, step)
        if out is not None:
            cache.append(out)

        def late_rows(counts: list[int]) -> DataFrame | None:
            if counts[2] and cfg.late_policy == LatePolicy.SIDE_OUTPUT and out is not None:
                reason = DRAINED_REASON if prev.drained else TOO_LATE_REASON  # --after-drain: W was already +inf
                return self._late_rows(parsed, out, reason)
            return None

        # The late rows are written side by side with results and state; the counts are checked before the
        # step commits (a failed check leaves the step uncommitted, its outputs overwritten by the replay).
        counts, buckets = self._finish(out, step, output_us(w_new), late_rows)
        on, late, too = counts[:3]
        if on + late + too != n_valid:
            msg = f"step {step}: executors judged {on + late + too} rows (on time, late, too late = " \
                  f"{on}, {late}, {too}), the driver has {n_valid} valid rows"
            raise RuntimeError(msg)
        acc = Accounting(rows=n_valid + plan.dead, on_time=on, late_updates=late, too_late=too,
                         dead_letter=plan.dead, clipped=plan.clipped)
        acc.check()  # a session's verdicts are the machine's (merges decide), never the driver's proto-windows
        return OperatorResult(accounting=acc, buckets=buckets, windows_fired=counts[4], revisions=counts[5])

    def _late_rows(self, parsed: DataFrame, out: DataFrame, reason: str) -> DataFrame:
        """Too-late rows, whole: their ids joined back to the (re-read) micro-batch."""
        tl = out.filter(F.col("_out") == "T").select(
            "_rid", F.col("_w"), F.col("window_start").alias("_ws"), F.col("window_end").alias("_we")
        )
        joined = parsed.filter(F.col("_dead").isNull()).join(F.broadcast(tl), "_rid")
        return joined.select(
            *[F.col(c) for c in self.inputs.fieldNames()],
            watermark_ts("_w").alias("watermark"),
            F.timestamp_micros("_ws").alias("window_start"),
            F.timestamp_micros("_we").alias("window_end"),
            F.lit(reason).alias("reason"),
            F.col("_file").alias("source_file"),
        )

    def drain(self, prev: Manifest, step: int, cache: list[DataFrame]) -> OperatorResult:
        """``W = +inf``: every live session fires."""
        out = self._run(None, prev, POS_INF, False, step)
        if out is not None:
            cache.append(out)
        counts, _ = self._finish(out, step, output_us(POS_INF))
        return OperatorResult(accounting=Accounting(), buckets={}, windows_fired=counts[4], revisions=counts[5])

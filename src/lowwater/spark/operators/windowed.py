"""Tumbling and hopping windows on Spark: contributions, fold, fire (the windowed :class:`WindowOperator`).

A step carries out the driver's :class:`~lowwater.spark.step.StepPlan` in
three parts:

1. **contributions** (executors, ``spark/contrib.py``): each task re-derives
   every (row, window) pair's verdict from the broadcast ``W(r)`` and folds
   the on-time pairs into partials; the frame is persisted and materialised
   in the background, and its pair counts must equal the driver's;
2. **fold** (Spark SQL, ``spark/windowing.py``): state ⊕ partials, early
   firings, finals, revisions, the new state;
3. **write**: late rows and results through the sinks, the new state as
   versioned buckets, side by side (``runtime/jobs.py``).

The drain fires every open window at ``W = +inf``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from pyspark.sql import Column, DataFrame, Observation, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lowwater.config import PipelineConfig
from lowwater.core.accounting import Accounting
from lowwater.core.lateness import DRAINED_REASON, TOO_LATE_REASON, LatePolicy
from lowwater.io.sink import Sinks
from lowwater.runtime.columns import col, memo, select, watermark_ts
from lowwater.runtime.jobs import Background, side_by_side
from lowwater.spark.contrib import PAYLOAD, PER_ROW, clipping, contrib_schema, make_contribute
from lowwater.spark.state import Bucket, BucketStateStore, Manifest
from lowwater.spark.step import OperatorResult, StepPlan
from lowwater.spark.windowing import ROWS, StateLayout, step_windows
from lowwater.time import POS_INF, output_us

log = logging.getLogger("lowwater")


def _pair_counts(contrib: DataFrame, step: int) -> tuple[int, int, int]:
    """Materialise the persisted contributions and count their (on time, late, too late) pairs.

    One stage, no shuffle: a ``noop`` write of the cached frame with an
    :class:`Observation` (metrics of a completed action count each task once).
    """
    obs = Observation(f"pairs_{step}")
    sums = memo("pair_counts", lambda: [
        F.sum(F.when(F.col("_kind") == k, F.col(ROWS)).otherwise(0)).alias(k) for k in ("P", "L", "T")
    ])
    contrib.observe(obs, *sums).write.format("noop").mode("overwrite").save()
    got = obs.get
    return int(got.get("P") or 0), int(got.get("L") or 0), int(got.get("T") or 0)


def _emission_counts() -> list[Column]:
    """Observed on a step's emissions: how many finals, revisions and provisionals it wrote."""
    return memo("emission_counts", lambda: [
        F.sum(F.when(F.col("kind") == kind, 1).otherwise(0)).alias(name)
        for kind, name in (("final", "finals"), ("revision", "revisions"), ("provisional", "provisionals"))
    ])


def _is_kind(kind: str) -> Column:
    """``_kind = kind`` on the contributions frame (built once per context)."""
    return memo(("is_kind", kind), lambda: col("_kind") == kind)


class WindowedOperator:
    """Tumbling and hopping windows: state is one bucket per window end, read only where a step needs it."""

    def __init__(
        self,
        cfg: PipelineConfig,
        spark: SparkSession,
        layout: StateLayout,
        state_dir: str,
        sinks: Sinks,
        inputs: T.StructType,
        clock: Callable[[], int],
    ) -> None:
        self.cfg = cfg
        self.spark = spark
        self.layout = layout
        self.sinks = sinks
        self.inputs = inputs
        self.clock = clock
        self.assigner = cfg.window.assigner()
        self.store = BucketStateStore(spark, state_dir, self.state_schema())

    def state_schema(self) -> T.StructType:
        return self.layout.schema()

    def _contributions(self, parsed: DataFrame, plan: StepPlan, with_payload: bool) -> DataFrame:
        """Executor side (``contrib``): on-time partials, late-update and too-late pairs."""
        names = self.inputs.fieldNames()
        need = list(dict.fromkeys([*self.layout.keys, *self.layout.values]))
        payload = [*names, "_file"] if with_payload else None
        clip, skew = clipping(self.cfg)
        cols = list(dict.fromkeys([*need, *(payload or []), "_event_us", "_rid"]))
        if clip:
            cols.append("_arrival_us")  # only clipping needs the arrival clock on the executors
            if skew == PER_ROW:
                cols.append(PER_ROW)
        valid = select(parsed.filter(memo("valid", lambda: F.col("_dead").isNull())), cols)
        fields = {f.name: f for f in parsed.schema.fields}
        schema = contrib_schema(self.layout, [fields[c] for c in payload] if payload else None)
        fn = make_contribute(
            self.layout,
            self.assigner,
            self.cfg.window.allowed_lateness_us,
            skew,
            self.spark.sparkContext.broadcast(plan.lookup),
            payload,
            clip,
            schema,
        )
        return valid.mapInArrow(fn, schema)

    def step(
        self, parsed: DataFrame, plan: StepPlan, prev: Manifest, step: int, cache: list[DataFrame],
    ) -> OperatorResult:
        grace = self.cfg.window.allowed_lateness_us
        w_new = plan.watermark
        n_on, n_late, n_too_late = (int(x) for x in plan.pair_counts)
        side_output = bool(n_too_late) and self.cfg.late_policy == LatePolicy.SIDE_OUTPUT
        contrib = None
        counting = None
        if n_on + n_late + n_too_late:
            contrib = self._contributions(parsed, plan, with_payload=side_output).persist()
            cache.append(contrib)
            # Materialise once (in the background, while the driver builds the fold's
            # frames) and hold the executors to the driver's verdicts below: nothing is
            # lost (or invented) between the two sides of the step.
            counting = Background(lambda: _pair_counts(contrib, step))
        try:  # build the fold's frames while the contributions pass runs
            late_rows = None
            if side_output and contrib is not None:
                p = PAYLOAD
                late_rows = contrib.filter(F.col("_kind") == "T").select(
                    *[F.col(p + c).alias(c) for c in self.inputs.fieldNames()],
                    watermark_ts("_w").alias("watermark"),
                    F.timestamp_micros("window_start").alias("window_start"),
                    F.timestamp_micros("window_end").alias("window_end"),
                    F.lit(DRAINED_REASON if prev.drained else TOO_LATE_REASON).alias("reason"),
                    F.col(p + "_file").alias("source_file"),
                )
            state_cols = [*self.layout.window_cols, *self.layout.partial_cols()]
            on_time = select(contrib.filter(_is_kind("P")), state_cols) if n_on else None
            late = select(contrib.filter(_is_kind("L")), [*state_cols, "_seq"]) if n_late else None
            read = set(plan.read)
            state = self.store.read(prev, read)
            emit_wm = output_us(w_new)
            emitted, new_state = step_windows(
                self.layout, state, on_time, late, w_new, grace, emit_wm, step, cache, self.cfg.window.accumulation,
                now_us=plan.now_us, admit_us=plan.admitted_at_us,
            )
            if emitted is not None and not (plan.fires or n_late or self.cfg.early is not None):
                # Nothing can be emitted (no window reaches W, no late update, no early trigger): skip
                # the results job, which would scan the merged state only to write an empty frame.
                emitted = None
            obs = None
            if emitted is not None:
                obs = Observation(f"emit_{step}")
                emitted = emitted.observe(obs, *_emission_counts())
        except BaseException:
            if counting is not None:  # never leave the pass running behind a failed step
                counting.join()
            raise

        if counting is not None:
            t_c = time.monotonic()
            seen = counting.result()
            if seen != (n_on, n_late, n_too_late):
                expected = (n_on, n_late, n_too_late)
                msg = f"step {step}: executors judged {seen} (on time, late, too late) pairs, the driver {expected}"
                raise RuntimeError(msg)
            log.debug("step %d: contributions (waited) %.2fs", step, time.monotonic() - t_c)

        def write_output(kind: str, frame: DataFrame | None) -> Callable[[], None]:
            def write() -> None:
                t_r = time.monotonic()
                self.sinks.write_or_clear(kind, step, frame)
                log.debug("step %d: %s %.2fs", step, kind, time.monotonic() - t_r)

            return write

        def write_state() -> tuple[dict, dict]:
            t_s = time.monotonic()
            written = self.store.write(step, new_state) if new_state is not None else {}
            waiting = self.store.column_min(step, "_due") if written and self.layout.timed else {}
            log.debug("step %d: state write %.2fs", step, time.monotonic() - t_s)
            return written, waiting

        # Results, late rows and state read the same persisted frames and do not depend on each other.
        _, _, (written, waiting) = side_by_side(write_output("results", emitted), write_output("late", late_rows),
                                                write_state)
        fired = revisions = provisionals = 0
        if obs is not None:
            got = obs.get
            fired, revisions = int(got.get("finals") or 0), int(got.get("revisions") or 0)
            provisionals = int(got.get("provisionals") or 0)
        buckets = {
            b: info for b, info in prev.buckets.items() if b not in read and b + grace > w_new
        }
        for b, (rows, size) in written.items():
            buckets[b] = Bucket(version=step, fired=b <= w_new, rows=rows, bytes=size,
                                pending_since_us=waiting.get(b))
        return OperatorResult(
            accounting=plan.accounting, buckets=buckets, windows_fired=fired, revisions=revisions,
            provisionals=provisionals,
        )

    def drain(self, prev: Manifest, step: int, cache: list[DataFrame]) -> OperatorResult:
        """Every open window fires (``W = +inf``), so the drain emits no provisional.

        The finals carry what the accumulation mode says (e.g. discarding: the pending rows).
        """
        to_fire = {b for b, info in prev.buckets.items() if not info.fired}
        state = self.store.read(prev, to_fire)
        emitted, _ = step_windows(
            self.layout, state, None, None, POS_INF, self.cfg.window.allowed_lateness_us, output_us(POS_INF), step,
            cache,
            now_us=self.clock(),
        )
        fired = 0
        if emitted is not None:
            obs = Observation(f"drain_{step}")
            emitted = emitted.observe(obs, *_emission_counts())
            self.sinks.write("results", step, emitted)
            fired = int(obs.get.get("finals") or 0)
        else:
            self.sinks.clear("results", step)
        return OperatorResult(accounting=Accounting(), buckets={}, windows_fired=fired)

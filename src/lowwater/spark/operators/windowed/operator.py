"""Tumbling and hopping windows on Spark: contributions, fold, fire (the windowed :class:`WindowOperator`).

A step carries out a :class:`~lowwater.spark.step.StepPlan` in three parts:

1. **contributions** (executors, ``executor.py``): each task judges
   every (row, window) pair from the row's ``W(r)`` (attached in the same
   pass, ``spark/clocked.py``) and folds the on-time pairs into partials; the
   frame is persisted and materialised once, observing the verdict counts and
   the window ends touched (the state buckets to read); with the driver's
   clock they must equal the driver's;
2. **fold** (Spark SQL, ``fold.py``): state ⊕ partials, early
   firings, finals, revisions, the new state;
3. **write**: late rows and results through the sinks, the new state as
   versioned buckets, side by side (``runtime/jobs.py``).

The drain fires every open window at ``W = +inf``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass

import numpy as np
from pyspark.sql import Column, DataFrame, Observation, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lowwater.config import PipelineConfig
from lowwater.config.window import WindowConfig
from lowwater.core.accounting import Accounting
from lowwater.core.lateness import DRAINED_REASON, TOO_LATE_REASON, Lateness, LatePolicy
from lowwater.runtime.columns import col, memo, select, select_built, watermark_ts
from lowwater.runtime.jobs import side_by_side, without_aqe
from lowwater.spark.fused_write import Output, writable, write_outputs, writing_tasks
from lowwater.spark.operators.protocol import OperatorContext
from lowwater.spark.operators.windowed.executor import PAYLOAD, PER_ROW, clipping, contrib_schema, make_contribute
from lowwater.spark.operators.windowed.fold import ROWS, StateLayout, step_windows
from lowwater.spark.state import Bucket, BucketStateStore, Manifest
from lowwater.spark.step import OperatorResult, StepPlan
from lowwater.time import POS_INF, output_us

log = logging.getLogger("lowwater")
ROWS_A_TASK = 1_000_000  # the fused write's tasks: one per this many rows written
ALL, STATE = "all", "state"  # what the fused write takes in a step (WindowedOperator._fused)


@dataclass(frozen=True)
class Judged:
    """What the executors' contributions pass judged: pairs and rows per verdict, the window ends it touched."""

    pairs: tuple[int, int, int]  # (on time, late update, too late) pairs
    rows: tuple[int, int, int]  # rows by their worst verdict (SEMANTICS.md §6)
    touched: frozenset[int]  # window ends of on-time and late-update pairs: the state buckets to read
    first_on_time_end: int | None  # the earliest window end of an on-time pair


def _judged(contrib: DataFrame, step: int, write: Callable[[DataFrame], None] | None = None) -> Judged:
    """Materialise the persisted contributions and observe what they judged.

    One stage, no shuffle: a write of the cached frame with an
    :class:`Observation` (metrics of a completed action count each task once);
    the touched window ends are a set (one per window, not per row). ``write``
    writes the observed frame (the step's late rows: a filter above the
    observation, so every contribution still passes it); without it the
    write is a ``noop``.
    """
    obs = Observation(f"judged_{step}")
    aggs = memo("judged", lambda: [
        *[F.sum(F.when(F.col("_kind") == k, F.col(ROWS)).otherwise(0)).alias(k) for k in ("P", "L", "T")],
        *[F.sum(F.when((F.col("_kind") == "A") & (F.col("_w") == v), F.col("_seq")).otherwise(0)).alias(f"A{v}")
          for v in range(3)],
        F.collect_set(F.when(F.col("_kind").isin("P", "L"), F.col("window_end"))).alias("touched"),
        F.min(F.when(F.col("_kind") == "P", F.col("window_end"))).alias("first_on"),
    ])
    observed = contrib.observe(obs, *aggs)
    if write is not None:
        write(observed)
    else:
        observed.write.format("noop").mode("overwrite").save()
    got = obs.get
    first = got.get("first_on")
    return Judged(
        pairs=(int(got.get("P") or 0), int(got.get("L") or 0), int(got.get("T") or 0)),
        rows=(int(got.get("A0") or 0), int(got.get("A1") or 0), int(got.get("A2") or 0)),
        touched=frozenset(int(x) for x in got.get("touched") or []),
        first_on_time_end=None if first is None else int(first),
    )


def _check(step: int, plan: StepPlan, judged: Judged, accounting: Accounting, read: set[int]) -> None:
    """With the driver's clock the verdicts were known before: the executors must agree, nothing lost or invented."""
    if plan.pair_counts is not None and judged.pairs != tuple(int(x) for x in plan.pair_counts):
        expected = tuple(int(x) for x in plan.pair_counts)
        msg = f"step {step}: executors judged {judged.pairs} (on time, late, too late) pairs, the driver {expected}"
        raise RuntimeError(msg)
    if plan.accounting is not None and accounting != plan.accounting:
        msg = f"step {step}: executors counted {accounting}, the driver {plan.accounting}"
        raise RuntimeError(msg)
    if plan.read is not None and read != set(plan.read):
        msg = f"step {step}: executors touched buckets {sorted(read)}, the driver {sorted(plan.read)}"
        raise RuntimeError(msg)


def _emission_counts() -> list[Column]:
    """Observed on a step's emissions: how many finals, revisions and provisionals it wrote."""
    return memo("emission_counts", lambda: [
        F.sum(F.when(F.col("kind") == kind, 1).otherwise(0)).alias(name)
        for kind, name in (("final", "finals"), ("revision", "revisions"), ("provisional", "provisionals"))
    ])


def aggregate_layout(cfg: PipelineConfig, inputs: T.StructType, window: WindowConfig | None = None) -> StateLayout:
    """The per-(key, window) aggregate layout of ``window`` (default ``[window]``) over ``inputs``."""
    window = window or cfg.window
    types = {f.name: f.dataType for f in inputs.fields}
    return StateLayout.of(
        keys=window.key,
        key_types=tuple(types[k] for k in window.key),
        aggregations=window.aggregations,
        types=types,
        accumulation=window.accumulation,
        early=cfg.early,
    )


def window_results(spark: SparkSession, layout: StateLayout) -> DataFrame:
    """results/'s columns for ``layout``'s windows, as an empty frame (what the sinks are prepared with)."""
    return layout.emission(spark.createDataFrame([], layout.schema()), "final", "0", None, 0)


def _is_kind(kind: str) -> Column:
    """``_kind = kind`` on the contributions frame (built once per context)."""
    return memo(("is_kind", kind), lambda: col("_kind") == kind)


class WindowedOperator:
    """Tumbling and hopping windows: state is one bucket per window end, read only where a step needs it."""

    driver_clock_only: str | None = None  # either row clock serves it
    writes_beside = True  # it writes plan.beside (dead letters, held rows) with its own outputs, in one job

    def __init__(self, ctx: OperatorContext, layout: StateLayout) -> None:
        self.cfg, self.spark, self.sinks, self.inputs, self.clock = ctx.cfg, ctx.spark, ctx.sinks, ctx.inputs, ctx.clock
        self.layout = layout
        self.assigner = ctx.cfg.window.assigner()
        self.store = BucketStateStore(ctx.spark, ctx.state_dir, self.state_schema())

    def state_schema(self) -> T.StructType:
        return self.layout.schema()

    def empty_results(self) -> DataFrame:
        return window_results(self.spark, self.layout)

    def summary(self, manifest: Manifest) -> dict:
        """Nothing beside the engine's accounting."""
        return {}

    def row_columns(self) -> list[str]:
        """What the contributions pass may read of a row (the executors' clock lays out only these)."""
        cols = [*self.layout.keys, *self.layout.values, "_event_us", "_arrival_us", PER_ROW]
        if self.cfg.late_policy == LatePolicy.SIDE_OUTPUT:  # too-late rows carry their whole input row
            cols += [*self.inputs.fieldNames(), "_file"]
        return list(dict.fromkeys(cols))

    def _contributions(self, plan: StepPlan, with_payload: bool, step: int = 0) -> DataFrame:
        """Executor side (``contrib``): on-time partials, late-update and too-late pairs, row counts."""
        assert plan.rows is not None
        names = self.inputs.fieldNames()
        need = list(dict.fromkeys([*self.layout.keys, *self.layout.values]))
        payload = [*names, "_file"] if with_payload else None
        clip, skew = clipping(self.cfg)
        cols = list(dict.fromkeys([*need, *(payload or []), "_event_us"]))
        if clip:
            cols.append("_arrival_us")  # only clipping needs the arrival clock on the executors
            if skew == PER_ROW:
                cols.append(PER_ROW)
        fields = {f.name: f for f in plan.rows.frame.schema.fields}
        schema = contrib_schema(self.layout, [fields[c] for c in payload] if payload else None)
        fn = make_contribute(
            self.layout,
            self.assigner,
            self.cfg.window.allowed_lateness_us,
            skew,
            payload,
            clip,
            schema,
            step,
        )
        return plan.rows.map(fn, schema, cols)

    def _fused(self, step: int) -> str | None:
        """What the fused write (``spark/fused_write.py``) takes this step: :data:`ALL` outputs (Parquet the
        only sink), the :data:`STATE` only (other sinks write their own), or None (a path it cannot write)."""
        state = self.store.version_path(step)
        if not writable(self.store.fs, state):
            return None
        if not self.sinks.single:
            return STATE
        paths = [self.sinks.sinks[0].path(kind, step) for kind in ("results", "late")]
        return ALL if writable(self.store.fs, *paths, state) else STATE

    def _state_output(self, step: int, new_state: DataFrame) -> Output:
        return Output(new_state, self.store.version_path(step), partition="_bucket",
                      low="_due" if self.layout.timed else None)

    def _write_fused(
        self, step: int, outputs: list[Output], beside: list[Output], rows: int, kinds: list[str] | None = None,
    ) -> dict[str, tuple[dict[int, tuple[int, int]], dict[int, int | None]]]:
        """``outputs`` (named by ``kinds``; default: the state) and ``beside`` in one Spark job.

        Returns the state's rows and bytes per bucket and, with a processing-time trigger, its earliest
        ``_due`` per bucket, under ``"state"``. ``rows``: how many pairs, state, dead and held rows the
        step writes: a writing task per :data:`ROWS_A_TASK`, at most the session's shuffle partitions.
        """
        kinds = kinds if kinds is not None else ["state"] * len(outputs)
        if not outputs and not beside:
            return {}
        t_w = time.monotonic()
        files = write_outputs(self.store.fs, [*outputs, *beside], writing_tasks(self.spark, rows, ROWS_A_TASK))
        out: dict[str, tuple[dict[int, tuple[int, int]], dict[int, int | None]]] = {}
        for kind, got in zip(kinds, files, strict=False):
            if kind != "state":
                continue
            written: dict[int, tuple[int, int]] = {}
            lows: dict[int, list[int]] = {}
            for f in got:
                assert f.part is not None
                n, size = written.get(f.part, (0, 0))
                written[f.part] = (n + f.rows, size + f.bytes)
                lows.setdefault(f.part, [])
                if f.low is not None:
                    lows[f.part].append(f.low)
            waiting = {b: min(v) if v else None for b, v in lows.items()} if self.layout.timed else {}
            out["state"] = (written, waiting)
        log.debug("step %d: fused write %.2fs", step, time.monotonic() - t_w)
        return out

    def _late_rows(self, contrib: DataFrame, prev: Manifest) -> DataFrame:
        """late/'s rows: the too-late pairs of the contributions, each with its whole input row."""
        p, reason = PAYLOAD, DRAINED_REASON if prev.drained else TOO_LATE_REASON
        too_late = contrib.filter(memo(("kind_is", "T"), lambda: F.col("_kind") == "T"))
        return select_built(too_late, ("late_rows", self.inputs.json(), reason), lambda: [  # the same every step
            *[F.col(p + c).alias(c) for c in self.inputs.fieldNames()],
            watermark_ts("_w").alias("watermark"),
            F.timestamp_micros("window_start").alias("window_start"),
            F.timestamp_micros("window_end").alias("window_end"),
            F.lit(reason).alias("reason"),
            F.col(p + "_file").alias("source_file"),
        ])

    def _may_be_too_late(self, plan: StepPlan) -> bool:
        """Can a row of this step be too late? (its earliest window's ``end + G <= W`` at the step's end)."""
        if plan.pair_counts is not None:
            return bool(plan.pair_counts[Lateness.TOO_LATE])
        if plan.min_event_us is None:
            return False
        earliest = int(self.assigner.assign(np.array([plan.min_event_us], dtype=np.int64)).end.min())
        return earliest + self.cfg.window.allowed_lateness_us <= plan.watermark

    def step(
        self, parsed: DataFrame, plan: StepPlan, prev: Manifest, step: int, cache: list[DataFrame],
    ) -> OperatorResult:
        grace = self.cfg.window.allowed_lateness_us
        w_new = plan.watermark
        side_output = self.cfg.late_policy == LatePolicy.SIDE_OUTPUT and self._may_be_too_late(plan)
        contrib = None
        judged = Judged((0, 0, 0), (0, 0, 0), frozenset(), None)
        late_written = False
        fused = self._fused(step)
        if plan.data_rows:
            contrib = self._contributions(plan, with_payload=side_output, step=step).persist()
            cache.append(contrib)
            t_c = time.monotonic()
            # The one pass over the rows; the rest reads the cached frame. Where rows may be too late
            # and Parquet is the only sink, that pass writes them (one job, not a noop and a late write),
            # unless the fused write takes them.
            late_written = side_output and self.sinks.single and fused != ALL
            write = (lambda observed: self.sinks.write("late", step, self._late_rows(observed, prev))) \
                if late_written else None
            judged = _judged(contrib, step, write)
            log.debug("step %d: contributions %.2fs", step, time.monotonic() - t_c)
        n_on, n_late, n_too_late = judged.pairs
        if late_written and not n_too_late:
            self.sinks.clear("late", step)  # the write left an empty file
        on_rows, late_rows_n, too_late_rows = judged.rows
        accounting = Accounting(rows=on_rows + late_rows_n + too_late_rows + plan.dead, on_time=on_rows,
                                late_updates=late_rows_n, too_late=too_late_rows, dead_letter=plan.dead,
                                clipped=plan.clipped)
        accounting.check()
        early = self.cfg.early
        read = set(judged.touched) | prev.due(w_new, plan.now_us, early.every_us if early is not None else None)
        _check(step, plan, judged, accounting, read)
        fires = any(b <= w_new for b in read if b in prev.buckets and not prev.buckets[b].fired) or (
            judged.first_on_time_end is not None and judged.first_on_time_end <= w_new)
        late_rows = None
        if side_output and n_too_late and contrib is not None and not late_written:
            late_rows = self._late_rows(contrib, prev)
        state_cols = [*self.layout.window_cols, *self.layout.partial_cols()]
        on_time = select(contrib.filter(_is_kind("P")), state_cols) if n_on and contrib is not None else None
        late = (select(contrib.filter(_is_kind("L")), [*state_cols, "_seq", "_seq_minor"])
                if n_late and contrib is not None else None)
        state = self.store.read(prev, read)
        emit_wm = output_us(w_new)
        # One job for every write: the fold's persisted frames are planned without AQE (an exchange is
        # then a stage, not a job), and the fused write coalesces what AQE would have.
        with without_aqe(self.spark) if fused == ALL else nullcontext():
            emitted, new_state = step_windows(
                self.layout, state, on_time, late, w_new, grace, emit_wm, step, cache, self.cfg.window.accumulation,
                now_us=plan.now_us, admit_us=plan.admitted_at_us,
            )
        if emitted is not None and not (fires or n_late or early is not None):
            # Nothing can be emitted (no window reaches W, no late update, no early trigger): skip
            # the results job, which would scan the merged state only to write an empty frame.
            emitted = None
        obs = None
        if emitted is not None:
            obs = Observation(f"emit_{step}")
            emitted = emitted.observe(obs, *_emission_counts())

        def write_output(kind: str, frame: DataFrame | None) -> Callable[[], None]:
            def write() -> None:
                t_r = time.monotonic()
                self.sinks.write_or_clear(kind, step, frame)
                log.debug("step %d: %s %.2fs", step, kind, time.monotonic() - t_r)

            return write

        # What the fused write writes: the pairs folded, the state read, dead and held rows (its tasks).
        sized = sum(judged.pairs) + sum(prev.buckets[b].rows for b in read if b in prev.buckets) + plan.dead + plan.held

        def write_state() -> tuple[dict, dict]:
            t_s = time.monotonic()
            if fused is not None:  # the state (and what the engine handed over) in one job
                states = [] if new_state is None else [self._state_output(step, new_state)]
                return self._write_fused(step, states, list(plan.beside), sized).get("state", ({}, {}))
            written = self.store.write(step, new_state) if new_state is not None else {}
            waiting = self.store.column_min(step, "_due") if written and self.layout.timed else {}
            log.debug("step %d: state write %.2fs", step, time.monotonic() - t_s)
            return written, waiting

        if fused == ALL:  # results, late rows, state, dead letters and held rows: one Spark job
            outputs: list[tuple[str, Output]] = []
            for kind, frame in (("results", emitted), ("late", late_rows)):
                if frame is not None:
                    outputs.append((kind, Output(frame, self.sinks.sinks[0].path(kind, step))))
                else:
                    self.sinks.clear(kind, step)
            if new_state is not None:
                outputs.append(("state", self._state_output(step, new_state)))
            with without_aqe(self.spark):
                fused_out = self._write_fused(step, [o for _, o in outputs], list(plan.beside), sized,
                                              [k for k, _ in outputs])
            written, waiting = fused_out.get("state", ({}, {}))
        else:
            # Results, late rows and state read the same persisted frames and do not depend on each other.
            writes = [write_output("results", emitted), *([] if late_written else [write_output("late", late_rows)])]
            if fused is None and plan.beside:  # what the engine handed over, on its own
                writes.append(lambda: self._write_fused(step, [], list(plan.beside), plan.dead + plan.held))
            *_, (written, waiting) = side_by_side(*writes, write_state)
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
            accounting=accounting, buckets=buckets, windows_fired=fired, revisions=revisions,
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

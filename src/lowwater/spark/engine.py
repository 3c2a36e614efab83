"""The lowwater engine: a Spark Structured Streaming query with exact per-row watermarks.

One micro-batch (``foreachBatch``) is one *step*, driven the same way for
every window type::

    parse ──> plan ──────────> operator ─────────> sinks ────────> commit
    (io/      (spark/planner:  (spark/operators/:  (io/sink: Parquet, (manifest:
     parse)    W(r), verdicts,  windowed or         then PostgreSQL    state versions,
               accounting ->    sessions -> new     or Delta; deliver  tracker, totals)
               StepPlan)        buckets, counts)    before the commit)

1. **parse** on the executors: clocks to µs, dead-letter reasons (``parse``);
2. **plan** on the driver: a compact projection (row id, partition,
   event/arrival µs, order columns; ~40 bytes a row) is collected as Arrow,
   sorted into arrival order and fed to the core
   :class:`~lowwater.core.tracker.WatermarkTracker`, which yields ``W(r)`` for
   every row with vectorised numpy -- the only inherently sequential part;
3. **operator** (the one the window type names, ``spark/operators/registry.py``; built once from an
   ``OperatorContext``, never asked which it is): classifies on the
   executors with the same core functions, folds against stored state (in
   versioned Parquet buckets, ``state``) and writes results and late rows
   through the sinks;
4. **commit**: the metrics row goes to every sink, every sink delivers, then
   the manifest (state versions + tracker + totals) is published atomically.

The streaming query itself (readStream, foreachBatch, triggers, stopping
between steps) is driven by ``spark/query.py``; this module is the step.

Spark's own checkpoint keeps the source offsets; our manifest records which
Spark batch produced it, so a batch replayed after a crash recomputes the same
step from the same state (SEMANTICS.md §8).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import replace

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lowwater.config import PipelineConfig
from lowwater.core.lateness import DRAINED_REASON
from lowwater.core.tracker import TrackerState, WatermarkTracker
from lowwater.io.checkpoint import admit_after_drain, check_fingerprint, fingerprint
from lowwater.io.files import PARSE_CONF
from lowwater.io.lock import PipelineLock, hold
from lowwater.io.outputs import ParquetOutputs
from lowwater.io.sink import Sinks, output_sinks
from lowwater.io.source import Admitted, StreamSource
from lowwater.runtime.columns import select
from lowwater.runtime.fs import HadoopFS
from lowwater.runtime.jobs import without_aqe
from lowwater.spark.beside import start_beside
from lowwater.spark.clocked import ClockedRows, lookup_attach, lookup_needs
from lowwater.spark.faults import crash_point as _fault  # tests patch it here
from lowwater.spark.hooks import StepHooks
from lowwater.spark.inputs import Inputs
from lowwater.spark.metrics import METRICS_ARROW, METRICS_SCHEMA, metrics_row, metrics_table
from lowwater.spark.operators import OperatorContext, WindowOperator, build_operator
from lowwater.spark.planner import StepPlanner
from lowwater.spark.query import QueryControl, StopRequested
from lowwater.spark.row_clock import ExecutorClock, plan_of, unavailable
from lowwater.spark.state import Manifest
from lowwater.spark.step import (
    ORDER_KEYS,
    TOTAL_KEYS,
    StepPlan,
    StepReport,
    add_totals,
    count_out_of_order,
    summarise,
)
from lowwater.time import POS_INF, format_ts

__all__ = [
    "DRAINED_REASON", "METRICS_ARROW", "METRICS_SCHEMA", "ORDER_KEYS", "TOTAL_KEYS", "Engine", "StepPlan",
    "StepReport", "StopRequested", "wall_clock_us",
]

log = logging.getLogger("lowwater")

# Runtime SQL settings for the step queries. The merged window state of a step is
# persisted (results and state are written from it); letting AQE coalesce the cached
# plan's shuffle partitions writes one file per ~64 MB instead of one per shuffle
# partition: ~9 % a step at 1k keys (interleaved A/B, docs/performance.md).
STEP_CONF = {
    "spark.sql.optimizer.canChangeCachedPlanOutputPartitioning": "true",
}


def wall_clock_us() -> int:
    """Processing time (µs since the epoch): what an ``every <duration>`` early trigger measures."""
    return time.time_ns() // 1000


class Engine:
    """Runs one pipeline configuration on a SparkSession.

    Holds the output path's lock (``io/lock.py``) from construction to the end
    of :meth:`run` (or :meth:`close`), and refuses a configuration the
    checkpoint was not started with (``io/checkpoint.py``). ``after_drain``
    (``--after-drain``) accepts new rows on a drained checkpoint.

    ``source`` (the Python API, ``api/running.py``): a stream source handed in instead of the one the
    configuration reads; it brings its input schema (``source.schema``; ``[[source]]`` tables:
    ``source.schemas``, by name).
    """

    def __init__(
        self, cfg: PipelineConfig, spark: SparkSession, after_drain: bool = False,
        observers: StepHooks | None = None, source: StreamSource | None = None,
    ) -> None:
        self.cfg = cfg
        self.spark = spark
        self.after_drain = after_drain
        # Told each committed step: observe.hub.Observers from the top layer (lowwater run), else only hooks.
        self.observers = observers if observers is not None else StepHooks(cfg)
        self.given_source = source
        self.fs = HadoopFS(spark)
        self._lock: PipelineLock | None = hold(cfg, self.fs)
        try:
            self._open(cfg, spark)
        except BaseException:
            self.close()
            raise

    def _open(self, cfg: PipelineConfig, spark: SparkSession) -> None:
        for k, v in {**PARSE_CONF, **STEP_CONF}.items():
            spark.conf.set(k, v)
        self.lw_dir = f"{cfg.output.checkpoint.rstrip('/')}/lowwater"
        # The sources as one union, whatever their kinds: schemas, layout, lanes, held rows (spark/inputs.py).
        self.inputs = Inputs(spark, cfg, self.lw_dir, self.given_source)
        self.schema, self.schemas, self.held = self.inputs.schema, self.inputs.schemas, self.inputs.held
        self.logs: dict[str, bool] | None = None  # the lanes caught up at the last step (the held-rows warning)
        self.clock: Callable[[], int] = wall_clock_us  # injectable (tests): read at each use, never bound
        self.outputs = ParquetOutputs(spark, cfg.output.path)
        # [output] kind's sink beside the Parquet output (io/sink.register_sink: postgres, delta, ...).
        self.sinks = Sinks(spark, [self.outputs, *output_sinks(cfg, spark, self.lw_dir)])
        # The operator its window type names (spark/operators/registry.py); the engine never asks which.
        self.operator: WindowOperator = build_operator(OperatorContext(
            cfg, spark, f"{self.lw_dir}/state", self.sinks, self.schema, lambda: self.clock(),
        ))
        # The driver's clock judges windows only for an operator that takes its verdicts (not the join).
        windows = getattr(self.operator, "window_verdicts", True)
        self.planner = StepPlanner(cfg, self.inputs.unit, lambda: self.clock(), windows=windows)
        # Where W(r) is computed (ADR 0032): on the executors where the pipeline and the operator allow, else
        # on the driver.
        forced = os.environ.get("LOWWATER_ROW_CLOCK", "").strip().lower() == "driver"
        executors = unavailable(cfg) is None and self.operator.driver_clock_only is None
        self.row_clock = ExecutorClock(cfg) if executors and not forced else None
        self.store = self.operator.store
        self.reports: list[StepReport] = []
        self._outputs_ready = False
        self.control = QueryControl(self)
        started = self.fs.exists(f"{cfg.output.checkpoint.rstrip('/')}/spark/offsets") or self.store.latest().step >= 0
        check_fingerprint(self.fs, self.lw_dir, cfg, fingerprint(cfg, self.inputs.schema_text), started)
        self.inputs.check_resumable(self.fs, f"{cfg.output.checkpoint.rstrip('/')}/spark")

    def close(self) -> None:
        """Give back the output path's lock (idempotent; :meth:`run` does it when it ends)."""
        if self._lock is not None:
            self._lock.release()
            self._lock = None
        if getattr(self, "inputs", None) is not None:
            self.inputs.close()

    # -- running -------------------------------------------------------------------

    def run(self, once: bool = False, drain: bool = False, trigger_interval: str | None = None) -> Manifest:
        """Start the streaming query; with ``once`` stop when the input is consumed.

        ``trigger_interval`` (e.g. ``"1 second"``; continuous runs only; default
        ``[trigger] interval``) starts a micro-batch every interval (Spark's
        processing-time trigger) instead of as soon as the previous one ends;
        ``self.query`` is the running query.
        """
        if self._lock is None:
            self._lock = hold(self.cfg, self.fs)
        try:
            self.observers.start(self.spark, self.lw_dir, self.outputs)
            return self._run(once, drain, trigger_interval)
        finally:
            self.observers.close()
            self.close()

    def _run(self, once: bool, drain: bool, trigger_interval: str | None) -> Manifest:
        self._ensure_outputs()
        if self.control.run(once, drain, trigger_interval):  # stopped on request: in-flight work uncommitted
            return self.store.latest()
        manifest = self.drain() if drain else self.store.latest()
        if manifest.held_rows and self.planner.frontier is not None:
            self.inputs.warn_held(manifest, self.logs)
        if once or drain:
            self.outputs.write_summary(self.summary(manifest))
        return manifest

    def request_stop(self, now: bool = False) -> None:
        """Stop the running query after its current step; ``now``: abandon the step (``spark/query.py``)."""
        self.control.request_stop(now)

    @property
    def query(self):  # noqa: ANN201 - the running pyspark StreamingQuery, or None
        """The running streaming query (``None`` before :meth:`run` starts it)."""
        return self.control.query

    # -- one step ------------------------------------------------------------------

    def _tracker(self, prev: Manifest) -> WatermarkTracker:
        """The watermark tracker as ``prev`` left it: one strategy per source."""
        return WatermarkTracker(self.inputs.strategies, TrackerState.from_json(prev.tracker) if prev.tracker else None)

    def normalised(self, name: str, raw: DataFrame) -> DataFrame:
        """A named source's raw rows, normalised and laid out like every source's (tests land files this way)."""
        return self.inputs.normalised(name, raw)

    def process_batch(
        self, df: DataFrame, spark_batch: int, admitted: Admitted | None = None, release: bool = False,
    ) -> StepReport:
        """Process one micro-batch as one step (idempotent per Spark batch id): plan, operator, sinks, commit.

        ``df`` holds the input rows (``[[source]]`` pipelines: already normalised and laid out by
        ``io/sources.py``); ``admitted`` (from the source) says which files they came from.
        ``release`` (the drain of several sources): no new rows, judge every held one.
        """
        t0 = time.monotonic()
        admit_us = self.clock()  # processing time at which this step's rows are admitted
        cfg = self.cfg
        prev = self.store.latest() if release else self.store.latest(before_spark_batch=spark_batch)
        step = prev.step + 1
        tracker = self._tracker(prev)
        self.sinks.begin_step(step)
        self._ensure_outputs()
        cache: list[DataFrame] = []
        try:
            # Not persisted: re-reading the batch's files is cheaper than caching them,
            # and the row ids come out the same (same files, same splits); the
            # executors check every id they look up and the operator checks
            # their verdicts against the driver's.
            parsed = self.inputs.carried(self.inputs.parse(df), prev)  # rows held behind the frontier come first
            parsed = parsed.withColumn("_rid", F.monotonically_increasing_id())
            logs = None if release else self.inputs.caught_up(spark_batch, self.control.source)
            self.logs = logs  # the inputs caught up at the last step (the held-rows warning names the holder)
            if self._executors_keep_clock(prev):
                # A batch read whole (Kafka's) is laid out whole and read once; files only with what the operator
                # reads (dead letters, held and late rows re-read them, as with the driver's clock).
                whole = self.inputs.read_whole
                columns = None if whole else self.operator.row_columns()
                touch = getattr(self.operator, "touch_column", None)  # pass 1 returns its values (the join's)
                with without_aqe(self.spark):  # its one exchange is not a job of its own; nothing else runs yet
                    clocked = self.row_clock.step(parsed, tracker, cache, prev.frontier, logs, columns, touch,
                                                  release)
                if whole:
                    parsed = clocked.laid
                if prev.drained and clocked.counts.rows + clocked.dead:  # refused before anything is written
                    admit_after_drain(cfg, clocked.counts.rows + clocked.dead, self.after_drain)
                t_collect = time.monotonic()
                plan = replace(plan_of(clocked, tracker.state.clock_us, self.clock()), admit_us=admit_us)
                tracker = clocked.tracker
            else:
                compact = select(parsed, self.planner.compact_columns()).toArrow()
                if prev.drained and compact.num_rows:  # refused before anything is written (io/checkpoint.py)
                    admit_after_drain(cfg, compact.num_rows, self.after_drain)
                t_collect = time.monotonic()
                plan = self.planner.plan(compact, tracker, prev, release=release, logs=logs)
                assert plan.lookup is not None
                markers = self.planner.markers
                rows = ClockedRows(self.inputs.judged(parsed, plan.ready_bounds, markers),
                                   lookup_attach(self.spark.sparkContext.broadcast(plan.lookup), markers),
                                   lookup_needs(markers), len(plan.lookup[0]))
                plan = replace(plan, admit_us=admit_us, rows=rows)
            t_plan = time.monotonic()
            # Dead letters and held rows: written beside the operator, or by it (spark/beside.py).
            beside = start_beside(self.inputs, self.sinks, self.outputs, self.fs, parsed, plan, step,
                                  getattr(self.operator, "writes_beside", False))
            plan = replace(plan, beside=tuple(beside.given))
            try:
                result = self.operator.step(self.inputs.judged(parsed, plan.ready_bounds, self.planner.markers),
                                            plan, prev, step, cache)
            finally:  # never leave a write running behind a failed step; its own failure fails the step
                beside.join()
            held = beside.held()
        finally:
            for c in cache:
                c.unpersist()
        t_fold = time.monotonic()
        report = StepReport.of(step, spark_batch, plan.watermark, result, plan.clock)
        report.markers, report.regressions, report.held_rows = plan.markers, plan.regressions, plan.held
        count_out_of_order(report, plan, admitted)
        report.duration_s = time.monotonic() - t0
        self._commit(report, tracker, prev, result.buckets, plan.frontier, held)
        log.debug(
            "step %d timings: collect %.2fs, plan %.2fs, operator %.2fs, commit %.2fs",
            step, t_collect - t0, t_plan - t_collect, t_fold - t_plan, time.monotonic() - t_fold,
        )
        return report

    def _executors_keep_clock(self, prev: Manifest) -> bool:
        """The executors' row clock (``spark/row_clock.py``) runs this step; else the driver plans every row.

        The first step of a checkpoint whose event times are numbers checks their ``time_unit`` on the
        driver (``StepPlanner``), which needs the rows there.
        """
        if self.row_clock is None:
            return False
        return prev.tracker is not None or not any(self.planner.unit_matters.values())

    def _ensure_outputs(self) -> None:
        """Once per engine: every output exists and reads as an empty table with its columns (``io/sink``)."""
        if not self._outputs_ready:
            self.sinks.prepare_all(self.schema, self.operator.empty_results(), METRICS_ARROW, METRICS_SCHEMA)
            self._outputs_ready = True

    def _commit(
        self, report: StepReport, tracker: WatermarkTracker, prev: Manifest, buckets: dict,
        frontier: dict | None = None, held: dict | None = None,
    ) -> None:
        metrics = metrics_row(report, tracker)
        self.sinks.write_rows("metrics", report.step, metrics_table(metrics), METRICS_SCHEMA)
        _fault("before_deliver", report.step)
        # Delivered (or recognised as delivered) BEFORE the manifest: a crash in
        # between replays the step, and PostgreSQL's batches table makes that a no-op.
        self.sinks.deliver(report.step, report.spark_batch, metrics)
        _fault("before_commit", report.step)
        manifest = Manifest(
            step=report.step,
            spark_batch=report.spark_batch,
            buckets=buckets,
            tracker=tracker.state.to_json(),
            totals=add_totals(prev.totals, report),
            drained=prev.drained or report.watermark_us >= POS_INF,
            frontier=frontier if frontier is not None else prev.frontier,
            held=held,
        )
        self.store.commit(manifest)
        self.inputs.collect_garbage(self.store.live_versions())
        _fault("after_commit", report.step)
        self.reports.append(report)
        self.observers.on_step(report.step, metrics, manifest.totals)
        acc = report.accounting
        log.info(
            "step %d (batch %d): %d rows, %d on time, %d late updates, %d too late, %d dead; "
            "W=%s (held back by %s; idle: %s), %d fired, %d revisions, %d open windows, %.2fs",
            report.step, report.spark_batch, acc.rows, acc.on_time, acc.late_updates, acc.too_late,
            acc.dead_letter, format_ts(report.watermark_us), metrics["holding_partition"] or "-",
            ", ".join(metrics["idle_partitions"]) or "none", report.windows_fired, report.revisions,
            report.open_windows, report.duration_s,
        )

    # -- drain and summary -----------------------------------------------------------

    def drain(self) -> Manifest:
        """Bounded input exhausted: ``W`` becomes +infinity and every open window fires (the operator's part).

        With several sources the rows still held behind the arrival frontier are
        judged first, in one more step (nothing can arrive before them any more).
        """
        prev = self.store.latest()
        if prev.held_rows and not prev.drained:
            self.process_batch(self.inputs.empty(), prev.spark_batch, release=True)
            prev = self.store.latest()
        if not prev.drained:
            self.sinks.begin_step(prev.step + 1)  # forget what an interrupted drain staged
        self._ensure_outputs()
        if prev.drained and prev.tracker is not None and prev.tracker.get("watermark_us", 0) >= POS_INF:
            return prev
        t0 = time.monotonic()
        step = prev.step + 1
        tracker = self._tracker(prev)
        tracker.drain()
        cache: list[DataFrame] = []
        try:
            result = self.operator.drain(prev, step, cache)
        finally:
            for c in cache:
                c.unpersist()
        report = StepReport.of(step, prev.spark_batch, POS_INF, result, None)
        report.duration_s = time.monotonic() - t0
        self._commit(report, tracker, prev, result.buckets)
        return self.store.latest()

    def summary(self, manifest: Manifest) -> dict:
        """The accounting totals of SEMANTICS.md §6 for everything this checkpoint processed."""
        return {**summarise(manifest), **self.operator.summary(manifest)}  # an operator's own (the join's, per side)

"""The lowwater engine: a Spark Structured Streaming query with exact per-row watermarks.

One micro-batch (``foreachBatch``) is one *step*:

1. **parse** on the executors: clocks to µs, dead-letter reasons (``parse``);
2. **order and watermark** on the driver: a compact projection (row id,
   partition, event/arrival µs, order columns; ~40 bytes a row) is collected as
   Arrow, sorted into arrival order and fed to the core
   :class:`~lowwater.core.tracker.WatermarkTracker`, which yields ``W(r)`` for
   every row with vectorised numpy -- the only inherently sequential part;
3. **classify** on the executors: ``W(r)`` is broadcast by row id; each task
   assigns windows and judges lateness with the same core functions;
4. **fold** with Spark SQL (``windowing``): on-time partials, late revisions
   and firing against stored state, which lives in versioned Parquet buckets
   (``state``) read only where the step touches or fires windows;
5. **commit**: outputs for the step are overwritten in place, then the
   manifest (state versions + tracker + totals) is published atomically.

Spark's own checkpoint keeps the source offsets; our manifest records which
Spark batch produced it, so a batch replayed after a crash recomputes the same
step from the same state (SEMANTICS.md §8).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame, Observation, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.utils import CapturedException

from lowwater.config import ConfigError, PipelineConfig
from lowwater.core.accounting import Accounting
from lowwater.core.judge import account, arrival_order, judge
from lowwater.core.lateness import DRAINED_REASON, TOO_LATE_REASON, Lateness, LatePolicy
from lowwater.core.tracker import PartitionCodes, TrackerState, WatermarkTracker
from lowwater.io.checkpoint import admit_after_drain, check_fingerprint, fingerprint
from lowwater.io.files import CORRUPT, PARSE_CONF, resolve_schema
from lowwater.io.landing import check_resumable
from lowwater.io.lock import PipelineLock, hold
from lowwater.io.outputs import ParquetOutputs
from lowwater.io.source import Admitted, StreamSource, open_source
from lowwater.spark.columns import col, memo, select, watermark_ts
from lowwater.spark.contrib import PAYLOAD, contrib_schema, make_contribute
from lowwater.spark.fs import HadoopFS
from lowwater.spark.jobs import Background, side_by_side
from lowwater.spark.parse import check_time_unit, normalise, unit_matters
from lowwater.spark.sessions import SessionSteps
from lowwater.spark.sessions import state_schema as session_state_schema
from lowwater.spark.state import Bucket, BucketStateStore, Manifest
from lowwater.spark.windowing import StateLayout, step_windows
from lowwater.time import NEG_INF, POS_INF, format_ts, output_us, to_datetime

log = logging.getLogger("lowwater")

# Input read out of its order (counted and warned about, never skipped): see StepReport.
ORDER_KEYS = ("out_of_order_files", "out_of_order_rows", "arrival_regressions")
TOTAL_KEYS = (
    "rows", "on_time", "late_updates", "too_late", "dead_letter", "clipped", "windows_fired", "revisions",
    "provisionals", *ORDER_KEYS,
)

# Runtime SQL settings for the step queries. The merged window state of a step is
# persisted (results and state are written from it); letting AQE coalesce the cached
# plan's shuffle partitions writes one file per ~64 MB instead of one per shuffle
# partition: ~9 % a step at 1k keys (interleaved A/B, docs/performance.md).
STEP_CONF = {
    "spark.sql.optimizer.canChangeCachedPlanOutputPartitioning": "true",
}

METRICS_SCHEMA = T.StructType([
    T.StructField("spark_batch", T.LongType()),
    T.StructField("low_watermark", T.TimestampType()),
    T.StructField("partition_watermarks", T.MapType(T.StringType(), T.TimestampType())),
    T.StructField("idle_partitions", T.ArrayType(T.StringType())),
    T.StructField("holding_partition", T.StringType()),
    T.StructField("spread_s", T.DoubleType()),
    T.StructField("watermark_lag_s", T.DoubleType()),
    T.StructField("rows", T.LongType()),
    T.StructField("on_time", T.LongType()),
    T.StructField("late_updates", T.LongType()),
    T.StructField("too_late", T.LongType()),
    T.StructField("dead_letter", T.LongType()),
    T.StructField("clipped", T.LongType()),
    T.StructField("windows_fired", T.LongType()),
    T.StructField("revisions", T.LongType()),
    T.StructField("open_windows", T.LongType()),
    T.StructField("state_bytes", T.LongType()),
    T.StructField("duration_s", T.DoubleType()),
    *[T.StructField(k, T.LongType()) for k in ORDER_KEYS],
])


METRICS_ARROW = pa.schema([
    ("spark_batch", pa.int64()),
    ("low_watermark", pa.timestamp("us", tz="UTC")),
    ("partition_watermarks", pa.map_(pa.string(), pa.timestamp("us", tz="UTC"))),
    ("idle_partitions", pa.list_(pa.string())),
    ("holding_partition", pa.string()),
    ("spread_s", pa.float64()),
    ("watermark_lag_s", pa.float64()),
    *[(k, pa.int64()) for k in (
        "rows", "on_time", "late_updates", "too_late", "dead_letter", "clipped", "windows_fired", "revisions",
        "open_windows", "state_bytes",
    )],
    ("duration_s", pa.float64()),
    *[(k, pa.int64()) for k in ORDER_KEYS],
])


class StopRequested(Exception):  # noqa: N818 - a request, not an error
    """Raised into a Spark batch that starts after :meth:`Engine.request_stop`: it stays uncommitted."""


@dataclass
class StepReport:
    """What one step did, for logs, metrics and tests."""

    step: int
    spark_batch: int
    accounting: Accounting
    watermark_us: int
    windows_fired: int = 0
    revisions: int = 0
    provisionals: int = 0  # early firings (not part of the determinism guarantee)
    open_windows: int = 0
    state_bytes: int = 0
    duration_s: float = 0.0
    # Files that landed after a file with a later name was admitted (read out of name order), their
    # rows, and 1 if the step's earliest arrival time is before the latest arrival of the steps before.
    out_of_order_files: int = 0
    out_of_order_rows: int = 0
    arrival_regressions: int = 0
    extra: dict = field(default_factory=dict)


class _RefusalFilter(logging.Filter):
    """Keep a refusal raised in ``foreachBatch`` out of py4j's log: it reaches the user once, from ``Engine.run``.

    py4j logs every exception a Python callback raises, with its trace; a
    :class:`ConfigError` (e.g. new rows on a drained checkpoint) is a one-line answer.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], ConfigError))


logging.getLogger("py4j.clientserver").addFilter(_RefusalFilter())


def _fault(point: str, step: int) -> None:
    """Test-only crash injection: ``LOWWATER_FAULT=before_commit:3`` kills the process there."""
    spec = os.environ.get("LOWWATER_FAULT")
    if spec and spec == f"{point}:{step}":
        log.error("LOWWATER_FAULT: crashing at %s of step %d", point, step)
        os._exit(137)


def _ts(us: int) -> datetime | None:
    return to_datetime(us)


def wall_clock_us() -> int:
    """Processing time (µs since the epoch): what an ``every <duration>`` early trigger measures."""
    return time.time_ns() // 1000


def _sorted_unique(values: pa.ChunkedArray) -> pa.Array:
    """Distinct values, sorted (numbers numerically, strings by code point like ``np.unique``)."""
    uniq = pc.unique(values)
    return uniq.take(pc.sort_indices(uniq))


def _codes(values: pa.ChunkedArray, uniq: pa.Array) -> np.ndarray:
    """Each value's position in ``uniq`` (int64), vectorised in Arrow."""
    if len(values) == 0:
        return np.zeros(0, dtype=np.int64)
    return pc.index_in(values, value_set=uniq).to_numpy().astype(np.int64)


def _pair_counts(contrib: DataFrame, step: int) -> tuple[int, int, int]:
    """Materialise the persisted contributions and count their (on time, late, too late) pairs.

    One stage, no shuffle: a ``noop`` write of the cached frame with an
    :class:`Observation` (metrics of a completed action count each task once).
    """
    obs = Observation(f"pairs_{step}")
    sums = memo("pair_counts", lambda: [
        F.sum(F.when(F.col("_kind") == k, F.col("_n")).otherwise(0)).alias(k) for k in ("P", "L", "T")
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


class Engine:
    """Runs one pipeline configuration on a SparkSession.

    Holds the output path's lock (``io/lock.py``) from construction to the end
    of :meth:`run` (or :meth:`close`), and refuses a configuration the
    checkpoint was not started with (``io/checkpoint.py``). ``after_drain``
    (``--after-drain``) accepts new rows on a drained checkpoint.
    """

    def __init__(self, cfg: PipelineConfig, spark: SparkSession, after_drain: bool = False) -> None:
        self.cfg = cfg
        self.spark = spark
        self.after_drain = after_drain
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
        self.schema = resolve_schema(spark, cfg, self.lw_dir)
        types = {f.name: f.dataType for f in self.schema.fields}
        self._unit_matters = unit_matters(types[cfg.source.event_time])
        self.layout = StateLayout(
            keys=cfg.window.key,
            key_types=tuple(types[k] for k in cfg.window.key),
            values=tuple(cfg.window.value_columns),
            aggregations=cfg.window.aggregations,
            accumulation=cfg.window.accumulation,
            early=cfg.early,
            value_types=tuple(types[v] for v in cfg.window.value_columns),
        )
        self.store = BucketStateStore(spark, f"{self.lw_dir}/state", self.layout.schema())
        self.sessions: SessionSteps | None = None
        if cfg.window.is_session:  # session windows: their own keyed pass and state (spark/sessions.py)
            self.sessions = SessionSteps(self)
            self.store = BucketStateStore(spark, f"{self.lw_dir}/state", session_state_schema(self.layout))
        self.outputs = ParquetOutputs(spark, cfg.output.path)
        self.sink = None
        if cfg.output.kind == "postgres" and cfg.output.postgres is not None:
            from lowwater.io.postgres import PostgresSink

            # The output path names the pipeline, so several pipelines can share one database.
            self.sink = PostgresSink(cfg.output.postgres, cfg.output.path, cfg.window.key)
            self.outputs.sink = self.sink  # every results/late/dead-letter write is staged from its Parquet
        self.assigner = cfg.window.assigner()
        self.reports: list[StepReport] = []
        self.clock: Callable[[], int] = wall_clock_us  # injectable (tests)
        self._error: BaseException | None = None
        self._outputs_ready = False
        self._stop: str | None = None  # request_stop: "after_step" | "now"
        self._in_step = False
        self.query = None
        self.source: StreamSource | None = None
        started = self.fs.exists(f"{cfg.output.checkpoint.rstrip('/')}/spark/offsets") or self.store.latest().step >= 0
        check_fingerprint(self.fs, self.lw_dir, cfg, fingerprint(cfg, self.schema.simpleString()), started)
        check_resumable(self.fs, f"{cfg.output.checkpoint.rstrip('/')}/spark", cfg)  # offsets of an older source

    def close(self) -> None:
        """Give back the output path's lock (idempotent; :meth:`run` does it when it ends)."""
        if self._lock is not None:
            self._lock.release()
            self._lock = None

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
            return self._run(once, drain, trigger_interval)
        finally:
            self.close()

    def _run(self, once: bool, drain: bool, trigger_interval: str | None) -> Manifest:
        if trigger_interval is None and self.cfg.trigger_interval_us is not None:
            trigger_interval = f"{self.cfg.trigger_interval_us // 1000} milliseconds"
        self.source = open_source(self.spark, self.cfg.source, self.schema, self.lw_dir)
        self._ensure_outputs()
        writer = self.source.stream().writeStream.foreachBatch(self._foreach).option(
            "checkpointLocation", f"{self.cfg.output.checkpoint.rstrip('/')}/spark"
        )
        poll_s = None  # availableNow: the files there at the start (listed by stream())
        if once or drain:
            writer = writer.trigger(availableNow=True)
        elif trigger_interval:
            writer = writer.trigger(processingTime=trigger_interval)
            poll_s = min(1.0, self.cfg.trigger_interval_us / 1e6 if self.cfg.trigger_interval_us else 1.0)
        else:
            poll_s = 1.0
        with self.source.watching(poll_s):
            query = self.query = writer.start()
            try:
                self._await(query)
            except CapturedException:
                if self._stop is None:
                    if self._error is not None:
                        raise self._error from None
                    raise
        if self._stop is not None:  # stopped on request: whatever was in flight is uncommitted
            return self.store.latest()
        if self._error is not None:
            raise self._error
        manifest = self.drain() if drain else self.store.latest()
        if once or drain:
            self.outputs.write_summary(self.summary(manifest))
        return manifest

    def request_stop(self, now: bool = False) -> None:
        """Stop the running query after its current step; ``now``: abandon the step, uncommitted.

        Only sets flags (safe from a signal handler); :meth:`run` acts on them.
        A step either commits its manifest or leaves none, so a restart resumes
        exactly where the last committed step ended (docs/design.md, stopping).
        """
        self._stop = "now" if now else (self._stop or "after_step")

    def _await(self, query) -> None:  # noqa: ANN001 - a StreamingQuery
        """Wait for the query; on a stop request, end it between steps (or at once with ``now``).

        A batch that starts after the request fails uncommitted (``_foreach``),
        which ends the query; an idle query (no step, no trigger planning a
        batch) is stopped. Stopping a query while its thread plans a batch would
        interrupt Spark mid-work, which logs errors of its own.
        """
        while not query.awaitTermination(0.25):
            if self._stop == "now":
                query.stop()
            elif self._stop is not None and not self._in_step and not query.status["isTriggerActive"]:
                query.stop()

    def _foreach(self, df: DataFrame, spark_batch: int) -> None:
        if self._stop is not None:
            # Fail the batch instead of returning: a batch that returns is committed by Spark,
            # and its files would never be processed. Failed, it is replayed on restart.
            msg = f"stop requested before Spark batch {spark_batch}"
            raise StopRequested(msg)
        self._in_step = True
        try:
            admitted = self.source.admit(df)
            self.process_batch(admitted.rows, spark_batch, admitted=admitted)
        except BaseException as e:
            self._error = e
            raise
        finally:
            self._in_step = False

    # -- one step ------------------------------------------------------------------

    def process_batch(self, df: DataFrame, spark_batch: int, admitted: Admitted | None = None) -> StepReport:
        """Process one micro-batch as one step (idempotent per Spark batch id).

        ``df`` holds the input rows; ``admitted`` (from the source) says which files they came from.
        """
        t0 = time.monotonic()
        admit_us = self.clock()  # processing time at which this step's rows are admitted
        cfg = self.cfg
        prev = self.store.latest(before_spark_batch=spark_batch)
        step = prev.step + 1
        tracker = WatermarkTracker(
            cfg.watermark, TrackerState.from_json(prev.tracker) if prev.tracker else None
        )
        if self.sink is not None:
            self.sink.begin_step(step)
        self._ensure_outputs()
        cache: list[DataFrame] = []
        try:
            # Not persisted: re-reading the batch's files is cheaper than caching them,
            # and the row ids come out the same (same files, same splits); the
            # executors check every id they look up (contrib) and the step checks
            # their pair counts against the driver's.
            parsed = normalise(df, cfg).withColumn("_rid", F.monotonically_increasing_id())
            compact = select(parsed, self._compact_columns()).toArrow()
            if prev.drained and compact.num_rows:  # refused before anything is written (io/checkpoint.py)
                admit_after_drain(cfg, compact.num_rows, self.after_drain)
            t_collect = time.monotonic()
            plan = self._plan(compact, tracker, prev)
            plan["admit_us"] = admit_us
            t_plan = time.monotonic()
            n_dead = plan["dead"]
            if n_dead:
                self._write_dead_letters(parsed, step)
            else:
                self.outputs.clear("dead_letter", step)
            if self.sessions is not None:  # session windows (spark/sessions.py)
                report = self.sessions.step(parsed, plan, prev, step, spark_batch, cache)
            else:
                report = self._fold(parsed, plan, tracker, prev, step, spark_batch, cache)
        finally:
            for c in cache:
                c.unpersist()
        t_fold = time.monotonic()
        self._order_checks(report, plan, admitted)
        report.duration_s = time.monotonic() - t0
        self._commit(report, tracker, prev, plan["buckets"])
        log.debug(
            "step %d timings: collect %.2fs, plan %.2fs, fold %.2fs, commit %.2fs",
            step, t_collect - t0, t_plan - t_collect, t_fold - t_plan, time.monotonic() - t_fold,
        )
        return report

    def _ensure_outputs(self) -> None:
        """Once per engine: every output exists and reads as an empty table with its columns (``io/outputs``)."""
        if not self._outputs_ready:
            results = self.layout.emission(self.spark.createDataFrame([], self.layout.schema()), "final", F.lit(0),
                                           None, 0)
            self.outputs.ensure_all(self.schema, results, METRICS_ARROW, METRICS_SCHEMA)
            self._outputs_ready = True

    def _order_checks(self, report: StepReport, plan: dict, admitted: Admitted | None) -> None:
        """Count (and warn about) input read out of its order: nothing is skipped, nothing is silent."""
        if admitted is not None and admitted.out_of_order:
            report.out_of_order_files = len(admitted.out_of_order)
            report.out_of_order_rows = admitted.out_of_order_rows
            log.warning(
                "step %d: %d file(s) (%d rows) landed after a file with a later name had been admitted and are "
                "read out of name order (metrics: out_of_order_files/rows): %s",
                report.step, report.out_of_order_files, report.out_of_order_rows, ", ".join(admitted.out_of_order),
            )
        regression = plan.get("arrival_regression")
        if regression is not None:
            report.arrival_regressions = 1
            log.warning(
                "step %d: earliest arrival %s is before the latest arrival of the steps before (%s): its files "
                "landed out of arrival order (metrics: arrival_regressions)",
                report.step, format_ts(regression[0]), format_ts(regression[1]),
            )

    def _compact_columns(self) -> list[str]:
        """What the driver needs per row: ~30-40 bytes, no payload."""
        src = self.cfg.source
        cols = ["_rid", "_dead", "_event_us", "_psort"]
        if src.arrival_time:
            cols.append("_arrival_us")
        if src.offset:
            cols.append("_offset")
        if not (src.arrival_time and src.offset):
            cols += ["_file", "_block"]  # the source's own order breaks ties
        return cols

    def _plan(self, compact: pa.Table, tracker: WatermarkTracker, prev: Manifest) -> dict:
        """Driver side: arrival order, ``W(r)``, verdicts, accounting, buckets to touch."""
        grace = self.cfg.window.allowed_lateness_us
        dead_mask = pc.is_valid(compact.column("_dead")).to_numpy(zero_copy_only=False)
        valid = compact.filter(pc.invert(pc.is_valid(compact.column("_dead"))))
        n = valid.num_rows

        def col(name: str) -> np.ndarray | None:
            return valid.column(name).to_numpy() if name in valid.column_names else None

        if prev.tracker is None and self._unit_matters:  # the first step of a checkpoint
            check_time_unit(self.cfg.source, col("_event_us"), compact.column("_dead"))
        rid = col("_rid")
        # Partitions as dense codes that sort like their values, computed by Arrow: never a
        # numpy object array per row (np.unique over 1M Python strings costs ~1 s).
        uniq = _sorted_unique(valid.column("_psort"))
        pcode = _codes(valid.column("_psort"), uniq)
        source_order = [rid]
        if "_file" in valid.column_names:
            files = valid.column("_file")
            source_order = [_codes(files, _sorted_unique(files)), col("_block"), rid]
        arrival = col("_arrival_us")
        latest_before = tracker.state.clock_us  # the latest arrival of the steps before
        earliest = int(arrival.min()) if arrival is not None and n else None
        regressed = earliest is not None and NEG_INF < latest_before and earliest < latest_before
        order = arrival_order(n, arrival, pcode, col("_offset"), source_order)
        names = PartitionCodes([str(u) for u in uniq.to_pylist()], pcode[order])
        j = judge(
            tracker, self.assigner, grace, names, col("_event_us")[order],
            None if arrival is None else arrival[order],
        )
        acc = account(j, int(dead_mask.sum()))
        w_new = tracker.watermark_us
        touched = set(pc.unique(pa.array(j.pairs.end[j.verdict < Lateness.TOO_LATE])).to_pylist())  # hashed, O(n)
        to_fire = {b for b, info in prev.buckets.items() if not info.fired and b <= w_new}
        # The early trigger is evaluated at the step's watermark, at this processing time.
        now_us = self.clock()
        early = self.cfg.early
        waiting: set[int] = set()
        if early is not None and early.every_us is not None:
            # Open buckets whose longest-waiting window may be due with no new rows.
            waiting = {
                b for b, info in prev.buckets.items()
                if not info.fired and info.pending_since_us is not None
                and now_us - info.pending_since_us >= early.every_us
            }
        on_time_ends = j.pairs.end[j.verdict == Lateness.ON_TIME]
        # Does any window fire in this step (stored, or opened by this batch and closed by its own W)?
        # If not and there are no late updates, the step emits nothing: no results job (see _fold).
        fires = bool(to_fire) or bool((on_time_ends <= w_new).any())
        rid_sorted = rid[order]
        by_rid = np.argsort(rid_sorted, kind="stable")
        return {
            "dead": int(dead_mask.sum()),
            "accounting": acc,
            "pair_counts": np.bincount(j.verdict.astype(np.int64), minlength=3),
            "lookup": (rid_sorted[by_rid], j.watermark_us[by_rid], j.seq[by_rid]),
            "read": touched | to_fire | waiting,
            "fires": fires,
            "buckets": {},
            "watermark": w_new,
            "clock": int(arrival.max()) if arrival is not None and n else None,
            "now_us": now_us,
            "arrival_regression": (earliest, latest_before) if regressed else None,
        }

    def _write_dead_letters(self, parsed: DataFrame, step: int) -> None:
        cols = [F.col(c) for c in self.schema.fieldNames()]
        raw = F.col(CORRUPT) if CORRUPT in parsed.columns else F.lit(None).cast("string")
        dead = parsed.filter(F.col("_dead").isNotNull()).select(
            *cols, raw.alias("raw"), F.col("_dead").alias("reason"), F.col("_file").alias("source_file")
        )
        self.outputs.write("dead_letter", step, dead)

    def _contributions(self, parsed: DataFrame, plan: dict, with_payload: bool) -> DataFrame:
        """Executor side (``contrib``): on-time partials, late-update and too-late pairs."""
        src = self.cfg.source
        names = self.schema.fieldNames()
        need = list(dict.fromkeys([*self.layout.keys, *self.layout.values]))
        payload = [*names, "_file"] if with_payload else None
        clip = bool(src.arrival_time) and self.cfg.watermark.max_future_skew_us is not None
        cols = list(dict.fromkeys([*need, *(payload or []), "_event_us", "_rid"]))
        if clip:
            cols.append("_arrival_us")  # only clipping needs the arrival clock on the executors
        valid = select(parsed.filter(memo("valid", lambda: F.col("_dead").isNull())), cols)
        fields = {f.name: f for f in parsed.schema.fields}
        schema = contrib_schema(self.layout, [fields[c] for c in payload] if payload else None)
        fn = make_contribute(
            self.layout,
            self.assigner,
            self.cfg.window.allowed_lateness_us,
            self.cfg.watermark.max_future_skew_us,
            self.spark.sparkContext.broadcast(plan["lookup"]),
            payload,
            clip,
            schema,
        )
        return valid.mapInArrow(fn, schema)

    def _fold(
        self,
        parsed: DataFrame,
        plan: dict,
        tracker: WatermarkTracker,
        prev: Manifest,
        step: int,
        spark_batch: int,
        cache: list[DataFrame],
    ) -> StepReport:
        grace = self.cfg.window.allowed_lateness_us
        w_new = plan["watermark"]
        n_on, n_late, n_too_late = (int(x) for x in plan["pair_counts"])
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
                    *[F.col(p + c).alias(c) for c in self.schema.fieldNames()],
                    watermark_ts("_w").alias("watermark"),
                    F.timestamp_micros("window_start").alias("window_start"),
                    F.timestamp_micros("window_end").alias("window_end"),
                    F.lit(DRAINED_REASON if prev.drained else TOO_LATE_REASON).alias("reason"),
                    F.col(p + "_file").alias("source_file"),
                )
            state_cols = [*self.layout.window_cols, *self.layout.partial_cols()]
            on_time = select(contrib.filter(_is_kind("P")), state_cols) if n_on else None
            late = select(contrib.filter(_is_kind("L")), [*state_cols, "_seq"]) if n_late else None
            read = plan["read"]
            state = self.store.read(prev, read)
            emit_wm = output_us(w_new)
            emitted, new_state = step_windows(
                self.layout, state, on_time, late, w_new, grace, emit_wm, step, cache, self.cfg.window.accumulation,
                now_us=plan["now_us"], admit_us=plan.get("admit_us", plan["now_us"]),
            )
            if emitted is not None and not (plan["fires"] or n_late or self.cfg.early is not None):
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

        def write_outputs() -> None:
            t_r = time.monotonic()
            for kind, frame in (("late", late_rows), ("results", emitted)):
                if frame is not None:
                    self.outputs.write(kind, step, frame)
                else:
                    self.outputs.clear(kind, step)
            log.debug("step %d: late + results %.2fs", step, time.monotonic() - t_r)

        def write_state() -> tuple[dict, dict]:
            t_s = time.monotonic()
            written = self.store.write(step, new_state) if new_state is not None else {}
            waiting = self.store.column_min(step, "_due") if written and self.layout.timed else {}
            log.debug("step %d: state write %.2fs", step, time.monotonic() - t_s)
            return written, waiting

        # Outputs and state read the same persisted frames and do not depend on each other.
        _, (written, waiting) = side_by_side(write_outputs, write_state)
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
        plan["buckets"] = buckets
        return StepReport(
            step=step,
            spark_batch=spark_batch,
            accounting=plan["accounting"],
            watermark_us=w_new,
            windows_fired=fired,
            revisions=revisions,
            provisionals=provisionals,
            open_windows=sum(b.rows for b in buckets.values()),
            state_bytes=sum(b.bytes for b in buckets.values()),
            extra={"clock": plan["clock"]},
        )

    def _commit(self, report: StepReport, tracker: WatermarkTracker, prev: Manifest, buckets: dict) -> None:
        totals = {k: int(prev.totals.get(k, 0)) for k in TOTAL_KEYS}
        for k, v in report.accounting.as_dict().items():
            totals[k] += v
        totals["windows_fired"] += report.windows_fired
        totals["revisions"] += report.revisions
        totals["provisionals"] += report.provisionals
        for k in ORDER_KEYS:
            totals[k] += getattr(report, k)
        metrics = self._write_metrics(report, tracker)
        _fault("before_deliver", report.step)
        if self.sink is not None:
            # Delivered (or recognised as delivered) BEFORE the manifest: a crash in
            # between replays the step, and the batches table makes that a no-op.
            self.sink.deliver(report.step, report.spark_batch, metrics)
        _fault("before_commit", report.step)
        manifest = Manifest(
            step=report.step,
            spark_batch=report.spark_batch,
            buckets=buckets,
            tracker=tracker.state.to_json(),
            totals=totals,
            drained=prev.drained or report.watermark_us >= POS_INF,
        )
        self.store.commit(manifest)
        _fault("after_commit", report.step)
        self.reports.append(report)
        acc = report.accounting
        log.info(
            "step %d (batch %d): %d rows, %d on time, %d late updates, %d too late, %d dead; "
            "W=%s, %d fired, %d revisions, %d open windows, %.2fs",
            report.step, report.spark_batch, acc.rows, acc.on_time, acc.late_updates, acc.too_late,
            acc.dead_letter, format_ts(report.watermark_us), report.windows_fired, report.revisions,
            report.open_windows, report.duration_s,
        )

    def _write_metrics(self, report: StepReport, tracker: WatermarkTracker) -> dict:
        statuses = tracker.statuses()
        spread, holder = tracker.spread()
        w = report.watermark_us
        clock = report.extra.get("clock")
        if w <= NEG_INF or w >= POS_INF:
            lag = None
        elif clock is not None:
            lag = (clock - w) / 1e6
        else:
            lag = time.time() - w / 1e6
        acc = report.accounting
        row = {
            "spark_batch": report.spark_batch,
            "low_watermark": _ts(w),
            "partition_watermarks": [(s.partition, _ts(s.watermark_us)) for s in statuses],
            "idle_partitions": [s.partition for s in statuses if not s.active],
            "holding_partition": holder,
            "spread_s": None if spread is None else spread / 1e6,
            "watermark_lag_s": lag,
            "rows": acc.rows,
            "on_time": acc.on_time,
            "late_updates": acc.late_updates,
            "too_late": acc.too_late,
            "dead_letter": acc.dead_letter,
            "clipped": acc.clipped,
            "windows_fired": report.windows_fired,
            "revisions": report.revisions,
            "open_windows": report.open_windows,
            "state_bytes": report.state_bytes,
            "duration_s": report.duration_s,
            **{k: getattr(report, k) for k in ORDER_KEYS},
        }
        self.outputs.write_rows("metrics", report.step, pa.Table.from_pylist([row], METRICS_ARROW), METRICS_SCHEMA)
        return row

    # -- drain and summary -----------------------------------------------------------

    def drain(self) -> Manifest:
        """Bounded input exhausted: ``W`` becomes +infinity and every open window fires."""
        prev = self.store.latest()
        if self.sink is not None and not prev.drained:
            self.sink.begin_step(prev.step + 1)  # forget what an interrupted drain staged
        self._ensure_outputs()
        if self.sessions is not None:  # session windows (spark/sessions.py)
            return self.sessions.drain()
        if prev.drained and prev.tracker is not None and prev.tracker.get("watermark_us", 0) >= POS_INF:
            return prev
        t0 = time.monotonic()
        step = prev.step + 1
        tracker = WatermarkTracker(
            self.cfg.watermark, TrackerState.from_json(prev.tracker) if prev.tracker else None
        )
        tracker.drain()
        cache: list[DataFrame] = []
        try:
            to_fire = {b for b, info in prev.buckets.items() if not info.fired}
            state = self.store.read(prev, to_fire)
            # Every open window fires (W = +inf), so the drain emits no provisional; the
            # finals carry what the accumulation mode says (e.g. discarding: the pending rows).
            emitted, _ = step_windows(
                self.layout, state, None, None, POS_INF, self.cfg.window.allowed_lateness_us, output_us(POS_INF), step,
                cache,
                now_us=self.clock(),
            )
            fired = 0
            if emitted is not None:
                obs = Observation(f"drain_{step}")
                emitted = emitted.observe(obs, *_emission_counts())
                self.outputs.write("results", step, emitted)
                fired = int(obs.get.get("finals") or 0)
            else:
                self.outputs.clear("results", step)
        finally:
            for c in cache:
                c.unpersist()
        report = StepReport(
            step=step,
            spark_batch=prev.spark_batch,
            accounting=Accounting(),
            watermark_us=POS_INF,
            windows_fired=fired,
            duration_s=time.monotonic() - t0,
            extra={"clock": None},
        )
        self._commit(report, tracker, prev, {})
        return self.store.latest()

    def summary(self, manifest: Manifest) -> dict:
        """The accounting totals of SEMANTICS.md §6 for everything this checkpoint processed."""
        t = {k: int(manifest.totals.get(k, 0)) for k in TOTAL_KEYS}
        acc = Accounting(**{k: t[k] for k in ("rows", "on_time", "late_updates", "too_late", "dead_letter", "clipped")})
        w = manifest.tracker.get("watermark_us", NEG_INF) if manifest.tracker else NEG_INF
        return {
            **t,
            "completeness": acc.completeness(),
            "balanced": acc.balanced,
            "final_watermark": format_ts(w),
            "final_watermark_us": output_us(w),
            "open_windows": manifest.open_windows,
            "steps": manifest.step + 1,
            "drained": manifest.drained,
        }

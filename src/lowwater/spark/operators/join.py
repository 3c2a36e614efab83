"""The interval join on Spark (``[join]``): the core state machine run on the driver, its state versioned.

A step carries out the driver's :class:`~lowwater.spark.step.StepPlan` (which
gives every judged row its ``W(r)`` from the tracker over both sources, the
join's watermark of SEMANTICS.md §9) in four parts:

1. **collect** the judged rows' join columns (keys, chosen columns, event and
   arrival times; no other payload) as Arrow, put them in arrival order by the
   plan's sequence numbers (each row id checked against the plan);
2. **join** with :class:`~lowwater.core.join.IntervalJoin` restored from the
   previous manifest's state: pairs, unmatched left rows freed by ``W``, too-late rows;
3. **write** through the sinks: ``joined`` (both sides' chosen columns, both
   event times, the watermark at emission), ``late`` (the too-late rows whole,
   looked up by row id on the executors, with ``source``, ``watermark`` and
   ``reason = too_late_for_join``), ``join_metrics`` (the held output watermark,
   open rows and each side's accounting);
4. **state**: the buffered rows of both sides as version ``step`` of one bucket
   in the versioned state directory, and each side's counts beside it
   (``join/v<step>.json``); the engine's manifest names the version, so a
   crash or a replayed batch restarts from the same state (§8).

The join's semantics live in ``core/join.py``; this module only translates.
Its cost is one collect of the join columns a step (the planner already
collects ~40 bytes a row): docs/design.md, "Interval join", says where it scales.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.pandas.types import to_arrow_schema

from lowwater.config import PipelineConfig
from lowwater.config.join import JoinConfig
from lowwater.core.accounting import Accounting
from lowwater.core.join import (
    TOO_LATE_FOR_JOIN,
    IntervalJoin,
    Joined,
    JoinRow,
    JoinState,
    Side,
    SideCounts,
    TooLate,
    _Buffered,
    run_batch,
)
from lowwater.core.judge import clip_per_source
from lowwater.core.lateness import LatePolicy
from lowwater.io.sink import Sinks
from lowwater.runtime.columns import watermark_ts
from lowwater.spark.state import KEEP_MANIFESTS, Bucket, BucketStateStore, Manifest
from lowwater.spark.step import OperatorResult, StepPlan
from lowwater.spark.windowing import StateLayout
from lowwater.time import POS_INF, output_us, to_datetime

BUCKET = 0  # the join's state is one bucket: every buffered row of both sides
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
    """``[join]``: an interval join of two sources (the engine's operator for ``window.type = "join"``)."""

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
        assert cfg.join is not None
        self.cfg = cfg
        self.join: JoinConfig = cfg.join
        self.spark = spark
        self.sinks = sinks
        self.inputs = inputs
        self.types = {f.name: f.dataType for f in inputs.fields}
        self.state_dir = state_dir.rstrip("/")
        self.store = BucketStateStore(spark, state_dir, self.state_schema())
        self._prepared = False
        # The join as the last step this operator carried out left it: (step, join). The next step
        # starts from it when it follows that step (no state read); a replay or a new process reads
        # the manifest's version. Taken out while a step runs, so a failed step leaves nothing behind.
        self._live: tuple[int, IntervalJoin] | None = None

    # -- layouts ---------------------------------------------------------------------

    def _side_columns(self, side: Side) -> tuple[str, ...]:
        return self.join.left_columns if side == Side.LEFT else self.join.right_columns

    def _state_columns(self) -> list[tuple[str, T.DataType]]:
        """Buffered rows: side, keys, event time, arrival sequence, matched, then each side's chosen columns."""
        cols: list[tuple[str, T.DataType]] = [("side", T.StringType())]
        cols += [(f"k_{c}", self.types[c]) for c in self.join.on]
        cols += [("event_us", T.LongType()), ("seq", T.LongType()), ("matched", T.BooleanType())]
        for side in Side:
            cols += [(f"{side.value}_{c}", self.types[c]) for c in self._side_columns(side)]
        return cols

    def state_schema(self) -> T.StructType:
        return T.StructType([T.StructField(n, t) for n, t in [*self._state_columns(), ("_bucket", T.IntegerType())]])

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

    # -- state -----------------------------------------------------------------------

    def _counts_path(self, step: int) -> str:
        return f"{self.state_dir}/join/v{step:012d}.json"

    def _restore(self, prev: Manifest) -> IntervalJoin:
        """The join as ``prev`` left it: its buffered rows (one bucket) and each side's counts."""
        live, self._live = self._live, None
        if live is not None and live[0] == prev.step >= 0:
            return live[1]
        state = JoinState()
        if prev.step >= 0 and self.store.fs.exists(self._counts_path(prev.step)):
            data = json.loads(self.store.fs.read_text(self._counts_path(prev.step)))
            state.counts = {Side(k): SideCounts(**v) for k, v in data.items()}
        frame = self.store.read(prev, {BUCKET})
        if frame is not None:
            for r in frame.toArrow().to_pylist():
                side = Side(r["side"])
                row = JoinRow(side, tuple(r[f"k_{c}"] for c in self.join.on), int(r["event_us"]), int(r["seq"]),
                              tuple(r[f"{side.value}_{c}"] for c in self._side_columns(side)))
                state.buffer(side).setdefault(row.key, []).append(_Buffered(row, bool(r["matched"])))
        for buf in (state.left, state.right):
            for entries in buf.values():
                entries.sort(key=lambda e: e.row.seq)
        return IntervalJoin(self.join.bounds, self.join.type, state)

    def _save(self, join: IntervalJoin, step: int) -> dict[int, Bucket]:
        """Write the buffered rows as version ``step`` and the counts beside them; the manifest's buckets."""
        counts = {side.value: c.as_dict() for side, c in join.counts().items()}
        self.store.fs.write_text_atomic(self._counts_path(step), json.dumps(counts))
        old = self._counts_path(step - 2 * KEEP_MANIFESTS)  # no kept manifest is that old
        if step >= 2 * KEEP_MANIFESTS and self.store.fs.exists(old):
            self.store.fs.delete(old)
        columns: dict[str, list] = {f.name: [] for f in self.state_schema().fields}
        n = 0
        for row, matched in join.state.rows():
            n += 1
            columns["side"].append(row.side.value)
            for c, k in zip(self.join.on, row.key, strict=True):
                columns[f"k_{c}"].append(k)
            columns["event_us"].append(row.event_us)
            columns["seq"].append(row.seq)
            columns["matched"].append(matched)
            for side in Side:
                chosen = self._side_columns(side)
                values = row.values if side == row.side else (None,) * len(chosen)
                for c, v in zip(chosen, values, strict=True):
                    columns[f"{side.value}_{c}"].append(v)
            columns["_bucket"].append(BUCKET)
        if not n:
            return {}
        table = self._arrow(columns, self.state_schema())
        local = self.store.fs.local_path(self.store.bucket_path(step, BUCKET))
        if local is None:
            written = self.store.write(step, self.spark.createDataFrame(table, self.state_schema()))
            rows_n, size = written.get(BUCKET, (n, 0))
        else:  # a local checkpoint: one Parquet file written by the driver, no Spark job
            target = Path(local)
            if target.parent.exists():
                shutil.rmtree(target.parent)  # an earlier attempt of this step
            target.mkdir(parents=True)
            pq.write_table(table.drop_columns(["_bucket"]), target / "part-00000.parquet")
            rows_n, size = n, (target / "part-00000.parquet").stat().st_size
        return {BUCKET: Bucket(version=step, fired=False, rows=rows_n, bytes=size)}

    def _arrow(self, columns: dict[str, list], schema: T.StructType) -> pa.Table:
        """Driver-side columns as an Arrow table of ``schema`` (the join's own times given as µs)."""
        arrow = to_arrow_schema(schema, timezone="UTC")
        arrays = []
        for f in arrow:
            values = columns[f.name]
            if pa.types.is_timestamp(f.type) and all(v is None or isinstance(v, int) for v in values):
                arrays.append(pa.array(values, pa.int64()).cast(f.type))
            else:
                arrays.append(pa.array(values, f.type))
        return pa.Table.from_arrays(arrays, schema=arrow)

    # -- a step ----------------------------------------------------------------------

    def _batch_rows(
        self, parsed: DataFrame, plan: StepPlan,
    ) -> tuple[list[JoinRow], np.ndarray, np.ndarray, dict[Side, int]]:
        """The judged rows as join rows in arrival order, their ``W(r)`` and row ids, each side's dead letters."""
        on, jc = list(self.join.on), self.join
        chosen = list(dict.fromkeys([*jc.left_columns, *jc.right_columns]))
        cols = list(dict.fromkeys(["_rid", "_dead", "_source", "_event_us", "_arrival_us", *on, *chosen]))
        table = parsed.select(*cols).toArrow()
        dead_mask = table.column("_dead").is_valid().to_numpy(zero_copy_only=False)
        sources = np.asarray(table.column("_source").to_pylist(), dtype=object)
        dead = {Side.LEFT: int((dead_mask & (sources == jc.left)).sum()),
                Side.RIGHT: int((dead_mask & (sources == jc.right)).sum())}
        valid = table.filter(pa.array(~dead_mask))
        rid_sorted, w_sorted, seq_sorted = plan.lookup
        rid = valid.column("_rid").to_numpy()
        at = np.searchsorted(rid_sorted, rid)
        found = len(rid) == len(rid_sorted) and (
            not len(rid) or np.array_equal(rid_sorted[np.minimum(at, len(rid_sorted) - 1)], rid))
        if not found:
            msg = f"join: the step's {len(rid)} judged rows do not match the driver's plan ({len(rid_sorted)} rows)"
            raise RuntimeError(msg)
        order = np.argsort(seq_sorted[at], kind="stable")
        valid = valid.take(pa.array(order))
        at = at[order]
        names = np.asarray(valid.column("_source").to_pylist(), dtype=object)
        skew = {s.name: s.watermark.max_future_skew_us for s in self.cfg.sources}
        event, _ = clip_per_source(valid.column("_event_us").to_numpy(), valid.column("_arrival_us").to_numpy(),
                                   skew, names)
        data = valid.select([*on, *chosen]).to_pydict()
        rows = []
        for k in range(valid.num_rows):
            side = Side.LEFT if names[k] == jc.left else Side.RIGHT
            rows.append(JoinRow(side, tuple(data[c][k] for c in on), int(event[k]), int(seq_sorted[at[k]]),
                                tuple(data[c][k] for c in self._side_columns(side))))
        return rows, w_sorted[at], valid.column("_rid").to_numpy(), dead

    def _joined_table(self, emitted: list[Joined]) -> pa.Table | None:
        if not emitted:
            return None
        jc = self.join
        schema = self.joined_schema()
        columns: dict[str, list] = {f.name: [] for f in schema.fields}
        for e in emitted:
            row: dict[str, Any] = dict(zip(jc.on, e.left.key, strict=True))
            row.update(zip(jc.left_columns, e.left.values, strict=True))
            if e.right is not None:
                row.update(zip(jc.right_columns, e.right.values, strict=True))
            for c in jc.output_columns():
                columns[c].append(row.get(c))
            columns["left_event_time"].append(e.left.event_us)
            columns["right_event_time"].append(None if e.right is None else e.right.event_us)
            columns["watermark"].append(output_us(e.watermark_us))
        return self._arrow(columns, schema)

    def _late_frame(
        self, parsed: DataFrame, late: list[TooLate], rows: list[JoinRow], rids: np.ndarray,
    ) -> DataFrame | None:
        """The too-late rows whole (every input column), each with its ``W(r)`` and the reason."""
        if not late or self.cfg.late_policy != LatePolicy.SIDE_OUTPUT:
            return None
        position = {row.seq: k for k, row in enumerate(rows)}
        marks = [(int(rids[position[t.row.seq]]), int(t.watermark_us)) for t in late]
        lookup = self.spark.createDataFrame(marks, "_rid LONG, _w LONG")
        rows_df = parsed.filter(F.col("_dead").isNull()).join(F.broadcast(lookup), "_rid")
        return rows_df.select(
            *[F.col(c) for c in self.inputs.fieldNames()],
            watermark_ts("_w").alias("watermark"),
            F.lit(None).cast("timestamp").alias("window_start"),
            F.lit(None).cast("timestamp").alias("window_end"),
            F.lit(TOO_LATE_FOR_JOIN).alias("reason"),
            F.col("_file").alias("source_file"),
        )

    def _write(self, step: int, watermark_us: int, join: IntervalJoin, emitted: list[Joined],
               late_rows: DataFrame | None) -> dict[int, Bucket]:
        self._prepare()
        joined = self._joined_table(emitted)
        if joined is None:
            self.sinks.clear("joined", step)
        else:  # driver-side rows: plain Parquet when the output path is local (io/outputs.write_rows)
            self.sinks.write_rows("joined", step, joined, self.joined_schema())
        self.sinks.write_or_clear("late", step, late_rows)
        open_rows = {side: sum(len(v) for v in join.state.buffer(side).values()) for side in Side}
        metrics = {
            "step": step,
            "watermark": to_datetime(watermark_us),
            "output_watermark": to_datetime(join.output_watermark(watermark_us)),
            "open_left": open_rows[Side.LEFT],
            "open_right": open_rows[Side.RIGHT],
            "emitted": len(emitted),
            "counts": [(side.value, list(c.as_dict().items())) for side, c in join.counts().items()],
        }
        self.sinks.write_rows(JOIN_METRICS, step, pa.Table.from_pylist([metrics], JOIN_METRICS_ARROW),
                              JOIN_METRICS_SCHEMA)
        join.check()
        return self._save(join, step)

    def step(
        self, parsed: DataFrame, plan: StepPlan, prev: Manifest, step: int, cache: list[DataFrame],
    ) -> OperatorResult:
        join = self._restore(prev)
        rows, w_rows, rids, dead = self._batch_rows(parsed, plan)
        for side, n in dead.items():
            join.count_dead_letters(side, n)
        batch = run_batch(join, rows, w_rows, plan.watermark)
        late_rows = self._late_frame(parsed, batch.too_late, rows, rids)
        buckets = self._write(step, plan.watermark, join, batch.emitted, late_rows)
        n_late = len(batch.too_late)
        accounting = Accounting(rows=len(rows) + plan.dead, on_time=len(rows) - n_late, too_late=n_late,
                                dead_letter=plan.dead)
        accounting.check()
        self._live = (step, join)
        return OperatorResult(accounting=accounting, buckets=buckets, windows_fired=len(batch.emitted),
                              output_watermark_us=join.output_watermark(plan.watermark))

    def drain(self, prev: Manifest, step: int, cache: list[DataFrame]) -> OperatorResult:
        """``W = +inf``: every buffered row is freed; a left outer join emits its unmatched left rows."""
        join = self._restore(prev)
        emitted = join.drain()
        self.sinks.clear("late", step)
        buckets = self._write(step, POS_INF, join, emitted, None)
        self._live = (step, join)
        return OperatorResult(accounting=Accounting(), buckets=buckets, windows_fired=len(emitted),
                              output_watermark_us=join.output_watermark(POS_INF))

    def summary(self, manifest: Manifest) -> dict:
        """Each side's accounting (SEMANTICS.md §9) for ``summary.json``."""
        path = self._counts_path(manifest.step)
        if manifest.step < 0 or not self.store.fs.exists(path):
            return {}
        counts = json.loads(self.store.fs.read_text(path))
        return {"join": {side: {**c, "balanced": SideCounts(**c).balanced} for side, c in counts.items()}}

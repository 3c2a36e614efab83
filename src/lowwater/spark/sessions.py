"""Session windows on Spark: one keyed pass running the core state machine.

Sessions merge, so a row's verdict depends on the state of its key, and the
driver cannot decide it from ``W(r)`` alone. A session step is therefore:

1. the driver computes ``W(r)`` and the arrival sequence number of every row
   (``Engine._plan``, unchanged) and broadcasts them by row id;
2. the valid rows (key, values, event µs, row id) are unioned with the live
   session state, hash-partitioned by key, and each task runs
   :class:`~lowwater.core.sessions.SessionMachine` over its partition
   (``mapInArrow``: one Python call per task, not per key): state rows are
   loaded, the rows are looked up in the broadcast, sorted by arrival sequence
   and fed one by one, then the machine advances to the step's watermark;
3. the task yields one frame, persisted once: emissions (``E``), the new
   state (``S``), too-late rows (``T``: row id, ``W(r)``, proto-window) and
   one counts row (``C``: verdicts, live sessions, finals, revisions);
4. the driver checks that the executors' verdicts add up to its valid-row
   count, writes results and late rows (too-late row ids joined back to the
   re-read micro-batch for the whole input row), and the state as one bucket
   of the versioned store, committed through the step's manifest.

Every live session is read and rewritten each step; that state is bounded by
``gap + L + G`` times the row rate (times the keys), see docs/design.md.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable, Iterator
from decimal import Decimal, localcontext

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.pandas.types import to_arrow_schema

from lowwater.core.accounting import Accounting
from lowwater.core.lateness import DRAINED_REASON, TOO_LATE_REASON, LatePolicy
from lowwater.core.sessions import (
    FINAL,
    REVISION,
    Emitted,
    Session,
    SessionMachine,
    agg_values,
)
from lowwater.core.tracker import TrackerState, WatermarkTracker
from lowwater.core.triggers import EarlyTrigger
from lowwater.core.watermarks import clip_future
from lowwater.spark.aggtypes import from_json, partial_kinds, python_values, value_cast
from lowwater.spark.columns import watermark_ts
from lowwater.spark.jobs import side_by_side
from lowwater.spark.state import Bucket, Manifest
from lowwater.spark.windowing import StateLayout
from lowwater.time import POS_INF, output_us

log = logging.getLogger("lowwater")

BUCKET = 0  # all live sessions are one bucket of the versioned store
COUNTS = ("_c_on", "_c_late", "_c_too", "_c_live", "_c_final", "_c_rev", "_c_emit")


def _agg_cols(layout: StateLayout, prefix: str = "") -> list[tuple[str, T.DataType]]:
    """The partial columns (typed as the layout's, ``spark/aggtypes.py``), optionally prefixed (``_pn``, ``_ps0``)."""
    return [(f"_{prefix}{c[1:]}", t) for c, t in layout.partial_types().items()]


def state_schema(layout: StateLayout) -> T.StructType:
    """One row per live session: bounds, full and pending partials, last revision, outstanding values."""
    fields = [T.StructField(k, t, True) for k, t in zip(layout.keys, layout.key_types, strict=True)]
    fields += [T.StructField("window_start", T.LongType()), T.StructField("window_end", T.LongType())]
    fields += [T.StructField(c, t) for c, t in [*_agg_cols(layout), *_agg_cols(layout, "p")]]
    fields += [
        T.StructField("_rev", T.LongType()),
        T.StructField("_retract", T.StringType()),  # JSON [[start, end, revision, agg], ...] (retracting mode)
        T.StructField("_since", T.LongType()),  # where the early trigger's processing-time clock starts
        T.StructField("_prov", T.BooleanType()),  # the last emission was provisional: the final is still owed
    ]
    return T.StructType(fields)


def _out_schema(layout: StateLayout) -> T.StructType:
    st = state_schema(layout)
    fields = [*st.fields, T.StructField("_out", T.StringType()), T.StructField("_kind", T.StringType()),
              T.StructField("_rid", T.LongType()), T.StructField("_w", T.LongType())]
    fields += [T.StructField(c, T.LongType()) for c in COUNTS]
    return T.StructType(fields)


def _group_ids(table: pa.Table, keys: list[str]) -> np.ndarray:
    """Dense ids of the distinct key tuples (nulls are a value)."""
    if not keys:
        return np.zeros(table.num_rows, dtype=np.int64)
    codes = []
    for k in keys:
        enc = pc.dictionary_encode(table.column(k).combine_chunks(), null_encoding="encode")
        codes.append(enc.indices.to_numpy(zero_copy_only=False).astype(np.int64))
    if len(codes) == 1:
        return codes[0]
    return np.unique(np.stack(codes, axis=1), axis=0, return_inverse=True)[1].reshape(-1).astype(np.int64)


def make_session_step(
    layout: StateLayout,
    gap_us: int,
    grace_us: int,
    accumulation: str,
    max_future_skew_us: int | None,
    lookup,  # noqa: ANN001 - a Spark Broadcast of (rids, watermarks, seqs) sorted by rid, or None
    has_arrival: bool,
    watermark_us: int,
    early: EarlyTrigger | None,
    now_us: int,
    out_schema: T.StructType,
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function of a session step (a closure that pickles to the executors)."""
    keys = list(layout.keys)
    nv = len(layout.values)
    agg_names = [c for c, _ in _agg_cols(layout)]
    pend_names = [c for c, _ in _agg_cols(layout, "p")]
    value_types = [layout.value_type(j) for j in range(nv)]
    kinds = partial_kinds(value_types)

    def typed(values: list) -> list:
        """JSON-read partial values as their kinds (decimals exact, floats as floats)."""
        return [from_json(k, v) for k, v in zip(kinds, values, strict=True)]
    arrow_schema = to_arrow_schema(out_schema, timezone="UTC")  # timestamps cross as UTC instants

    def shaped(columns: dict[str, pa.Array], n: int) -> pa.RecordBatch:
        arrays = []
        for f in arrow_schema:
            a = columns.get(f.name)
            arrays.append(pa.nulls(n, f.type) if a is None else a.cast(f.type))
        return pa.RecordBatch.from_arrays(arrays, schema=arrow_schema)

    def load_state(t: pa.Table, idx: np.ndarray, gid: np.ndarray, m: SessionMachine) -> None:
        """State rows arrive packed as one JSON column (``_state``), so input rows carry one null, not 16."""
        if not len(idx):
            return
        packed = t.column("_state").take(pa.array(idx)).to_pylist()
        defaults = [0, *[0, math.inf, -math.inf, 0] * nv]  # null sums/mins/maxes: no non-null row
        for g, text in zip(gid[idx].tolist(), packed, strict=True):
            d = json.loads(text, parse_float=Decimal)
            agg = [z if d.get(c) is None else from_json(k, d[c])
                   for c, z, k in zip(agg_names, defaults, kinds, strict=True)]
            pend = [z if d.get(c) is None else from_json(k, d[c])
                    for c, z, k in zip(pend_names, defaults, kinds, strict=True)]
            s = Session(d["window_start"], d["window_end"], agg, pend, d["_rev"],
                        pending_since_us=d.get("_since"), provisional=bool(d.get("_prov")))
            if d.get("_retract"):
                s.outstanding = [Emitted(a, b, r, tuple(typed(v)))
                                 for a, b, r, v in json.loads(d["_retract"], parse_float=Decimal)]
            m.load(g, s)

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        got = [b for b in batches if b.num_rows]
        if not got:
            return
        with localcontext() as ctx:  # decimal sums exact to 38 digits and beyond (Python's default is 28)
            ctx.prec = 2 * 38
            yield from keyed_pass(got)

    def keyed_pass(got: list[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        t = pa.Table.from_batches(got).combine_chunks()
        role = t.column("_role").to_numpy(zero_copy_only=False)
        gid = _group_ids(t, keys)
        # A row of each key, to write the key columns of that key's outputs.
        uniq, rep = np.unique(gid, return_index=True)
        rep_of = np.zeros(int(uniq.max()) + 1 if len(uniq) else 0, dtype=np.int64)
        rep_of[uniq] = rep
        m = SessionMachine(gap_us, grace_us, nv, accumulation)
        m.now_us = now_us
        load_state(t, np.flatnonzero(role == 0), gid, m)
        ridx = np.flatnonzero(role == 1)
        if len(ridx):
            sel = pa.array(ridx)
            rid = t.column("_rid").take(sel).to_numpy()
            rids, ws, seqs = lookup.value
            i = np.minimum(np.searchsorted(rids, rid), max(len(rids) - 1, 0))
            if len(rids) == 0 or not np.array_equal(rids[i], rid):
                msg = "row ids differ from the driver's plan: the micro-batch was not re-read identically"
                raise RuntimeError(msg)
            w, seq = ws[i], seqs[i]
            arrival = t.column("_arrival_us").take(sel).to_numpy() if has_arrival else None
            event, _ = clip_future(t.column("_event_us").take(sel).to_numpy(), arrival, max_future_skew_us)
            order = np.argsort(seq, kind="stable")
            take = pa.array(ridx[order])  # Python ints, Decimals or floats; NaN is null (spark/aggtypes.py)
            vals = [python_values(t.column(f"_v{j}").take(take), value_types[j]) for j in range(nv)]
            rows = list(zip(*vals, strict=True)) if nv else [()] * len(ridx)
            process = m.process
            for g, ev, wr, v, r in zip(gid[ridx][order].tolist(), event[order].tolist(), w[order].tolist(),
                                       rows, rid[order].tolist(), strict=True):
                process(g, ev, wr, v, r)
        m.advance(watermark_us)
        if early is not None and watermark_us < POS_INF:
            m.early(early, watermark_us, now_us)
        yield from emit(t, m, rep_of)

    def key_cols(t: pa.Table, rep_of: np.ndarray, gids: list[int]) -> dict[str, pa.Array]:
        take = pa.array(rep_of[np.asarray(gids, dtype=np.int64)] if gids else np.zeros(0, dtype=np.int64))
        return {k: t.column(k).take(take).combine_chunks() for k in keys}

    def agg_arrays(aggs: list, names: list[str], with_nulls: bool) -> dict[str, pa.Array]:
        if with_nulls:
            aggs = [agg_values(a, nv) for a in aggs]
        cols = list(zip(*aggs, strict=True)) if aggs else [()] * len(names)
        return {c: pa.array(list(v)) for c, v in zip(names, cols, strict=True)} if aggs else {}

    def emit(t: pa.Table, m: SessionMachine, rep_of: np.ndarray) -> Iterator[pa.RecordBatch]:
        em = m.take_emissions()
        finals = revisions = 0
        if em:
            cols = key_cols(t, rep_of, [e.key for e in em])
            cols["window_start"] = pa.array([e.start_us for e in em], pa.int64())
            cols["window_end"] = pa.array([e.end_us for e in em], pa.int64())
            cols.update(agg_arrays([e.agg for e in em], agg_names, True))
            cols["_rev"] = pa.array([e.revision for e in em], pa.int64())
            kinds = [e.kind for e in em]
            cols["_kind"] = pa.array(kinds, pa.string())
            cols["_out"] = pa.array(["E"] * len(em), pa.string())
            finals, revisions = kinds.count(FINAL), kinds.count(REVISION)
            yield shaped(cols, len(em))
        live = [(g, s) for g, ss in m.sessions.items() for s in ss]
        if live:
            cols = key_cols(t, rep_of, [g for g, _ in live])
            cols["window_start"] = pa.array([s.start_us for _, s in live], pa.int64())
            cols["window_end"] = pa.array([s.end_us for _, s in live], pa.int64())
            cols.update(agg_arrays([s.agg for _, s in live], agg_names, True))
            cols.update(agg_arrays([s.pending for _, s in live], pend_names, True))
            cols["_rev"] = pa.array([s.last_rev for _, s in live], pa.int64())
            cols["_retract"] = pa.array(
                [json.dumps([[o.start_us, o.end_us, o.revision, agg_values(o.agg, nv)] for o in s.outstanding],
                            default=str)  # a Decimal as its exact text
                 if s.outstanding else None for _, s in live], pa.string())
            cols["_since"] = pa.array([s.pending_since_us for _, s in live], pa.int64())
            cols["_prov"] = pa.array([s.provisional for _, s in live], pa.bool_())
            cols["_out"] = pa.array(["S"] * len(live), pa.string())
            yield shaped(cols, len(live))
        late = m.take_too_late()
        if late:
            cols = key_cols(t, rep_of, [x.key for x in late])
            cols["window_start"] = pa.array([x.start_us for x in late], pa.int64())
            cols["window_end"] = pa.array([x.end_us for x in late], pa.int64())
            cols["_rid"] = pa.array([x.row for x in late], pa.int64())
            cols["_w"] = pa.array([x.watermark_us for x in late], pa.int64())
            cols["_out"] = pa.array(["T"] * len(late), pa.string())
            yield shaped(cols, len(late))
        counts = [*m.counts, len(live), finals, revisions, len(em)]
        cols = {c: pa.array([v], pa.int64()) for c, v in zip(COUNTS, counts, strict=True)}
        cols["_out"] = pa.array(["C"], pa.string())
        yield shaped(cols, 1)

    return run


class SessionSteps:
    """The session-window path of :class:`~lowwater.spark.engine.Engine` (steps and drain)."""

    def __init__(self, engine) -> None:  # noqa: ANN001 - the Engine (avoids an import cycle)
        self.engine = engine
        self.cfg = engine.cfg
        self.layout: StateLayout = engine.layout
        self.out_schema = _out_schema(self.layout)

    # -- Spark frames --------------------------------------------------------------

    def _rows(self, parsed: DataFrame, clip: bool) -> DataFrame:
        cols = [F.col(k) for k in self.layout.keys]
        cols += [F.col(v).cast(value_cast(self.layout.value_type(j))).alias(f"_v{j}")
                 for j, v in enumerate(self.layout.values)]
        cols += [F.col("_event_us"), F.col("_rid"), F.lit(1).alias("_role")]
        if clip:
            cols.append(F.col("_arrival_us"))
        return parsed.filter(F.col("_dead").isNull()).select(*cols)

    def _run(
        self, rows: DataFrame | None, prev: Manifest, watermark_us: int, lookup, clip: bool,  # noqa: ANN001
    ) -> DataFrame | None:
        """The persisted output frame of the keyed pass (None when there is nothing to run)."""
        state = self.engine.store.read(prev, {BUCKET})
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
        row_cols = {"_rid": "long", "_event_us": "long", "_arrival_us": "long"}
        row_cols.update({f"_v{j}": value_cast(self.layout.value_type(j)) for j in range(len(self.layout.values))})
        for c, typ in row_cols.items():
            if c not in union.columns:
                union = union.withColumn(c, F.lit(None).cast(typ))
        union = union.repartition(*keys) if keys else union.repartition(1)
        fn = make_session_step(
            self.layout,
            int(self.cfg.window.gap_us or 0),
            self.cfg.window.allowed_lateness_us,
            self.cfg.window.accumulation,
            self.cfg.watermark.max_future_skew_us,
            lookup,
            clip,
            watermark_us,
            self.cfg.early,
            self.engine.clock(),  # processing time for the early trigger (injectable, as for tumbling)
            self.out_schema,
        )
        return union.mapInArrow(fn, self.out_schema).persist()

    def _results(self, out: DataFrame, emit_wm: int | None) -> DataFrame:
        """Emission rows as result rows (the columns of the tumbling path)."""
        lay = self.layout
        df = out.filter(F.col("_out") == "E")
        cols = [F.col(k) for k in lay.keys]
        cols += [F.timestamp_micros("window_start").alias("window_start"),
                 F.timestamp_micros("window_end").alias("window_end"), F.col("_n").alias("count")]
        cols += lay.aggregate_columns()  # typed as the tumbling path types them (spark/aggtypes.py)
        wm = F.timestamp_micros(F.lit(emit_wm)) if emit_wm is not None else F.lit(None).cast("timestamp")
        cols += [F.col("_kind").alias("kind"), F.col("_rev").alias("revision"), wm.alias("watermark")]
        return df.select(*cols)

    def _finish(self, out: DataFrame | None, step: int, emit_wm: int | None) -> tuple[list[int], dict]:
        """Write results and state; return the counts and the manifest's buckets."""
        eng = self.engine
        counts = [0] * len(COUNTS)
        t0 = time.monotonic()
        if out is not None:
            got = out.filter(F.col("_out") == "C").agg(*[F.sum(c).alias(c) for c in COUNTS]).collect()[0]
            counts = [int(got[c] or 0) for c in COUNTS]
        t1 = time.monotonic()

        def write_results() -> None:
            if counts[6]:
                eng.outputs.write("results", step, self._results(out, emit_wm))
            else:
                eng.outputs.clear("results", step)

        def write_state() -> dict[int, Bucket]:
            buckets: dict[int, Bucket] = {}
            if out is not None and counts[3]:
                names = state_schema(self.layout).fieldNames()
                state = out.filter(F.col("_out") == "S").select(*names).withColumn("_bucket", F.lit(BUCKET))
                for b, (rows, size) in eng.store.write(step, state).items():
                    buckets[b] = Bucket(version=step, fired=False, rows=rows, bytes=size)
            return buckets

        # Both read the persisted output of the keyed pass and do not depend on each other.
        _, buckets = side_by_side(write_results, write_state)
        t2 = time.monotonic()
        log.debug("step %d sessions: keyed pass + counts %.2fs, results and state %.2fs", step, t1 - t0, t2 - t1)
        return counts, buckets

    # -- a step and the drain ------------------------------------------------------------

    def step(self, parsed: DataFrame, plan: dict, prev: Manifest, step: int, spark_batch: int, cache: list):  # noqa: ANN201
        from lowwater.spark.engine import StepReport

        eng, cfg = self.engine, self.cfg
        w_new = plan["watermark"]
        acc0: Accounting = plan["accounting"]
        n_valid = acc0.rows - acc0.dead_letter
        clip = bool(cfg.source.arrival_time) and cfg.watermark.max_future_skew_us is not None
        rows = self._rows(parsed, clip) if n_valid else None
        lookup = eng.spark.sparkContext.broadcast(plan["lookup"]) if n_valid else None
        out = self._run(rows, prev, w_new, lookup, clip)
        if out is not None:
            cache.append(out)
        emit_wm = output_us(w_new)
        counts, buckets = self._finish(out, step, emit_wm)
        on, late, too = counts[:3]
        if on + late + too != n_valid:
            msg = f"step {step}: executors judged {on + late + too} rows (on time, late, too late = " \
                  f"{on}, {late}, {too}), the driver has {n_valid} valid rows"
            raise RuntimeError(msg)
        acc = Accounting(rows=acc0.rows, on_time=on, late_updates=late, too_late=too,
                         dead_letter=acc0.dead_letter, clipped=acc0.clipped)
        acc.check()
        if too and cfg.late_policy == LatePolicy.SIDE_OUTPUT and out is not None:
            reason = DRAINED_REASON if prev.drained else TOO_LATE_REASON  # --after-drain: W was already +inf
            eng.outputs.write("late", step, self._late_rows(parsed, out, reason))
        else:
            eng.outputs.clear("late", step)
        plan["buckets"] = buckets
        return StepReport(
            step=step,
            spark_batch=spark_batch,
            accounting=acc,
            watermark_us=w_new,
            windows_fired=counts[4],
            revisions=counts[5],
            open_windows=sum(b.rows for b in buckets.values()),
            state_bytes=sum(b.bytes for b in buckets.values()),
            extra={"clock": plan["clock"]},
        )

    def _late_rows(self, parsed: DataFrame, out: DataFrame, reason: str) -> DataFrame:
        """Too-late rows, whole: their ids joined back to the (re-read) micro-batch."""
        tl = out.filter(F.col("_out") == "T").select(
            "_rid", F.col("_w"), F.col("window_start").alias("_ws"), F.col("window_end").alias("_we")
        )
        joined = parsed.filter(F.col("_dead").isNull()).join(F.broadcast(tl), "_rid")
        return joined.select(
            *[F.col(c) for c in self.engine.schema.fieldNames()],
            watermark_ts("_w").alias("watermark"),
            F.timestamp_micros("_ws").alias("window_start"),
            F.timestamp_micros("_we").alias("window_end"),
            F.lit(reason).alias("reason"),
            F.col("_file").alias("source_file"),
        )

    def drain(self) -> Manifest:
        """Bounded input exhausted: ``W = +inf``, every live session fires (the engine's drain, for sessions)."""
        from lowwater.spark.engine import StepReport

        eng = self.engine
        prev = eng.store.latest()
        if prev.drained and prev.tracker is not None and prev.tracker.get("watermark_us", 0) >= POS_INF:
            return prev
        t0 = time.monotonic()
        step = prev.step + 1
        tracker = WatermarkTracker(self.cfg.watermark, TrackerState.from_json(prev.tracker) if prev.tracker else None)
        tracker.drain()
        cache: list[DataFrame] = []
        try:
            out = self._run(None, prev, POS_INF, None, False)
            if out is not None:
                cache.append(out)
            counts, _ = self._finish(out, step, output_us(POS_INF))
        finally:
            for c in cache:
                c.unpersist()
        report = StepReport(
            step=step,
            spark_batch=prev.spark_batch,
            accounting=Accounting(),
            watermark_us=POS_INF,
            windows_fired=counts[4],
            revisions=counts[5],
            duration_s=time.monotonic() - t0,
            extra={"clock": None},
        )
        eng._commit(report, tracker, prev, {})
        return eng.store.latest()

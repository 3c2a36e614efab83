"""The executor side of the interval join: one keyed pass running the core state machine per key bucket.

The step's judged rows (side, keys, chosen columns, event and arrival µs, row
id, and the row clock's ``_w`` = ``W(r)`` and ``_seq``, ``_seq_minor``: its
arrival key, with the step, :data:`ORDER`) are unioned with the buffered rows of the state buckets the step
reads, hash-partitioned by key bucket, and each task runs
:class:`~lowwater.core.join.IntervalJoin` over its partition (``mapInArrow``:
one Python call per task): the buffered rows are loaded in arrival order with
their matched flags, the new rows fed in arrival order with their ``W(r)``,
then the join advances to the step's ``W``. Keys never interact, so any
partitioning gives the pairs, verdicts and counts of one join over all rows.

A row's chosen columns never become Python objects: the core carries each
row's position in the task's Arrow table and the outputs are ``take``\\ n from
it. The task yields one frame (``_out``): ``J`` joined rows, ``S`` the new
state, ``T`` too-late rows (row id, ``W(r)``), ``B`` one summary per state
bucket it wrote (the freeing bounds, the held output watermark's part, open and
pending rows per side) and ``C`` one row of count deltas per side. The driver
side is ``operator.py``; this module is what pickles to the executors,
so it imports no driver code.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import types as T
from pyspark.sql.pandas.types import to_arrow_schema

from lowwater.config.join import JoinConfig
from lowwater.core.join import JoinBounds, JoinRow, JoinState, Side, SideCounts, _Buffered, run_batch
from lowwater.core.join_windows import joined_arrival
from lowwater.core.temporal_join import JoinKind, new_join
from lowwater.core.watermarks import clip_future
from lowwater.spark.operators.windowed.executor import skew_of
from lowwater.time import POS_INF

COUNT_FIELDS = tuple(SideCounts().as_dict())
COUNTS = tuple(f"_c_{side.value}_{f}" for side in Side for f in COUNT_FIELDS)
NEW_ROWS = "_c_new"  # the step's rows the pass judged: checked against the driver's plan
EMITTED = "_c_emitted"  # joined rows (pairs, unmatched left rows) the pass emitted
# Per written bucket: min/max over its rows of the time W must pass to free them, min event time
# (the held output watermark), open and pending (unmatched) rows per side.
META = ("_m_min_free", "_m_max_free", "_m_min_event", "_m_open_left", "_m_open_right",
        "_m_pending_left", "_m_pending_right")
# A joined row's times, and its place in arrival order (``core/join_windows.joined_arrival``: its later row's
# ``seq``, then its earlier row's), which the windows after the join order by-time ties with (global with the
# driver's clock, which such windows keep: ``join/windows.py``).
JOINED_TIMES = ("_j_left_us", "_j_right_us", "_j_w_us", "_j_later_seq", "_j_earlier_seq")
# A buffered row's arrival key, valid across steps and for either row clock: (the step that judged it, the
# clock's ``_seq``, ``_seq_minor``), compared as a tuple. The driver's clock gives (its global sequence, 0),
# the executors' (arrival, rank << 40 | position). State written before the key had three parts has only
# ``seq`` (the driver's global sequence): its rows read as step -1, minor 0, before every newer row.
ORDER = ("seq", "seq_minor", "seq_step")


def state_columns(join: JoinConfig, types: dict[str, T.DataType]) -> list[tuple[str, T.DataType]]:
    """Buffered rows: side, keys, event time, arrival sequence, matched, then each side's chosen columns."""
    cols: list[tuple[str, T.DataType]] = [("side", T.StringType())]
    cols += [(f"k_{c}", types[c]) for c in join.on]
    cols += [("event_us", T.LongType()), *[(c, T.LongType()) for c in ORDER], ("matched", T.BooleanType())]
    for side, chosen in ((Side.LEFT, join.left_columns), (Side.RIGHT, join.right_columns)):
        cols += [(f"{side.value}_{c}", types[c]) for c in chosen]
    return cols


def out_schema(join: JoinConfig, types: dict[str, T.DataType]) -> T.StructType:
    """What the pass yields: state columns and ``_bucket``, joined columns (``_j_``), row ids, summaries, counts."""
    fields = [T.StructField(n, t) for n, t in state_columns(join, types)]
    fields.append(T.StructField("_bucket", T.IntegerType()))
    fields += [T.StructField(f"_j_{c}", types[c]) for c in join.output_columns()]
    longs = [*JOINED_TIMES, "_rid", "_w", *META, *COUNTS, NEW_ROWS, EMITTED]
    fields += [T.StructField(c, T.LongType()) for c in longs]
    fields.append(T.StructField("_out", T.StringType()))
    return T.StructType(fields)


def make_join_pass(
    join: JoinConfig,
    out: T.StructType,
    watermark_us: int,
    clip: bool,
    max_future_skew_us: int | str | None,
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """Build the ``mapInArrow`` function (a closure that pickles to the executors).

    Input rows: the state layout (:func:`state_columns`) and ``_bucket``,
    ``_role`` (0 buffered, 1 new), and for new rows ``_rid``, ``_w``,
    ``_arrival_us``, ``_skew_us`` (``seq``, ``seq_minor`` hold their ``_seq``,
    ``_seq_minor``, ``seq_step`` the step; ``event_us`` the unclipped event time).
    The core is handed each row's rank in the task by its arrival key
    (:data:`ORDER`): keys never interact, so only the order within a key matters.
    """
    on = list(join.on)
    bounds, jtype = join.bounds, join.type
    temporal = join.kind == JoinKind.TEMPORAL
    arrow_schema = to_arrow_schema(out, timezone="UTC")  # timestamps cross as UTC instants
    payload = [f"k_{c}" for c in on] + [f"left_{c}" for c in join.left_columns]
    payload += [f"right_{c}" for c in join.right_columns]

    def shaped(columns: dict[str, pa.Array], n: int, kind: str) -> pa.RecordBatch:
        columns["_out"] = pa.array([kind] * n, pa.string())
        arrays = []
        for f in arrow_schema:
            a = columns.get(f.name)
            if isinstance(a, pa.ChunkedArray):
                a = a.combine_chunks()
            arrays.append(pa.nulls(n, f.type) if a is None else a.cast(f.type))
        return pa.RecordBatch.from_arrays(arrays, schema=arrow_schema)

    def longs(values: list | np.ndarray) -> pa.Array:
        return pa.array(values, pa.int64())

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        got = [b for b in batches if b.num_rows]
        if got:
            yield from keyed_pass(pa.Table.from_batches(got).combine_chunks())

    def events(t: pa.Table, new: np.ndarray) -> np.ndarray:
        """Event times: as stored for buffered rows, clipped (SEMANTICS.md §5) for the step's rows."""
        event = t.column("event_us").to_numpy(zero_copy_only=False).astype(np.int64)
        if clip and len(new):
            sel = pa.array(new)
            raw = t.column("event_us").take(sel)
            arrival = pc.fill_null(t.column("_arrival_us").take(sel), raw).to_numpy()  # no arrival: no clipping
            event[new], _ = clip_future(raw.to_numpy(), arrival, skew_of(t, max_future_skew_us, sel))
        return event

    def keyed_pass(t: pa.Table) -> Iterator[pa.RecordBatch]:
        role = t.column("_role").to_numpy(zero_copy_only=False)
        seq = arrival_rank(t)
        new = np.flatnonzero(role == 1)
        event = events(t, new)
        left = (t.column("side").to_numpy(zero_copy_only=False) == Side.LEFT.value)
        free = _free_bounds(bounds, temporal, t, on, left, event, seq)
        load, still = _to_load(t, on, role, new, free, watermark_us, whole_keys=temporal)
        seen = np.concatenate([load, new])
        key_values = [t.column(f"k_{c}").take(pa.array(seen, pa.int64())).to_pylist() for c in on]
        keys = dict(zip(seen.tolist(), zip(*key_values, strict=True), strict=True))
        state = JoinState()
        before = {Side.LEFT: SideCounts(), Side.RIGHT: SideCounts()}
        matched = t.column("matched").to_numpy(zero_copy_only=False)
        for i in load[np.argsort(seq[load], kind="stable")].tolist():  # each key's rows in arrival order
            side = Side.LEFT if left[i] else Side.RIGHT
            row = JoinRow(side, keys[i], int(event[i]), int(seq[i]), (i,))
            state.buffer(side).setdefault(row.key, []).append(_Buffered(row, bool(matched[i])))
            if not matched[i]:
                before[side].pending += 1
        state.counts = {s: SideCounts(**c.as_dict()) for s, c in before.items()}
        ij = new_join(join.kind, bounds, jtype, state)
        order = new[np.argsort(seq[new], kind="stable")]
        rows = [JoinRow(Side.LEFT if left[i] else Side.RIGHT, keys[i], int(event[i]), int(seq[i]), (i,))
                for i in order.tolist()]
        w = pc.fill_null(t.column("_w"), 0).to_numpy(zero_copy_only=False).astype(np.int64)  # null: buffered rows
        batch = run_batch(ij, rows, w[order], watermark_us)
        if batch.emitted:
            yield joined(t, batch.emitted, seq)
        if batch.too_late:
            at = pa.array([x.row.values[0] for x in batch.too_late], pa.int64())
            cols = {"_rid": t.column("_rid").take(at), "_w": longs([x.watermark_us for x in batch.too_late])}
            yield shaped(cols, len(batch.too_late), "T")
        kept = list(ij.state.rows())
        pos = np.concatenate([np.array([r.values[0] for r, _ in kept], dtype=np.int64), still])
        flags = np.concatenate([np.array([m for _, m in kept], dtype=bool),
                                matched[still].astype(bool) if len(still) else np.zeros(0, dtype=bool)])
        stored = np.concatenate([np.array([r.event_us for r, _ in kept], dtype=np.int64), event[still]])
        yield from buffered_rows(t, pos, stored, flags, seq[pos])
        counts = {f"_c_{s.value}_{f}": longs([v - getattr(before[s], f)])
                  for s, c in ij.counts().items() for f, v in c.as_dict().items()}
        counts[NEW_ROWS] = longs([len(new)])
        counts[EMITTED] = longs([len(batch.emitted)])
        yield shaped(counts, 1, "C")

    def joined(t: pa.Table, emitted: list, rank: np.ndarray) -> pa.RecordBatch:
        lpos = pa.array([e.left.values[0] for e in emitted], pa.int64())
        rpos = pa.array([None if e.right is None else e.right.values[0] for e in emitted], pa.int64())
        cols: dict[str, pa.Array] = {}
        for c in join.output_columns():
            if c in join.on:  # a pair's keys are equal; an unmatched left row has only its own
                cols[f"_j_{c}"] = t.column(f"k_{c}").take(lpos)
            elif c in join.left_columns:
                cols[f"_j_{c}"] = t.column(f"left_{c}").take(lpos)
            else:
                cols[f"_j_{c}"] = t.column(f"right_{c}").take(rpos)
        cols["_j_left_us"] = longs([e.left.event_us for e in emitted])
        cols["_j_right_us"] = longs([None if e.right is None else e.right.event_us for e in emitted])
        cols["_j_w_us"] = longs([e.watermark_us for e in emitted])
        # The core's ``seq`` here is a row's rank in the task; (later, earlier) by rank name two rows, whose
        # clock ``seq`` is what the windows read (global with the driver's clock).
        _, seq, _ = order_parts(t)
        at = np.empty(len(rank), dtype=np.int64)
        at[rank] = np.arange(len(rank), dtype=np.int64)
        pairs = np.array([joined_arrival(e) for e in emitted], dtype=np.int64).reshape(-1, 2)
        cols["_j_later_seq"], cols["_j_earlier_seq"] = longs(seq[at[pairs[:, 0]]]), longs(seq[at[pairs[:, 1]]])
        return shaped(cols, len(emitted), "J")

    def buffered_rows(t: pa.Table, pos: np.ndarray, event: np.ndarray, flags: np.ndarray, rank: np.ndarray,
                      ) -> Iterator[pa.RecordBatch]:
        """The new state (``S``: rows at ``pos`` of ``t``) and one summary per bucket still holding rows (``B``)."""
        if not len(pos):
            return
        at = pa.array(pos, pa.int64())
        cols = {c: t.column(c).take(at) for c in [*payload, "side", "_bucket", *ORDER] if c in t.column_names}
        is_left = t.column("side").take(at).to_numpy(zero_copy_only=False) == Side.LEFT.value
        cols.update(event_us=longs(event), matched=pa.array(flags))
        yield shaped(cols, len(pos), "S")
        free = _free_bounds(bounds, temporal, t.take(at), on, is_left, event, rank)
        # The held output watermark's part: a temporal join's kept versions emit nothing (its rows carry
        # their left row's time), so only its waiting left rows hold it.
        held = np.where(is_left, event, POS_INF) if temporal else event
        summary = pa.table({
            "_bucket": cols["_bucket"], "free": free, "event": held,
            "ol": is_left.astype(np.int64), "or": (~is_left).astype(np.int64),
            "pl": (is_left & ~flags).astype(np.int64), "pr": (~is_left & ~flags).astype(np.int64),
        }).group_by("_bucket", use_threads=False).aggregate([
            ("free", "min"), ("free", "max"), ("event", "min"), ("ol", "sum"), ("or", "sum"), ("pl", "sum"),
            ("pr", "sum"),
        ])
        names = ["free_min", "free_max", "event_min", "ol_sum", "or_sum", "pl_sum", "pr_sum"]
        meta = {m: summary.column(n).combine_chunks() for m, n in zip(META, names, strict=True)}
        meta["_bucket"] = summary.column("_bucket").combine_chunks()
        yield shaped(meta, summary.num_rows, "B")

    return run


def order_parts(t: pa.Table) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each row's arrival key (:data:`ORDER`) as (step, ``seq``, minor); state of the old layout: step -1, minor 0."""
    def part(name: str, missing: int) -> np.ndarray:
        if name not in t.column_names:
            return np.full(t.num_rows, missing, dtype=np.int64)
        return pc.fill_null(t.column(name), missing).to_numpy(zero_copy_only=False).astype(np.int64)

    return part("seq_step", -1), part("seq", 0), part("seq_minor", 0)


def arrival_rank(t: pa.Table) -> np.ndarray:
    """Each row's rank in ``t`` by its arrival key (:data:`ORDER`: step, ``seq``, minor), 0-based, unique."""
    step, seq, minor = order_parts(t)
    rank = np.empty(len(seq), dtype=np.int64)
    rank[np.lexsort((minor, seq, step))] = np.arange(len(seq), dtype=np.int64)
    return rank


def _to_load(
    t: pa.Table, on: list[str], role: np.ndarray, new: np.ndarray, free: np.ndarray, watermark_us: int,
    whole_keys: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """Buffered rows the core must see (a key with new rows, or freed by ``W``), and those kept as they are.

    A buffered row of a key without new rows changes only when ``W`` frees it: the others pass through
    as Arrow, never as Python values. ``whole_keys`` (the temporal join, which matches a left row when
    ``W`` frees it): every row of a key with a freed row too.
    """
    buffered = np.flatnonzero(role == 0)
    hot = watermark_us > free[buffered]
    if (len(new) or (whole_keys and hot.any())) and not hot.all():
        ids = _key_ids(t, on)
        touched = np.zeros(int(ids.max()) + 1, dtype=bool)
        touched[ids[new]] = True
        if whole_keys:
            touched[ids[buffered[hot]]] = True
        hot |= touched[ids[buffered]]
    return buffered[hot], buffered[~hot]


def _free_bounds(
    bounds: JoinBounds, temporal: bool, t: pa.Table, on: list[str], left: np.ndarray, event: np.ndarray,
    seq: np.ndarray,
) -> np.ndarray:
    """Each buffered row's freeing bound (``W > bound`` frees it): its own time plus the join's bound, and for
    a temporal join's older versions the time of the version that supersedes them."""
    free = np.where(left, event + bounds.upper_us, event - bounds.lower_us)
    return _superseded_at(t, on, left, event, seq, free) if temporal else free


def _superseded_at(
    t: pa.Table, on: list[str], left: np.ndarray, event: np.ndarray, seq: np.ndarray, free: np.ndarray,
) -> np.ndarray:
    """A temporal join's version is freed once a newer one of its key is at or before ``W``.

    Per key, versions in (event time, arrival) order: each but the newest gets the bound ``next - 1``
    (``W > bound`` frees, as for every buffered row), so the driver reads its bucket and the pass loads
    its key in the step that supersedes it, as the core frees it then.
    """
    right = np.flatnonzero(~left)
    if len(right) < 2:
        return free
    ids = _key_ids(t.take(pa.array(right, pa.int64())), on)
    order = np.lexsort((np.asarray(seq)[right], event[right], ids))
    same_key = ids[order][1:] == ids[order][:-1]
    out = free.copy()
    older = right[order][:-1][same_key]
    out[older] = event[right[order][1:][same_key]] - 1
    return out


def _key_ids(t: pa.Table, on: list[str]) -> np.ndarray:
    """Dense ids of the distinct key tuples (nulls a value; ``-0.0`` as ``0.0``, as the core's ``==``)."""
    codes = []
    for c in on:
        col = t.column(f"k_{c}").combine_chunks()
        if pa.types.is_floating(col.type):
            col = pc.if_else(pc.equal(col, 0), pa.scalar(0, col.type), col)
        enc = pc.dictionary_encode(col, null_encoding="encode")
        codes.append(enc.indices.to_numpy(zero_copy_only=False).astype(np.int64))
    if len(codes) == 1:
        return codes[0]
    return np.unique(np.stack(codes, axis=1), axis=0, return_inverse=True)[1].reshape(-1).astype(np.int64)

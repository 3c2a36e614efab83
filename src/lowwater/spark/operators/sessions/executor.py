"""The executor side of session windows: one keyed pass running the core state machine.

The valid rows of a step (key, values, event µs, row id) are unioned with the
live session state, hash-partitioned by key, and each task runs
:class:`~lowwater.core.sessions.SessionMachine` over its partition
(``mapInArrow``: one Python call per task, not per key): state rows are
loaded, the rows (which carry ``W(r)`` and their arrival order as columns,
``spark/clocked.py``) are sorted into arrival order and fed one by one, then
the machine advances to the step's watermark. The task yields one frame:
emissions (``E``), the new state (``S``), too-late rows (``T``: row id,
``W(r)``, proto-window) and one counts row (``C``: verdicts, live sessions,
finals, revisions). The driver side is ``operator.py``; this module
is what pickles to the executors, so it imports no driver code.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from decimal import Decimal, localcontext

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import types as T
from pyspark.sql.pandas.types import to_arrow_schema

from lowwater.core.partials import COLLECTED, empty, input_value, stored
from lowwater.core.sessions import FINAL, REVISION, Emitted, Session, SessionMachine
from lowwater.core.triggers import EarlyTrigger
from lowwater.core.watermarks import clip_future
from lowwater.spark.aggtypes import python_values, summed
from lowwater.spark.operators.sessions.values import Slot, slots, special_inputs
from lowwater.spark.operators.windowed.executor import skew_of
from lowwater.spark.operators.windowed.fold import StateLayout
from lowwater.time import POS_INF

BUCKET = 0  # all live sessions are one bucket of the versioned store
COUNTS = ("_c_on", "_c_late", "_c_too", "_c_live", "_c_final", "_c_rev", "_c_emit")


def _agg_cols(layout: StateLayout, prefix: str = "") -> list[tuple[str, T.DataType]]:
    """The partial columns (``core/partials.py``, typed as the layout's), optionally prefixed (``_pn``, ``_ps0``)."""
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


def out_schema(layout: StateLayout) -> T.StructType:
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


def _build_inputs(vals: list[list], special: dict[int, str], at: tuple[np.ndarray, ...]) -> None:
    """Replace the values of ``special`` inputs by the inputs themselves (``partials.input_value``: a by-time
    tuple, a one-value collection or sketch), ``at`` each row's (event µs, step, ``_seq``, ``_seq_minor``)."""
    where = list(zip(*(a.tolist() for a in at), strict=True))
    for j, of in special.items():
        vals[j] = [input_value(v, of, a) for v, a in zip(vals[j], where, strict=True)]


def _agg_arrays(aggs: list, names: list[str], slot: list[Slot], schema: pa.Schema) -> dict[str, pa.Array]:
    """Partials (one per output row) as the Arrow columns ``names``: numbers as they are, the other values as their
    :class:`~lowwater.spark.operators.sessions.values.Slot` builds the column's type."""
    if not aggs:
        return {}
    cols = list(zip(*[stored(a) for a in aggs], strict=True))
    return {c: pa.array(list(v)) if s.plain else pa.array([s.to_arrow(x) for x in v], schema.field(c).type)
            for c, v, s in zip(names, cols, slot, strict=True)}


def make_session_step(
    layout: StateLayout,
    gap_us: int,
    grace_us: int,
    accumulation: str,
    max_future_skew_us: int | str | None,
    has_arrival: bool,
    watermark_us: int,
    early: EarlyTrigger | None,
    now_us: int,
    out_schema: T.StructType,
    step: int = 0,
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function of a session step (a closure that pickles to the executors).

    ``step``: the step's number, the first part of a row's arrival order in a by-time input (``_seq`` is the
    order within the step), as on the windowed executors.
    """
    keys = list(layout.keys)
    nv = len(layout.values)
    agg_names = [c for c, _ in _agg_cols(layout)]
    pend_names = [c for c, _ in _agg_cols(layout, "p")]
    value_types = [layout.value_type(j) for j in range(nv)]
    slot = slots(layout)  # how each partial position crosses (numbers, by-time structs, collections, sketches)
    special = special_inputs(layout)  # built here from the row's value and arrival (``partials.input_value``)
    row_types = [layout.column_type(j) if j in special else value_types[j] for j in range(nv)]
    # Which inputs keep a sum: numbers, and collections and sketches (their sum field is their merge).
    adds = tuple(summed(t) or layout.input_of(j) in COLLECTED for j, t in enumerate(value_types))

    def typed(values: list) -> list:
        """JSON-read partial values as the machine keeps them (decimals exact, floats as floats, sketches...)."""
        return [s.load(v) for s, v in zip(slot, values, strict=True)]

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
        defaults = empty(nv)  # a null count is 0 (sums/mins/maxes are null without a non-null row)
        for g, text in zip(gid[idx].tolist(), packed, strict=True):
            d = json.loads(text, parse_float=Decimal)
            agg = [z if d.get(c) is None else k.load(d[c]) for c, z, k in zip(agg_names, defaults, slot, strict=True)]
            pend = [z if d.get(c) is None else k.load(d[c]) for c, z, k in zip(pend_names, defaults, slot, strict=True)]
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
        m = SessionMachine(gap_us, grace_us, nv, accumulation, adds)
        m.now_us = now_us
        load_state(t, np.flatnonzero(role == 0), gid, m)
        ridx = np.flatnonzero(role == 1)
        if len(ridx):
            sel = pa.array(ridx)
            rid = t.column("_rid").take(sel).to_numpy()
            w, seq, minor = (t.column(c).take(sel).to_numpy() for c in ("_w", "_seq", "_seq_minor"))
            arrival = t.column("_arrival_us").take(sel).to_numpy() if has_arrival else None
            skew = None if arrival is None else skew_of(t, max_future_skew_us, sel)
            event, _ = clip_future(t.column("_event_us").take(sel).to_numpy(), arrival, skew)
            order = np.lexsort((minor, seq))  # arrival order: (_seq, _seq_minor)
            take = pa.array(ridx[order])  # Python ints, Decimals or floats; NaN is null (spark/aggtypes.py)
            vals = [python_values(t.column(f"_v{j}").take(take), row_types[j]) for j in range(nv)]
            if special:  # (event µs, step, _seq, _seq_minor) of each row, as the windowed executors' by-time input
                _build_inputs(vals, special, (event[order], np.full(len(order), step), seq[order], minor[order]))
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

    def agg_arrays(aggs: list, names: list[str]) -> dict[str, pa.Array]:
        return _agg_arrays(aggs, names, slot, arrow_schema)

    def emit(t: pa.Table, m: SessionMachine, rep_of: np.ndarray) -> Iterator[pa.RecordBatch]:
        em = m.take_emissions()
        finals = revisions = 0
        if em:
            cols = key_cols(t, rep_of, [e.key for e in em])
            cols["window_start"] = pa.array([e.start_us for e in em], pa.int64())
            cols["window_end"] = pa.array([e.end_us for e in em], pa.int64())
            cols.update(agg_arrays([e.agg for e in em], agg_names))
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
            cols.update(agg_arrays([s.agg for _, s in live], agg_names))
            cols.update(agg_arrays([s.pending for _, s in live], pend_names))
            cols["_rev"] = pa.array([s.last_rev for _, s in live], pa.int64())
            cols["_retract"] = pa.array(
                [json.dumps([[o.start_us, o.end_us, o.revision, [k.to_json(x) for k, x in zip(slot, stored(o.agg),
                                                                                                  strict=True)]]
                             for o in s.outstanding], default=str)  # a Decimal as its exact text
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

"""Executor side of a step: verdicts per (row, window), folded into partials.

Each task receives its rows (Arrow record batches, ``mapInArrow``) with their
``W(r)`` and arrival order attached (``spark/clocked.py``: ``_w``, ``_seq``,
``_seq_minor``), assigns windows and classifies with the core functions, and
emits one frame:

* ``_kind = "P"``: on-time partial aggregates per (key, window) of this task;
* ``_kind = "L"``: one partial per late-update pair, with its ``_seq``/``_seq_minor``;
* ``_kind = "T"``: one row per too-late pair, carrying the whole input row
  (``_in_<column>``) for the late output;
* ``_kind = "A"``: the task's row-level accounting (SEMANTICS.md §6: a row
  counts once, by the worst verdict over its windows): ``_w`` the verdict,
  ``_seq`` how many rows.

Aggregating inside the task (Arrow's hash aggregation, no pandas) keeps what
crosses back to the JVM proportional to (keys x windows), not to rows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import types as T
from pyspark.sql.pandas.types import to_arrow_schema

from lowwater.config import PipelineConfig
from lowwater.core.lateness import Lateness, classify, row_verdicts
from lowwater.core.partials import (
    BY_TIME,
    HLL,
    KLL,
    LIST,
    MAX,
    MIN,
    NONNULL,
    ROWS,
    SET,
    SUM,
    VALUE_FIELDS,
    hll_bytes,
    kll_bytes,
)
from lowwater.core.watermarks import clip_future
from lowwater.core.windows import WindowAssigner
from lowwater.spark.aggtypes import SUM_OVERFLOW, arrow_input, summed, value_kind
from lowwater.spark.operators.windowed.fold import StateLayout

PAYLOAD = "_in_"
# The clipping bound of a union of sources: each row's own source's, in its ``_skew_us`` column.
PER_ROW = "_skew_us"




def check_sum(column: str, exact: pa.ChunkedArray, approx: pa.ChunkedArray, dt: T.DataType) -> None:
    """Refuse a window's sum beyond its result type: never a silent wrong total.

    Arrow's hash sums neither widen nor check: int64 wraps around past 2^63
    (3 x 9.2e18 gave 9.2e18), decimal128 past 2^127 (3 x 9.9e37 gave
    -4.0e37) and may hold more digits than Spark's result type
    (``decimal(min(38, p + 10), s)``). ``approx`` is the same sum in doubles:
    a wrapped sum is far from it, and it shows where the true sum is.
    """
    if isinstance(dt, T.DecimalType):
        precision = min(38, dt.precision + 10)
        bound, kind = 10.0 ** (precision - dt.scale), f"its decimal sum's range (DECIMAL({precision},{dt.scale}))"
        advice = "a smaller scale or a double"
    else:
        bound, kind = 2.0**63, "a bigint's range"
        advice = "a decimal type (source.schema, e.g. DECIMAL(38,0)) or a double"
    want = approx.to_numpy(zero_copy_only=False)
    got = np.abs(pc.cast(exact, pa.float64(), safe=False).to_numpy(zero_copy_only=False))
    over = ((np.abs(want) >= bound * (1 - 1e-12)) | (got >= bound)) & ~np.isnan(want)
    if np.any(over):
        at = float(want[np.flatnonzero(over)[0]])
        msg = f"{SUM_OVERFLOW}: sum({column}) of one window is about {at:.4g}, beyond {kind}: give {column} {advice}"
        raise OverflowError(msg)


def clipping(cfg: PipelineConfig) -> tuple[bool, int | str | None]:
    """(whether the executors clip event times, the bound: µs, or :data:`PER_ROW`) (SEMANTICS.md §5)."""
    if cfg.named_sources:
        return any(s.arrival_time and s.watermark.max_future_skew_us is not None for s in cfg.sources), PER_ROW
    skew = cfg.watermark.max_future_skew_us
    return bool(cfg.source.arrival_time) and skew is not None, skew


def skew_of(batch: pa.RecordBatch | pa.Table, skew: int | str | None, rows: pa.Array | None = None):  # noqa: ANN201
    """The clipping bound for a batch's rows: the configured one, or each row's (null: none)."""
    if skew != PER_ROW:
        return skew
    col = batch.column(PER_ROW)
    if rows is not None:
        col = col.take(rows)
    return pc.fill_null(col, np.iinfo(np.int64).max).to_numpy()


def contrib_schema(layout: StateLayout, payload: list[T.StructField] | None) -> T.StructType:
    """Schema of the frames :func:`make_contribute` yields."""
    state = layout.schema()
    own = {*layout.window_cols, *layout.partial_cols()}
    fields = [f for f in state.fields if f.name in own]
    fields += [
        T.StructField("_kind", T.StringType()),
        T.StructField("_seq", T.LongType()),
        T.StructField("_seq_minor", T.LongType()),
        T.StructField("_w", T.LongType()),
    ]
    fields += [T.StructField(PAYLOAD + f.name, f.dataType, True) for f in payload or []]
    return T.StructType(fields)


def _time_ranks(allon: pa.Table, timed: list[int]) -> tuple[pa.Table, np.ndarray | None]:
    """Each pair's place in (event, arrival) order as ``_rank`` (Arrow has no min/max of a struct): the by-time
    inputs' min/max per group are the pairs of the group's min/max rank. Returns the table and the ordering."""
    if not timed:
        return allon, None
    by = allon.column(f"_v{timed[0]}").combine_chunks()  # every by-time input of a row has its (e, s, m)
    order = pc.sort_indices(pa.table({c: by.field(c) for c in "ebsm"}),
                            sort_keys=[(c, "ascending") for c in "ebsm"]).to_numpy()
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order), dtype=np.int64)
    return allon.append_column("_rank", pa.array(rank)), order


def _collected(g: pa.Table, allon: pa.Table, j: int, of: str) -> pa.Array:
    """A collection input's values per group, as a list (Spark's merge drops nulls, dedupes and sorts them)."""
    if of == SET:
        return g.column(f"_v{j}_distinct").combine_chunks()
    if of == HLL:  # each group's distinct values, sketched (Spark's hll_union_agg merges the bytes)
        return pa.array([hll_bytes(vs) for vs in g.column(f"_v{j}_distinct").to_pylist()], pa.binary())
    if of == KLL:  # each group's values, sketched (Spark's kll_merge_agg_double merges the bytes)
        return pa.array([kll_bytes(vs) for vs in g.column(f"_v{j}_list").to_pylist()], pa.binary())
    idx = g.column("_idx_list").combine_chunks()  # Arrow has no list of a struct: the pairs' places, then take
    return pa.ListArray.from_arrays(idx.offsets, allon.column(f"_v{j}").combine_chunks().take(idx.flatten()))


def _fold_on_time(
    allon: pa.Table, group_cols: list[str], values: list[str], value_types: list, adds: list[bool],
    checked: list[int], timed: list[int], kept: dict[int, str],
) -> tuple[dict[str, pa.Array], int]:
    """A task's on-time pairs folded into one partial per (key, window): the ``_kind = "P"`` rows."""
    # Each field folds the values as ``core/partials.py`` says (its ``fold`` is Arrow's name).
    allon, order = _time_ranks(allon, timed)
    aggs: list[tuple] = [([], ROWS.fold)]
    if timed:
        aggs += [("_rank", "min"), ("_rank", "max")]
    if LIST in kept.values():
        allon = allon.append_column("_idx", pa.array(np.arange(allon.num_rows, dtype=np.int64)))
        aggs.append(("_idx", "list"))
    for j, of in kept.items():  # a collection: its values (``_collected``) and how many are not null
        allon = allon.append_column(f"_c{j}", pc.cast(pc.is_valid(allon.column(f"_v{j}")), pa.int64()))
        aggs.append((f"_c{j}", "sum"))
        if of in (SET, HLL):
            aggs.append((f"_v{j}", "distinct"))
        elif of == KLL:
            aggs.append((f"_v{j}", "list"))
    for j in range(len(values)):
        if j not in timed and j not in kept:
            aggs += [(f"_v{j}", f.fold) for f in VALUE_FIELDS if adds[j] or f is not SUM]
    for j in checked:  # the same sum in doubles: Arrow's int64 and decimal sums wrap around unchecked
        allon = allon.append_column(f"_d{j}", pc.cast(allon.column(f"_v{j}"), pa.float64(), safe=False))
        aggs.append((f"_d{j}", "sum"))
    g = allon.group_by(group_cols, use_threads=False).aggregate(aggs)
    for j in checked:
        check_sum(values[j], g.column(f"_v{j}_{SUM.fold}"), g.column(f"_d{j}_sum"), value_types[j])
    out: dict[str, pa.Array] = {c: g.column(c).combine_chunks() for c in group_cols}
    out[ROWS.column()] = g.column(ROWS.fold).combine_chunks()
    for j in range(len(values)):
        if j in kept:
            out[SUM.column(j)] = _collected(g, allon, j, kept[j])
            out[NONNULL.column(j)] = g.column(f"_c{j}_sum").combine_chunks()
            continue
        if j in timed:  # a by-time input is never null: its non-null count is the rows
            v = allon.column(f"_v{j}").combine_chunks()
            out[NONNULL.column(j)] = out[ROWS.column()]
            for f, end in ((MIN, "min"), (MAX, "max")):
                out[f.column(j)] = v.take(pa.array(order[g.column(f"_rank_{end}").to_numpy()]))
            continue
        for f in VALUE_FIELDS:
            if adds[j] or f is not SUM:  # a non-number's sum is left null (``shaped``)
                out[f.column(j)] = g.column(f"_v{j}_{f.fold}").combine_chunks()
    out["_kind"] = pa.array(["P"] * g.num_rows, pa.string())
    out["_seq"] = pa.array(np.zeros(g.num_rows, dtype=np.int64))
    out["_seq_minor"] = pa.array(np.zeros(g.num_rows, dtype=np.int64))
    out["_w"] = pa.array(np.zeros(g.num_rows, dtype=np.int64))
    return out, g.num_rows


def make_contribute(
    layout: StateLayout,
    assigner: WindowAssigner,
    grace_us: int,
    max_future_skew_us: int | str | None,
    payload: list[str] | None,
    has_arrival: bool,
    out_schema: T.StructType,
    step: int = 0,
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """Build the ``mapInArrow`` function (a closure that pickles to the executors).

    ``step``: the step's number, the first part of a row's arrival order in a by-time input (``_seq`` is the
    order within the step).
    """
    keys = list(layout.keys)
    values = list(layout.values)
    group_cols = [*keys, "window_start", "window_end"]
    value_types = [layout.value_type(j) for j in range(len(values))]
    column_types = [layout.column_type(j) for j in range(len(values))]
    inputs = [layout.input_of(j) for j in range(len(values))]
    labels = [f"{of} of {v}" if of else v for v, of in zip(values, inputs, strict=True)]  # an overflow names it
    # Timestamps cross as UTC instants (the JVM reads the µs and ignores the zone's name).
    arrow_schema = to_arrow_schema(out_schema, timezone="UTC")

    def shaped(columns: dict[str, pa.Array], n: int) -> pa.RecordBatch:
        arrays = []
        for field in arrow_schema:
            a = columns.get(field.name)
            arrays.append(pa.nulls(n, field.type) if a is None else a.cast(field.type))
        return pa.RecordBatch.from_arrays(arrays, schema=arrow_schema)

    def one_row_partials(part: dict[str, pa.Array], n: int) -> dict[str, pa.Array]:
        """The partial of each single row (a late pair): a count field is 1 or 0, any other the value."""
        out = {ROWS.column(): pa.array(np.ones(n, dtype=np.int64))}
        for j in range(len(values)):
            v = part[f"_v{j}"]
            valid = pc.cast(pc.is_valid(v), pa.int64())
            out.update({f.column(j): valid if f.counts else v for f in VALUE_FIELDS})
            if j in kept and kept[j] in (HLL, KLL):  # the sketch of the one value (null: none)
                sketch = hll_bytes if kept[j] == HLL else kll_bytes
                out[SUM.column(j)] = pa.array([None if x is None else sketch((x,)) for x in v.to_pylist()],
                                              pa.binary())
                out[MIN.column(j)] = out[MAX.column(j)] = pa.nulls(n, pa.int64())
            elif j in kept:  # a collection of the one value (null: dropped by the merge); no min/max
                out[SUM.column(j)] = pa.ListArray.from_arrays(pa.array(np.arange(n + 1, dtype=np.int32)), v)
                out[MIN.column(j)] = out[MAX.column(j)] = pa.nulls(n, pa.int64())
            elif not adds[j]:  # a string or date has no sum (spark/aggtypes.py)
                out[SUM.column(j)] = pa.nulls(n, pa.int64())
        return out

    checked = [j for j, t in enumerate(value_types) if value_kind(t) in ("int", "decimal")]  # Arrow's sums wrap
    timed = [j for j, of in enumerate(inputs) if of == BY_TIME]
    kept = {j: of for j, of in enumerate(inputs) if of in (SET, LIST, HLL, KLL)}
    adds = [summed(t) for t in value_types]

    def contribute(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        on_tables: list[pa.Table] = []
        other: list[pa.RecordBatch] = []
        row_counts = np.zeros(3, dtype=np.int64)
        for b in batches:
            if b.num_rows == 0:
                continue
            w, seq, minor = (b.column(c).to_numpy() for c in ("_w", "_seq", "_seq_minor"))
            arrival = b.column("_arrival_us").to_numpy() if has_arrival else None
            skew = None if arrival is None else skew_of(b, max_future_skew_us)
            event, _ = clip_future(b.column("_event_us").to_numpy(), arrival, skew)
            pairs = assigner.assign(event)
            verdict = classify(pairs.end, w[pairs.row], grace_us)
            row_counts += np.bincount(row_verdicts(pairs.row, verdict, b.num_rows).astype(np.int64), minlength=3)
            take = pa.array(pairs.row)
            cols: dict[str, pa.Array] = {k: b.column(k).take(take) for k in keys}
            cols["window_start"] = pa.array(pairs.start)
            cols["window_end"] = pa.array(pairs.end)
            at = (event, np.full(b.num_rows, step, np.int64), seq, minor)  # a by-time input's (event, arrival)
            for j, v in enumerate(values):  # int64, decimal or float64 (NaN -> null): spark/aggtypes.py
                cols[f"_v{j}"] = arrow_input(b.column(v), column_types[j], inputs[j], at).take(take)
            on = verdict == Lateness.ON_TIME
            if on.any():
                mask = pa.array(on)
                on_tables.append(pa.table({k: a.filter(mask) for k, a in cols.items()}))
            for kind, code in (("L", Lateness.LATE_UPDATE), ("T", Lateness.TOO_LATE)):
                sel = np.flatnonzero(verdict == code)
                if not len(sel):
                    continue
                idx = pa.array(sel)
                part = {k: a.take(idx) for k, a in cols.items()}
                part.update(one_row_partials(part, len(sel)))
                part["_kind"] = pa.array([kind] * len(sel), pa.string())
                part["_seq"] = pa.array(seq[pairs.row[sel]])
                part["_seq_minor"] = pa.array(minor[pairs.row[sel]])
                part["_w"] = pa.array(w[pairs.row[sel]])
                if kind == "T" and payload:
                    rows = pa.array(pairs.row[sel])
                    for c in payload:
                        part[PAYLOAD + c] = b.column(c).take(rows)
                other.append(shaped(part, len(sel)))
        if on_tables:
            yield shaped(*_fold_on_time(pa.concat_tables(on_tables), group_cols, labels, value_types, adds, checked,
                                        timed, kept))
        yield from other
        if row_counts.any():
            yield shaped({"_kind": pa.array(["A"] * 3, pa.string()), "_w": pa.array(np.arange(3, dtype=np.int64)),
                          "_seq": pa.array(row_counts)}, 3)

    return contribute

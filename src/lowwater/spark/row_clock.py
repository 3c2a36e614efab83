"""The row clock on the executors: ``W(r)`` as a column, without collecting the rows (ADR 0024).

Three Spark-side steps around the pure ``core/row_clock``:

1. pass 1, one group per source partition (``applyInArrow`` grouped by
   ``_psort``): the rows put in arrival order within the partition, the
   partition's unchanged generator run from its snapshot, only its summary
   (critical rows, snapshot) returned -- O(change points), not O(rows);
2. the driver ranks the partitions (ties at one arrival go in partition
   order, as in ``StepPlanner.plan``) and folds the summaries into the step
   function of ``W`` and the next tracker state;
3. pass 2, again per partition: each row's key ``(arrival, rank, position)``
   looked up in the step function (shipped with the task: kilobytes).

Not wired into the engine yet; scope: one source with an arrival clock (the
arrival frontier of several sources and Kafka lanes stays in the planner).
"""

from __future__ import annotations

import pickle
from dataclasses import replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lowwater.core.row_clock import FoldCounts, PartitionSummary, WatermarkStepFunction, fold, gap_for
from lowwater.core.row_clock import summarise_partition as summarise
from lowwater.core.row_clock.keys import pack, unpack
from lowwater.core.tracker_state import DEFAULT_SOURCE, TrackerState
from lowwater.core.watermarks import PartitionRows, WatermarkStrategy

_RANK_SHIFT = 40  # minor = partition rank << 40 | position in the partition's batch (2^40 rows a step)
W_COLUMN = "w_us"


def _in_order(table: pa.Table) -> pa.Table:
    """One partition's rows in arrival order: arrival, offset, then the source's own order (file, block, row id)."""
    keys = [c for c in ("_arrival_us", "_offset", "_file", "_block", "_rid") if c in table.column_names]
    return table.take(pc.sort_indices(table, sort_keys=[(c, "ascending") for c in keys]))


def _name(table: pa.Table) -> tuple[object, str]:
    """The partition's sort value and its name as the tracker keys it (``StepPlanner.plan``: ``str`` of ``_psort``)."""
    value = table.column("_psort")[0].as_py()
    return value, str(value)


def _summaries(
    valid: DataFrame, strategy: WatermarkStrategy, state: TrackerState | None, markers: bool,
) -> list[tuple[object, PartitionSummary]]:
    """Pass 1: one summary per partition, from its snapshot in ``state`` (collected: small)."""
    snapshots = {} if state is None else {p: state.snapshot_of(i) for i, p in enumerate(state.partitions)}
    gap = gap_for({DEFAULT_SOURCE: strategy})

    def one(table: pa.Table) -> pa.Table:
        t = _in_order(table)
        value, name = _name(t)
        if t.column("_arrival_us").null_count:
            msg = "the row clock needs an arrival clock (source.arrival_time)"
            raise ValueError(msg)
        arrival = t.column("_arrival_us").to_numpy()
        marker = t.column("_marker").to_numpy(zero_copy_only=False).astype(bool) if markers else None
        rows = PartitionRows(t.column("_event_us").to_numpy(), arrival, marker)
        s = summarise(strategy, name, snapshots.get(name), rows, arrival, np.arange(t.num_rows), gap_us=gap)
        return pa.table({"summary": pa.array([pickle.dumps((value, s))], pa.binary())})

    schema = T.StructType([T.StructField("summary", T.BinaryType())])
    got = valid.groupBy("_psort").applyInArrow(one, schema).collect()
    return [pickle.loads(r["summary"]) for r in got]  # noqa: S301 -- our own executors' output


def _ranked(summaries: list[tuple[object, PartitionSummary]]) -> tuple[list[PartitionSummary], dict[str, int]]:
    """Ties at one arrival go in partition order: the rank joins the key's minor."""
    ranked = sorted(summaries, key=lambda vs: vs[0])  # type: ignore[arg-type, return-value]
    ranks = {s.partition: r for r, (_, s) in enumerate(ranked)}
    out = []
    for _, s in ranked:
        major, minor = unpack(s.keys)
        out.append(replace(s, keys=pack(major, (ranks[s.partition] << _RANK_SHIFT) | minor)))
    return out, ranks


def _lookup(valid: DataFrame, step: WatermarkStepFunction, ranks: dict[str, int]) -> DataFrame:
    """Pass 2: every row's ``W(r)`` from its key, by the step function (shipped with the task)."""

    def one(table: pa.Table) -> pa.Table:
        t = _in_order(table)
        _, name = _name(t)
        minor = (ranks[name] << _RANK_SHIFT) | np.arange(t.num_rows, dtype=np.int64)
        w = step.lookup(t.column("_arrival_us").to_numpy(), minor)
        return t.append_column(W_COLUMN, pa.array(w, pa.int64()))

    schema = T.StructType([*valid.schema.fields, T.StructField(W_COLUMN, T.LongType(), False)])
    return valid.groupBy("_psort").applyInArrow(one, schema)


def attach(
    parsed: DataFrame, strategy: WatermarkStrategy, state: TrackerState | None, markers: bool = False,
) -> tuple[DataFrame, TrackerState, FoldCounts]:
    """The valid rows of a step with their ``W(r)`` (column ``w_us``), the tracker state after it, its counts.

    ``parsed``: one source's rows with the planner's columns (``StepPlanner.compact_columns``:
    which of ``_offset``, ``_file``, ``_block`` it holds decides the tie order, as in ``StepPlanner.plan``);
    ``state``: the tracker state before the step (not modified). Equals
    ``StepPlanner.plan``'s ``W(r)`` row for row.
    """
    valid = parsed.filter(F.col("_dead").isNull())
    summaries, ranks = _ranked(_summaries(valid, strategy, state, markers))
    step, after, counts = fold(summaries, strategy, state)
    return _lookup(valid, step, ranks), after, counts


"""The operators' one input: a step's judged rows, each given its ``W(r)`` and arrival order where it is.

An operator never asks how ``W(r)`` was computed. It gets a
:class:`ClockedRows`: a frame of rows and an *attach* function (an
``mapInArrow`` iterator transformer) that drops the rows it must not see (dead
letters, marker rows) and adds three columns to the others:

* ``_w``: ``W(r)``, the watermark just before the row (SEMANTICS.md §2);
* ``_seq``, ``_seq_minor``: the row's place in arrival order within the step
  (compare them as a pair; only their order is meaningful).

Two clocks make one (ADR 0032): the driver's (``spark/planner.py``: every
row's ``W`` computed on the driver, looked up here by row id in a broadcast)
and the executors' (``spark/row_clock.py``: per-partition summaries folded on
the driver, ``W`` looked up by the row's arrival key in a step function of a
few kilobytes). An operator with its own Python pass composes attach into it
(:meth:`ClockedRows.map`: one pass over the rows, not two); one that wants a
frame takes :meth:`ClockedRows.frame_with_clock`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import types as T

from lowwater.runtime.columns import select

Batches = Iterator[pa.RecordBatch]
Attach = Callable[[Batches], Batches]
CLOCK_COLUMNS = ("_w", "_seq", "_seq_minor")


def _compose(attach: Attach, fn: Callable[[Batches], Batches]) -> Callable[[Batches], Batches]:
    def both(batches: Batches) -> Batches:
        return fn(attach(batches))

    return both


@dataclass(frozen=True)
class ClockedRows:
    """A step's rows and how each gets ``_w``, ``_seq``, ``_seq_minor`` (see the module's docstring).

    ``needs`` are the columns ``attach`` reads; ``rows`` how many data rows it
    yields in all (the valid, judged, non-marker rows of the step).
    """

    frame: DataFrame
    attach: Attach
    needs: tuple[str, ...]
    rows: int

    def _columns(self, columns: Sequence[str]) -> list[str]:
        return list(dict.fromkeys([*columns, *self.needs]))

    def map(self, fn: Callable[[Batches], Batches], schema: T.StructType, columns: Sequence[str]) -> DataFrame:
        """``fn`` over the rows (their ``columns`` plus the clock's) in the same Python pass as attach."""
        return select(self.frame, self._columns(columns)).mapInArrow(_compose(self.attach, fn), schema)

    def frame_with_clock(self, columns: Sequence[str]) -> DataFrame:
        """The rows' ``columns`` (plus what attach reads) with the three clock columns."""
        framed = select(self.frame, self._columns(columns))
        fields = [*framed.schema.fields, *(T.StructField(c, T.LongType(), False) for c in CLOCK_COLUMNS)]
        return framed.mapInArrow(self.attach, T.StructType(fields))


def with_clock(batch: pa.RecordBatch, keep: np.ndarray | None, w: np.ndarray, seq: np.ndarray,
               minor: np.ndarray) -> pa.RecordBatch:
    """``batch``'s rows where ``keep`` (None: all) with the clock columns (already for those rows)."""
    if keep is not None:
        batch = batch.filter(pa.array(keep))
    arrays = [*batch.columns, pa.array(w, pa.int64()), pa.array(seq, pa.int64()), pa.array(minor, pa.int64())]
    return pa.RecordBatch.from_arrays(arrays, names=[*batch.schema.names, *CLOCK_COLUMNS])


def lookup_attach(lookup, markers: bool) -> Attach:  # noqa: ANN001 - a Spark Broadcast of (rids, W, seq)
    """The driver's clock: each row's ``W(r)`` and global sequence number looked up by row id.

    The rows are re-read from the micro-batch; every id must be one the driver
    judged (else the batch was not re-read identically, and the step fails).
    """

    def attach(batches: Batches) -> Batches:
        rids, ws, seqs = lookup.value
        for b in batches:
            keep = pc.is_null(b.column("_dead")).to_numpy(zero_copy_only=False)
            if markers:
                keep &= ~pc.fill_null(b.column("_marker"), False).to_numpy(zero_copy_only=False)
            rid = b.column("_rid").to_numpy()[keep]
            if not len(rid):
                continue
            i = np.minimum(np.searchsorted(rids, rid), max(len(rids) - 1, 0))
            if len(rids) == 0 or not np.array_equal(rids[i], rid):
                msg = "row ids differ from the driver's plan: the micro-batch was not re-read identically"
                raise RuntimeError(msg)
            yield with_clock(b, None if keep.all() else keep, ws[i], seqs[i], np.zeros(len(rid), dtype=np.int64))

    return attach


def lookup_needs(markers: bool) -> tuple[str, ...]:
    """The columns :func:`lookup_attach` reads."""
    return ("_rid", "_dead", *(("_marker",) if markers else ()))

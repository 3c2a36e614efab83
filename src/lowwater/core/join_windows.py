"""Windows after an interval join: the joined rows windowed, the join's held output watermark as their ``W``.

A window downstream of the join sees the join's **output watermark** (SEMANTICS.md
§2, "an operator that buffers rows holds its output watermark back";
:meth:`~lowwater.core.join.IntervalJoin.output_watermark`): ``min(W, event time of
every buffered row)``. A joined row is stamped with the later of its two rows'
event times (Flink's ``IntervalJoinOperator`` does the same); an unmatched left row
of a left outer join with its own. Its ``W(r)`` is the hold just before it was
emitted; windows fire when the hold reaches their end (SEMANTICS.md §4 with that
``W``), late updates and too-late rows follow the same rules as for any input.

Why no joined row is ever late: a pair is emitted when its second row is admitted,
whose event time is at least its ``W(r)``, hence at least the hold; its first row is
buffered, so its time is at least the hold too. An unmatched left row is buffered
until it is freed. So a joined row's time is never behind the hold at its emission,
and (the hold being monotone) the windows' results do not depend on how the input
is cut, nor on whether the hold is read per row or per step (the Spark operator,
``spark/operators/join_windows.py``, reads it per step). The verdicts are still
judged and counted: an input row too late for the *join* is where rows are lost.

A joined row's **arrival order** (:func:`joined_arrival`), which breaks ties of event time for
``first_by_time``/``last_by_time`` and orders ``collect_list``: the arrival of the later of its two
rows, then of the earlier one (an unmatched left row: its own, twice). A pair exists from its later
row's arrival on and each (later, earlier) names one pair, so the order is total and the same for any
cut: it never depends on the step or the position a joined row is emitted at (ADR 0039).

Pure Python, no Spark; :func:`run_joined_batch` is the reference a step follows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lowwater.core.join import IntervalJoin, Joined, JoinRow, TooLate
from lowwater.core.lateness import Lateness, classify
from lowwater.core.panes import Agg, Emission, WindowPanes
from lowwater.core.partials import COLUMN
from lowwater.core.triggers import AccumulationMode
from lowwater.core.windows import WindowAssigner
from lowwater.time import POS_INF


def joined_event_us(j: Joined) -> int:
    """A joined row's event time: the later of its rows' (an unmatched left row: its own)."""
    return j.left.event_us if j.right is None else max(j.left.event_us, j.right.event_us)


def joined_arrival(j: Joined) -> tuple[int, int]:
    """A joined row's place in arrival order: (its later row's arrival, its earlier row's); an unmatched left row
    (its own, its own). Total over the joined rows and the same for any cut (the module's docstring).

    >>> from lowwater.core.join import Side
    >>> joined_arrival(Joined(JoinRow(Side.LEFT, ("u",), 4, 7), JoinRow(Side.RIGHT, ("u",), 9, 3), 0))
    (7, 3)
    """
    if j.right is None:
        return (j.left.seq, j.left.seq)
    return (max(j.left.seq, j.right.seq), min(j.left.seq, j.right.seq))


@dataclass(frozen=True)
class WindowResult:
    """One emission of a (key, window) after the join: one :class:`Agg` per value input (``JoinWindows.columns``)."""

    key: tuple
    start_us: int
    end_us: int
    kind: str
    revision: int
    values: tuple[Agg, ...]

    @property
    def count(self) -> int:
        return self.values[0].n


@dataclass
class JoinWindows:
    """Tumbling or hopping windows over joined rows; fed each joined row with its ``W(r)`` (the hold).

    >>> from lowwater.core.windows import TumblingWindows
    >>> jw = JoinWindows(TumblingWindows(10), 0, ["amount"])
    >>> jw.on_row(("c1",), 12, {"amount": 5.0}, 3)
    []
    >>> jw.on_row(("c1",), 2, {"amount": 1.0}, 11), jw.too_late   # window [0, 10) ended at W(r) = 11
    ([], [(('c1',), 0, 10, 11)])
    >>> [(r.start_us, r.count, r.values[0].total) for r in jw.fire(20)]
    [(10, 1, 5.0)]
    """

    assigner: WindowAssigner
    grace_us: int
    # One pane per value input: a column (itself) or (column, what of it: ``core/aggregates.value_inputs``);
    # None: the row count only.
    columns: Sequence[str | tuple[str, str] | None]
    mode: AccumulationMode = AccumulationMode.ACCUMULATING
    verdicts: dict[Lateness, int] = field(default_factory=lambda: dict.fromkeys(Lateness, 0))
    too_late: list[tuple] = field(default_factory=list)
    panes: WindowPanes = field(init=False)

    def __post_init__(self) -> None:
        self.columns = list(self.columns) or [None]
        inputs = [c if c is None or isinstance(c, tuple) else (c, COLUMN) for c in self.columns]
        self.panes = WindowPanes(inputs, self.mode)  # a null value: counted in rows only

    def on_row(self, key: tuple, event_us: int, values: Mapping[str, Any], watermark_us: int,
               arrival: tuple[int, ...] = ()) -> list[WindowResult]:
        """Judge one joined row in each of its windows (counted in ``verdicts``); the revisions it causes.

        ``arrival``: its place in arrival order (:func:`joined_arrival`), for by-time and list inputs.
        A too-late window of the row is listed in ``too_late`` (key, start, end, ``W(r)``).
        """
        at = (event_us, *arrival)
        got = self.assigner.assign(np.array([event_us], dtype=np.int64))
        verdict = classify(got.end, np.full(len(got.end), watermark_us, dtype=np.int64), self.grace_us)
        out: list[WindowResult] = []
        for start, end, v in zip(got.start.tolist(), got.end.tolist(), verdict.tolist(), strict=True):
            self.verdicts[Lateness(v)] += 1
            win = (key, start, end)
            if v == Lateness.ON_TIME:
                self.panes.admit(win, values, at)
            elif v == Lateness.LATE_UPDATE:
                out += self._results(self.panes.late(win, values, at))
            else:
                self.too_late.append((key, start, end, watermark_us))
        return out

    def behind(self) -> int:
        """Joined rows' windows judged late or too late (zero while ``W`` is the join's hold)."""
        return self.verdicts[Lateness.LATE_UPDATE] + self.verdicts[Lateness.TOO_LATE]

    def fire(self, watermark_us: int) -> list[WindowResult]:
        """Every open window whose end ``W`` has reached fires (``POS_INF``: the drain)."""
        out = self._results(self.panes.fire(watermark_us))
        self.panes.free(watermark_us, self.grace_us)  # no late update can reach them any more
        return out

    @staticmethod
    def _results(emitted: list[tuple[tuple, list[list[Emission]]]]) -> list[WindowResult]:
        return [WindowResult(key, start, end, str(e.kind), e.revision, tuple(values))
                for (key, start, end), per_input in emitted for e, values in WindowPanes.emitted(per_input)]


@dataclass
class JoinedBatch:
    """One batch through the join and the windows after it."""

    joined: list[Joined] = field(default_factory=list)
    too_late: list[TooLate] = field(default_factory=list)
    results: list[WindowResult] = field(default_factory=list)
    hold_us: int = 0  # the join's held output watermark after the batch (the windows' W)


ColumnsOf = Callable[[Joined], tuple[tuple, Mapping[str, Any]]]  # a joined row's window key and named columns


def run_joined_batch(join: IntervalJoin, windows: JoinWindows, columns_of: ColumnsOf, rows: Iterable[JoinRow],
                     watermarks_us: Iterable[int], watermark_end_us: int) -> JoinedBatch:
    """Feed a batch row by row: each joined row enters the windows at the hold before it; then free and fire."""
    out = JoinedBatch()

    def window(emitted: list[Joined], hold: int) -> None:
        for j in emitted:
            key, values = columns_of(j)
            out.results += windows.on_row(key, joined_event_us(j), values, hold, joined_arrival(j))
            out.joined.append(j)

    for row, w in zip(rows, watermarks_us, strict=True):
        hold = join.output_watermark(int(w))  # the hold before the row: what its joined rows are judged at
        got = join.on_row(row, int(w))
        if isinstance(got, TooLate):
            out.too_late.append(got)
        else:
            window(got, hold)
    hold = join.output_watermark(watermark_end_us)  # before freeing: the freed left rows are still held
    window(join.advance(watermark_end_us), hold)
    out.hold_us = join.output_watermark(watermark_end_us)
    out.results += windows.fire(out.hold_us)
    if windows.behind():  # impossible by the proof above; a defect, never a silent loss
        msg = f"{windows.behind()} joined rows' windows behind the join's held output watermark: {windows.too_late}"
        raise AssertionError(msg)
    return out


def drain(join: IntervalJoin, windows: JoinWindows, columns_of: ColumnsOf) -> JoinedBatch:
    """Bounded input exhausted: the join frees everything, the hold becomes ``+inf``, every window fires."""
    return run_joined_batch(join, windows, columns_of, [], [], POS_INF)

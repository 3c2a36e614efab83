"""The interval join of two streams (SEMANTICS.md §9), as a state machine fed rows in arrival order.

A left row ``a`` and a right row ``b`` with equal keys form a pair when::

    lower <= b.event_time - a.event_time <= upper        (both bounds inclusive, µs)

The join's watermark ``W`` is the min over both inputs (SEMANTICS.md §2, the
one rule of ``core/combine.py``, computed by the tracker); :class:`IntervalJoin`
is handed each row with its ``W(r)`` and never computes a watermark itself.

* a row with ``event_time < W(r)`` is **too late for the join**: reported, never buffered;
* every other row is **admitted**: matched against the other side's buffer (a
  pair is emitted once, when its second row arrives; a null key matches
  nothing, as in SQL) and buffered;
* :meth:`IntervalJoin.advance` frees, once ``W`` passes their bound, left rows
  (``W > a.event_time + upper``) and right rows (``W > b.event_time - lower``);
  an unmatched left row of a left outer join is emitted then, once, with no partner.

Why nothing is lost: an admitted ``b`` has ``b.t >= W(b)``, so any buffered
``a`` it matches has ``a.t + upper >= b.t >= W(b)`` and was not freed yet
(symmetrically for a late-arriving ``a``). Hence the set of pairs is every
pair of admitted rows within the bounds, whatever the cut into batches and
whenever :meth:`advance` is called (only *when* an unmatched row is emitted moves).

The **output watermark** (what a window downstream of the join would see,
SEMANTICS.md §2 "an operator that buffers rows holds its output watermark
back"): ``min(W, event time of every buffered row)``; any row emitted later
carries the event time of a buffered row or of a row not yet arrived (at least ``W``).

Per side, every row ends in exactly one of matched (at least once) /
unmatched (freed with no partner) / too late / dead letter, plus *pending*
(buffered, not matched yet) until it is freed: :class:`SideCounts`.
Pure Python, no Spark; the Spark operator (``spark/operators/join/``) runs it.
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

from lowwater.time import NEG_INF, POS_INF

TOO_LATE_FOR_JOIN = "too_late_for_join"


class Side(StrEnum):
    LEFT = "left"
    RIGHT = "right"


class JoinType(StrEnum):
    INNER = "inner"
    LEFT_OUTER = "left_outer"


@dataclass(frozen=True)
class JoinBounds:
    """``lower <= right.event_time - left.event_time <= upper`` (µs, both inclusive; ``lower`` may be negative).

    >>> JoinBounds(0, 30).matches(10, 40), JoinBounds(0, 30).matches(10, 41)
    (True, False)
    """

    lower_us: int
    upper_us: int

    def __post_init__(self) -> None:
        if self.lower_us > self.upper_us:
            msg = f"lower ({self.lower_us} µs) is after upper ({self.upper_us} µs): no pair could ever match"
            raise ValueError(msg)

    def matches(self, left_us: int, right_us: int) -> bool:
        return self.lower_us <= right_us - left_us <= self.upper_us

    def free_after_us(self, side: Side, event_us: int) -> int:
        """A row of ``side`` is freed once ``W`` is strictly past this (no partner can be admitted after)."""
        return event_us + self.upper_us if side == Side.LEFT else event_us - self.lower_us


@dataclass(frozen=True)
class JoinRow:
    """One input row as the join sees it: side, key, event time, arrival sequence, chosen columns."""

    side: Side
    key: tuple[Hashable, ...]
    event_us: int
    seq: int  # global arrival sequence number (identity and order)
    values: tuple[Any, ...] = ()


@dataclass(frozen=True)
class Joined:
    """An emitted row: a pair, or (left outer) a left row with no partner (``right`` None).

    ``watermark_us`` is ``W`` at emission: ``W(r)`` of the row that completed
    the pair; for an unmatched left row, the ``W`` that freed it.
    """

    left: JoinRow
    right: JoinRow | None
    watermark_us: int


@dataclass(frozen=True)
class TooLate:
    """A row too late for the join (``event_time < W(r)``), for the side output."""

    row: JoinRow
    watermark_us: int
    reason: str = TOO_LATE_FOR_JOIN


@dataclass
class SideCounts:
    """One side's rows by final class (pending: buffered, not matched yet)."""

    rows: int = 0
    matched: int = 0
    unmatched: int = 0
    too_late: int = 0
    dead_letter: int = 0
    pending: int = 0

    @property
    def balanced(self) -> bool:
        """The accounting identity of SEMANTICS.md §9 (with the rows still pending)."""
        return self.rows == self.matched + self.unmatched + self.too_late + self.dead_letter + self.pending

    def check(self, side: str) -> None:
        if not self.balanced:
            msg = f"join accounting identity broken on the {side} side: {self}"
            raise AssertionError(msg)

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


@dataclass
class _Buffered:
    row: JoinRow
    matched: bool = False


@dataclass
class JoinState:
    """The buffered rows of both sides (by key) and the counts: all a join carries between batches."""

    left: dict[tuple, list[_Buffered]] = field(default_factory=dict)
    right: dict[tuple, list[_Buffered]] = field(default_factory=dict)
    counts: dict[Side, SideCounts] = field(default_factory=lambda: {Side.LEFT: SideCounts(), Side.RIGHT: SideCounts()})

    def buffer(self, side: Side) -> dict[tuple, list[_Buffered]]:
        return self.left if side == Side.LEFT else self.right

    def rows(self) -> Iterable[tuple[JoinRow, bool]]:
        """Every buffered row with its matched flag (left first, then right; by key and arrival)."""
        for buf in (self.left, self.right):
            for entries in buf.values():
                for e in entries:
                    yield e.row, e.matched

    @property
    def open_rows(self) -> int:
        return sum(len(v) for v in self.left.values()) + sum(len(v) for v in self.right.values())


class IntervalJoin:
    """The interval join's state machine; feed rows in arrival order with their ``W(r)``.

    >>> j = IntervalJoin(JoinBounds(0, 10), JoinType.INNER)
    >>> j.on_row(JoinRow(Side.LEFT, ("u",), 5, 0), NEG_INF)
    []
    >>> [(p.left.event_us, p.right.event_us) for p in j.on_row(JoinRow(Side.RIGHT, ("u",), 12, 1), 3)]
    [(5, 12)]
    >>> j.on_row(JoinRow(Side.RIGHT, ("u",), 2, 2), 3).reason   # 2 < W(r) = 3
    'too_late_for_join'
    """

    def __init__(self, bounds: JoinBounds, join_type: JoinType, state: JoinState | None = None) -> None:
        self.bounds = bounds
        self.join_type = join_type
        self.state = state or JoinState()
        self._expiry: dict[Side, list[tuple[int, int, tuple]]] = {Side.LEFT: [], Side.RIGHT: []}
        for side in Side:
            for key, entries in self.state.buffer(side).items():
                for e in entries:
                    self._expiry[side].append((bounds.free_after_us(side, e.row.event_us), e.row.seq, key))
            heapq.heapify(self._expiry[side])

    def on_row(self, row: JoinRow, watermark_us: int) -> list[Joined] | TooLate:
        """Judge one admitted-or-late row at ``W(r)``: its new pairs, or the too-late verdict."""
        counts = self.state.counts[row.side]
        counts.rows += 1
        if watermark_us > NEG_INF and row.event_us < watermark_us:
            counts.too_late += 1
            return TooLate(row, watermark_us)
        other = Side.RIGHT if row.side == Side.LEFT else Side.LEFT
        mine = _Buffered(row)
        out: list[Joined] = []
        # A null key matches nothing (as in SQL): the row is admitted, buffered and ends unmatched.
        partners = self.state.buffer(other).get(row.key, ()) if None not in row.key else ()
        for e in partners:
            left, right = (row, e.row) if row.side == Side.LEFT else (e.row, row)
            if self.bounds.matches(left.event_us, right.event_us):
                out.append(Joined(left, right, watermark_us))
                if not e.matched:
                    e.matched = True
                    self._count_match(other)
                if not mine.matched:
                    mine.matched = True
        if mine.matched:
            counts.matched += 1
        else:
            counts.pending += 1
        self.state.buffer(row.side).setdefault(row.key, []).append(mine)
        heapq.heappush(self._expiry[row.side], (self.bounds.free_after_us(row.side, row.event_us), row.seq, row.key))
        return out

    def _count_match(self, side: Side) -> None:
        c = self.state.counts[side]
        c.pending -= 1
        c.matched += 1

    def advance(self, watermark_us: int) -> list[Joined]:
        """Free every row no partner can join any more at ``W``; the unmatched left rows of a left outer join."""
        out: list[Joined] = []
        for side in Side:
            heap, buf, counts = self._expiry[side], self.state.buffer(side), self.state.counts[side]
            while heap and watermark_us > heap[0][0]:
                _, seq, key = heapq.heappop(heap)
                entries = buf[key]
                at = next(i for i, e in enumerate(entries) if e.row.seq == seq)
                e = entries.pop(at)
                if not entries:
                    del buf[key]
                if not e.matched:
                    counts.pending -= 1
                    counts.unmatched += 1
                    if side == Side.LEFT and self.join_type == JoinType.LEFT_OUTER:
                        out.append(Joined(e.row, None, watermark_us))
        return out

    def drain(self) -> list[Joined]:
        """Bounded input exhausted: ``W = +inf`` frees everything."""
        return self.advance(POS_INF)

    def output_watermark(self, watermark_us: int) -> int:
        """The held output watermark: ``min(W, event time of every buffered row)``."""
        low = min((row.event_us for row, _ in self.state.rows()), default=POS_INF)
        return min(watermark_us, low)

    def count_dead_letters(self, side: Side, n: int) -> None:
        c = self.state.counts[side]
        c.rows += n
        c.dead_letter += n

    def check(self) -> None:
        """Raise if a row of either side went missing from the accounting."""
        for side, c in self.state.counts.items():
            c.check(side.value)
        for side in Side:
            pending = sum(not e.matched for es in self.state.buffer(side).values() for e in es)
            if pending != self.state.counts[side].pending:
                counted = self.state.counts[side].pending
                msg = f"join: {pending} unmatched rows buffered on the {side} side, counted {counted}"
                raise AssertionError(msg)

    def counts(self) -> Mapping[Side, SideCounts]:
        return self.state.counts


@dataclass(frozen=True)
class JoinBatch:
    """What one batch of rows did: the rows emitted (pairs, unmatched left rows) and the too-late rows."""

    emitted: list[Joined]
    too_late: list[TooLate]


def run_batch(join: IntervalJoin, rows: Iterable[JoinRow], watermarks_us: Iterable[int],
              watermark_end_us: int) -> JoinBatch:
    """Feed a batch (rows in arrival order with their ``W(r)``), then free what ``W`` after it proves."""
    emitted: list[Joined] = []
    late: list[TooLate] = []
    for row, w in zip(rows, watermarks_us, strict=True):
        got = join.on_row(row, int(w))
        if isinstance(got, TooLate):
            late.append(got)
        else:
            emitted.extend(got)
    emitted.extend(join.advance(watermark_end_us))
    return JoinBatch(emitted, late)

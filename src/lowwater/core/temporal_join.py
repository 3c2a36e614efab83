"""The temporal (stream-table) join: each stream row with the table's version valid at its event time.

The left input is a stream (payments), the right a slowly changing table given
as a stream of versions (exchange rates): a right row is the value of its key
from its event time on, until a newer version of the key. A left row ``l``
joins the version of its key with the greatest event time ``<= l.event_time``
(ties: the later arrival), as Flink's event-time temporal join
(``FOR SYSTEM_TIME AS OF``) does. With ``W`` the join's watermark (the min over
both inputs, as for the interval join, SEMANTICS.md §9):

* a row of either input with ``event_time < W(r)`` is **too late for the join**
  (counted, side output): a version arriving so late could change rows already
  emitted, a stream row so late may have lost its version;
* an admitted left row waits until ``W > l.event_time``, then is emitted once
  with its version; with none, a left outer join emits it with nulls, an inner
  join counts it unmatched. Why waiting suffices: any right row admitted later
  has ``event_time >= W(r) >= W > l.event_time``, so it cannot be ``l``'s version;
* per key, the table keeps its versions newer than ``W`` and the newest one at or
  before ``W`` (every left row still to come has ``event_time >= W``, so older
  versions can never be chosen): those are freed, unmatched if no left row used
  them. A right row ends matched (used at least once), unmatched, too late or
  dead letter.

The result does not depend on how the input is cut or when :meth:`advance` runs.
The state is a :class:`~lowwater.core.join.JoinState` (pending left rows, kept
versions, with their matched flags), so the interval join's keyed pass on
Spark runs this machine unchanged (``spark/operators/join/executor.py``). Its output
watermark is ``min(W, earliest pending left row)``: a joined row carries its left
row's event time.
"""

from __future__ import annotations

from enum import StrEnum

from lowwater.core.join import (
    IntervalJoin,
    JoinBounds,
    Joined,
    JoinRow,
    JoinState,
    JoinType,
    Side,
    SideCounts,
    TooLate,
    _Buffered,
)
from lowwater.time import NEG_INF, POS_INF

# What the keyed pass reads as "the time W must pass to free a row" (``JoinBounds.free_after_us``):
# a left row ``t`` (it is emitted once W > t), a version never by time alone (``t + 2**61``; the drain's
# ``W = +inf`` frees it): lower = -2**61, upper = 0.
TEMPORAL_BOUNDS = JoinBounds(-(2**61), 0)


class JoinKind(StrEnum):
    INTERVAL = "interval"
    TEMPORAL = "temporal"


class TemporalJoin:
    """The temporal join's state machine; feed rows in arrival order with their ``W(r)``, then :meth:`advance`.

    >>> j = TemporalJoin(TEMPORAL_BOUNDS, JoinType.LEFT_OUTER)
    >>> j.on_row(JoinRow(Side.RIGHT, ("EUR",), 0, 0, (1.1,)), NEG_INF)
    []
    >>> j.on_row(JoinRow(Side.RIGHT, ("EUR",), 10, 1, (1.2,)), NEG_INF)
    []
    >>> j.on_row(JoinRow(Side.LEFT, ("EUR",), 7, 2), NEG_INF)    # waits until W > 7
    []
    >>> [(p.left.event_us, p.right.values) for p in j.advance(8)]   # the version valid at 7 s: from 0 s
    [(7, (1.1,))]
    """

    def __init__(self, bounds: JoinBounds, join_type: JoinType, state: JoinState | None = None) -> None:
        self.bounds = bounds
        self.join_type = join_type
        self.state = state or JoinState()
        for entries in self.state.right.values():
            entries.sort(key=lambda e: (e.row.event_us, e.row.seq))  # versions in validity order

    def on_row(self, row: JoinRow, watermark_us: int) -> list[Joined] | TooLate:
        """Judge one row at ``W(r)``: too late, or kept (a left row waits for ``W``; a right row is a version)."""
        counts = self.state.counts[row.side]
        counts.rows += 1
        if watermark_us > NEG_INF and row.event_us < watermark_us:
            counts.too_late += 1
            return TooLate(row, watermark_us)
        counts.pending += 1
        entries = self.state.buffer(row.side).setdefault(row.key, [])
        entries.append(_Buffered(row))
        if row.side == Side.RIGHT:
            entries.sort(key=lambda e: (e.row.event_us, e.row.seq))
        return []

    def version(self, row: JoinRow) -> _Buffered | None:
        """The version of ``row``'s key valid at its event time (None: none yet, or a null key)."""
        if None in row.key:
            return None
        best = None
        for e in self.state.right.get(row.key, ()):
            if e.row.event_us > row.event_us:
                break
            best = e
        return best

    def advance(self, watermark_us: int) -> list[Joined]:
        """Emit every left row ``W`` has passed, then free the versions no row to come can choose."""
        out: list[Joined] = []
        left = self.state.counts[Side.LEFT]
        for key in list(self.state.left):
            waiting = []
            for e in self.state.left[key]:
                if not watermark_us > e.row.event_us:
                    waiting.append(e)
                    continue
                left.pending -= 1
                v = self.version(e.row)
                if v is None:
                    left.unmatched += 1
                    if self.join_type == JoinType.LEFT_OUTER:
                        out.append(Joined(e.row, None, watermark_us))
                    continue
                left.matched += 1
                out.append(Joined(e.row, v.row, watermark_us))
                if not v.matched:
                    v.matched = True
                    self._count_right(matched=True)
            if waiting:
                self.state.left[key] = waiting
            else:
                del self.state.left[key]
        for key in list(self.state.right):
            self._free_versions(key, watermark_us)
        return sorted(out, key=lambda j: j.left.seq)

    def _free_versions(self, key: tuple, watermark_us: int) -> None:
        entries = self.state.right[key]
        keep_from = 0
        if watermark_us >= POS_INF or None in key:
            keep_from = len(entries)  # the drain: no row is to come; a null key matches nothing
        else:
            for i, e in enumerate(entries):
                if e.row.event_us <= watermark_us:
                    keep_from = i  # the newest version at or before W stays
        for e in entries[:keep_from]:
            if not e.matched:
                self._count_right(matched=False)
        if keep_from == len(entries):
            del self.state.right[key]
        else:
            self.state.right[key] = entries[keep_from:]

    def _count_right(self, matched: bool) -> None:
        """A version leaves pending: used by a left row (matched), or freed unused (unmatched)."""
        c = self.state.counts[Side.RIGHT]
        c.pending -= 1
        if matched:
            c.matched += 1
        else:
            c.unmatched += 1

    def drain(self) -> list[Joined]:
        return self.advance(POS_INF)

    def output_watermark(self, watermark_us: int) -> int:
        """``min(W, earliest pending left row)``: a joined row carries its left row's event time."""
        low = min((e.row.event_us for es in self.state.left.values() for e in es), default=POS_INF)
        return min(watermark_us, low)

    def count_dead_letters(self, side: Side, n: int) -> None:
        c = self.state.counts[side]
        c.rows += n
        c.dead_letter += n

    def check(self) -> None:
        """Raise if a row of either side went missing from the accounting."""
        for side, c in self.state.counts.items():
            c.check(side.value)
        pending = {Side.LEFT: sum(len(es) for es in self.state.left.values()),
                   Side.RIGHT: sum(not e.matched for es in self.state.right.values() for e in es)}
        for side, n in pending.items():
            counted = self.state.counts[side].pending
            if n != counted:
                msg = f"temporal join: {n} pending rows buffered on the {side} side, counted {counted}"
                raise AssertionError(msg)

    def counts(self) -> dict[Side, SideCounts]:
        return self.state.counts


def new_join(kind: JoinKind | str, bounds: JoinBounds, join_type: JoinType,
             state: JoinState | None = None) -> IntervalJoin | TemporalJoin:
    """The state machine of a ``[join]`` of this kind (both take the same state and are fed alike)."""
    if kind == JoinKind.TEMPORAL:
        return TemporalJoin(bounds, join_type, state)
    return IntervalJoin(bounds, join_type, state)

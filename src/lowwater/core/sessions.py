"""Session windows: the per-key state machine (SEMANTICS.md §3-§4, issue 6).

A session of a key is ``[first, last + gap)``. Rows of a key are processed in
arrival order, each with the watermark ``W(r)`` it saw (from the tracker). Row
``t`` has the proto-window ``[t, t + gap)``; it merges with every live session
of its key that overlaps it (``t < s.end and s.start < t + gap``; half-open, so
a row at exactly ``s.end`` does not join ``s``). The union ``C`` of the
proto-window and those sessions is one interval.

1. **Firing and freeing.** Before a row of key ``k`` is processed (at its
   ``W(r)``) and at the end of every step (at the step's watermark), every
   live session of the key with ``end <= W`` and unemitted content fires: a
   ``final`` (revision 0) if it never emitted, else a ``revision`` numbered
   after its last one. Then every session with ``end + G <= W`` is freed.
   Firing before each row (not only at step ends) makes the emissions
   independent of how the log is cut (§8); only their timing differs.
2. **Verdict** of the row against ``C``: *too late* iff ``C.end + G <= W(r)``
   (no live session can have overlapped: the row goes to the late output with
   its proto-window, sessions untouched); *late update* iff
   ``C.end <= W(r) < C.end + G`` (the merged session takes the row and emits a
   revision at once, numbered ``max(last revisions of the merged, 0) + 1``);
   *on time* iff ``C.end > W(r)`` (the merged session takes the row and fires
   when ``W >= end``; as a ``revision`` if a merged component had emitted).
3. **Accumulation** (the mode's rule, ``core/pane_rules.py``, as for every
   window): ``accumulating``: every emission carries the session's full
   value; ``discarding``: only what was admitted since the previous emission
   of any merged component; ``retracting``: one ``retraction`` per previously
   emitted value being replaced (with the bounds and revision it was emitted
   with; a merge of two fired sessions retracts both), then the full value.
4. **Drain**: ``advance(POS_INF)`` fires everything and frees everything.
5. **Early firings** (optional): :meth:`SessionMachine.early` emits
   ``provisional`` values of open sessions (``end > W``) with pending rows
   for which the trigger is due. A session whose last emission was
   provisional still fires its ``final`` (or revision) when ``W >= end``,
   even with nothing pending (in discarding mode that emission is empty).

Aggregates are kept as mergeable partials in the one layout of
``core/partials.py``, a flat list per session: ``[n, s0, mn0, mx0, nn0, s1,
...]`` (row count; per value input sum, min, max, non-null count). Values are
plain Python numbers -- floats, ints or Decimals, as the value column's type
(sums of integers and decimals stay exact) -- with ``NaN`` for null on input;
or a row's other value inputs as ``partials.input_value`` builds them (ADR 0038):
a by-time tuple (event, arrival order, value; no sum), a one-value collection
or sketch (``core/partial_values.py``) that the sum field "adds" by its own
merge. A session keeps them as any partial, so revisions, retractions and
merges of sessions need nothing of their own, and any cut of the log gives the
one-batch emissions. The loop runs once per row on the executors (and in the
what-if replay), so it is kept lean.

    >>> m = SessionMachine(gap_us=10, grace_us=0, n_values=1)
    >>> [m.process("a", t, w, (1.0,)) for t, w in [(0, -1), (5, -1), (30, 20)]]
    [0, 0, 0]
    >>> [(e.start_us, e.end_us, e.agg[0], e.kind, e.revision) for e in m.take_emissions()]
    [(0, 15, 2, 'final', 0)]
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import partial

from lowwater.core.lateness import Lateness
from lowwater.core.pane_rules import NEVER, late_revision, on_time_pane, owes_on_time, provisional_revision, rule_of
from lowwater.core.partials import add_row, add_row_where, empty, merge_into, rows
from lowwater.core.triggers import AccumulationMode, EarlyTrigger, EmissionKind

ON_TIME = int(Lateness.ON_TIME)
LATE_UPDATE = int(Lateness.LATE_UPDATE)
TOO_LATE = int(Lateness.TOO_LATE)

FINAL = EmissionKind.FINAL.value
REVISION = EmissionKind.REVISION.value
RETRACTION = EmissionKind.RETRACTION.value
PROVISIONAL = EmissionKind.PROVISIONAL.value



@dataclass(frozen=True)
class Emitted:
    """A value a session emitted and has not retracted yet (retracting mode)."""

    start_us: int
    end_us: int
    revision: int
    agg: tuple


@dataclass(slots=True)
class Session:
    """One live session of a key.

    ``agg`` is the full value; ``pending`` what was admitted since the last
    emission (provisional ones included); ``last_rev`` the revision of the
    last non-provisional emission (``NEVER`` before the first); ``outstanding``
    the emitted values a retracting emission must withdraw first;
    ``pending_since_us`` when (processing time) the session became pending,
    for time-based early firings.
    """

    start_us: int
    end_us: int
    agg: list
    pending: list
    last_rev: int = NEVER
    outstanding: list[Emitted] = field(default_factory=list)
    pending_since_us: int | None = None
    provisional: bool = False


@dataclass(frozen=True, slots=True)
class Emission:
    """One result row of a session: ``agg`` is what it carries (per the accumulation mode)."""

    key: Hashable
    start_us: int
    end_us: int
    agg: tuple
    kind: str
    revision: int


@dataclass(frozen=True, slots=True)
class TooLate:
    """A too-late row: its index in the input, proto-window and ``W(r)``."""

    key: Hashable
    row: object
    start_us: int
    end_us: int
    watermark_us: int


class SessionMachine:
    """Session windows of every key, fed rows in arrival order (see the module docstring).

    ``sessions`` maps each key to its live sessions (disjoint, sorted by
    start). Emissions and too-late rows accumulate until taken; verdict counts
    in ``counts`` (indexed by :class:`~lowwater.core.lateness.Lateness`).
    """

    def __init__(
        self,
        gap_us: int,
        grace_us: int,
        n_values: int,
        accumulation: str = AccumulationMode.ACCUMULATING.value,
        summed: tuple[bool, ...] | None = None,
    ) -> None:
        """``summed``: which value inputs keep a sum (None: all): numbers, collections and sketches; the others
        (strings, dates, by-time tuples) are counted and compared only."""
        self._add = add_row if summed is None or all(summed) else partial(add_row_where, summed=summed)
        if gap_us <= 0:
            msg = "session gap must be positive"
            raise ValueError(msg)
        self.gap_us = int(gap_us)
        self.grace_us = int(grace_us)
        self.n_values = int(n_values)
        self.mode = AccumulationMode(accumulation)
        self.rule = rule_of(self.mode)  # what each emission carries (``core/pane_rules.py``)
        self.sessions: dict[Hashable, list[Session]] = {}
        self.emissions: list[Emission] = []
        self.too_late: list[TooLate] = []
        self.counts = [0, 0, 0]
        self.now_us: int | None = None  # processing time of the current step (early firings' clock)

    # -- state in and out --------------------------------------------------------

    def load(self, key: Hashable, session: Session) -> None:
        """Restore a stored session (keys' lists are kept sorted by start)."""
        ss = self.sessions.setdefault(key, [])
        ss.append(session)
        ss.sort(key=lambda s: s.start_us)

    def take_emissions(self) -> list[Emission]:
        out, self.emissions = self.emissions, []
        return out

    def take_too_late(self) -> list[TooLate]:
        out, self.too_late = self.too_late, []
        return out

    def live(self) -> int:
        """Live sessions over all keys."""
        return sum(len(ss) for ss in self.sessions.values())

    # -- the rules ---------------------------------------------------------------

    def process(self, key: Hashable, t_us: int, w_us: int, values: Sequence[float], row: object = None) -> int:
        """Admit (or refuse) one row of ``key`` at event time ``t_us`` seen at ``W(r) = w_us``.

        Returns the verdict (``Lateness`` code). ``row`` is carried into the
        :class:`TooLate` record (e.g. the row's id).
        """
        gap = self.gap_us
        ss = self.sessions.get(key)
        if ss:
            self._fire_free(key, ss, w_us)
        hi = t_us + gap
        c_start, c_end = t_us, hi
        merged: list[Session] = []
        keep: list[Session] = []
        if ss:
            for s in ss:
                if t_us < s.end_us and s.start_us < hi:
                    merged.append(s)
                    if s.start_us < c_start:
                        c_start = s.start_us
                    if s.end_us > c_end:
                        c_end = s.end_us
                else:
                    keep.append(s)
        if c_end + self.grace_us <= w_us:
            self.too_late.append(TooLate(key, row, t_us, hi, w_us))
            self.counts[TOO_LATE] += 1
            return TOO_LATE
        if len(merged) == 1 and merged[0].start_us == c_start:
            new = merged[0]  # the common case: extend one session in place
            new.end_us = c_end
            self._add(new.agg, values)
            self._add(new.pending, values)
        else:
            new = Session(c_start, c_end, empty(self.n_values), empty(self.n_values))
            for s in merged:
                merge_into(new.agg, s.agg)
                merge_into(new.pending, s.pending)
                if s.last_rev > new.last_rev:
                    new.last_rev = s.last_rev
                new.outstanding.extend(s.outstanding)
                new.provisional = new.provisional or s.provisional
                if s.pending_since_us is not None and (
                    new.pending_since_us is None or s.pending_since_us < new.pending_since_us
                ):
                    new.pending_since_us = s.pending_since_us
            self._add(new.agg, values)
            self._add(new.pending, values)
            keep.append(new)
            keep.sort(key=lambda s: s.start_us)
            self.sessions[key] = keep
        if c_end <= w_us:
            self._emit(key, new, REVISION, late_revision(new.last_rev))
            self.counts[LATE_UPDATE] += 1
            return LATE_UPDATE
        self.counts[ON_TIME] += 1
        return ON_TIME

    def advance(self, w_us: int) -> None:
        """End of a step at watermark ``w_us`` (``POS_INF`` drains): fire, then free, every key."""
        for key in list(self.sessions):
            ss = self.sessions[key]
            self._fire_free(key, ss, w_us)
            if not ss:
                del self.sessions[key]

    def early(self, trigger: EarlyTrigger, w_us: int, now_us: int) -> None:
        """Provisional emissions of open sessions (``end > W``) whose early trigger is due.

        Each carries the revision its next non-provisional emission will have
        (0 before the first final). ``now_us`` is processing time; a session
        that has pending rows and no clock yet starts waiting now.
        """
        self.now_us = now_us
        for key, ss in self.sessions.items():
            for s in ss:
                if s.end_us <= w_us or rows(s.pending) == 0:
                    continue
                if s.pending_since_us is None:
                    s.pending_since_us = now_us
                if trigger.is_due(rows(s.pending), now_us - s.pending_since_us):
                    self._emit(key, s, PROVISIONAL, provisional_revision(s.last_rev))

    def _fire_free(self, key: Hashable, ss: list[Session], w_us: int) -> None:
        grace = self.grace_us
        freed = False
        for s in ss:
            if s.end_us <= w_us:
                if owes_on_time(rows(s.pending), s.provisional):
                    self._emit(key, s, *on_time_pane(s.last_rev))
                if s.end_us + grace <= w_us:
                    freed = True
        if freed:
            ss[:] = [s for s in ss if s.end_us + grace > w_us]

    def _emit(self, key: Hashable, s: Session, kind: str, revision: int) -> None:
        rule = self.rule
        value = tuple(rule.value(s.agg, s.pending))
        if rule.retracts:
            for o in s.outstanding:
                self.emissions.append(Emission(key, o.start_us, o.end_us, o.agg, RETRACTION, o.revision))
            s.outstanding = [Emitted(s.start_us, s.end_us, revision, value)]
        self.emissions.append(Emission(key, s.start_us, s.end_us, value, kind, revision))
        if kind != PROVISIONAL:
            s.last_rev = revision
        s.provisional = kind == PROVISIONAL
        s.pending = empty(self.n_values)
        s.pending_since_us = self.now_us


def run_steps(
    machine: SessionMachine,
    keys: Sequence[Hashable],
    event_us: Sequence[int],
    watermark_us: Sequence[int],
    values: Sequence[Sequence[float]],
    step_ends: Iterable[tuple[int, int]],
) -> list[int]:
    """Feed rows in arrival order, calling ``advance`` after each step.

    ``step_ends`` gives ``(end row index exclusive, watermark at the end of
    that step)`` for each step. Returns the verdict per row.
    """
    verdicts = []
    lo = 0
    for hi, w_end in step_ends:
        for i in range(lo, hi):
            verdicts.append(machine.process(keys[i], event_us[i], watermark_us[i], values[i], row=i))
        machine.advance(w_end)
        lo = hi
    return verdicts

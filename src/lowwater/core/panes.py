"""Panes of one (key, window): what each emission carries, per accumulation mode.

A window's results reach the output as a sequence of *emissions* (panes):
zero or more ``provisional`` ones while it is open (an early trigger,
``core.triggers``), the on-time ``final`` when ``W >= end`` (revision 0), and
one ``revision`` per late-update row (1, 2, ...). The accumulation mode says
what each carries:

* ``accumulating``: the window's full value so far, every time;
* ``discarding``: only the rows admitted since the window's previous emission
  (a ``final`` with nothing new since the last provisional is emitted anyway,
  empty -- ``count = 0``, other aggregates null -- to mark completeness, as
  Beam emits the on-time pane);
* ``retracting``: before every emission that replaces an earlier one, a
  ``retraction`` carrying the previously emitted full value and its revision,
  then the new full value.

What each carries, and when, is stated once in ``core/pane_rules.py``:
:class:`Pane` (pure Python, one value column) follows it, as do the session
machine and the Spark fold (``spark/operators/windowed/fold.py``, every
(key, window) of a step in Spark SQL); the tests hold them together.
:class:`WindowPanes` is every (key, window)'s panes, as the core runs a
windowed aggregation (the scenario runner's core path, windows after a join).
:func:`fold` is the fold property: folding a window's emissions the way its
mode prescribes gives the value of all its admitted rows.

Times are integer µs of processing (wall-clock) time.

    >>> p = Pane(AccumulationMode.DISCARDING, EarlyTrigger(every_rows=2))
    >>> p.admit(Agg.of([1.0, 2.0]), now_us=0)
    >>> [e.value.n for e in p.early(now_us=0)], [e.value.n for e in p.fire()]
    ([2], [0])
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from lowwater.core import partials
from lowwater.core.pane_rules import (
    NEVER,
    Fold,
    late_revision,
    on_time_pane,
    owes_on_time,
    provisional_revision,
    rule_of,
)
from lowwater.core.triggers import AccumulationMode, EarlyTrigger, EmissionKind


@dataclass(frozen=True)
class Agg:
    """The partial of one value column (``core/partials.py``), its fields named.

    ``n`` rows; ``total``/``low``/``high`` the sum, min and max (null when no
    value); ``nn`` the non-null values -- when not given, ``n`` if any value
    is, else 0 (the rows of a reference pane all have a value).
    """

    n: int = 0
    total: float | None = None
    low: float | None = None
    high: float | None = None
    nn: int | None = None

    def __post_init__(self) -> None:
        if self.nn is None:
            has = any(v is not None for v in (self.total, self.low, self.high))
            object.__setattr__(self, "nn", self.n if has else 0)

    @property
    def parts(self) -> list:
        """The flat partial ``[n, s, mn, mx, nn]``."""
        return [self.n, self.total, self.low, self.high, self.nn]

    @classmethod
    def of(cls, values: Iterable[float]) -> Agg:
        return cls(*partials.of_rows(((v,) for v in values), 1))

    def merge(self, other: Agg) -> Agg:
        """Counts and sums add, mins and maxes fold; null is the identity."""
        return Agg(*partials.merged(self.parts, other.parts))

    def minus(self, other: Agg) -> Agg:
        """Counts and sums only (what a retraction can undo); min/max are left null."""
        return Agg(*partials.signed_sum([(1, self.parts), (-1, other.parts)], 1))


EMPTY = Agg()


def input_agg(value: object, of: str = partials.COLUMN, at: tuple = ()) -> Agg:
    """One row's partial of one value input (``partials.input_value``); ``at``: its (event µs, arrival order...),
    which a by-time or list input carries. A by-time input and a text value have no sum (``add_row_where``)."""
    v = partials.input_value(value, of, at)
    p = partials.empty(1)
    partials.add_row_where(p, (v,), (of != partials.BY_TIME and not isinstance(v, str),))
    return Agg(*p)


@dataclass(frozen=True)
class Emission:
    """One result row of a window: its kind, revision number and value."""

    kind: EmissionKind
    revision: int
    value: Agg


@dataclass
class Pane:
    """Emission state of one (key, window); what each pane carries is its mode's rule (``core/pane_rules.py``).

    ``full`` is the value of every admitted row; ``pending`` the rows admitted
    since the last emission (and ``pending_rows`` their count); ``emitted`` the
    value of the last emission (None before the first: what a retraction
    withdraws); ``since_us`` the processing time of the last emission or,
    before the first, of the step in which the window first got pending rows.
    """

    mode: AccumulationMode = AccumulationMode.ACCUMULATING
    trigger: EarlyTrigger | None = None
    full: Agg = EMPTY
    pending: Agg = EMPTY
    emitted: Agg | None = None
    since_us: int | None = None
    fired: bool = False
    log: list[Emission] = field(default_factory=list)
    last_rev: int = NEVER  # revision of the last on-time pane or revision
    provisional: bool = False  # the last emission was provisional
    _emitted_revision: int = 0  # revision of the last emission (what a retraction carries)

    @property
    def pending_rows(self) -> int:
        return self.pending.n

    def admit(self, value: Agg, now_us: int) -> None:
        """On-time rows of an open window, admitted by the step that started at ``now_us``."""
        if self.fired:
            msg = "an on-time row for a fired window"
            raise ValueError(msg)
        if value.n == 0:
            return
        self.full = self.full.merge(value)
        self.pending = self.pending.merge(value)
        if self.since_us is None:
            self.since_us = now_us

    def is_due(self, now_us: int) -> bool:
        """Whether the early trigger fires this open window at ``now_us``."""
        if self.trigger is None or self.fired or self.since_us is None:
            return False
        return self.trigger.is_due(self.pending_rows, now_us - self.since_us)

    def early(self, now_us: int) -> list[Emission]:
        """End of a step at ``now_us`` while the window is open: a provisional, if due."""
        if not self.is_due(now_us):
            return []
        out = self._emit(EmissionKind.PROVISIONAL, provisional_revision(self.last_rev))
        self.since_us = now_us
        return out

    def fire(self) -> list[Emission]:
        """``W >= end``: the on-time pane, if owed (none for a window without on-time rows)."""
        if self.fired:
            return []
        self.fired = True
        if not owes_on_time(self.pending_rows, self.provisional):
            return []
        kind, revision = on_time_pane(self.last_rev)
        return self._emit(EmissionKind(kind), revision)

    def late(self, row: Agg) -> list[Emission]:
        """A late-update row of a fired window: the next revision."""
        if not self.fired:
            msg = "a late update for a window that has not fired"
            raise ValueError(msg)
        self.full = self.full.merge(row)
        self.pending = self.pending.merge(row)
        return self._emit(EmissionKind.REVISION, late_revision(self.last_rev))

    def _emit(self, kind: EmissionKind, revision: int) -> list[Emission]:
        rule = rule_of(self.mode)
        out: list[Emission] = []
        if rule.retracts and self.emitted is not None:
            out.append(Emission(EmissionKind.RETRACTION, self._emitted_revision, self.emitted))
        value = rule.value(self.full, self.pending)
        out.append(Emission(kind, revision, value))
        self.emitted, self._emitted_revision = value, revision
        self.provisional = kind == EmissionKind.PROVISIONAL
        if not self.provisional:
            self.last_rev = revision
        self.pending = EMPTY
        self.log.extend(out)
        return out


def fold(emissions: Sequence[Emission], mode: AccumulationMode | str) -> Agg:
    """The value a consumer gets by folding a window's emissions (in emission order) as ``mode``'s rule says
    (``pane_rules.Fold``): the last non-retraction; all merged; or the emissions added and the retractions
    subtracted (counts and sums)."""
    how = rule_of(mode).fold
    if how is Fold.LATEST:
        kept = [e for e in emissions if e.kind != EmissionKind.RETRACTION]
        return kept[-1].value if kept else EMPTY
    if how is Fold.ADD:
        out = EMPTY
        for e in emissions:
            out = out.merge(e.value)
        return out
    terms = [(-1 if e.kind == EmissionKind.RETRACTION else 1, e.value.parts) for e in emissions]
    return Agg(*partials.signed_sum(terms, 1))


Input = tuple[str, str] | None  # a value input: (column, what of it: ``partials.INPUTS``); None: the row count


@dataclass
class WindowPanes:
    """Every (key, window)'s panes, one per value input, as the core runs a windowed aggregation.

    A window is ``(key, start µs, end µs)``; ``inputs`` are the value inputs
    (``core/aggregates.value_inputs``), read together (none: the row count
    only). Each method returns the emissions it causes, per pane kind and
    revision one list of :class:`Emission` per input (see :meth:`emitted`).
    """

    inputs: Sequence[Input]
    mode: AccumulationMode = AccumulationMode.ACCUMULATING
    trigger: EarlyTrigger | None = None
    open: dict[tuple, list[Pane]] = field(default_factory=dict)
    fired: dict[tuple, list[Pane]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.inputs = list(self.inputs) or [None]

    def _aggs(self, row: Mapping[str, object], at: tuple) -> list[Agg]:
        return [input_agg(1.0) if c is None else input_agg(row.get(c[0]), c[1], at) for c in self.inputs]

    def admit(self, win: tuple, row: Mapping[str, object], at: tuple = ()) -> None:
        """An on-time row of window ``win``; ``at``: its (event µs, arrival order...) for a by-time or list input."""
        panes = self.open.setdefault(win, [Pane(self.mode, self.trigger) for _ in self.inputs])
        for pane, agg in zip(panes, self._aggs(row, at), strict=True):
            pane.admit(agg, now_us=0)

    def late(self, win: tuple, row: Mapping[str, object], at: tuple = ()) -> list[tuple[tuple, list[list[Emission]]]]:
        """A late update of ``win`` (fired, or with no on-time row: then its first revision)."""
        panes = self.fired.setdefault(win, [Pane(self.mode, self.trigger, fired=True) for _ in self.inputs])
        return [(win, [p.late(a) for p, a in zip(panes, self._aggs(row, at), strict=True)])]

    def fire(self, w_us: float) -> list[tuple[tuple, list[list[Emission]]]]:
        """Every open window whose end ``w_us`` has reached fires, in window order (``inf``: the drain)."""
        out = []
        for win in sorted(w for w in self.open if w[2] <= w_us):
            panes = self.open.pop(win)
            self.fired[win] = panes
            out.append((win, [p.fire() for p in panes]))
        return out

    def free(self, w_us: float, grace_us: int) -> None:
        """Forget the fired windows no late update can reach any more (``end + grace <= W``)."""
        for win in [w for w in self.fired if w[2] + grace_us <= w_us]:
            del self.fired[win]

    def early(self, now_us: int = 0) -> list[tuple[tuple, list[list[Emission]]]]:
        """End of a step: the provisionals the early trigger makes due, in window order."""
        return [(win, [p.early(now_us=now_us) for p in panes]) for win, panes in sorted(self.open.items())]

    @staticmethod
    def emitted(per_input: list[list[Emission]]) -> Iterator[tuple[Emission, list[Agg]]]:
        """A window's emissions, each with every input's value (the panes of one window emit in lockstep)."""
        for k, e in enumerate(per_input[0]):
            yield e, [em[k].value for em in per_input]

"""The pane rules of SEMANTICS.md §4, stated once: what each emission of a window carries, per accumulation mode.

A window's (or a session's) results are a sequence of *panes*: ``provisional``
ones while it is open (an early trigger, ``core/triggers.py``), the on-time
one when ``W >= end``, and one ``revision`` per late update. Two things vary
with the accumulation mode, and this table is the only place that says how:

* **what a pane carries** (:class:`Carries`): the window's ``full`` value (every
  row it admitted) or only what is ``pending`` (admitted since its previous
  pane; the first pane's pending rows are all of them);
* **whether a pane that replaces an earlier one first retracts it**: a
  ``retraction`` row carrying the value (and revision) it withdraws.

Every path reads its mode's :class:`PaneRule` from :data:`RULES`: the core
window pane (``core/panes.py``), the session machine (``core/sessions.py``, run
per key on the executors), the scenario runner's core path
(``testing/transcript_core.py``, through ``core/panes.WindowPanes``) and the
windowed operator's Spark SQL fold (``spark/operators/windowed/fold.py``: the
state columns it keeps and the columns each pane reads). What a consumer does
with the panes (:class:`Fold`) is in the table too: ``core/panes.fold`` and
the reconciler (``core/reconcile.rule``) read it.

The timing rules are the functions below: which kind and revision the next
pane has, and when the on-time pane is owed.

    >>> rule_of("discarding").value(full="every row", pending="rows since the last pane")
    'rows since the last pane'
    >>> on_time_pane(NEVER), late_revision(NEVER), late_revision(0), provisional_revision(0)
    (('final', 0), 1, 1, 1)
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TypeVar

from lowwater.core.triggers import AccumulationMode, EmissionKind

V = TypeVar("V")

NEVER = -1  # the last revision of a window that has emitted no on-time pane nor revision yet


class Carries(StrEnum):
    """What a pane's value is."""

    FULL = "full"  # every row the window admitted
    PENDING = "pending"  # the rows admitted since the window's previous pane


class Fold(StrEnum):
    """How a consumer folds a window's panes (in emission order) into its value."""

    LATEST = "latest"  # the last pane that is not a retraction
    ADD = "add"  # merge them all (counts and sums add, mins/maxes fold)
    SIGNED = "signed"  # add the panes, subtract the retractions (what a sum can undo)


@dataclass(frozen=True)
class PaneRule:
    """One accumulation mode's rule: what a pane carries, whether it retracts what it replaces, how it folds."""

    carries: Carries
    retracts: bool
    fold: Fold

    def __post_init__(self) -> None:
        if self.retracts and self.carries is not Carries.FULL:
            msg = "a retraction withdraws a full value: a rule that retracts carries the full value"
            raise ValueError(msg)

    def value(self, full: V, pending: V) -> V:
        """The value a pane carries, of the window's ``full`` value and its ``pending`` rows."""
        return pending if self.carries is Carries.PENDING else full

    @property
    def keeps_pending(self) -> bool:
        """The window keeps the partial of its pending rows apart from its full value (what a pane carries)."""
        return self.carries is Carries.PENDING

    @property
    def keeps_emitted(self) -> bool:
        """The window keeps the value of its last pane (what the next one retracts)."""
        return self.retracts


RULES: dict[AccumulationMode, PaneRule] = {
    AccumulationMode.ACCUMULATING: PaneRule(Carries.FULL, retracts=False, fold=Fold.LATEST),
    AccumulationMode.DISCARDING: PaneRule(Carries.PENDING, retracts=False, fold=Fold.ADD),
    AccumulationMode.RETRACTING: PaneRule(Carries.FULL, retracts=True, fold=Fold.SIGNED),
}


def rule_of(mode: AccumulationMode | str) -> PaneRule:
    """The rule of accumulation mode ``mode`` (a :class:`AccumulationMode` or its name)."""
    return RULES[AccumulationMode(mode)]


# -- when, and which kind and revision ----------------------------------------------------


def owes_on_time(pending_rows: int, provisional: bool) -> bool:
    """Whether a window ``W`` has reached emits a pane: it has rows not emitted yet, or its last pane was
    provisional (then in discarding mode the on-time pane is empty, marking completeness, as Beam's is).
    A window that admitted no on-time row emits none: its late updates are its only panes."""
    return pending_rows > 0 or provisional


def on_time_pane(last_rev: int) -> tuple[str, int]:
    """(kind, revision) of the pane a window emits when ``W`` reaches its end: the ``final`` (revision 0) if it
    never emitted a non-provisional pane, else (a session that merged fired ones) the next ``revision``."""
    if last_rev == NEVER:
        return EmissionKind.FINAL.value, 0
    return EmissionKind.REVISION.value, last_rev + 1


def late_revision(last_rev: int) -> int:
    """The revision a late update emits at once: the next one (1 for a window with no on-time pane)."""
    return max(last_rev, 0) + 1


def provisional_revision(last_rev: int) -> int:
    """A provisional pane carries the revision of the non-provisional pane it anticipates."""
    return 0 if last_rev == NEVER else last_rev + 1

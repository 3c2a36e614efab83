"""Early firings: provisional results of windows that have not fired yet.

The on-time firing (``W >= end``) and the late revisions are fixed by
SEMANTICS.md §4; an *early trigger* adds provisional emissions of open
windows before that, like Beam's ``AfterWatermark(early=...)``:

* ``every N rows``: an open window that has admitted at least ``N`` rows since
  its last emission emits a provisional result (Beam's ``AfterCount``, per
  window);
* ``every D`` (a duration, processing time): an open window with rows admitted
  since its last emission, whose last emission (or first pending row) is at
  least ``D`` of wall-clock time ago, emits a provisional result (Beam's
  ``AfterProcessingTime.plusDelayOf``).

A micro-batch engine evaluates the trigger at the end of each step, so *when*
provisional results appear (and how many) depends on how the input is cut:
they are excepted from the determinism guarantee of §8, but folding a window's
emissions by its accumulation mode always gives the value of its admitted rows.

Provisional rows carry ``kind = "provisional"`` and ``revision = 0``: they are
earlier values of the revision-0 (on-time) result, replaced by the ``final``.

    >>> EarlyTrigger.parse("every 1000 rows")
    EarlyTrigger(every_rows=1000, every_us=None)
    >>> EarlyTrigger.parse("every 5s").is_due(pending_rows=3, waited_us=6_000_000)
    True
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass
from enum import StrEnum

from lowwater.time import to_duration_us

_ROWS = re.compile(r"^\s*every\s+(\d+)\s+rows?\s*$")
_EVERY = re.compile(r"^\s*every\s+(.+?)\s*$")


class AccumulationMode(StrEnum):
    """What each emission of a window carries (Dataflow model)."""

    ACCUMULATING = "accumulating"  # the full value every time
    DISCARDING = "discarding"  # only what arrived since the previous emission
    RETRACTING = "retracting"  # a retraction of the previous value, then the full value


class EmissionKind(StrEnum):
    """The ``kind`` column of a result row."""

    PROVISIONAL = "provisional"  # early firing of an open window
    FINAL = "final"  # the on-time firing (revision 0)
    REVISION = "revision"  # a re-emission after a late update (revision 1, 2, ...)
    RETRACTION = "retraction"  # retracting mode: the previous value, withdrawn


@dataclass(frozen=True)
class EarlyTrigger:
    """Provisional firings of open windows, every ``N`` admitted rows or every ``D`` of processing time."""

    every_rows: int | None = None
    every_us: int | None = None

    def __post_init__(self) -> None:
        if (self.every_rows is None) == (self.every_us is None):
            msg = "an early trigger is either every N rows or every <duration>"
            raise ValueError(msg)
        if self.every_rows is not None and self.every_rows < 1:
            msg = "every N rows needs N >= 1"
            raise ValueError(msg)
        if self.every_us is not None and self.every_us <= 0:
            msg = "every <duration> needs a positive duration"
            raise ValueError(msg)

    @classmethod
    def parse(cls, text: str) -> EarlyTrigger:
        """``"every 1000 rows"`` or ``"every 5s"``; raises ValueError otherwise."""
        m = _ROWS.match(str(text))
        if m:
            return cls(every_rows=int(m.group(1)))
        m = _EVERY.match(str(text))
        if m:
            with contextlib.suppress(ValueError):  # not a duration: the error below says what is expected
                return cls(every_us=to_duration_us(m.group(1)))
        msg = f'{text!r}: expected "every N rows" or "every <duration>" (e.g. "every 5s")'
        raise ValueError(msg)

    def is_due(self, pending_rows: int, waited_us: int) -> bool:
        """Whether an open window with ``pending_rows`` unemitted rows fires early now.

        ``waited_us`` is the processing time since the window's last emission
        (or since its first pending row, when it has never emitted).
        """
        if pending_rows <= 0:
            return False
        if self.every_rows is not None:
            return pending_rows >= self.every_rows
        assert self.every_us is not None
        return waited_us >= self.every_us

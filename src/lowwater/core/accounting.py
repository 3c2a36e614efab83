"""Accounting: every input row ends in exactly one bucket (SEMANTICS.md §6).

``rows == on_time + late_updates + too_late + dead_letter`` per batch and per
run. :class:`Accounting` is the one place that adds the buckets up; the engine
and the replay both report through it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, fields

import numpy as np

from lowwater.core.lateness import Lateness


@dataclass
class Accounting:
    """Row counts per final bucket, plus emission counters."""

    rows: int = 0
    on_time: int = 0
    late_updates: int = 0
    too_late: int = 0
    dead_letter: int = 0
    clipped: int = 0

    @classmethod
    def from_verdicts(cls, row_verdict: np.ndarray, dead_letter: int, clipped: int = 0) -> Accounting:
        """Count a batch: row-level verdicts of the valid rows plus its dead letters."""
        counts = np.bincount(row_verdict.astype(np.int64), minlength=3)
        return cls(
            rows=int(len(row_verdict)) + int(dead_letter),
            on_time=int(counts[Lateness.ON_TIME]),
            late_updates=int(counts[Lateness.LATE_UPDATE]),
            too_late=int(counts[Lateness.TOO_LATE]),
            dead_letter=int(dead_letter),
            clipped=int(clipped),
        )

    def __add__(self, other: Accounting) -> Accounting:
        return Accounting(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)})

    @property
    def balanced(self) -> bool:
        """The accounting identity of SEMANTICS.md §6."""
        return self.rows == self.on_time + self.late_updates + self.too_late + self.dead_letter

    def check(self) -> None:
        """Raise if a row went missing: nothing is lost without being counted."""
        if not self.balanced:
            msg = f"accounting identity broken: {self}"
            raise AssertionError(msg)

    def completeness(self) -> float:
        """Rows counted in emitted results / rows with a valid event time (§7)."""
        valid = self.rows - self.dead_letter
        return 1.0 if valid == 0 else (self.on_time + self.late_updates) / valid

    def as_dict(self) -> dict[str, int]:
        """The counts by name, as the run summary and metrics write them."""
        return asdict(self)


def dead_by_source(parts: Iterable[Mapping[str, int] | None]) -> dict[str, int] | None:
    """A step's dead letters per source, summed over the parts that counted them (the row clock's tasks).

    None when a part could not tell (its rows name no source): a partial count would misplace rows.
    """
    out: dict[str, int] = {}
    for part in parts:
        if part is None:
            return None
        for source, n in part.items():
            out[source] = out.get(source, 0) + int(n)
    return out

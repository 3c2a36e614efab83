"""Bounded out-of-orderness: ``W_p = max(event_time seen on p) - L`` (SEMANTICS.md §2).

Flink's ``BoundedOutOfOrdernessWatermarks``. ``W_p`` is undefined until ``p``
has produced a row, then follows the running max; it never moves back, so the
generator never counts a regression.

    >>> g = BoundedOutOfOrderness(2).build()
    >>> g.on_rows(PartitionRows(np.array([10, 5, 20]))).watermark_us.tolist()
    [8, 8, 18]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from lowwater.core.watermarks.protocol import Emitted, GeneratorSpec, PartitionRows
from lowwater.time import NEG_INF, POS_INF


@dataclass(frozen=True)
class BoundedOutOfOrderness(GeneratorSpec):
    """The bound ``L`` of one partition (µs, not negative)."""

    max_out_of_orderness_us: int
    kind: ClassVar[str] = "bounded"

    def __post_init__(self) -> None:
        if self.max_out_of_orderness_us < 0:
            msg = "max_out_of_orderness cannot be negative"
            raise ValueError(msg)

    def watermark(self, max_event_us: np.ndarray) -> np.ndarray:
        """Vectorised: partition watermark from the running max event time."""
        m = np.asarray(max_event_us, dtype=np.int64)
        return np.where(m <= NEG_INF, NEG_INF, m - self.max_out_of_orderness_us)

    def build(self, snapshot: dict[str, Any] | None = None) -> BoundedGenerator:
        g = BoundedGenerator(self.max_out_of_orderness_us)
        if snapshot:
            g.restore(snapshot)
        return g

    def check_inputs(self, has_arrival: bool, has_marker: bool) -> None:
        """Needs event times only."""


class BoundedGenerator:
    """Running max of the partition's event times, minus ``L``."""

    def __init__(self, bound_us: int) -> None:
        self.bound_us = bound_us
        self.max_event_us = NEG_INF

    def on_rows(self, rows: PartitionRows) -> Emitted:
        ev = np.asarray(rows.event_us, dtype=np.int64)
        if not len(ev):
            return Emitted(np.zeros(0, dtype=np.int64))
        running = np.maximum.accumulate(np.maximum(ev, self.max_event_us) if self.max_event_us > NEG_INF else ev)
        self.max_event_us = int(running[-1])
        return Emitted(running - self.bound_us)

    @property
    def watermark_us(self) -> int:
        return NEG_INF if self.max_event_us <= NEG_INF else self.max_event_us - self.bound_us

    @property
    def reported(self) -> bool:
        return self.max_event_us > NEG_INF

    @property
    def lateness_us(self) -> int | None:
        return self.bound_us

    def active_until_us(self, start_clock_us: int) -> int:
        return POS_INF

    def snapshot(self) -> dict[str, Any]:
        return {"max_event_us": self.max_event_us}

    def restore(self, snapshot: dict[str, Any]) -> None:
        self.max_event_us = int(snapshot.get("max_event_us", NEG_INF))

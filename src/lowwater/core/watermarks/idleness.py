"""Idleness as a wrapper around any generator (Flink's ``WatermarksWithIdleness``).

A partition with no arrivals for longer than ``idle_timeout`` of *arrival*
time leaves the min until it produces again (SEMANTICS.md §2). The wrapper
leaves ``W_p`` to the generator it wraps and only answers "until when does
this partition count": ``last arrival + idle_timeout`` after each row, and
``first arrival of the run + idle_timeout`` for a declared partition that never
reported. The tracker evaluates that at every row's arrival, so the worst-case
delay before a silent partition stops holding ``W`` back is exactly
``idle_timeout`` of arrival time (no periodic check, no wall clock: the same
log gives the same watermarks however it is cut).

    >>> from lowwater.core.watermarks.bounded import BoundedOutOfOrderness
    >>> g = WithIdleness(BoundedOutOfOrderness(0), 10).build()
    >>> e = g.on_rows(PartitionRows(np.array([3, 7]), np.array([100, 104])))
    >>> e.watermark_us.tolist(), e.active_until_us.tolist(), g.active_until_us(0)
    ([3, 7], [110, 114], 114)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from lowwater.core.watermarks.protocol import Emitted, GeneratorSpec, PartitionRows, WatermarkGenerator
from lowwater.time import NEG_INF, POS_INF


def active_until_us(last_arrival_us: int, start_clock_us: int, idle_timeout_us: int) -> int:
    """The idle rule, once: a lane (a partition here, a source for the arrival frontier, ``core/frontier.py``)
    counts while the arrival clock is at most its last arrival + ``idle_timeout``; one that never delivered
    counts from the run's first arrival (``POS_INF`` while there is none: nothing can be idle yet).

    >>> active_until_us(100, 0, 10), active_until_us(NEG_INF, 5, 10), active_until_us(NEG_INF, NEG_INF, 10) == POS_INF
    (110, 15, True)
    """
    ref = last_arrival_us if last_arrival_us > NEG_INF else start_clock_us
    return POS_INF if ref <= NEG_INF else ref + idle_timeout_us


@dataclass(frozen=True)
class WithIdleness(GeneratorSpec):
    """Wraps ``inner``: the partition is active while ``clock - last arrival <= idle_timeout_us``."""

    inner: GeneratorSpec
    idle_timeout_us: int

    def __post_init__(self) -> None:
        if self.idle_timeout_us <= 0:
            msg = "idle_timeout must be positive"
            raise ValueError(msg)

    @property
    def kind(self) -> str:
        return self.inner.kind

    def build(self, snapshot: dict[str, Any] | None = None) -> IdleAwareGenerator:
        g = IdleAwareGenerator(self.inner.build(), self.idle_timeout_us)
        if snapshot:
            g.restore(snapshot)
        return g

    def check_inputs(self, has_arrival: bool, has_marker: bool) -> None:
        if not has_arrival:
            msg = "idleness needs an arrival clock (source.arrival_time)"
            raise ValueError(msg)
        self.inner.check_inputs(has_arrival, has_marker)

    def marker_column(self) -> str | None:
        return self.inner.marker_column()


class IdleAwareGenerator:
    """The wrapped generator's ``W_p``, plus the arrival clock up to which the partition is active."""

    def __init__(self, inner: WatermarkGenerator, idle_timeout_us: int) -> None:
        self.inner = inner
        self.idle_timeout_us = idle_timeout_us
        self.last_arrival_us = NEG_INF

    def on_rows(self, rows: PartitionRows) -> Emitted:
        if rows.arrival_us is None:
            msg = "idleness needs an arrival clock (source.arrival_time)"
            raise ValueError(msg)
        emitted = self.inner.on_rows(rows)
        arr = np.asarray(rows.arrival_us, dtype=np.int64)
        if not len(arr):
            return emitted
        last = np.maximum.accumulate(np.maximum(arr, self.last_arrival_us))
        self.last_arrival_us = int(last[-1])
        return Emitted(emitted.watermark_us, last + self.idle_timeout_us, emitted.regressions)

    @property
    def watermark_us(self) -> int:
        return self.inner.watermark_us

    @property
    def reported(self) -> bool:
        return self.inner.reported

    @property
    def lateness_us(self) -> int | None:
        return self.inner.lateness_us

    def active_until_us(self, start_clock_us: int) -> int:
        return active_until_us(self.last_arrival_us, start_clock_us, self.idle_timeout_us)

    def snapshot(self) -> dict[str, Any]:
        return {**self.inner.snapshot(), "last_arrival_us": self.last_arrival_us}

    def restore(self, snapshot: dict[str, Any]) -> None:
        self.inner.restore(snapshot)
        self.last_arrival_us = int(snapshot.get("last_arrival_us", NEG_INF))

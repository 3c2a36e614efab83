"""Watermark generators and the strategy that configures them.

A watermark ``W`` is a promise: no row with ``event_time < W`` is expected any
more. Per source partition ``p``, a generator turns the rows of ``p`` into a
partition watermark ``W_p`` (SEMANTICS.md §2). Times are integer µs;
``NEG_INF`` means "undefined" (the partition has not produced yet).

Like Flink's ``WatermarkStrategy.forBoundedOutOfOrderness(d).withIdleness(t)``,
:class:`WatermarkStrategy` is a frozen config built fluently::

    >>> s = WatermarkStrategy.for_bounded_out_of_orderness(3_000_000).with_idleness(60_000_000)
    >>> s.bound_for("p7"), s.idle_timeout_us
    (3000000, 60000000)

The idleness is measured on the *arrival* clock, not the wall clock, so that
the same log gives the same watermarks however it is cut into micro-batches.
Worst-case delay before an idle partition stops holding ``W`` back: exactly
``idle_timeout`` of arrival time (checked at every row, not periodically).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from lowwater.time import NEG_INF


@dataclass(frozen=True)
class BoundedOutOfOrderness:
    """``W_p = max(event_time seen on p) - L``; undefined until ``p`` produced a row."""

    max_out_of_orderness_us: int

    def __post_init__(self) -> None:
        if self.max_out_of_orderness_us < 0:
            msg = "max_out_of_orderness cannot be negative"
            raise ValueError(msg)

    def watermark(self, max_event_us: np.ndarray) -> np.ndarray:
        """Vectorised: partition watermark from the running max event time."""
        m = np.asarray(max_event_us, dtype=np.int64)
        return np.where(m <= NEG_INF, NEG_INF, m - self.max_out_of_orderness_us)


@dataclass(frozen=True)
class WatermarkStrategy:
    """How the low watermark of a pipeline is generated and combined.

    Attributes:
        max_out_of_orderness_us: default bound ``L`` for every partition.
        per_partition_us: bounds for named partitions that differ from ``L``.
        idle_timeout_us: a partition with no arrivals for longer than this
            (arrival clock) leaves the min until it produces again.
        declared_partitions: partitions that must all report before ``W`` is
            defined; others are discovered and join when they first produce.
        max_future_skew_us: event times further than this ahead of their
            arrival time are clamped to the arrival time (SEMANTICS.md §5).
    """

    max_out_of_orderness_us: int = 0
    per_partition_us: tuple[tuple[str, int], ...] = ()
    idle_timeout_us: int | None = None
    declared_partitions: tuple[str, ...] = ()
    max_future_skew_us: int | None = None
    _bounds: dict[str, int] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        BoundedOutOfOrderness(self.max_out_of_orderness_us)
        for _, bound in self.per_partition_us:
            BoundedOutOfOrderness(bound)
        if self.idle_timeout_us is not None and self.idle_timeout_us <= 0:
            msg = "idle_timeout must be positive"
            raise ValueError(msg)
        self._bounds.update(dict(self.per_partition_us))

    @classmethod
    def for_bounded_out_of_orderness(cls, bound_us: int) -> WatermarkStrategy:
        return cls(max_out_of_orderness_us=bound_us)

    def with_idleness(self, idle_timeout_us: int | None) -> WatermarkStrategy:
        return replace(self, idle_timeout_us=idle_timeout_us, _bounds={})

    def with_partitions(self, partitions: list[str] | tuple[str, ...]) -> WatermarkStrategy:
        return replace(self, declared_partitions=tuple(str(p) for p in partitions), _bounds={})

    def with_bounds(self, bounds: dict[str, int]) -> WatermarkStrategy:
        return replace(self, per_partition_us=tuple(sorted(bounds.items())), _bounds={})

    def with_max_future_skew(self, skew_us: int | None) -> WatermarkStrategy:
        return replace(self, max_future_skew_us=skew_us, _bounds={})

    def bound_for(self, partition: str) -> int:
        return self._bounds.get(partition, self.max_out_of_orderness_us)

    def generator_for(self, partition: str) -> BoundedOutOfOrderness:
        return BoundedOutOfOrderness(self.bound_for(partition))


def clip_future(
    event_us: np.ndarray, arrival_us: np.ndarray | None, max_future_skew_us: int | None
) -> tuple[np.ndarray, np.ndarray]:
    """Clamp event times too far ahead of their arrival (SEMANTICS.md §5).

    One device with a wrong clock must not drag ``W`` forward and make everyone
    else late. Returns the clipped event times and a mask of clipped rows.

    >>> clip_future(np.array([5, 100]), np.array([10, 10]), 20)[0].tolist()
    [5, 10]
    """
    ev = np.asarray(event_us, dtype=np.int64)
    if arrival_us is None or max_future_skew_us is None:
        return ev, np.zeros(len(ev), dtype=bool)
    arr = np.asarray(arrival_us, dtype=np.int64)
    mask = ev > arr + max_future_skew_us
    return np.where(mask, arr, ev), mask

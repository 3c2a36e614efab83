"""Pass 1 of the row clock: one partition's rows in, its change points out.

``W_p`` depends only on the partition's own rows in their own order, and its
activity only on their arrival times (SEMANTICS.md §2), so each partition is
summarised where its rows are, by its **unchanged** generator resumed from its
snapshot. The summary keeps only the rows where something the fold needs
happens (the *critical* rows):

* the first and the last row;
* every row after which ``W_p`` changes;
* both ends of every arrival gap longer than ``gap_us`` (the smallest
  ``idle_timeout`` of the pipeline): where the partition may go idle and
  where it comes back.

Between two critical rows ``W_p`` is constant and the partition is active
whenever a row of the log can be evaluated (its next row comes within its
timeout), so the summary is exact. It is small when ``W_p`` moves rarely; where
it moves on every row (a perfectly in-order partition) it holds every row and
is still exact.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from lowwater.core.row_clock.keys import pack
from lowwater.core.watermarks import PartitionRows, WatermarkStrategy, clip_future
from lowwater.time import NEG_INF, POS_INF


@dataclass(frozen=True)
class PartitionSummary:
    """What one partition's batch contributes to the global watermark (O(critical rows)).

    Per critical row (in arrival order): its key, arrival, ``W_p`` after it and
    the arrival of the partition's next row of the batch (``POS_INF`` after
    the last). ``snapshot`` is the generator's after the batch.
    """

    source: str
    partition: str
    rows: int
    keys: np.ndarray  # S16
    arrival_us: np.ndarray | None
    watermark_us: np.ndarray
    next_arrival_us: np.ndarray | None
    snapshot: dict[str, Any]
    regressions: int  # the generator's own ignored proposals
    clipped: int
    markers: int
    gap_us: int | None  # gaps longer than this are kept (None: no idleness anywhere)
    has_marker: bool

    @property
    def first_arrival_us(self) -> int:
        return NEG_INF if self.arrival_us is None else int(self.arrival_us[0])

    @property
    def last_arrival_us(self) -> int:
        return NEG_INF if self.arrival_us is None else int(self.arrival_us[-1])

    def gaps(self) -> tuple[np.ndarray, np.ndarray]:
        """Arrival gaps longer than ``gap_us`` inside the batch: (last arrival before, first after)."""
        if self.arrival_us is None or self.next_arrival_us is None or self.gap_us is None:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        at = (self.next_arrival_us < POS_INF) & (self.next_arrival_us - self.arrival_us > self.gap_us)
        return self.arrival_us[at], self.next_arrival_us[at]


def gap_for(strategies: dict[str, WatermarkStrategy]) -> int | None:
    """The gap a summary must keep: the smallest ``idle_timeout`` of the pipeline (``None``: no idleness)."""
    timeouts = [s.idle_timeout_us for s in strategies.values() if s.idle_timeout_us is not None]
    return min(timeouts) if timeouts else None


def summarise_partition(
    strategy: WatermarkStrategy,
    partition: str,
    snapshot: dict[str, Any] | None,
    rows: PartitionRows,
    key_major: np.ndarray,
    key_minor: np.ndarray,
    *,
    source: str = "default",
    gap_us: int | None = None,
) -> PartitionSummary:
    """Run the partition's generator from ``snapshot`` over its rows (in arrival order); keep the critical rows.

    ``rows.event_us`` are raw event times: they are clipped here (SEMANTICS.md §5)
    with the source's ``max_future_skew``, as the tracker's callers do. With an
    arrival clock ``key_major`` must be the arrival time (idleness is compared on it).
    """
    n = len(rows)
    if n == 0:
        msg = "a partition summary needs at least one row"
        raise ValueError(msg)
    arr = None if rows.arrival_us is None else np.asarray(rows.arrival_us, dtype=np.int64)
    major, minor = np.asarray(key_major, dtype=np.int64), np.asarray(key_minor, dtype=np.int64)
    if arr is not None and not np.array_equal(major, arr):
        msg = "with an arrival clock, a row's key must start with its arrival time"
        raise ValueError(msg)
    spec = strategy.generator_for(partition)
    spec.check_inputs(arr is not None, rows.marker is not None)
    event, clipped = clip_future(rows.event_us, arr, strategy.max_future_skew_us)
    gen = spec.build(snapshot or None)
    emitted = gen.on_rows(PartitionRows(event, arr, rows.marker))
    wm = np.asarray(emitted.watermark_us, dtype=np.int64)
    critical = np.zeros(n, dtype=bool)
    critical[0] = critical[-1] = True
    critical[1:] |= wm[1:] != wm[:-1]
    nxt = None
    if arr is not None:
        nxt = np.concatenate([arr[1:], [POS_INF]])
        if gap_us is not None:
            gap = (nxt - arr > gap_us) & (nxt < POS_INF)
            critical |= gap
            critical[1:] |= gap[:-1]
    at = np.flatnonzero(critical)
    marker = rows.marker
    return PartitionSummary(
        source=source,
        partition=partition,
        rows=n,
        keys=pack(major[at], minor[at]),
        arrival_us=None if arr is None else arr[at],
        watermark_us=wm[at],
        next_arrival_us=None if nxt is None else nxt[at],
        snapshot=gen.snapshot(),
        regressions=emitted.regressions,
        clipped=int(clipped.sum()),
        markers=0 if marker is None else int(np.asarray(marker, dtype=bool).sum()),
        gap_us=gap_us,
        has_marker=marker is not None,
    )

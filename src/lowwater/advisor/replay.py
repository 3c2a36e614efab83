"""The exact replay of a log, in memory: strategies per source in, the what-if figures out.

The pure entry point for several sources and for comparing strategies on the
same history (``lowwater whatif --compare``): each lane (a label and one
strategy per source) gets its own tracker, as the engine would run it, through
the same sweeps as the grid (:mod:`lowwater.advisor.sweep`,
:mod:`lowwater.advisor.session_sweep`). The Spark job feeds the sweeps chunk by
chunk; this module feeds them a log held in memory.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from lowwater.advisor.lanes import Strategies
from lowwater.advisor.session_sweep import SessionSweep
from lowwater.advisor.sweep import LatenessSweep
from lowwater.core.judge import arrival_order
from lowwater.core.windows import SessionWindows, WindowAssigner


@dataclass(frozen=True)
class Log:
    """A log's valid rows (one array per column) and its dead-letter count."""

    partitions: np.ndarray
    event_us: np.ndarray
    key_hash: np.ndarray
    arrival_us: np.ndarray | None = None
    sources: np.ndarray | None = None
    markers: np.ndarray | None = None
    offsets: np.ndarray | None = None
    batch_ids: np.ndarray | None = None  # micro-batch per row (None: the log is one micro-batch)
    dead_letter: int = 0

    def in_arrival_order(self) -> Log:
        """The rows sorted by ``(arrival_time, source, partition, offset)``, the order across sources."""
        parts = np.asarray(self.partitions).astype(str)
        by = parts if self.sources is None else np.char.add(np.char.add(np.asarray(self.sources).astype(str),
                                                                         "\x00"), parts)
        order = arrival_order(len(self.event_us), self.arrival_us, by, self.offsets)

        def take(a: np.ndarray | None) -> np.ndarray | None:
            return None if a is None else np.asarray(a)[order]

        return Log(parts[order], np.asarray(self.event_us)[order], np.asarray(self.key_hash)[order],
                   take(self.arrival_us), take(self.sources), take(self.markers), take(self.offsets),
                   take(self.batch_ids), self.dead_letter)


def replay(
    lanes: Mapping[str, Strategies],
    assigner: WindowAssigner,
    grace_us: int,
    log: Log,
    chunk_rows: int | None = None,
) -> dict[str, dict]:
    """Each lane's result dict (``COMPARE_FIELDS``), every lane replayed exactly over ``log`` in arrival order."""
    ordered = log.in_arrival_order()
    if not lanes:
        return {}
    strategies = next(iter(lanes.values()))  # clipping and source names: the sources are the same in every lane
    cls = SessionSweep if isinstance(assigner, SessionWindows) else LatenessSweep
    sweep = cls(strategies, assigner, [], [grace_us], compare=lanes)  # type: ignore[arg-type]
    n = len(ordered.event_us)
    batches = np.zeros(n, dtype=np.int64) if ordered.batch_ids is None else ordered.batch_ids  # chunks are no cut
    step = chunk_rows or max(n, 1)
    for lo in range(0, max(n, 1), step):
        hi = min(n, lo + step)

        def part(a: np.ndarray | None, lo: int = lo, hi: int = hi) -> np.ndarray | None:
            return None if a is None else a[lo:hi]

        sweep.feed(ordered.partitions[lo:hi], ordered.event_us[lo:hi], ordered.key_hash[lo:hi],
                   part(ordered.arrival_us), ordered.dead_letter if lo == 0 else 0, part(batches),
                   part(ordered.sources), part(ordered.markers))
    return {r["strategy"]: r for r in sweep.results()}

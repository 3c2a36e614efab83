"""The watermarks a what-if replay compares: one *lane* per bound of the grid or per compared strategy.

A lane is one watermark configuration (a strategy per source) and gives every
row its ``W(r)``. Two ways to compute them, and the choice is made here only:

* :class:`ShiftedLanes`, the fast path: with one bounded ``L`` for every
  partition of every source, each step of the low watermark (per-partition
  max minus ``L``, min over active partitions, running max) commutes with
  subtracting ``L``, and idleness and declared partitions depend on the arrival
  clock only. So ``W_L(r) = W_0(r) - L`` exactly and one tracker at ``L = 0``
  serves the whole grid. It refuses any other strategy.
* :class:`ExactLanes`: one :class:`~lowwater.core.tracker.WatermarkTracker` per
  lane, as the engine would run it. Always exact; one tracker scan per lane.
  Punctuated and adaptive generators and per-partition bounds take this path:
  a marker or a delay quantile does not shift with ``L``, and per-partition
  overrides keep their own bound while the grid moves the default.

:func:`grid_lanes` picks the path for a grid of ``L`` (:func:`shift_is_exact`);
``--compare`` strategies always run exactly.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace

import numpy as np

from lowwater.core.tracker import DEFAULT_SOURCE, PartitionCodes, WatermarkTracker
from lowwater.core.watermarks import WatermarkStrategy, clip_future
from lowwater.time import NEG_INF

LaneKey = int | str
"""A bound of the grid (µs) or the label of a compared strategy."""

Strategies = Mapping[str, WatermarkStrategy]
"""Source name -> its strategy (a single ``[source]`` is ``{"default": strategy}``)."""

L_SAMPLE_ROWS = 1024
"""An adaptive lane's ``L`` in force is read after every row of a run up to 256 rows, else every
``run / 256`` rows, and at least every this many rows (for its range)."""


def at_bound(strategy: WatermarkStrategy, bound_us: int) -> WatermarkStrategy:
    """The strategy a grid point ``L`` replays.

    Bounded: ``L`` is the default bound; per-partition overrides keep theirs.
    Any other generator says itself (``GeneratorSpec.at_bound``): adaptive makes
    ``L`` its floor ``min_lateness``; punctuated is unchanged (markers carry no bound).
    """
    if strategy.generator is None:
        return replace(strategy, max_out_of_orderness_us=bound_us, _bounds={})
    moved = strategy.generator.at_bound(bound_us)
    return strategy if moved == strategy.generator else replace(strategy, generator=moved, _bounds={})


def shift_is_exact(strategies: Strategies) -> bool:
    """``W_L = W_0 - L`` holds only when every partition of every source is bounded by the grid's ``L``."""
    return all(s.generator is None and not s.per_partition_us for s in strategies.values())


@dataclass(frozen=True)
class Chunk:
    """A chunk of rows in arrival order, as every lane sees them (event times already clipped)."""

    coded: PartitionCodes
    sources: np.ndarray | None  # source name per row, None for a single source
    event_us: np.ndarray
    arrival_us: np.ndarray | None
    markers: np.ndarray | None  # True on marker rows of punctuated sources
    starts: list[int]  # first row of each micro-batch run of the chunk

    @property
    def stops(self) -> list[int]:
        return [*self.starts[1:], len(self.event_us)]


@dataclass(frozen=True)
class LaneScan:
    """One lane over a chunk: ``W(r)`` per row, ``W`` after each micro-batch run and after the chunk."""

    row_us: np.ndarray
    run_us: np.ndarray
    end_us: int

    def after_rows(self) -> np.ndarray:
        """``W`` after each row: the next row's ``W(r)``, and ``W`` after the chunk for the last."""
        return np.concatenate([self.row_us[1:], [self.end_us]])


def clip_by_source(strategies: Strategies, sources: np.ndarray | None, event_us: np.ndarray,
                   arrival_us: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """SEMANTICS.md §5 with each source's ``max_future_skew``: clipped event times and the clipped mask."""
    if sources is None:
        (only,) = strategies.values()
        return clip_future(event_us, arrival_us, only.max_future_skew_us)
    event = np.asarray(event_us, dtype=np.int64).copy()
    clipped = np.zeros(len(event), dtype=bool)
    for name, s in strategies.items():
        rows = np.flatnonzero(sources == name)
        if len(rows):
            event[rows], clipped[rows] = clip_future(
                event[rows], None if arrival_us is None else arrival_us[rows], s.max_future_skew_us
            )
    return event, clipped


@contextmanager
def _quiet_tracker() -> Iterator[None]:
    """The tracker logs ignored regressions once per engine step; a replay feeding it in pieces would repeat it."""
    logger = logging.getLogger("lowwater.core.tracker")
    was, logger.disabled = logger.disabled, True
    try:
        yield
    finally:
        logger.disabled = was


def _scan(tracker: WatermarkTracker, chunk: Chunk, markers: bool, sample: list[int] | None) -> LaneScan:
    """Feed ``tracker`` one micro-batch run at a time, as the engine feeds it.

    ``W`` after a run is exactly the one the engine frees state with (idleness
    is judged at the run's last arrival); ``W(r)`` does not depend on the cut
    (SEMANTICS.md §8), so a run may be fed in pieces to ``sample`` the ``L`` in
    force (adaptive lanes).
    """
    n = len(chunk.event_us)
    row = np.empty(n, dtype=np.int64)
    runs = np.empty(len(chunk.starts), dtype=np.int64)
    for i, (lo, hi) in enumerate(zip(chunk.starts, chunk.stops, strict=True)):
        step = min(L_SAMPLE_ROWS, -(-(hi - lo) // 256)) if sample is not None else hi - lo
        for a in range(lo, hi, max(step, 1)):
            b = min(hi, a + step)
            row[a:b] = tracker.advance(
                PartitionCodes(chunk.coded.names, chunk.coded.codes[a:b]),
                chunk.event_us[a:b],
                None if chunk.arrival_us is None else chunk.arrival_us[a:b],
                sources=None if chunk.sources is None else chunk.sources[a:b],
                markers=chunk.markers[a:b] if markers and chunk.markers is not None else None,
            )
            if sample is not None:
                sample.extend(s.lateness_us for s in tracker.statuses() if s.lateness_us is not None)
        runs[i] = tracker.watermark_us
    return LaneScan(row, runs, tracker.watermark_us)


class ShiftedLanes:
    """One tracker at ``L = 0`` for a whole grid of bounds: ``W_L = W_0 - L`` (exact, see the module)."""

    def __init__(self, strategies: Strategies, bounds_us: list[int]) -> None:
        if not shift_is_exact(strategies):
            msg = "the shift W_L = W_0 - L is exact only for one bounded L everywhere; replay exactly instead"
            raise ValueError(msg)
        self.keys: list[LaneKey] = sorted(set(bounds_us))
        self.tracker = WatermarkTracker({k: at_bound(s, 0) for k, s in strategies.items()})

    def scan(self, chunk: Chunk) -> dict[LaneKey, LaneScan]:
        w0 = _scan(self.tracker, chunk, False, None)
        return {b: LaneScan(shifted(w0.row_us, b), shifted(w0.run_us, b), int(shifted(w0.end_us, b)))
                for b in self.keys}

    def lateness_range(self, key: LaneKey) -> tuple[int, int] | None:
        return None

    @property
    def low_us(self) -> int:
        """The lowest ``W`` of all lanes after the last chunk."""
        w0 = self.tracker.watermark_us
        return w0 if w0 <= NEG_INF else w0 - int(max(self.keys))


class ExactLanes:
    """One tracker per lane: the replay the engine would run with that lane's strategies."""

    def __init__(self, lanes: Mapping[LaneKey, Strategies]) -> None:
        self.keys: list[LaneKey] = list(lanes)
        self.trackers = {k: WatermarkTracker(dict(s)) for k, s in lanes.items()}
        self.markers = {k: any(s.marker for s in lanes[k].values()) for k in lanes}
        self.adaptive = {k for k, s in lanes.items()
                         if any(x.generator is not None and x.generator.lateness_varies for x in s.values())}
        self.samples: dict[LaneKey, list[int]] = {k: [] for k in self.adaptive}

    def scan(self, chunk: Chunk) -> dict[LaneKey, LaneScan]:
        with _quiet_tracker():
            return {k: _scan(t, chunk, self.markers[k], self.samples.get(k)) for k, t in self.trackers.items()}

    def lateness_range(self, key: LaneKey) -> tuple[int, int] | None:
        """Lowest and highest ``L`` an adaptive lane had in force (sampled, see :data:`L_SAMPLE_ROWS`)."""
        seen = self.samples.get(key)
        return (min(seen), max(seen)) if seen else None

    @property
    def low_us(self) -> int:
        return min(t.watermark_us for t in self.trackers.values())


Lanes = ShiftedLanes | ExactLanes


def grid_lanes(strategies: Strategies, bounds_us: list[int]) -> Lanes:
    """The grid's lanes: the shift trick where it is exact, one tracker per bound otherwise."""
    if shift_is_exact(strategies):
        return ShiftedLanes(strategies, bounds_us)
    return ExactLanes({b: {k: at_bound(s, b) for k, s in strategies.items()} for b in sorted(set(bounds_us))})


def as_strategies(strategy: WatermarkStrategy | Strategies) -> dict[str, WatermarkStrategy]:
    """A single strategy as the one source of a pipeline with a single ``[source]``."""
    return {DEFAULT_SOURCE: strategy} if isinstance(strategy, WatermarkStrategy) else dict(strategy)


def shifted(w0: np.ndarray | int, bound_us: int) -> np.ndarray:
    """``W_L`` from ``W_0``: subtract ``L`` where the watermark is defined."""
    w = np.asarray(w0, dtype=np.int64)
    return np.where(w <= NEG_INF, NEG_INF, w - bound_us)

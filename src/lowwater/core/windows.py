"""Window assigners: which event-time windows a row belongs to.

Windows are half-open intervals ``[start, end)`` in integer microseconds; a row
at exactly ``end`` belongs to the next window (SEMANTICS.md §3). Assignment
uses ``event_time`` only. Assigners are vectorised: they take an int64 array of
event times and return one output element per (row, window) pair.

Tumbling and hopping windows are fixed by assignment alone. Session windows
(:class:`SessionWindows`) also *merge*: each row first gets its proto-window
``[t, t + gap)``, and proto-windows of a key that overlap merge into one
session ``[first, last + gap)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np


@dataclass(frozen=True, order=True)
class Window:
    """A half-open event-time interval ``[start_us, end_us)``."""

    start_us: int
    end_us: int

    def __repr__(self) -> str:
        return f"[{self.start_us}, {self.end_us})"


@dataclass(frozen=True)
class Assignment:
    """Result of assigning windows to a batch of rows.

    ``row[i]`` is the index of the input row of pair ``i``; ``start[i]`` and
    ``end[i]`` bound its window.
    """

    row: np.ndarray
    start: np.ndarray
    end: np.ndarray


class WindowAssigner(Protocol):
    """The whole contract of a non-merging window function: assign."""

    def assign(self, event_us: np.ndarray) -> Assignment: ...

    @property
    def windows_per_row(self) -> int: ...


@dataclass(frozen=True)
class TumblingWindows:
    """Fixed, non-overlapping windows ``[k*size + offset, (k+1)*size + offset)``.

    >>> TumblingWindows(10).assign(np.array([0, 9, 10, -1])).start.tolist()
    [0, 0, 10, -10]
    """

    size_us: int
    offset_us: int = 0

    def __post_init__(self) -> None:
        if self.size_us <= 0:
            msg = "window size must be positive"
            raise ValueError(msg)

    @property
    def windows_per_row(self) -> int:
        return 1

    def assign(self, event_us: np.ndarray) -> Assignment:
        """Each event time's one window ``[start, start + size)`` (vectorised)."""
        ev = np.asarray(event_us, dtype=np.int64)
        start = ev - np.mod(ev - self.offset_us, self.size_us)
        return Assignment(np.arange(len(ev), dtype=np.int64), start, start + self.size_us)


@dataclass(frozen=True)
class HoppingWindows:
    """Overlapping windows of ``size`` every ``slide``: ``[k*slide, k*slide + size)``.

    Each row falls in ``size / slide`` windows (``size`` must be a multiple of
    ``slide``), and is judged per window.

    >>> a = HoppingWindows(10, 5).assign(np.array([7]))
    >>> list(zip(a.start.tolist(), a.end.tolist()))
    [(0, 10), (5, 15)]
    """

    size_us: int
    slide_us: int
    offset_us: int = 0

    def __post_init__(self) -> None:
        if self.size_us <= 0 or self.slide_us <= 0:
            msg = "window size and slide must be positive"
            raise ValueError(msg)
        if self.size_us % self.slide_us:
            msg = "window size must be a multiple of the slide"
            raise ValueError(msg)

    @property
    def windows_per_row(self) -> int:
        return self.size_us // self.slide_us

    def assign(self, event_us: np.ndarray) -> Assignment:
        """Each event time's ``size / slide`` windows, one row per (event, window) (vectorised)."""
        ev = np.asarray(event_us, dtype=np.int64)
        k = self.windows_per_row
        last_start = ev - np.mod(ev - self.offset_us, self.slide_us)
        # The k windows containing a row start at last_start, last_start - slide, ...
        starts = last_start[:, None] - self.slide_us * np.arange(k - 1, -1, -1)[None, :]
        rows = np.repeat(np.arange(len(ev), dtype=np.int64), k)
        start = starts.reshape(-1)
        return Assignment(rows, start, start + self.size_us)


@dataclass(frozen=True)
class SessionWindows:
    """Per-key sessions with inactivity gap ``gap``: ``[first, last + gap)``.

    Assignment gives each row its proto-window ``[t, t + gap)``; rows of a key
    closer than ``gap`` end up in one session, and a row that bridges two
    sessions merges them (SEMANTICS.md §3).

    >>> a = SessionWindows(5).assign(np.array([1, 3]))
    >>> list(zip(a.start.tolist(), a.end.tolist()))
    [(1, 6), (3, 8)]
    """

    gap_us: int

    def __post_init__(self) -> None:
        if self.gap_us <= 0:
            msg = "session gap must be positive"
            raise ValueError(msg)

    @property
    def windows_per_row(self) -> int:
        return 1

    def assign(self, event_us: np.ndarray) -> Assignment:
        ev = np.asarray(event_us, dtype=np.int64)
        return Assignment(np.arange(len(ev), dtype=np.int64), ev, ev + self.gap_us)


@dataclass(frozen=True)
class NoWindows:
    """No window at all: for an operator that judges its rows itself from ``W(r)`` (the join).

    A row then has no (row, window) pair, so its row verdict is on time: the
    planner gives such an operator ``W(r)`` and arrival order only.

    >>> len(NoWindows().assign(np.array([5, 7])).row)
    0
    """

    @property
    def windows_per_row(self) -> int:
        return 0

    def assign(self, event_us: np.ndarray) -> Assignment:
        none = np.zeros(0, dtype=np.int64)
        return Assignment(none, none, none)

"""Timestamp clipping (SEMANTICS.md §5): an event time too far ahead of its arrival is clamped.

One device with a wrong clock must not drag ``W`` forward and make everyone
else late. Applied to the rows before any generator sees them.
"""

from __future__ import annotations

import numpy as np


def clip_future(
    event_us: np.ndarray, arrival_us: np.ndarray | None, max_future_skew_us: int | np.ndarray | None
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
    mask = (ev - arr) > max_future_skew_us
    return np.where(mask, arr, ev), mask


def skew_per_row(skew_us: np.ndarray | list[int | None]) -> np.ndarray:
    """Per-row ``max_future_skew`` (``None``/NaN: no clipping) as int64 for :func:`clip_future`.

    Rows of a union of sources carry their own source's bound.
    """
    values = np.asarray(skew_us, dtype=object)
    none = np.array([v is None or (isinstance(v, float) and v != v) for v in values], dtype=bool)
    out = np.full(len(values), np.iinfo(np.int64).max, dtype=np.int64)
    out[~none] = values[~none].astype(np.int64)
    return out

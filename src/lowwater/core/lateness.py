"""Lateness: is a row on time, a late update, or too late for a window?

For a window ``w`` and the watermark ``W(r)`` seen by row ``r``
(SEMANTICS.md §4), with allowed lateness (grace) ``G``:

* on time      iff ``end(w) >  W(r)``
* late update  iff ``end(w) <= W(r) < end(w) + G``
* too late     iff ``end(w) + G <= W(r)``

A row that falls in several windows (hopping) is judged per window; its
row-level class, the one the accounting counts, is the *worst* of its windows:
a row is counted ``too_late`` if any of its windows lost it (that part went to
the late output), ``late_update`` if none lost it but one was revised.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum, StrEnum

import numpy as np


class Lateness(IntEnum):
    """Per-(row, window) verdict, ordered from best to worst."""

    ON_TIME = 0
    LATE_UPDATE = 1
    TOO_LATE = 2


class LatePolicy(StrEnum):
    """What happens to too-late rows: counted and dropped, or written whole."""

    DROP = "drop"
    SIDE_OUTPUT = "side_output"


TOO_LATE_REASON = "too late: window end + allowed lateness <= watermark"
# Rows that reached a drained checkpoint (``lowwater run --after-drain``): W was already +inf.
DRAINED_REASON = "too late: the input had been declared finished (drained, watermark = +inf)"


@dataclass(frozen=True)
class AllowedLateness:
    """Grace period ``G`` (µs) during which a fired window still takes rows."""

    grace_us: int = 0

    def __post_init__(self) -> None:
        if self.grace_us < 0:
            msg = "allowed lateness cannot be negative"
            raise ValueError(msg)


def classify(window_end_us: np.ndarray, watermark_us: np.ndarray, grace_us: int) -> np.ndarray:
    """Vectorised verdict per (row, window) pair, as ``Lateness`` int8 codes.

    >>> classify(np.array([10, 10, 10]), np.array([9, 10, 12]), 2).tolist()
    [0, 1, 2]
    """
    end = np.asarray(window_end_us, dtype=np.int64)
    w = np.asarray(watermark_us, dtype=np.int64)
    out = np.zeros(len(end), dtype=np.int8)
    out[end <= w] = Lateness.LATE_UPDATE
    out[end + grace_us <= w] = Lateness.TOO_LATE
    return out


def row_verdicts(pair_row: np.ndarray, pair_verdict: np.ndarray, n_rows: int) -> np.ndarray:
    """Row-level class: the worst verdict over the row's windows."""
    out = np.zeros(n_rows, dtype=np.int8)
    np.maximum.at(out, pair_row, pair_verdict)
    return out


def fired(window_end_us: np.ndarray | int, watermark_us: int) -> np.ndarray | bool:
    """A window fires (its on-time result is final) once ``W >= end``."""
    return np.asarray(window_end_us) <= watermark_us


def freed(window_end_us: np.ndarray | int, watermark_us: int, grace_us: int) -> np.ndarray | bool:
    """A window's state is freed once ``W >= end + G``: no open window outlives its grace."""
    return np.asarray(window_end_us) + grace_us <= watermark_us

"""Punctuated watermarks: ``W_p`` moves only on marker rows the source emits (SEMANTICS.md §2).

A CDC stream can *prove* its progress: a commit marker says "everything up to
this timestamp has been written". A marker row is identified by a boolean
column (``marker = "is_marker"``) and carries the proven timestamp in the
event-time column; it is not data (the engine neither windows nor counts it as
a row, it counts it as a marker). Data rows never move ``W_p``.

``W_p`` is the largest marker timestamp so far; a marker older than that
proposes a regression, which is ignored and counted. A partition that has
produced data but no marker yet takes part in the min with an undefined
``W_p``: it has promised nothing, so ``W`` holds until its first marker (or
until it goes idle, with the idleness wrapper).

Timeline (``M`` a marker, ``.`` a data row; event times above)::

    event   5   3   9   12  4   8
    row     .   M   .   M   .   M
    W_p    -inf 3   3   12  12  12   (the marker at 8 < 12: one regression)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from lowwater.core.watermarks.protocol import Emitted, GeneratorSpec, PartitionRows
from lowwater.time import NEG_INF, POS_INF


@dataclass(frozen=True)
class Punctuated(GeneratorSpec):
    """``W_p`` = the newest marker timestamp; ``marker`` names the boolean column.

    >>> g = Punctuated("is_marker").build()
    >>> rows = PartitionRows(np.array([5, 3, 9, 12, 4, 8]), marker=np.array([0, 1, 0, 1, 0, 1], bool))
    >>> e = g.on_rows(rows)
    >>> e.watermark_us.tolist()[1:], e.regressions
    ([3, 3, 12, 12, 12], 1)
    """

    marker: str
    kind: ClassVar[str] = "punctuated"

    def __post_init__(self) -> None:
        if not self.marker:
            msg = "marker: expected a column name"
            raise ValueError(msg)

    def build(self, snapshot: dict[str, Any] | None = None) -> PunctuatedGenerator:
        g = PunctuatedGenerator()
        if snapshot:
            g.restore(snapshot)
        return g

    def check_inputs(self, has_arrival: bool, has_marker: bool) -> None:
        if not has_marker:
            msg = f"punctuated watermarks need the marker column ({self.marker!r})"
            raise ValueError(msg)

    def marker_column(self) -> str | None:
        return self.marker

    def describe(self) -> str:
        return f"punctuated marker={self.marker}"


class PunctuatedGenerator:
    """Running max over marker rows; data rows only mark the partition as reported."""

    def __init__(self) -> None:
        self._watermark_us = NEG_INF
        self._reported = False

    def on_rows(self, rows: PartitionRows) -> Emitted:
        ev = np.asarray(rows.event_us, dtype=np.int64)
        if not len(ev):
            return Emitted(np.zeros(0, dtype=np.int64))
        if rows.marker is None:
            msg = "punctuated watermarks need a marker column"
            raise ValueError(msg)
        marker = np.asarray(rows.marker, dtype=bool)
        proposed = np.where(marker, ev, NEG_INF)
        after = np.maximum.accumulate(np.maximum(proposed, self._watermark_us))
        before = np.concatenate([[self._watermark_us], after[:-1]])
        regressions = int((marker & (ev < before) & (before > NEG_INF)).sum())
        self._watermark_us = int(after[-1])
        self._reported = True
        return Emitted(after, regressions=regressions)

    @property
    def watermark_us(self) -> int:
        return self._watermark_us

    @property
    def reported(self) -> bool:
        return self._reported

    @property
    def lateness_us(self) -> int | None:
        return None

    def active_until_us(self, start_clock_us: int) -> int:
        return POS_INF

    def snapshot(self) -> dict[str, Any]:
        return {"watermark_us": self._watermark_us, "reported": self._reported}

    def restore(self, snapshot: dict[str, Any]) -> None:
        self._watermark_us = int(snapshot.get("watermark_us", NEG_INF))
        self._reported = bool(snapshot.get("reported", False))

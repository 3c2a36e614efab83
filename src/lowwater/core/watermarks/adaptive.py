"""Adaptive watermarks: ``L`` follows a quantile of the partition's recent delays (SEMANTICS.md §2).

A mobile feed's delay tail changes with the hour: a fixed ``L`` is too slow at
night or drops data on a festival evening. After each row ``r`` of partition
``p`` the bound is

    L(r) = clamp(quantile_q(arrival - event over the window of r), min_lateness, max_lateness)
    W_p proposal = max(event seen on p) - L(r)

where the window of ``r`` is ``p``'s last ``rows`` rows up to and including
``r``, or those that arrived within ``over`` of ``r``'s arrival (both, when
both are given), and the quantile is the nearest-rank one (an observed delay).
Everything is a function of ``p``'s rows up to ``r`` in arrival order, and the
generator carries exactly the rows a later window can still see, so the same
log gives the same ``L`` and ``W_p`` after every row however it is cut (§8).
``L`` moves only on ``p``'s own rows; while ``p`` is silent it keeps its last
value (and the idleness wrapper takes ``p`` out of the min).

When ``L`` widens faster than the max event grows, the proposal falls below
the previous ``W_p``: it is ignored (``W_p`` never moves back) and counted as a
regression.

Timeline, ``rows = 3``, ``q = 1.0`` (the max delay of the last 3 rows)::

    arrival   10  11  12  13  14  15
    event     10  11   2  13  14  15      (row 3 is 10 late)
    delay      0   0  10   0   0   0
    L          0   0  10  10  10   0
    proposal  10  11   1   3   4  15
    W_p       10  11  11  11  11  15      (three proposals ignored and counted: 1, 3, 4)

The window holds the last ``rows`` delays (or the ``over`` of arrival time) in
the manifest: with ``over`` on a busy partition that can be many values, so
prefer ``rows`` when the rate is high.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, ClassVar

import numpy as np

from lowwater.core.watermarks.protocol import Emitted, GeneratorSpec, PartitionRows, setting_text
from lowwater.core.watermarks.quantiles import range_quantiles
from lowwater.time import NEG_INF, POS_INF


@dataclass(frozen=True)
class Adaptive(GeneratorSpec):
    """The delay quantile to follow, the window it is measured over, and the clamp on ``L``.

    >>> g = Adaptive(target_quantile=1.0, rows=3).build()
    >>> rows = PartitionRows(np.array([10, 11, 2, 13, 14, 15]), np.array([10, 11, 12, 13, 14, 15]))
    >>> e = g.on_rows(rows)
    >>> e.watermark_us.tolist(), e.regressions, g.lateness_us
    ([10, 11, 11, 11, 11, 15], 3, 0)
    """

    target_quantile: float = 0.999
    rows: int | None = None
    over_us: int | None = None
    min_lateness_us: int = 0
    max_lateness_us: int | None = None
    kind: ClassVar[str] = "adaptive"
    arrival_needed_for: ClassVar[str | None] = "the delay arrival_time - event_time is measured on the arrival clock"
    lateness_varies: ClassVar[bool] = True

    def __post_init__(self) -> None:
        if not 0.0 < self.target_quantile <= 1.0:
            msg = f"target_quantile: expected a number in (0, 1], got {self.target_quantile!r}"
            raise ValueError(msg)
        if self.rows is None and self.over_us is None:
            msg = "rows / over: an adaptive watermark needs a window (rows = N, or over = a duration)"
            raise ValueError(msg)
        if self.rows is not None and self.rows < 1:
            msg = f"rows: expected a positive integer, got {self.rows!r}"
            raise ValueError(msg)
        if self.over_us is not None and self.over_us <= 0:
            msg = "over: must be positive"
            raise ValueError(msg)
        if self.min_lateness_us < 0:
            msg = "min_lateness: cannot be negative"
            raise ValueError(msg)
        if self.max_lateness_us is not None and self.max_lateness_us < self.min_lateness_us:
            msg = "max_lateness: must not be below min_lateness"
            raise ValueError(msg)

    def build(self, snapshot: dict[str, Any] | None = None) -> AdaptiveGenerator:
        g = AdaptiveGenerator(self)
        if snapshot:
            g.restore(snapshot)
        return g

    def check_inputs(self, has_arrival: bool, has_marker: bool) -> None:
        if not has_arrival:
            msg = "adaptive watermarks need an arrival clock (source.arrival_time): the delay is arrival - event"
            raise ValueError(msg)

    def at_bound(self, bound_us: int) -> Adaptive:
        """A what-if grid point ``L`` is the floor ``min_lateness`` (``max_lateness`` rises to it if below)."""
        top = None if self.max_lateness_us is None else max(self.max_lateness_us, bound_us)
        return replace(self, min_lateness_us=bound_us, max_lateness_us=top)

    def describe(self) -> str:
        window = f"rows={self.rows}" if self.rows is not None else ""
        if self.over_us is not None:
            window = ", ".join(filter(None, [window, f"over={setting_text(self.over_us)}"]))
        return (f"adaptive target_quantile={self.target_quantile:g}, {window}, "
                f"min_lateness={setting_text(self.min_lateness_us)}, max_lateness={setting_text(self.max_lateness_us)}")


class AdaptiveGenerator:
    """Sliding-window delay quantile per row (vectorised), running max event, monotone ``W_p``."""

    def __init__(self, spec: Adaptive) -> None:
        self.spec = spec
        self.max_event_us = NEG_INF
        self._watermark_us = NEG_INF
        self._lateness_us: int | None = None
        self._delays = np.zeros(0, dtype=np.int64)  # the rows a later window can still see
        self._arrivals = np.zeros(0, dtype=np.int64)

    def on_rows(self, rows: PartitionRows) -> Emitted:
        ev = np.asarray(rows.event_us, dtype=np.int64)
        if not len(ev):
            return Emitted(np.zeros(0, dtype=np.int64))
        if rows.arrival_us is None:
            msg = "adaptive watermarks need an arrival clock"
            raise ValueError(msg)
        arr = np.asarray(rows.arrival_us, dtype=np.int64)
        spec = self.spec
        delays = np.concatenate([self._delays, arr - ev])
        arrivals = np.concatenate([self._arrivals, arr])
        at = len(self._delays) + np.arange(len(ev))  # each row's index in the carried + new rows
        lo = self._window_starts(arrivals, at)
        lateness = range_quantiles(delays, lo, at + 1, spec.target_quantile)
        lateness = np.maximum(lateness, spec.min_lateness_us)
        if spec.max_lateness_us is not None:
            lateness = np.minimum(lateness, spec.max_lateness_us)
        running_max = np.maximum.accumulate(np.maximum(ev, self.max_event_us))
        proposed = running_max - lateness
        after = np.maximum.accumulate(np.maximum(proposed, self._watermark_us))
        before = np.concatenate([[self._watermark_us], after[:-1]])
        regressions = int(((proposed < before) & (before > NEG_INF)).sum())
        keep = int(self._window_starts(arrivals, np.array([len(delays)]), arrivals[-1])[0])
        self._delays, self._arrivals = delays[keep:], arrivals[keep:]
        self.max_event_us = int(running_max[-1])
        self._watermark_us = int(after[-1])
        self._lateness_us = int(lateness[-1])
        return Emitted(after, regressions=regressions)

    def _window_starts(self, arrivals: np.ndarray, at: np.ndarray, clock: int | None = None) -> np.ndarray:
        """First row of the window of a row at index ``at`` (arriving at ``clock``, by default its own)."""
        lo = np.zeros(len(at), dtype=np.int64)
        if self.spec.rows is not None:
            lo = np.maximum(lo, at - self.spec.rows + 1)
        if self.spec.over_us is not None:
            now = arrivals[at] if clock is None else np.full(len(at), clock, dtype=np.int64)
            lo = np.maximum(lo, np.searchsorted(arrivals, now - self.spec.over_us, side="right"))
        return lo

    @property
    def watermark_us(self) -> int:
        return self._watermark_us

    @property
    def reported(self) -> bool:
        return self.max_event_us > NEG_INF

    @property
    def lateness_us(self) -> int | None:
        return self._lateness_us

    def active_until_us(self, start_clock_us: int) -> int:
        return POS_INF

    def snapshot(self) -> dict[str, Any]:
        snap: dict[str, Any] = {
            "max_event_us": self.max_event_us,
            "watermark_us": self._watermark_us,
            "lateness_us": self._lateness_us,
            "delays_us": self._delays.tolist(),
        }
        if self.spec.over_us is not None:
            snap["arrivals_us"] = self._arrivals.tolist()
        return snap

    def restore(self, snapshot: dict[str, Any]) -> None:
        self.max_event_us = int(snapshot.get("max_event_us", NEG_INF))
        self._watermark_us = int(snapshot.get("watermark_us", NEG_INF))
        lateness = snapshot.get("lateness_us")
        self._lateness_us = None if lateness is None else int(lateness)
        self._delays = np.asarray(snapshot.get("delays_us", []), dtype=np.int64)
        arrivals = snapshot.get("arrivals_us")
        # Without ``over`` arrival times do not bound the window: zeros keep the two arrays aligned.
        self._arrivals = (
            np.zeros(len(self._delays), dtype=np.int64) if arrivals is None else np.asarray(arrivals, dtype=np.int64)
        )

"""The arrival frontier: how far several independently cut sources may be judged.

Arrival order across sources is ``(arrival_time, source, partition, offset)``
(SEMANTICS.md §1), but Spark advances each source on its own: one source's
micro-batch may reach arrival time 600 s while another's reaches 20 s. A row
judged now must not precede, in arrival order, a row of another source that
only lands in a later micro-batch, or ``W(r)`` would depend on the cut (§8).

Each source's files arrive in arrival order, so once a source has delivered a
row arriving at ``a_s`` it will deliver nothing earlier. The **frontier** is
``F = min over sources of a_s``: every row arriving before ``F`` has been
delivered, whichever source it belongs to, so rows with ``arrival < F`` are
judged now, in arrival order, and the rest are *held* (kept in the checkpoint,
counted as ``held_rows``) until the frontier passes them. Strictly before: a
row of another source may still arrive *at* ``F``.

A source that has gone quiet would hold everything back for ever. As with a
partition (§2), a source whose watermark table sets ``idle_timeout`` stops
holding the frontier once the arrival clock (the latest arrival delivered by
any source) is more than ``idle_timeout`` past its own latest arrival; a
source that has delivered nothing yet counts from the run's first arrival.
Without ``idle_timeout`` a silent source holds the frontier until it delivers
or the run drains (``F = +inf``: everything held is judged). A row of an idle
source that arrives behind the frontier is judged when it comes, after rows
that arrived later: counted as an arrival regression, like a file that lands
out of order. This is the one place where a cut can change a result, and only
with a source idle by its configured timeout, as in Flink.

Pure numpy; the engine keeps :class:`FrontierState` in its manifest.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from lowwater.time import NEG_INF, POS_INF


@dataclass
class FrontierState:
    """Per source, the latest arrival it has delivered (``NEG_INF``: nothing yet); the run's first arrival."""

    latest_us: dict[str, int] = field(default_factory=dict)
    start_us: int = NEG_INF

    def to_json(self) -> dict:
        return {"latest_us": dict(self.latest_us), "start_us": self.start_us}

    @classmethod
    def from_json(cls, data: Mapping | None) -> FrontierState:
        if not data:
            return cls()
        return cls({str(k): int(v) for k, v in data.get("latest_us", {}).items()}, int(data.get("start_us", NEG_INF)))


@dataclass(frozen=True)
class ArrivalFrontier:
    """The frontier rule for a set of sources and their idle timeouts (``None``: never idle)."""

    idle_timeout_us: Mapping[str, int | None]

    def deliver(self, state: FrontierState, sources: np.ndarray, arrival_us: np.ndarray) -> None:
        """Record a micro-batch's delivered rows (any order; dead letters excluded by the caller)."""
        if not len(arrival_us):
            return
        arr = np.asarray(arrival_us, dtype=np.int64)
        names = np.asarray(sources)
        state.start_us = int(arr.min()) if state.start_us <= NEG_INF else min(state.start_us, int(arr.min()))
        for name in self.idle_timeout_us:
            mine = arr[names == name]
            if len(mine):
                state.latest_us[name] = max(state.latest_us.get(name, NEG_INF), int(mine.max()))

    def clock_us(self, state: FrontierState) -> int:
        """The arrival clock: the latest arrival any source has delivered."""
        return max(state.latest_us.values(), default=NEG_INF)

    def idle(self, state: FrontierState) -> list[str]:
        """Sources that no longer hold the frontier (silent for longer than their ``idle_timeout``)."""
        clock = self.clock_us(state)
        out = []
        for name, timeout in self.idle_timeout_us.items():
            if timeout is None or clock <= NEG_INF:
                continue
            since = state.latest_us.get(name, NEG_INF)
            since = state.start_us if since <= NEG_INF else since
            if since + timeout < clock:
                out.append(name)
        return out

    def frontier_us(self, state: FrontierState) -> int:
        """``F``, the earliest latest arrival of the sources that hold it (``POS_INF``: none does)."""
        idle = set(self.idle(state))
        holding = [state.latest_us.get(name, NEG_INF) for name in self.idle_timeout_us if name not in idle]
        return min(holding, default=POS_INF)

    def holder(self, state: FrontierState) -> str | None:
        """The source holding the frontier (the first by name on ties), for metrics and logs."""
        idle = set(self.idle(state))
        holding = sorted(
            (state.latest_us.get(name, NEG_INF), name) for name in self.idle_timeout_us if name not in idle
        )
        return holding[0][1] if holding else None

    def bounds(self, state: FrontierState) -> dict[str, tuple[int, str] | None]:
        """Per source, the ``(arrival, source)`` its rows must sort before to be judged (None: no bound).

        The bound of ``s`` is the least ``(latest_t, t)`` over the other
        holding sources ``t``: ``t`` can only deliver rows from there on.
        """
        idle = set(self.idle(state))
        holding = sorted(
            (state.latest_us.get(name, NEG_INF), name) for name in self.idle_timeout_us if name not in idle
        )
        out: dict[str, tuple[int, str] | None] = {}
        for name in self.idle_timeout_us:
            others = [(a, t) for a, t in holding if t != name]
            out[name] = others[0] if others else None
        return out

    def ready(self, state: FrontierState, sources: np.ndarray, arrival_us: np.ndarray) -> np.ndarray:
        """Mask of rows that may be judged now.

        A row of source ``s`` arriving at ``a`` is ready when every *other*
        holding source ``t`` can only deliver rows after it in arrival order:
        ``(a, s) < (latest_t, t)``. A source's own later rows come after its
        earlier ones (its files are in arrival order), so one source alone
        never waits for itself; the ready rows are always a prefix of the
        arrival order of what was delivered.
        """
        arr = np.asarray(arrival_us, dtype=np.int64)
        names = np.asarray(sources)
        bounds = self.bounds(state)
        out = np.zeros(len(arr), dtype=bool)
        for name in np.unique(names).tolist():
            rows = names == name
            bound = bounds.get(name)
            if bound is None:
                out[rows] = True
                continue
            at, first = bound
            out[rows] = (arr[rows] < at) | ((arr[rows] == at) & (name < first))
        return out

"""The what-if sweep for session windows: the engine's session state machine per (L, G).

A session's verdicts depend on its key's state (merges), so the group trick of
:mod:`lowwater.advisor.sweep` does not apply. What does carry over is the
watermark scan of :mod:`lowwater.advisor.lanes`: one tracker at ``L = 0`` for
the whole grid where ``W_L(r) = W_0(r) - L`` is exact, one per lane otherwise
(and per ``--compare`` strategy). Each (lane, G) then runs its own :class:`~lowwater.core.sessions.SessionMachine` (the
one the engine's executors run) over the arrival-sorted log, with ``advance``
at the end of each micro-batch (and of each chunk, which changes nothing: a
key's sessions are fired and freed before its next row anyway). The cost is
one Python step per row and (L, G) pair.

Per (L, G) it reports the fields of :data:`lowwater.advisor.sweep.FIELDS`:
accounting, completeness, sessions fired (finals) before the end of input and
those only a drain would fire, emit latency (``maxEventTimeSeen - end`` when a
session's final fires; mean and p99), peak live sessions (the engine's
``open_windows``: at micro-batch ends, after freeing; see
:mod:`lowwater.advisor.sweep`), too-late rows per partition.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from lowwater.advisor.lanes import LaneKey, Strategies
from lowwater.advisor.sweep import ReplayBase
from lowwater.core.accounting import Accounting
from lowwater.core.sessions import FINAL, NEVER, SessionMachine
from lowwater.core.watermarks import WatermarkStrategy
from lowwater.core.windows import SessionWindows


@dataclass
class _Run:
    """One (lane, G): its machine and what the results need."""

    lane: LaneKey
    grace_us: int
    machine: SessionMachine
    clipped: int = 0
    dead: int = 0
    fired: int = 0
    latencies_us: list[int] = field(default_factory=list)
    peak_open: int = 0  # at micro-batch ends
    open_now: int = 0  # at the end of the last chunk (a micro-batch end if the next row starts a new one)
    too_late_by_partition: dict[str, int] = field(default_factory=dict)


class SessionSweep(ReplayBase):
    """Feed a log in arrival order, chunk by chunk; read one result per (lane, G) (see ``LatenessSweep``)."""

    def __init__(
        self,
        strategy: WatermarkStrategy | Strategies,
        assigner: SessionWindows,
        bounds_us: list[int],
        graces_us: list[int],
        compare: Mapping[str, Strategies] | None = None,
    ) -> None:
        super().__init__(strategy, bounds_us, compare)
        self.gap_us = assigner.gap_us
        self.runs = [_Run(k, g, SessionMachine(self.gap_us, g, 0)) for k in self.keys for g in sorted(set(graces_us))]

    def _end_batch(self) -> None:
        for run in self.runs:
            run.peak_open = max(run.peak_open, run.open_now)

    def feed(
        self,
        partitions: np.ndarray,
        event_us: np.ndarray,
        key_hash: np.ndarray,
        arrival_us: np.ndarray | None = None,
        dead_letter: int = 0,
        batch_ids: np.ndarray | None = None,
        sources: np.ndarray | None = None,
        markers: np.ndarray | None = None,
    ) -> None:
        """One chunk of valid rows, in arrival order, plus the chunk's dead-letter count.

        ``batch_ids``: each row's micro-batch (non-decreasing); ``None``: the
        chunk is one micro-batch. ``sources`` and ``markers`` as in
        :meth:`lowwater.advisor.sweep.LatenessSweep.feed`.
        """
        for run in self.runs:
            run.dead += int(dead_letter)
        c = self._prepare(partitions, event_us, arrival_us, sources, markers, batch_ids)
        if c is None:
            return
        n = c.n
        # Max event time seen before each row (for latencies of sessions fired before it), and after the chunk.
        seen_before = np.concatenate([[c.max_before], c.cum_max[:-1]]).tolist()
        keys = np.asarray(key_hash, dtype=np.int64).tolist()
        ev = c.event_us.tolist()
        codes = c.labels.codes.tolist()
        is_data = np.zeros(n, dtype=bool)
        is_data[c.data] = True
        data = is_data.tolist()
        for run in self.runs:
            scan = c.scans[run.lane]
            run.clipped += c.n_clipped
            m = run.machine
            process = m.process
            emissions = m.emissions
            w_rows = scan.row_us.tolist()
            lo = 0
            for last, w_end in zip(c.run_last_row.tolist(), scan.run_us.tolist(), strict=True):
                for i in range(lo, last + 1):
                    if not data[i]:
                        continue  # a marker row: it moved W, it is not data
                    process(keys[i], ev[i], w_rows[i], (), codes[i])
                    if emissions:
                        self._fired(run, seen_before[i])
                        emissions = m.emissions
                m.advance(w_end)
                self._fired(run, int(c.cum_max[last]))
                emissions = m.emissions
                if last < n - 1:  # a micro-batch ends inside the chunk
                    run.peak_open = max(run.peak_open, m.live())
                else:
                    run.open_now = m.live()
                lo = last + 1
            for x in m.take_too_late():
                name = c.labels.names[x.row]
                run.too_late_by_partition[name] = run.too_late_by_partition.get(name, 0) + 1

    @staticmethod
    def _fired(run: _Run, max_seen: int) -> None:
        for e in run.machine.take_emissions():
            if e.kind == FINAL:
                run.fired += 1
                run.latencies_us.append(max_seen - e.end_us)

    def results(self) -> list[dict]:
        """One dict per (lane, G): the fields of ``FIELDS`` (``COMPARE_FIELDS`` for a compared strategy)."""
        self._end_batch()  # the end of the log ends the last micro-batch
        out = []
        for run in self.runs:
            c = run.machine.counts
            acc = Accounting(rows=sum(c) + run.dead, on_time=c[0], late_updates=c[1], too_late=c[2],
                             dead_letter=run.dead, clipped=run.clipped)
            lat = np.array(run.latencies_us, dtype=np.float64) / 1e6
            drain_only = sum(1 for ss in run.machine.sessions.values() for s in ss if s.last_rev == NEVER)
            out.append(self._row(run.lane, run.grace_us, {
                "rows": acc.rows,
                "on_time": acc.on_time,
                "late_updates": acc.late_updates,
                "too_late": acc.too_late,
                "dead_letter": acc.dead_letter,
                "completeness": acc.completeness(),
                "windows_fired": run.fired,
                "windows_drain_only": drain_only,
                "emit_latency_mean": float(lat.mean()) if len(lat) else None,
                "emit_latency_p99": float(np.percentile(lat, 99)) if len(lat) else None,
                "peak_open_windows": run.peak_open,
                "too_late_by_partition": dict(sorted(run.too_late_by_partition.items())),
            }))
        return out

"""The what-if sweep: replay one log under many lateness bounds at once.

For every bound ``L`` a :class:`~lowwater.core.tracker.WatermarkTracker` runs
over the log in arrival order (the same tracker the engine uses); ``W(r)``
does not depend on the grace ``G``, so each ``L`` is scanned once and every
``G`` is judged from the same watermarks with the same ``classify``. The log is
fed in chunks (``feed``), so memory is bounded by the open windows, not by the
log; one pass serves the whole (L, G) grid.

Per (L, G) it reports SEMANTICS.md §6-§7: the accounting, completeness,
windows fired before the end of input (and those only a drain would fire),
emit latency (``maxEventTimeSeen - end(w)`` when ``W`` first reaches
``end(w)``; mean and p99 over (key, window) pairs), peak open (key, window)
state entries (sampled at chunk boundaries, as a micro-batch engine with
batches of one chunk would hold them), and too-late rows per partition.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from lowwater.core.accounting import Accounting
from lowwater.core.lateness import Lateness, classify, row_verdicts
from lowwater.core.tracker import PartitionCodes, WatermarkTracker
from lowwater.core.watermarks import WatermarkStrategy, clip_future
from lowwater.core.windows import WindowAssigner
from lowwater.time import NEG_INF

FIELDS = (
    "lateness", "allowed_lateness", "rows", "on_time", "late_updates", "too_late", "dead_letter", "completeness",
    "windows_fired", "windows_drain_only", "emit_latency_mean", "emit_latency_p99", "peak_open_windows",
    "too_late_by_partition",
)


@dataclass
class _PerGrace:
    accounting: Accounting = field(default_factory=Accounting)
    too_late_by_partition: dict[str, int] = field(default_factory=dict)
    open_entries: dict[int, np.ndarray] = field(default_factory=dict)  # end -> key hashes admitted, not freed
    peak_open: int = 0


@dataclass
class _PerBound:
    tracker: WatermarkTracker
    unfired: dict[int, np.ndarray] = field(default_factory=dict)  # end -> key hashes with on-time rows
    latencies: list[tuple[int, int]] = field(default_factory=list)  # (latency µs, windows)
    fired: int = 0
    grace: dict[int, _PerGrace] = field(default_factory=dict)


def _merge(store: dict[int, np.ndarray], ends: np.ndarray, keys: np.ndarray) -> None:
    """Add (end, key) pairs to ``store`` (end -> sorted unique keys)."""
    if not len(ends):
        return
    order = np.argsort(ends, kind="stable")  # few distinct ends: a cheap sort
    ends, keys = ends[order], keys[order]
    cuts = np.flatnonzero(np.diff(ends)) + 1
    starts = np.concatenate([[0], cuts])
    for lo, hi in zip(starts, np.concatenate([cuts, [len(ends)]]), strict=True):
        e = int(ends[lo])
        block = np.unique(keys[lo:hi])
        prev = store.get(e)
        store[e] = block if prev is None else np.union1d(prev, block)


class LatenessSweep:
    """Feed a log in arrival order, chunk by chunk; read one result per (L, G)."""

    def __init__(
        self,
        strategy: WatermarkStrategy,
        assigner: WindowAssigner,
        bounds_us: list[int],
        graces_us: list[int],
    ) -> None:
        self.assigner = assigner
        self.graces = sorted(set(graces_us))
        self.bounds = sorted(set(bounds_us))
        self.max_event = NEG_INF
        self.dead = 0
        self.per: dict[int, _PerBound] = {}
        for b in self.bounds:
            s = replace(strategy, max_out_of_orderness_us=b, per_partition_us=(), _bounds={})
            self.per[b] = _PerBound(WatermarkTracker(s), grace={g: _PerGrace() for g in self.graces})

    def feed(
        self,
        partitions: np.ndarray,
        event_us: np.ndarray,
        key_hash: np.ndarray,
        arrival_us: np.ndarray | None = None,
        dead_letter: int = 0,
    ) -> None:
        """One chunk of valid rows, in arrival order, plus the chunk's dead-letter count."""
        self.dead += int(dead_letter)
        for g in self.graces:
            for pb in self.per.values():
                pb.grace[g].accounting.dead_letter += int(dead_letter)
                pb.grace[g].accounting.rows += int(dead_letter)
        n = len(event_us)
        if n == 0:
            return
        coded = PartitionCodes.of(np.asarray(partitions))
        keys = np.asarray(key_hash, dtype=np.int64)
        any_strategy = next(iter(self.per.values())).tracker.strategy
        event, clipped = clip_future(event_us, arrival_us, any_strategy.max_future_skew_us)
        cum_max = np.maximum.accumulate(np.maximum(event, self.max_event))
        self.max_event = int(cum_max[-1])
        pairs = self.assigner.assign(event)
        pair_keys = keys[pairs.row]
        for pb in self.per.values():
            w_row = pb.tracker.advance(coded, event, arrival_us)
            w_after = np.concatenate([w_row[1:], [pb.tracker.watermark_us]])
            pair_w = w_row[pairs.row]
            on = pairs.end > pair_w
            _merge(pb.unfired, pairs.end[on], pair_keys[on])
            self._fire(pb, w_after, cum_max)
            for g, pg in pb.grace.items():
                verdict = classify(pairs.end, pair_w, g)
                rows = row_verdicts(pairs.row, verdict, n)
                acc = Accounting.from_verdicts(rows, 0, int(clipped.sum()))
                pg.accounting = pg.accounting + acc
                too = rows == Lateness.TOO_LATE
                if too.any():
                    counts = np.bincount(coded.codes[too], minlength=len(coded.names))
                    for name, c in zip(coded.names, counts.tolist(), strict=True):
                        if c:
                            pg.too_late_by_partition[name] = pg.too_late_by_partition.get(name, 0) + c
                admitted = verdict < Lateness.TOO_LATE
                _merge(pg.open_entries, pairs.end[admitted], pair_keys[admitted])
                pg.peak_open = max(pg.peak_open, sum(len(v) for v in pg.open_entries.values()))
                w_end = pb.tracker.watermark_us
                for e in [e for e in pg.open_entries if e + g <= w_end]:
                    del pg.open_entries[e]

    def _fire(self, pb: _PerBound, w_after: np.ndarray, cum_max: np.ndarray) -> None:
        w_end = int(w_after[-1])
        for e in sorted(e for e in pb.unfired if e <= w_end):
            j = int(np.searchsorted(w_after, e, side="left"))
            windows = len(pb.unfired.pop(e))
            pb.fired += windows
            pb.latencies.append((int(cum_max[j]) - e, windows))

    def results(self) -> list[dict]:
        """One dict per (L, G) with the fields of ``FIELDS`` (times in seconds)."""
        out = []
        for b, pb in self.per.items():
            lat = np.array([x for x, _ in pb.latencies], dtype=np.float64) / 1e6
            weights = np.array([c for _, c in pb.latencies], dtype=np.int64)
            mean = float(np.average(lat, weights=weights)) if weights.sum() else None
            p99 = float(np.percentile(np.repeat(lat, weights), 99)) if weights.sum() else None
            drain_only = sum(len(v) for v in pb.unfired.values())
            for g, pg in pb.grace.items():
                acc = pg.accounting
                out.append({
                    "lateness": b / 1e6,
                    "allowed_lateness": g / 1e6,
                    "rows": acc.rows,
                    "on_time": acc.on_time,
                    "late_updates": acc.late_updates,
                    "too_late": acc.too_late,
                    "dead_letter": acc.dead_letter,
                    "completeness": acc.completeness(),
                    "windows_fired": pb.fired,
                    "windows_drain_only": drain_only,
                    "emit_latency_mean": mean,
                    "emit_latency_p99": p99,
                    "peak_open_windows": pg.peak_open,
                    "too_late_by_partition": dict(sorted(pg.too_late_by_partition.items())),
                })
        return out

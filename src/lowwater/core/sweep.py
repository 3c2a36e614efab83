"""The what-if sweep: replay one log under many lateness bounds at once.

Two facts make the whole (L, G) grid cost about one replay:

* **One watermark scan for every L.** With one bound ``L`` for all partitions,
  every step of the low watermark (per-partition max minus ``L``, min over
  active partitions, running max) commutes with subtracting ``L``, and
  idleness and declared partitions depend on the arrival clock only. So
  ``W_L(r) = W_0(r) - L`` exactly: the engine's
  :class:`~lowwater.core.tracker.WatermarkTracker` runs once, with ``L = 0``.
* **A (window, key) group is decided by its first pair.** ``W`` never goes
  back, so along arrival order the pairs of a group that are on time (or
  admitted, for a grace ``G``) form a prefix: the group has an on-time pair
  iff its *first* pair is on time, and it opens state iff its first pair is
  admitted. Each group is therefore reduced once, to (window end, ``W_0`` at
  its first pair), and every (L, G) is a vectorised comparison over groups.

Row verdicts still go through the engine's ``classify`` per (L, G), so the
accounting is the engine's to the row. Per (L, G) the sweep reports
SEMANTICS.md §6-§7: the accounting, completeness, windows fired before the end
of input (and those only a drain would fire), emit latency
(``maxEventTimeSeen - end(w)`` when ``W`` first reaches ``end(w)``; mean and
p99 over (key, window) pairs), peak open (key, window) state entries, and
too-late rows per partition.

**Peak open windows is the engine's figure**: the most (key, window) entries
held at the end of a micro-batch, after freeing those with ``end + G <= W``
(``W`` after the batch's last row), as the engine's ``open_windows`` metric
counts them. ``feed`` takes each row's micro-batch id (the engine's batches:
``max_files_per_batch`` files each); without ids every ``feed`` call is one
micro-batch. Within a batch the engine briefly holds more (entries opened and
freed by the same batch), so the figure depends on how the log is cut; one row
per batch gives the most any cutting can show.
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


def shifted(w0: np.ndarray | int, bound_us: int) -> np.ndarray:
    """``W_L`` from ``W_0``: subtract ``L`` where the watermark is defined."""
    w = np.asarray(w0, dtype=np.int64)
    return np.where(w <= NEG_INF, NEG_INF, w - bound_us)


def zero_bound_tracker(strategy: WatermarkStrategy) -> WatermarkTracker:
    """The one tracker a sweep needs: ``L = 0`` for every partition, so ``W_L = shifted(W_0, L)``."""
    return WatermarkTracker(replace(strategy, max_out_of_orderness_us=0, per_partition_us=(), _bounds={}))


def watermarks_by_batch(
    tracker: WatermarkTracker,
    coded: PartitionCodes,
    event_us: np.ndarray,
    arrival_us: np.ndarray | None,
    batch_ids: np.ndarray | None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``W_0(r)`` per row, the rows that end a micro-batch run of the chunk, and ``W_0`` after each.

    The tracker is fed one micro-batch at a time, as the engine feeds it, so the
    watermark after a batch is exactly the one the engine frees state with
    (idleness is judged at the batch's last arrival). ``W_0(r)`` itself does not
    depend on the cut (SEMANTICS.md §8). The chunk's last row is always listed:
    whether it ends its micro-batch is known only from the next chunk.
    """
    n = len(event_us)
    starts = [0] if batch_ids is None else [0, *(np.flatnonzero(batch_ids[1:] != batch_ids[:-1]) + 1).tolist()]
    stops = [*starts[1:], n]
    w0 = np.empty(n, dtype=np.int64)
    w_after = np.empty(len(starts), dtype=np.int64)
    for i, (lo, hi) in enumerate(zip(starts, stops, strict=True)):
        part = PartitionCodes(coded.names, coded.codes[lo:hi])
        w0[lo:hi] = tracker.advance(part, event_us[lo:hi], None if arrival_us is None else arrival_us[lo:hi])
        w_after[i] = tracker.watermark_us
    return w0, np.array(stops, dtype=np.int64) - 1, w_after


def open_at_batch_ends(
    carried: dict[int, int], ends: np.ndarray, batch: np.ndarray, w_after: np.ndarray, grace_us: int
) -> np.ndarray:
    """Open (key, window) entries at the end of each micro-batch run of a chunk.

    Args:
        carried: window end -> entries open when the chunk starts.
        ends: window end of each entry the chunk opens.
        batch: index (into ``w_after``) of the run in which each of them opens.
        w_after: ``W`` after each run (non-decreasing).
        grace_us: ``G``: an entry is freed at the first run end with ``end + G <= W``.
    """
    k = len(w_after)
    opened = np.bincount(batch, minlength=k + 1)
    freed = np.bincount(np.maximum(batch, np.searchsorted(w_after, ends + grace_us, side="left")), minlength=k + 1)
    if carried:
        c_end = np.fromiter(carried, dtype=np.int64, count=len(carried))
        c_n = np.fromiter(carried.values(), dtype=np.int64, count=len(carried))
        opened[0] += int(c_n.sum())
        freed += np.bincount(np.searchsorted(w_after, c_end + grace_us, side="left"), weights=c_n,
                             minlength=k + 1).astype(np.int64)
    return np.cumsum(opened - freed)[:k]


def _add_counts(store: dict[int, int], ends: np.ndarray) -> None:
    if len(ends):
        u, c = np.unique(ends, return_counts=True)
        for e, n in zip(u.tolist(), c.tolist(), strict=True):
            store[e] = store.get(e, 0) + n


@dataclass
class _PerGrace:
    accounting: Accounting = field(default_factory=Accounting)
    too_late_by_partition: dict[str, int] = field(default_factory=dict)
    open_groups: dict[int, int] = field(default_factory=dict)  # end -> (key, window) groups admitted, not freed
    peak_open: int = 0  # at micro-batch ends
    open_now: int = 0  # at the end of the last chunk: a micro-batch end only if the next row starts a new one


@dataclass
class _PerBound:
    unfired: dict[int, int] = field(default_factory=dict)  # end -> groups with on-time rows, not fired yet
    latencies: list[tuple[int, int]] = field(default_factory=list)  # (latency µs, windows)
    fired: int = 0
    grace: dict[int, _PerGrace] = field(default_factory=dict)


class _GroupIndex:
    """First sighting of each (window end, key) group, across chunks.

    Ends that no (L, G) of the grid can still admit are forgotten, so memory
    follows the live windows, not the log.
    """

    def __init__(self) -> None:
        self.seen: dict[int, np.ndarray] = {}  # end -> sorted key hashes seen

    def first_pairs(self, ends: np.ndarray, keys: np.ndarray) -> np.ndarray:
        """Indices of the pairs that are the first of their group (pairs given in arrival order)."""
        if not len(ends):
            return np.zeros(0, dtype=np.int64)
        order = np.lexsort((np.arange(len(ends)), keys, ends))
        e, k = ends[order], keys[order]
        head = np.ones(len(e), dtype=bool)
        head[1:] = (e[1:] != e[:-1]) | (k[1:] != k[:-1])
        first = order[head]
        fe, fk = ends[first], keys[first]
        new = np.ones(len(first), dtype=bool)
        by_end = np.argsort(fe, kind="stable")  # few distinct ends per chunk
        for block in np.split(by_end, np.flatnonzero(np.diff(fe[by_end])) + 1):
            end = int(fe[block[0]])
            prev = self.seen.get(end)
            block_keys = fk[block]
            if prev is not None:
                pos = np.minimum(np.searchsorted(prev, block_keys), len(prev) - 1)
                new[block] = prev[pos] != block_keys
                self.seen[end] = np.union1d(prev, block_keys)
            else:
                self.seen[end] = np.sort(block_keys)
        return np.sort(first[new])

    def forget_before(self, end_exclusive: int) -> None:
        for e in [e for e in self.seen if e < end_exclusive]:
            del self.seen[e]


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
        # One tracker at L = 0 serves every L (see the module docstring).
        self.tracker = zero_bound_tracker(strategy)
        self.groups = _GroupIndex()
        self.per = {b: _PerBound(grace={g: _PerGrace() for g in self.graces}) for b in self.bounds}
        self.last_batch: object = None

    def _end_batch(self) -> None:
        for pb in self.per.values():
            for pg in pb.grace.values():
                pg.peak_open = max(pg.peak_open, pg.open_now)

    def feed(
        self,
        partitions: np.ndarray,
        event_us: np.ndarray,
        key_hash: np.ndarray,
        arrival_us: np.ndarray | None = None,
        dead_letter: int = 0,
        batch_ids: np.ndarray | None = None,
    ) -> None:
        """One chunk of valid rows, in arrival order, plus the chunk's dead-letter count.

        ``batch_ids``: each row's micro-batch (non-decreasing); ``None``: the
        chunk is one micro-batch.
        """
        self.dead += int(dead_letter)
        for pb in self.per.values():
            for pg in pb.grace.values():
                pg.accounting.dead_letter += int(dead_letter)
                pg.accounting.rows += int(dead_letter)
        n = len(event_us)
        if n == 0:
            return
        if batch_ids is None or batch_ids[0] != self.last_batch:
            self._end_batch()  # the previous chunk's last row ended its micro-batch
        self.last_batch = None if batch_ids is None else batch_ids[-1]
        coded = PartitionCodes.of(np.asarray(partitions))
        keys = np.asarray(key_hash, dtype=np.int64)
        event, clipped = clip_future(event_us, arrival_us, self.tracker.strategy.max_future_skew_us)
        n_clipped = int(clipped.sum())
        cum_max = np.maximum.accumulate(np.maximum(event, self.max_event))
        self.max_event = int(cum_max[-1])
        w0, run_last_row, run_w0 = watermarks_by_batch(self.tracker, coded, event, arrival_us, batch_ids)
        w0_after = np.concatenate([w0[1:], [self.tracker.watermark_us]])  # W_0 after each row
        pairs = self.assigner.assign(event)
        pair_w0 = w0[pairs.row]
        first = self.groups.first_pairs(pairs.end, keys[pairs.row])
        g_end, g_w0 = pairs.end[first], pair_w0[first]
        g_run = np.searchsorted(run_last_row, pairs.row[first], side="left")
        for b, pb in self.per.items():
            w_end = int(shifted(self.tracker.watermark_us, b))
            pair_w = shifted(pair_w0, b)
            g_w = shifted(g_w0, b)
            _add_counts(pb.unfired, g_end[g_end > g_w])
            self._fire(pb, shifted(w0_after, b), cum_max, w_end)
            for g, pg in pb.grace.items():
                verdict = classify(pairs.end, pair_w, g)
                rows = row_verdicts(pairs.row, verdict, n) if self.assigner.windows_per_row > 1 else verdict
                pg.accounting = pg.accounting + Accounting.from_verdicts(rows, 0, n_clipped)
                too = rows == Lateness.TOO_LATE
                if too.any():
                    counts = np.bincount(coded.codes[too], minlength=len(coded.names))
                    for name, c in zip(coded.names, counts.tolist(), strict=True):
                        if c:
                            pg.too_late_by_partition[name] = pg.too_late_by_partition.get(name, 0) + c
                admitted = g_end + g > g_w
                opens = open_at_batch_ends(pg.open_groups, g_end[admitted], g_run[admitted], shifted(run_w0, b), g)
                pg.peak_open = max(pg.peak_open, int(opens[:-1].max(initial=0)))
                pg.open_now = int(opens[-1])
                _add_counts(pg.open_groups, g_end[admitted])
                for e in [e for e in pg.open_groups if e + g <= w_end]:
                    del pg.open_groups[e]
        # No (L, G) of the grid admits a pair of a window whose end + L + G <= W_0 any more.
        if self.tracker.watermark_us > NEG_INF:
            self.groups.forget_before(self.tracker.watermark_us - self.bounds[-1] - self.graces[-1] + 1)

    @staticmethod
    def _fire(pb: _PerBound, w_after: np.ndarray, cum_max: np.ndarray, w_end: int) -> None:
        for e in sorted(e for e in pb.unfired if e <= w_end):
            j = int(np.searchsorted(w_after, e, side="left"))
            windows = pb.unfired.pop(e)
            pb.fired += windows
            pb.latencies.append((int(cum_max[j]) - e, windows))

    def results(self) -> list[dict]:
        """One dict per (L, G) with the fields of ``FIELDS`` (times in seconds)."""
        self._end_batch()  # the end of the log ends the last micro-batch
        out = []
        for b, pb in self.per.items():
            lat = np.array([x for x, _ in pb.latencies], dtype=np.float64) / 1e6
            weights = np.array([c for _, c in pb.latencies], dtype=np.int64)
            mean = float(np.average(lat, weights=weights)) if weights.sum() else None
            p99 = float(np.percentile(np.repeat(lat, weights), 99)) if weights.sum() else None
            drain_only = sum(pb.unfired.values())
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

"""The what-if sweep: replay one log under many lateness bounds (and compared strategies) at once.

Two facts make the whole (L, G) grid cost about one replay:

* **One watermark scan for every L** where that is exact (one bounded ``L``
  for every partition: ``W_L(r) = W_0(r) - L``, see :mod:`lowwater.advisor.lanes`);
  any other strategy gets one tracker per grid point (or per ``--compare``
  strategy), exactly as the engine would run it.
* **A (window, key) group is decided by its first pair.** ``W`` never goes
  back, so along arrival order the pairs of a group that are on time (or
  admitted, for a grace ``G``) form a prefix: the group has an on-time pair
  iff its *first* pair is on time, and it opens state iff its first pair is
  admitted. Each group is therefore reduced once, to (window end, its first
  pair), and every lane and ``G`` is a vectorised comparison over groups.

Row verdicts still go through the engine's ``classify`` per (L, G), so the
accounting is the engine's to the row. Per (L, G) the sweep reports
SEMANTICS.md §6-§7: the accounting, completeness, windows fired before the end
of input (and those only a drain would fire), emit latency
(``maxEventTimeSeen - end(w)`` when ``W`` first reaches ``end(w)``; mean and
p99 over (key, window) pairs), peak open (key, window) state entries, and
too-late rows per partition (``source/partition`` with several sources).

**Peak open windows is the engine's figure**: the most (key, window) entries
held at the end of a micro-batch, after freeing those with ``end + G <= W``
(``W`` after the batch's last row), as the engine's ``open_windows`` metric
counts them. ``feed`` takes each row's micro-batch id (the engine's batches:
``max_files_per_batch`` files each); without ids every ``feed`` call is one
micro-batch. Within a batch the engine briefly holds more (entries opened and
freed by the same batch), so the figure depends on how the log is cut; one row
per batch gives the most any cutting can show.

Several sources: rows carry their source name (arrival order across sources is
``(arrival_time, source, partition, offset)``), each source has its own
strategy and clipping, and the tracker keys generators by (source, partition).
Marker rows of punctuated sources move the watermark and are not data.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from lowwater.advisor.lanes import (
    Chunk,
    ExactLanes,
    LaneKey,
    Lanes,
    LaneScan,
    Strategies,
    as_strategies,
    clip_by_source,
    grid_lanes,
)
from lowwater.core.accounting import Accounting
from lowwater.core.lateness import Lateness, classify, row_verdicts
from lowwater.core.tracker_state import PartitionCodes
from lowwater.core.watermarks import WatermarkStrategy
from lowwater.core.windows import WindowAssigner
from lowwater.time import NEG_INF

FIELDS = (
    "lateness", "allowed_lateness", "rows", "on_time", "late_updates", "too_late", "dead_letter", "completeness",
    "windows_fired", "windows_drain_only", "emit_latency_mean", "emit_latency_p99", "peak_open_windows",
    "too_late_by_partition",
)
COMPARE_FIELDS = ("strategy", *FIELDS, "lateness_range")
"""A ``--compare`` row: the grid's fields (``lateness`` is ``None``) plus the label and, for adaptive, L's range."""


@dataclass(frozen=True)
class Prepared:
    """A chunk made ready for every lane: clipped times, lanes' watermarks, the data rows."""

    n: int
    event_us: np.ndarray
    data: np.ndarray  # indices of the data rows (all but marker rows)
    labels: PartitionCodes  # too-late attribution per row: partition, or source/partition
    n_clipped: int
    max_before: int  # max data event time seen before the chunk
    cum_max: np.ndarray  # max data event time seen up to each row
    run_last_row: np.ndarray  # last row of each micro-batch run
    scans: dict[LaneKey, LaneScan]


class ReplayBase(ABC):
    """What both sweeps share: lanes, clipping, micro-batch runs, and the watermark scan of a chunk."""

    def __init__(
        self,
        strategy: WatermarkStrategy | Strategies,
        bounds_us: list[int],
        compare: Mapping[str, Strategies] | None,
    ) -> None:
        self.strategies = as_strategies(strategy)
        self.lanes: list[Lanes] = [grid_lanes(self.strategies, bounds_us)] if bounds_us else []
        if compare:
            self.lanes.append(ExactLanes({label: as_strategies(s) for label, s in compare.items()}))
        self.keys: list[LaneKey] = [k for lanes in self.lanes for k in lanes.keys]
        self.max_event = NEG_INF
        self.last_batch: object = None

    @abstractmethod
    def _end_batch(self) -> None:
        """A micro-batch ended: record each lane's peak of open windows (each sweep keeps its own)."""

    def lateness_range(self, key: LaneKey) -> list[float] | None:
        for lanes in self.lanes:
            if key in lanes.keys:
                r = lanes.lateness_range(key)
                return None if r is None else [r[0] / 1e6, r[1] / 1e6]
        return None

    def _prepare(
        self,
        partitions: np.ndarray,
        event_us: np.ndarray,
        arrival_us: np.ndarray | None,
        sources: np.ndarray | None,
        markers: np.ndarray | None,
        batch_ids: np.ndarray | None,
    ) -> Prepared | None:
        n = len(event_us)
        if n == 0:
            return None
        if batch_ids is None or batch_ids[0] != self.last_batch:
            self._end_batch()  # the previous chunk's last row ended its micro-batch
        self.last_batch = None if batch_ids is None else batch_ids[-1]
        parts = np.asarray(partitions)
        src = None if sources is None or len(self.strategies) == 1 else np.asarray(sources).astype(str)
        coded = PartitionCodes.of(parts)
        labels = coded if src is None else PartitionCodes.of(np.char.add(np.char.add(src, "/"), parts.astype(str)))
        event, clipped = clip_by_source(self.strategies, src, event_us, arrival_us)
        mark = None if markers is None else np.asarray(markers, dtype=bool)
        data = np.arange(n) if mark is None else np.flatnonzero(~mark)
        data_event = event if mark is None else np.where(mark, NEG_INF, event)
        max_before = self.max_event
        cum_max = np.maximum.accumulate(np.maximum(data_event, max_before))
        self.max_event = int(cum_max[-1])
        starts = [0] if batch_ids is None else [0, *(np.flatnonzero(batch_ids[1:] != batch_ids[:-1]) + 1).tolist()]
        chunk = Chunk(coded, src, event, arrival_us, mark, starts)
        scans = {k: v for lanes in self.lanes for k, v in lanes.scan(chunk).items()}
        run_last_row = np.array([*starts[1:], n], dtype=np.int64) - 1
        return Prepared(n, event, data, labels, int(clipped[data].sum()), max_before, cum_max, run_last_row, scans)

    @property
    def low_us(self) -> int:
        """The lowest ``W`` of every lane after the last chunk."""
        return min(lanes.low_us for lanes in self.lanes)

    def _row(self, key: LaneKey, grace_us: int, fields: dict) -> dict:
        """One result dict: a grid row (``lateness``) or a compared strategy's (``strategy``, ``lateness_range``)."""
        if isinstance(key, str):
            return {"strategy": key, "lateness": None, "allowed_lateness": grace_us / 1e6, **fields,
                    "lateness_range": self.lateness_range(key)}
        return {"lateness": key / 1e6, "allowed_lateness": grace_us / 1e6, **fields}

    def split(self, rows: list[dict]) -> tuple[list[dict], list[dict]]:
        """(grid rows, compared-strategy rows) of :meth:`results`."""
        return [r for r in rows if "strategy" not in r], [r for r in rows if "strategy" in r]


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


class LatenessSweep(ReplayBase):
    """Feed a log in arrival order, chunk by chunk; read one result per (lane, G).

    Lanes are the bounds ``L`` of the grid (``bounds_us``) and the strategies
    of ``compare`` (label -> strategy per source, replayed exactly).
    """

    def __init__(
        self,
        strategy: WatermarkStrategy | Strategies,
        assigner: WindowAssigner,
        bounds_us: list[int],
        graces_us: list[int],
        compare: Mapping[str, Strategies] | None = None,
    ) -> None:
        super().__init__(strategy, bounds_us, compare)
        self.assigner = assigner
        self.graces = sorted(set(graces_us))
        self.groups = _GroupIndex()
        self.per = {k: _PerBound(grace={g: _PerGrace() for g in self.graces}) for k in self.keys}

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
        sources: np.ndarray | None = None,
        markers: np.ndarray | None = None,
    ) -> None:
        """One chunk of valid rows, in arrival order, plus the chunk's dead-letter count.

        ``batch_ids``: each row's micro-batch (non-decreasing); ``None``: the
        chunk is one micro-batch. ``sources``: each row's source (several
        sources); ``markers``: True on marker rows (punctuated sources).
        """
        for pb in self.per.values():
            for pg in pb.grace.values():
                pg.accounting.dead_letter += int(dead_letter)
                pg.accounting.rows += int(dead_letter)
        c = self._prepare(partitions, event_us, arrival_us, sources, markers, batch_ids)
        if c is None:
            return
        keys = np.asarray(key_hash, dtype=np.int64)
        local = self.assigner.assign(c.event_us[c.data])  # pairs of the data rows (row: index into c.data)
        pair_row = c.data[local.row]
        first = self.groups.first_pairs(local.end, keys[pair_row])
        g_end, g_row = local.end[first], pair_row[first]
        g_run = np.searchsorted(c.run_last_row, g_row, side="left")
        n_data = len(c.data)
        data_labels = c.labels.codes[c.data]
        for k, pb in self.per.items():
            scan = c.scans[k]
            pair_w = scan.row_us[pair_row]
            g_w = scan.row_us[g_row]
            _add_counts(pb.unfired, g_end[g_end > g_w])
            self._fire(pb, scan.after_rows(), c.cum_max, scan.end_us)
            for g, pg in pb.grace.items():
                verdict = classify(local.end, pair_w, g)
                rows = row_verdicts(local.row, verdict, n_data) if self.assigner.windows_per_row > 1 else verdict
                pg.accounting = pg.accounting + Accounting.from_verdicts(rows, 0, c.n_clipped)
                too = rows == Lateness.TOO_LATE
                if too.any():
                    counts = np.bincount(data_labels[too], minlength=len(c.labels.names))
                    for name, n in zip(c.labels.names, counts.tolist(), strict=True):
                        if n:
                            pg.too_late_by_partition[name] = pg.too_late_by_partition.get(name, 0) + n
                admitted = g_end + g > g_w
                opens = open_at_batch_ends(pg.open_groups, g_end[admitted], g_run[admitted], scan.run_us, g)
                pg.peak_open = max(pg.peak_open, int(opens[:-1].max(initial=0)))
                pg.open_now = int(opens[-1])
                _add_counts(pg.open_groups, g_end[admitted])
                for e in [e for e in pg.open_groups if e + g <= scan.end_us]:
                    del pg.open_groups[e]
        # No lane admits a pair of a window whose end + G <= its W any more.
        if self.low_us > NEG_INF:
            self.groups.forget_before(self.low_us - self.graces[-1] + 1)

    @staticmethod
    def _fire(pb: _PerBound, w_after: np.ndarray, cum_max: np.ndarray, w_end: int) -> None:
        for e in sorted(e for e in pb.unfired if e <= w_end):
            j = int(np.searchsorted(w_after, e, side="left"))
            windows = pb.unfired.pop(e)
            pb.fired += windows
            pb.latencies.append((int(cum_max[j]) - e, windows))

    def results(self) -> list[dict]:
        """One dict per (lane, G): the fields of ``FIELDS`` (``COMPARE_FIELDS`` for a compared strategy)."""
        self._end_batch()  # the end of the log ends the last micro-batch
        out = []
        for k, pb in self.per.items():
            lat = np.array([x for x, _ in pb.latencies], dtype=np.float64) / 1e6
            weights = np.array([c for _, c in pb.latencies], dtype=np.int64)
            mean = float(np.average(lat, weights=weights)) if weights.sum() else None
            p99 = float(np.percentile(np.repeat(lat, weights), 99)) if weights.sum() else None
            drain_only = sum(pb.unfired.values())
            for g, pg in pb.grace.items():
                acc = pg.accounting
                out.append(self._row(k, g, {
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
                }))
        return out

"""The watermark tracker: ``W(r)`` for every row, in arrival order.

``W(r)``, the watermark seen by row ``r``, is the low watermark computed from
all rows strictly before ``r`` in arrival order (SEMANTICS.md §2), with
idleness evaluated on the arrival clock at ``r``'s arrival. The tracker does
not know any watermark rule itself: it keys one generator per
``(source, partition)`` (built by that source's
:class:`~lowwater.core.watermarks.WatermarkStrategy`), hands each its rows,
and folds their ``W_p`` with :class:`~lowwater.core.combine.MinOfInputs`. The
generators' snapshots are all it carries between calls, so the result is the
same however the log is cut into batches (§8).

Cost of a call: every row goes to its generator once (grouped by one stable
sort), then each input's ``W_p`` is laid out over the batch's evaluation
points and folded into the min, one input at a time: O(rows x inputs) numpy
work in O(rows) memory, no Python per row. The evaluation points are the
states after 0..n rows; when some input can go idle each state is evaluated
twice (at the arrival of the row just consumed, when its partition is active,
and at the arrival of the next row, when silent partitions may have gone idle)
and ``W`` is the running max of both.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from lowwater.core.combine import InputColumns, min_at, partition_spread
from lowwater.core.tracker_state import DEFAULT_SOURCE, PartitionCodes, PartitionStatus, TrackerState
from lowwater.core.watermarks import Emitted, PartitionRows, WatermarkGenerator, WatermarkStrategy
from lowwater.core.watermarks.idleness import active_until_us
from lowwater.time import NEG_INF, POS_INF

log = logging.getLogger(__name__)


@dataclass
class _Fed:
    """One input's part of a batch: its rows and what its generator said about them."""

    rows: np.ndarray
    emitted: Emitted
    before_us: int  # W_p before the batch
    active_until_us: int  # activity deadline before the batch
    reported: bool  # had produced rows before the batch
    last_arrival_us: int  # of its rows in this batch (NEG_INF without an arrival clock)


class WatermarkTracker:
    """Computes ``W(r)`` per row and carries the low watermark across batches."""

    def __init__(
        self,
        strategy: WatermarkStrategy | Mapping[str, WatermarkStrategy],
        state: TrackerState | None = None,
    ) -> None:
        self.strategies = {DEFAULT_SOURCE: strategy} if isinstance(strategy, WatermarkStrategy) else dict(strategy)
        if not self.strategies:
            msg = "a tracker needs at least one source's strategy"
            raise ValueError(msg)
        self.state = st = state or TrackerState()
        if st.sources is None and len(self.strategies) > 1:
            if st.partitions:
                msg = "this tracker state was written for a single source"
                raise ValueError(msg)
            st.sources = []
        only = next(iter(self.strategies))
        self._keys = list(zip(st.sources or [only] * len(st.partitions), st.partitions, strict=True))
        self._pos = {key: i for i, key in enumerate(self._keys)}
        self._gens = [self._build(i) for i in range(len(self._keys))]
        self._declared = {(s, p) for s, strat in self.strategies.items() for p in strat.declared_partitions}
        for source, strat in self.strategies.items():
            for p in strat.declared_partitions:
                self._index(source, p)

    @property
    def strategy(self) -> WatermarkStrategy:
        """The strategy of a single-source tracker."""
        if len(self.strategies) != 1:
            msg = "this tracker has several sources: read tracker.strategies[source]"
            raise ValueError(msg)
        return next(iter(self.strategies.values()))

    def _build(self, i: int) -> WatermarkGenerator:
        source, partition = self._keys[i]
        if source not in self.strategies:
            msg = f"tracker state names source {source!r}, which is not configured"
            raise ValueError(msg)
        return self.strategies[source].generator_for(partition).build(self.state.snapshot_of(i))

    def _index(self, source: str, partition: str) -> int:
        i = self._pos.get((source, partition))
        if i is not None:
            return i
        if source not in self.strategies:
            msg = f"rows of source {source!r}, which is not configured"
            raise ValueError(msg)
        st = self.state
        i = len(self._keys)
        self._keys.append((source, partition))
        self._pos[(source, partition)] = i
        st.partitions.append(partition)
        st.max_event_us.append(NEG_INF)
        st.last_arrival_us.append(NEG_INF)
        if st.sources is not None:
            st.sources.append(source)
        if st.generators is not None:
            st.generators.append({})
        self._gens.append(self.strategies[source].generator_for(partition).build())
        return i

    def partition_indices(
        self, partitions: np.ndarray | PartitionCodes, sources: np.ndarray | str | None = None
    ) -> np.ndarray:
        """Map rows to dense input indices, registering new ``(source, partition)`` keys.

        ``sources`` is one name for the whole batch, a name per row, or ``None``
        for a single-source tracker.
        """
        codes = partitions if isinstance(partitions, PartitionCodes) else PartitionCodes.of(partitions)
        if not len(codes.codes):
            return np.zeros(0, dtype=np.int64)
        if sources is None or isinstance(sources, str):
            source = self._only_source() if sources is None else sources
            lookup = np.array([self._index(source, name) for name in codes.names], dtype=np.int64)
            return lookup[codes.codes]
        by_source = PartitionCodes.of(np.asarray(sources))
        pairs = by_source.codes * len(codes.names) + codes.codes
        uniq, inverse = np.unique(pairs, return_inverse=True)
        width = len(codes.names)
        lookup = np.array(
            [self._index(by_source.names[u // width], codes.names[u % width]) for u in uniq.tolist()], dtype=np.int64
        )
        return lookup[inverse.reshape(-1)]

    def _only_source(self) -> str:
        if len(self.strategies) != 1:
            msg = "rows need a source name: this tracker has several sources"
            raise ValueError(msg)
        return next(iter(self.strategies))

    @property
    def watermark_us(self) -> int:
        return self.state.watermark_us

    @property
    def inputs(self) -> list[tuple[str, str, WatermarkGenerator, bool]]:
        """Every input in index order: ``(source, partition, its generator, declared)``."""
        return [(s, p, g, (s, p) in self._declared) for (s, p), g in zip(self._keys, self._gens, strict=True)]

    def advance(
        self,
        partitions: np.ndarray | PartitionCodes,
        event_us: np.ndarray,
        arrival_us: np.ndarray | None = None,
        *,
        sources: np.ndarray | str | None = None,
        markers: np.ndarray | None = None,
    ) -> np.ndarray:
        """Feed rows in arrival order; return ``W(r)`` for each (int64 µs).

        ``partitions`` are names (or pre-coded), ``event_us`` int64 event times
        (already clipped), ``arrival_us`` int64 arrival times (non-decreasing)
        or ``None`` when the source has no arrival clock, ``sources`` the
        source of each row (see :meth:`partition_indices`), ``markers`` True
        on marker rows of punctuated sources.
        """
        ev = np.asarray(event_us, dtype=np.int64)
        arr = None if arrival_us is None else np.asarray(arrival_us, dtype=np.int64)
        mark = None if markers is None else np.asarray(markers, dtype=bool)
        for strat in self.strategies.values():
            strat.check_inputs(arr is not None, mark is not None)
        silent = self.silent_sources()
        idx = self.partition_indices(partitions, sources)
        n, st = len(ev), self.state
        if n == 0:
            return np.zeros(0, dtype=np.int64)
        if arr is not None and st.start_clock_us <= NEG_INF:
            st.start_clock_us = int(arr[0])
        fed = self._feed(idx, ev, arr, mark)
        waiting = self._waiting_for_sources(silent, sources, n)
        # Deadlines only grow, so an input that can go idle in this batch has a finite one now.
        can_idle = any(g.active_until_us(st.start_clock_us) < POS_INF for g in self._gens) or any(
            until is not None for _, until in waiting
        )
        # State k (after k rows) is evaluated at the arrival of the row just consumed (its partition is
        # active then) and, when inputs can go idle, again at the next row's (silent ones may be idle).
        clocks = self._clocks(arr, n) if can_idle else None
        columns = (self._columns(i, fed.get(i), n) for i in range(len(self._keys)))
        # A source that has not reported yet: W is undefined until it does.
        inputs: Iterable[InputColumns] = itertools.chain(
            columns, ((wm, until, wm <= NEG_INF) for wm, until in waiting)
        )
        mins = min_at(n + 1, inputs, [None] if clocks is None else [clocks[0], clocks[1]])
        running = mins[0].low_watermark(st.watermark_us)
        for m in mins[1:]:
            running = np.maximum(running, m.low_watermark(st.watermark_us))
        seen = running[:n]
        self._count_regressions(fed, seen, arr)
        for i, f in fed.items():
            st.keep_snapshot(i, self._gens[i].snapshot())
            st.last_arrival_us[i] = max(st.last_arrival_us[i], f.last_arrival_us)
        if arr is not None:
            st.clock_us = max(st.clock_us, int(arr[-1]))
        st.watermark_us = int(running[-1])
        st.rows_seen += n
        return seen

    def silent_sources(self) -> list[str]:
        """Sources of a union with no partition known yet (declared partitions count as known)."""
        if len(self.strategies) < 2:
            return []
        known = {source for source, _ in self._keys}
        return [name for name in self.strategies if name not in known]

    def _waiting_for_sources(
        self, silent: list[str], sources: np.ndarray | str | None, n: int
    ) -> list[tuple[np.ndarray, int | None]]:
        """Per source that had not reported before the batch: an input undefined until its first row.

        Each source of a union is an input of the min (SEMANTICS.md §2, "several
        inputs"), as in Flink, where every input of an operator starts at the
        lowest watermark: a source that has produced nothing has promised
        nothing, so ``W`` stays undefined until it reports, or until it goes idle
        (its ``idle_timeout``, counted from the run's first arrival). Returns,
        per such source, its ``W`` over the states after 0..n rows (``NEG_INF``
        before its first row, neutral after) and its activity deadline.
        """
        out = []
        names = None if sources is None or isinstance(sources, str) else np.asarray(sources)
        for name in silent:
            if isinstance(sources, str):
                first = 0 if sources == name else n
            else:
                hits = np.flatnonzero(names == name) if names is not None else np.zeros(0, dtype=np.int64)
                first = int(hits[0]) if len(hits) else n
            wm = np.full(n + 1, POS_INF, dtype=np.int64)
            wm[: first + 1] = NEG_INF
            out.append((wm, waiting_deadline(self.strategies[name].idle_timeout_us, self.state.start_clock_us)))
        return out

    def _feed(self, idx: np.ndarray, ev: np.ndarray, arr: np.ndarray | None, mark: np.ndarray | None) -> dict:
        """Hand every input its rows (grouped by one stable sort); what each generator said, by input."""
        # Stable sorts of 16-bit integers are a radix sort in numpy: O(rows), ~6x faster than of int64.
        order = np.argsort(idx.astype(np.int16) if len(self._keys) < 2**15 else idx, kind="stable")
        cuts = np.searchsorted(idx[order], np.arange(len(self._keys) + 1))
        fed: dict[int, _Fed] = {}
        for i in np.flatnonzero(np.diff(cuts)).tolist():
            rows = order[cuts[i] : cuts[i + 1]]
            gen = self._gens[i]
            before, until, reported = gen.watermark_us, gen.active_until_us(self.state.start_clock_us), gen.reported
            block = PartitionRows(ev[rows], None if arr is None else arr[rows], None if mark is None else mark[rows])
            last = NEG_INF if block.arrival_us is None else int(block.arrival_us.max())
            fed[i] = _Fed(rows, gen.on_rows(block), before, until, reported, last)
        return fed

    def _columns(self, i: int, f: _Fed | None, n: int) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | bool]:
        """Input ``i`` over the states after 0..n rows: ``W_p``, activity deadline, whether it takes part."""
        gen = self._gens[i]
        declared = self._keys[i] in self._declared
        if f is None:  # no rows in this batch: constant
            until_us = gen.active_until_us(self.state.start_clock_us)
            wm_us = gen.watermark_us
            return (
                np.full(n + 1, wm_us, dtype=np.int64),
                None if until_us >= POS_INF else np.full(n + 1, until_us, dtype=np.int64),
                bool(takes_part(wm_us, declared, gen.reported, None)),
            )
        # State k holds the values after the last of this input's rows before k. Both are
        # non-decreasing (the protocol's promise), so a running max fills the gaps.
        wm = _steps(n, f.rows, f.before_us, f.emitted.watermark_us)
        until: np.ndarray | None = None
        if f.emitted.active_until_us is not None or f.active_until_us < POS_INF:
            after = f.emitted.active_until_us
            until = _steps(n, f.rows, f.active_until_us, np.full(len(f.rows), POS_INF) if after is None else after)
        rule = takes_part(f.before_us, declared, f.reported, int(f.emitted.watermark_us[0]))
        part = np.arange(n + 1) > f.rows[0] if rule is None else rule
        return wm, until, part

    def _clocks(self, arr: np.ndarray | None, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Arrival clock at which state k is evaluated: at the row just consumed, and at the next row."""
        assert arr is not None  # an input that can go idle needs the arrival clock (checked in advance)
        prev = self.state.clock_us if self.state.clock_us > NEG_INF else int(arr[0])
        return np.concatenate([[prev], arr]), np.concatenate([arr, arr[-1:]])

    def _count_regressions(self, fed: dict[int, _Fed], seen: np.ndarray, arr: np.ndarray | None) -> None:
        """Proposals behind ``W`` are ignored (W is monotone) and counted, both kinds.

        A generator's own (a marker older than the last, an adaptive ``L`` that
        widens), and a row that brings its input (back) into the min behind
        ``W`` (a discovered partition, one returning from idleness).
        """
        st = self.state
        proposed = 0
        for f in fed.values():
            proposed += f.emitted.regressions
            can_idle = f.emitted.active_until_us is not None or f.active_until_us < POS_INF
            if f.before_us > NEG_INF and not can_idle:
                continue  # in the min all along (W_p never moves back): nothing to rejoin
            after = f.emitted.watermark_us
            before = np.concatenate([[f.before_us], after[:-1]])
            in_time = None
            if arr is not None and can_idle:
                deadline = f.emitted.active_until_us
                deadline = np.full(len(after), POS_INF) if deadline is None else deadline
                in_time = arr[f.rows] <= np.concatenate([[f.active_until_us], deadline[:-1]])
            st.regressions_ignored += rejoined_behind(before, after, in_time, seen[f.rows])
        if proposed:
            st.regressions_ignored += proposed
            log.warning("watermark: %d proposal(s) below a partition's watermark ignored in this step", proposed)

    def drain(self) -> None:
        """Bounded input exhausted and a drain requested: ``W`` becomes +infinity."""
        self.state.watermark_us = POS_INF

    def statuses(self) -> list[PartitionStatus]:
        """Per-input watermark, activity at the current arrival clock, and ``L`` in force."""
        st = self.state
        out = []
        for (source, partition), gen in zip(self._keys, self._gens, strict=True):
            active = st.clock_us <= NEG_INF or st.clock_us <= gen.active_until_us(st.start_clock_us)
            out.append(PartitionStatus(partition, gen.watermark_us, active, source, gen.lateness_us))
        return out

    def spread(self) -> tuple[int | None, str | None]:
        """Partition spread (max W_p - min active W_p) and the partition holding W back."""
        spread, holder = partition_spread(sorted(self.statuses(), key=lambda s: (s.partition, s.source)))
        return spread, None if holder is None else holder.partition


def takes_part(before_us: int, declared: bool, reported: bool, first_after_us: int | None) -> bool | None:
    """Whether an input's undefined ``W_p`` makes ``W`` undefined (SEMANTICS.md §2, "undefined").

    ``before_us``/``reported``: the input before the batch; ``first_after_us``: its
    ``W_p`` after its first row of the batch (``None``: no row). ``None`` means
    "from its first row of the batch on" (it reported then, promising nothing yet).
    """
    if before_us > NEG_INF:  # defined before the batch: never undefined in it
        return False
    if declared or reported:
        return True
    if first_after_us is not None and first_after_us <= NEG_INF:
        return None
    return False


def waiting_deadline(idle_timeout_us: int | None, start_clock_us: int) -> int | None:
    """Until when a source that has not reported holds ``W`` undefined: the run's first arrival + its timeout."""
    if idle_timeout_us is None or start_clock_us <= NEG_INF:
        return None
    return active_until_us(NEG_INF, start_clock_us, idle_timeout_us)  # one that never delivered


def rejoined_behind(before_us: np.ndarray, after_us: np.ndarray, in_time: np.ndarray | None, seen: np.ndarray) -> int:
    """Rows that bring their input (back) into the min behind ``W``: ignored proposals, counted.

    Per row of one input: ``W_p`` before and after it, whether it arrived within
    the input's deadline (``None``: no idleness), and ``W(r)``.
    """
    eligible = before_us > NEG_INF
    if in_time is not None:
        eligible &= in_time
    return int((~eligible & (after_us > NEG_INF) & (after_us < seen) & (seen > NEG_INF)).sum())


def _steps(n: int, rows: np.ndarray, before: int, after: np.ndarray) -> np.ndarray:
    """Values over the states after 0..n rows of a non-decreasing quantity set after each of ``rows``."""
    out = np.full(n + 1, NEG_INF, dtype=np.int64)
    out[0] = before
    out[rows + 1] = after
    return np.maximum.accumulate(out, out=out)

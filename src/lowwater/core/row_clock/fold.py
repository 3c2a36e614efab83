"""The driver's part of the row clock: partition summaries folded into ``W`` over arrival order.

The tracker (core/tracker.py) evaluates the min over inputs at every row: the
state after ``k`` rows at the arrival of row ``k - 1`` and of row ``k``. Here
the same evaluations are made only where their value can differ:

* at every critical row ``K`` of any partition (core/row_clock/summary.py),
  just before it (what ``K`` sees) and just after it (what the next row sees);
* at every *threshold* ``(u + 1, -inf)``: the arrival after which an input's
  deadline ``u`` has passed, i.e. where it goes idle;
* before the batch, at the previous step's arrival clock.

Between two such points every input's ``W_p``, deadline and activity are
constant, so every row between them sees the same proposal. A threshold that
falls strictly inside an arrival interval where no partition has a row (a
*silence*, known from the summaries' gaps) is evaluated by no row and is
skipped: it matters only when all inputs are idle at the next row, and such a
silence is longer than the smallest ``idle_timeout``, so every summary reports
it. Each input's columns and the min are the tracker's own rules
(``takes_part``, ``waiting_deadline``, ``rejoined_behind``, ``combine.min_at``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from lowwater.core.combine import InputColumns, min_at
from lowwater.core.row_clock.keys import MIN_MINOR, WatermarkStepFunction, pack, successor, threshold
from lowwater.core.row_clock.summary import PartitionSummary, gap_for
from lowwater.core.tracker import WatermarkTracker, rejoined_behind, takes_part, waiting_deadline
from lowwater.core.tracker_state import TrackerState
from lowwater.core.watermarks import WatermarkStrategy
from lowwater.time import NEG_INF, POS_INF

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FoldCounts:
    """What a fold saw: rows, ignored proposals counted, clipped and marker rows, summary entries."""

    rows: int = 0
    regressions: int = 0
    clipped: int = 0
    markers: int = 0
    entries: int = 0


@dataclass(frozen=True)
class _Input:
    """One input's step functions over the points: ``W_p`` and deadline before and after its critical rows."""

    keys: np.ndarray  # S16 critical rows (empty: no rows in the batch)
    before_us: int
    watermark_us: np.ndarray
    before_until_us: int
    until_us: np.ndarray | None  # None: never idle
    part: bool | None  # None: from its first row on
    can_idle: bool

    def columns(self, points: np.ndarray) -> InputColumns:
        cnt = np.searchsorted(self.keys, points, side="left")  # its critical rows before each point
        prev = np.maximum(cnt - 1, 0)
        first = cnt == 0
        wm = np.where(first, self.before_us, self.watermark_us[prev]) if len(self.keys) else np.full(
            len(points), self.before_us, dtype=np.int64
        )
        until = None
        if self.until_us is not None:
            until = np.where(first, self.before_until_us, self.until_us[prev]) if len(self.keys) else np.full(
                len(points), self.before_until_us, dtype=np.int64
            )
        return wm, until, cnt > 0 if self.part is None else self.part


def _copy(state: TrackerState | None) -> TrackerState | None:
    return None if state is None else TrackerState.from_json(json.loads(json.dumps(state.to_json())))


def fold(
    summaries: Sequence[PartitionSummary],
    strategy: WatermarkStrategy | Mapping[str, WatermarkStrategy],
    state: TrackerState | None = None,
) -> tuple[WatermarkStepFunction, TrackerState, FoldCounts]:
    """``W`` over the batch's arrival order, the tracker state after it, and the batch's counts.

    ``summaries``: one per ``(source, partition)`` with rows in the batch, each
    made from that input's snapshot in ``state``. ``state`` is not modified.
    Equals :meth:`WatermarkTracker.advance` on the same rows, row for row.
    """
    tracker = WatermarkTracker(strategy, _copy(state))
    st, strategies = tracker.state, tracker.strategies
    summaries = [s for s in summaries if s.rows]
    if not summaries:
        return WatermarkStepFunction.of(pack([], []), np.zeros(0, dtype=np.int64), st.watermark_us), st, FoldCounts()
    clock = {s.arrival_us is not None for s in summaries}
    if len(clock) > 1:
        msg = "every partition of a batch needs an arrival clock, or none"
        raise ValueError(msg)
    has_clock = clock.pop()
    for name, strat in strategies.items():  # each source's strategy against its own rows in the batch
        mine = [s for s in summaries if s.source == name]
        if mine:
            strat.check_inputs(has_clock, any(s.has_marker for s in mine))
    need = gap_for(strategies)
    if need is not None and any(s.gap_us is None or s.gap_us > need for s in summaries):
        msg = f"a partition summary kept gaps coarser than the smallest idle_timeout ({need} µs)"
        raise ValueError(msg)
    silent = tracker.silent_sources()
    several = len(strategies) > 1
    idx = tracker.partition_indices(
        np.array([s.partition for s in summaries]), np.array([s.source for s in summaries]) if several else None
    ).tolist()
    if len(set(idx)) != len(idx):
        msg = "two summaries of one partition in a batch"
        raise ValueError(msg)
    by_input = dict(zip(idx, summaries, strict=True))
    if has_clock and st.start_clock_us <= NEG_INF:
        st.start_clock_us = min(s.first_arrival_us for s in summaries)
    inputs = [_input(tracker, i, by_input.get(i)) for i in range(len(tracker.inputs))]
    waiting = [_waiting(name, strategies[name], st.start_clock_us, summaries) for name in silent]
    points, clocks = _points(summaries, inputs, waiting, st.clock_us if has_clock else None)

    def columns() -> Iterator[InputColumns]:
        for inp in inputs:
            yield inp.columns(points)
        for first, until in waiting:  # undefined until the source's first row (inclusive), neutral after
            wm = np.where(points > first, POS_INF, NEG_INF) if first is not None else np.full(len(points), NEG_INF)
            yield wm, None if until is None else np.full(len(points), until, dtype=np.int64), wm <= NEG_INF

    running = min_at(len(points), columns(), [clocks])[0].low_watermark(st.watermark_us)
    step = WatermarkStepFunction.of(points, running, st.watermark_us)
    regressions_before = st.regressions_ignored
    _count_regressions(st, by_input, inputs, step, has_clock)
    for i, s in by_input.items():
        st.keep_snapshot(i, s.snapshot)
        st.last_arrival_us[i] = max(st.last_arrival_us[i], s.last_arrival_us)
    n = sum(s.rows for s in summaries)
    if has_clock:
        st.clock_us = max(st.clock_us, max(s.last_arrival_us for s in summaries))
    st.watermark_us = step.final_us
    st.rows_seen += n
    counts = FoldCounts(
        rows=n,
        regressions=st.regressions_ignored - regressions_before,
        clipped=sum(s.clipped for s in summaries),
        markers=sum(s.markers for s in summaries),
        entries=sum(len(s.keys) for s in summaries),
    )
    return step, st, counts


def _input(tracker: WatermarkTracker, i: int, s: PartitionSummary | None) -> _Input:
    """Input ``i``'s step functions: before the batch from its generator, in it from its summary."""
    source, _, gen, declared = tracker.inputs[i]
    timeout = tracker.strategies[source].idle_timeout_us
    before_until = gen.active_until_us(tracker.state.start_clock_us)
    can_idle = timeout is not None or before_until < POS_INF
    if s is None:
        wm = gen.watermark_us
        empty = np.zeros(0, dtype=np.int64)
        part = bool(takes_part(wm, declared, gen.reported, None))
        until = None if before_until >= POS_INF else empty
        return _Input(pack(empty, empty), wm, empty, before_until, until, part, can_idle)
    until = None
    part_from: bool | None
    if timeout is not None and s.arrival_us is not None and s.next_arrival_us is not None:
        # After a row followed by a gap longer than the timeout (or after the last), the input goes
        # idle at arrival + timeout; after any other row its next row comes first: active throughout.
        idles = (s.next_arrival_us >= POS_INF) | (s.next_arrival_us - s.arrival_us > timeout)
        until = np.where(idles, s.arrival_us + timeout, POS_INF)
    part_from = takes_part(gen.watermark_us, declared, gen.reported, int(s.watermark_us[0]))
    return _Input(s.keys, gen.watermark_us, s.watermark_us, before_until, until, part_from, can_idle)


def _waiting(
    name: str, strategy: WatermarkStrategy, start_us: int, summaries: list[PartitionSummary]
) -> tuple[np.ndarray | None, int | None]:
    """A source that had not reported: its first row's key in the batch (or None), and its deadline."""
    firsts = [s.keys[0] for s in summaries if s.source == name]
    first = np.array([min(firsts)], dtype="S16") if firsts else None
    return first, waiting_deadline(strategy.idle_timeout_us, start_us)


def _points(
    summaries: list[PartitionSummary], inputs: list[_Input], waiting: list, clock_us: int | None
) -> tuple[np.ndarray, np.ndarray | None]:
    """The evaluation points (sorted keys: the state holds the rows before each) and the arrival clock at each."""
    rows = np.concatenate([s.keys for s in summaries])
    start = pack([MIN_MINOR], [MIN_MINOR])  # before every row: the state before the batch
    if clock_us is None:  # no arrival clock: no idleness, the state alone decides
        keys = np.concatenate([start, rows, successor(rows)])
        keys = np.unique(keys)
        return keys, None
    arrivals = np.concatenate([s.arrival_us for s in summaries if s.arrival_us is not None])
    first, last = int(arrivals.min()), int(arrivals.max())
    deadlines = [np.array([inp.before_until_us]) for inp in inputs if inp.until_us is not None]
    deadlines += [inp.until_us for inp in inputs if inp.until_us is not None]
    deadlines += [np.array([until]) for _, until in waiting if until is not None]
    at = np.unique(np.concatenate([np.zeros(0, dtype=np.int64), *deadlines])) + 1
    at = at[(at > first) & (at <= last) & ~_silent(summaries, at)]
    keys = np.concatenate([start, rows, successor(rows), threshold(at)])
    times = np.concatenate([[clock_us if clock_us > NEG_INF else first], arrivals, arrivals, at])
    keys, pos = np.unique(keys, return_index=True)  # a row's successor may be the next row: the same point
    return keys, times[pos].astype(np.int64)


def _silent(summaries: list[PartitionSummary], at: np.ndarray) -> np.ndarray:
    """Arrival times strictly inside an interval where no partition has a row (known from the summaries' gaps)."""
    lo, hi = [], []
    for s in summaries:
        gap_lo, gap_hi = s.gaps()
        lo.append(np.concatenate([[s.first_arrival_us], gap_hi]))  # covered: [first, gap) ... (gap, last]
        hi.append(np.concatenate([gap_lo, [s.last_arrival_us]]))
    starts, ends = np.concatenate(lo), np.concatenate(hi)
    order = np.argsort(starts, kind="stable")
    starts, reach = starts[order], np.maximum.accumulate(ends[order])
    # Silences: from the furthest covered arrival so far to the next segment's start, when that is later.
    gap = starts[1:] > reach[:-1]
    quiet_lo, quiet_hi = reach[:-1][gap], starts[1:][gap]
    k = np.searchsorted(quiet_lo, at, side="left") - 1
    inside = (k >= 0) & (at < quiet_hi[np.maximum(k, 0)]) if len(quiet_lo) else np.zeros(len(at), dtype=bool)
    return inside


def _count_regressions(
    st: TrackerState, by_input: dict[int, PartitionSummary], inputs: list[_Input], step: WatermarkStepFunction,
    has_clock: bool,
) -> None:
    """The tracker's two kinds of ignored proposals (see WatermarkTracker._count_regressions), from the summaries.

    A row can bring its input (back) into the min only where the input was not
    eligible before it: where ``W_p`` first becomes defined, or after an idle
    gap. Both are critical rows, so the summary's rows suffice.
    """
    proposed = 0
    for i, s in by_input.items():
        proposed += s.regressions
        inp = inputs[i]
        if inp.before_us > NEG_INF and not inp.can_idle:
            continue
        after = s.watermark_us
        before = np.concatenate([[inp.before_us], after[:-1]])
        in_time = None
        if has_clock and inp.can_idle and s.arrival_us is not None:
            deadline = np.full(len(after), POS_INF, dtype=np.int64) if inp.until_us is None else inp.until_us
            in_time = s.arrival_us <= np.concatenate([[inp.before_until_us], deadline[:-1]])
        st.regressions_ignored += rejoined_behind(before, after, in_time, step.lookup_packed(s.keys))
    if proposed:
        st.regressions_ignored += proposed
        log.warning("watermark: %d proposal(s) below a partition's watermark ignored in this step", proposed)

"""Judging a batch of rows: arrival order, ``W(r)``, window pairs and verdicts.

The one place where SEMANTICS.md §1-§4 meet for a batch: rows are put in
arrival order, the tracker gives each its watermark, the assigner its windows,
and ``classify`` each (row, window) pair its verdict. The streaming engine
calls it on the driver for every micro-batch; the what-if replay calls it on
the whole log. Pure numpy.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lowwater.core.accounting import Accounting
from lowwater.core.lateness import classify, row_verdicts
from lowwater.core.tracker import WatermarkTracker
from lowwater.core.watermarks import clip_future
from lowwater.core.windows import Assignment, WindowAssigner


def arrival_order(
    n: int,
    arrival_us: np.ndarray | None = None,
    partition_sort: np.ndarray | None = None,
    offset: np.ndarray | None = None,
    source_order: list[np.ndarray] | None = None,
) -> np.ndarray:
    """Permutation putting rows in arrival order.

    The order is ``(arrival_time, partition, offset)`` when there is an
    arrival clock, then the source's own order (``source_order``: most
    significant first, e.g. file name, block, position) as the tie-breaker;
    without an arrival clock it is the source order alone.
    """
    keys: list[np.ndarray] = [np.asarray(k) for k in reversed(source_order or [])]
    if arrival_us is not None:
        if offset is not None:
            keys.append(np.asarray(offset))
        if partition_sort is not None:
            keys.append(_sort_codes(partition_sort))
        keys.append(np.asarray(arrival_us))
    if not keys or n == 0 or _in_order(keys):
        return np.arange(n, dtype=np.int64)
    first = keys[-1]
    if n > 1 and bool((first[1:] >= first[:-1]).all()):
        # Already in order by the most significant key (e.g. the arrival clock): only the runs
        # of equal values need sorting, and they keep their positions.
        eq = first[1:] == first[:-1]
        tied = np.zeros(n, dtype=bool)
        tied[1:] |= eq
        tied[:-1] |= eq
        at = np.flatnonzero(tied)
        order = np.arange(n, dtype=np.int64)
        order[at] = at[np.lexsort([k[at] for k in keys])]
        return order
    return np.lexsort(keys)


def _in_order(keys: list[np.ndarray]) -> bool:
    """Are the rows already sorted by ``keys`` (least significant first, as for ``np.lexsort``)?

    Files usually hold rows in arrival order: a few O(n) comparisons then
    replace the sort (a ~20 ms lexsort on 250k rows).
    """
    undecided = np.ones(len(keys[0]) - 1, dtype=bool)
    for k in reversed(keys):
        a, b = k[:-1], k[1:]
        if (undecided & (b < a)).any():
            return False
        undecided &= b == a
        if not undecided.any():
            break
    return True


def _sort_codes(values: np.ndarray) -> np.ndarray:
    """Something that sorts like ``values``: numbers as they are, anything else as dense codes."""
    values = np.asarray(values)
    if np.issubdtype(values.dtype, np.number) or values.dtype == bool:
        return values
    _, codes = np.unique(values, return_inverse=True)
    return codes


@dataclass(frozen=True)
class Judgement:
    """Verdicts for a batch already in arrival order.

    Arrays are over the batch's *data* rows: marker rows of punctuated sources
    move the watermark but are not data (SEMANTICS.md §2), so they get no
    window and no verdict; ``data`` says where the data rows sit in the batch.
    """

    event_us: np.ndarray  # clipped event times
    watermark_us: np.ndarray  # W(r) per row
    seq: np.ndarray  # global arrival sequence number per row
    pairs: Assignment  # (row, window) pairs
    verdict: np.ndarray  # Lateness code per pair
    row_verdict: np.ndarray  # worst verdict per row
    clipped: np.ndarray  # bool per row
    data: np.ndarray | None = None  # positions of the data rows in the batch (None: every row is data)
    markers: int = 0  # marker rows consumed (not data)


def clip_per_source(
    event_us: np.ndarray,
    arrival_us: np.ndarray | None,
    skew_by_source: dict[str, int | None],
    sources: np.ndarray | str | None,
) -> tuple[np.ndarray, np.ndarray]:
    """SEMANTICS.md §5 with each source's own ``max_future_skew`` (``sources``: one name or a name per row)."""
    if sources is None or isinstance(sources, str):
        skews = list(skew_by_source.values())
        skew = skew_by_source.get(sources, None) if isinstance(sources, str) else (skews[0] if skews else None)
        return clip_future(event_us, arrival_us, skew)
    ev = np.asarray(event_us, dtype=np.int64).copy()
    mask = np.zeros(len(ev), dtype=bool)
    names = np.asarray(sources)
    for name, skew in skew_by_source.items():
        rows = np.flatnonzero(names == name)
        if skew is None or not len(rows):
            continue
        ev[rows], mask[rows] = clip_future(ev[rows], None if arrival_us is None else arrival_us[rows], skew)
    return ev, mask


def judge(
    tracker: WatermarkTracker,
    assigner: WindowAssigner,
    grace_us: int,
    partitions: np.ndarray,
    event_us: np.ndarray,
    arrival_us: np.ndarray | None = None,
    *,
    sources: np.ndarray | str | None = None,
    markers: np.ndarray | None = None,
) -> Judgement:
    """Advance ``tracker`` over rows in arrival order and judge every (row, window) pair.

    ``sources`` names each row's source for a tracker of several sources (see
    :meth:`WatermarkTracker.advance`); ``markers`` is True on marker rows of
    punctuated sources, which are fed to the tracker and then left out.
    """
    skew = {name: s.max_future_skew_us for name, s in tracker.strategies.items()}
    event, clipped = clip_per_source(event_us, arrival_us, skew, sources)
    seq0 = tracker.state.rows_seen
    w_row = tracker.advance(partitions, event, arrival_us, sources=sources, markers=markers)
    seq = seq0 + np.arange(len(event), dtype=np.int64)
    data = None
    n_markers = 0
    if markers is not None and bool(np.any(markers)):
        data = np.flatnonzero(~np.asarray(markers, dtype=bool))
        n_markers = len(event) - len(data)
        event, w_row, seq, clipped = event[data], w_row[data], seq[data], clipped[data]
    pairs = assigner.assign(event)
    verdict = classify(pairs.end, w_row[pairs.row], grace_us)
    return Judgement(
        event_us=event,
        watermark_us=w_row,
        seq=seq,
        pairs=pairs,
        verdict=verdict,
        row_verdict=row_verdicts(pairs.row, verdict, len(event)),
        clipped=clipped,
        data=data,
        markers=n_markers,
    )


def account(j: Judgement, dead_letter: int) -> Accounting:
    """The batch's accounting; raises if the identity does not hold."""
    acc = Accounting.from_verdicts(j.row_verdict, dead_letter, int(j.clipped.sum()))
    acc.check()
    return acc

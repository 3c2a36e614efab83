"""SEMANTICS.md §8 for every strategy and several sources, in the pure core.

A punctuated source (random marker rows), an adaptive one and a bounded one
with clipping, each cut into micro-batches independently (one source in one
batch, another in many), rows held until the arrival frontier passes them:
every data row gets the ``W(r)`` and verdict of one batch of the whole log in
arrival order, and the counts (markers, clipped, regressions) are the same.
The bounded-only version is tests/core/test_frontier.py.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from lowwater.core.frontier import ArrivalFrontier, FrontierState
from lowwater.core.judge import arrival_order, judge
from lowwater.core.tracker import WatermarkTracker
from lowwater.core.watermarks import Adaptive, Punctuated, WatermarkStrategy
from lowwater.core.windows import TumblingWindows

S = 1_000_000


def _strategies() -> dict[str, WatermarkStrategy]:
    return {
        "cdc": WatermarkStrategy.for_generator(Punctuated("is_marker")),
        "mobile": WatermarkStrategy.for_generator(
            Adaptive(target_quantile=0.9, rows=4, over_us=8 * S, min_lateness_us=1 * S, max_lateness_us=20 * S)
        ),
        "radar": WatermarkStrategy.for_bounded_out_of_orderness(5 * S).with_max_future_skew(3 * S),
    }


@dataclass(frozen=True)
class Row:
    arrival: int
    source: str
    partition: str
    offset: int  # position in its source's log
    event: int
    marker: bool


@st.composite
def logs(draw):
    """Per source: rows in its own arrival order (delays may be negative: ahead of arrival) and its cuts."""
    out = {}
    for name in _strategies():
        n = draw(st.integers(1, 20))
        arrival = np.cumsum(draw(st.lists(st.integers(0, 4), min_size=n, max_size=n))) * S
        delay = np.array(draw(st.lists(st.integers(-6, 30), min_size=n, max_size=n))) * S
        part = draw(st.lists(st.sampled_from(["0", "1"]), min_size=n, max_size=n))
        marker = draw(st.lists(st.booleans(), min_size=n, max_size=n)) if name == "cdc" else [False] * n
        rows = sorted(zip(arrival.tolist(), part, (arrival - delay).tolist(), marker, strict=True),
                      key=lambda r: (r[0], r[1]))  # a source's log is in its own arrival order
        cuts = sorted(set(draw(st.lists(st.integers(1, max(1, n - 1)), max_size=5))))
        out[name] = ([Row(a, name, p, i, e, m) for i, (a, p, e, m) in enumerate(rows)], cuts)
    return out


def _judge(tracker: WatermarkTracker, rows: list[Row]) -> tuple[dict, int, int]:
    """Judge rows (in arrival order): {(source, offset): (W(r), verdict)} of the data rows, markers, clipped."""
    col = lambda f, dtype=None: np.array([getattr(r, f) for r in rows], dtype=dtype)  # noqa: E731
    j = judge(tracker, TumblingWindows(10 * S), 2 * S, col("partition"), col("event", np.int64),
              col("arrival", np.int64), sources=col("source"), markers=col("marker", bool))
    data = [rows[k] for k in (range(len(rows)) if j.data is None else j.data.tolist())]
    seen = {(r.source, r.offset): (int(w), int(v)) for r, w, v in zip(data, j.watermark_us, j.row_verdict,
                                                                      strict=True)}
    return seen, j.markers, int(j.clipped.sum())


def _in_order(rows: list[Row]) -> list[Row]:
    order = arrival_order(len(rows), np.array([r.arrival for r in rows]),
                          np.array([f"{r.source}\x00{r.partition}" for r in rows]), np.array([r.offset for r in rows]))
    return [rows[i] for i in order]


def _one_batch(log) -> tuple[dict, tuple[int, ...]]:
    tracker = WatermarkTracker(_strategies())
    seen, markers, clipped = _judge(tracker, _in_order([r for rows, _ in log.values() for r in rows]))
    return seen, (markers, clipped, tracker.state.regressions_ignored)


def _cut_and_held(log) -> tuple[dict, tuple[int, ...]]:
    """Micro-batch k brings each source's k-th chunk; rows wait until the frontier passes them."""
    chunks = {}
    for name, (rows, cuts) in log.items():
        bounds = [0, *cuts, len(rows)]
        chunks[name] = [rows[lo:hi] for lo, hi in zip(bounds[:-1], bounds[1:], strict=True) if hi > lo]
    steps = max(len(c) for c in chunks.values())
    tracker = WatermarkTracker(_strategies())
    frontier, fstate = ArrivalFrontier({n: None for n in log}), FrontierState()
    held: list[Row] = []
    seen: dict = {}
    markers = clipped = 0
    for k in range(steps + 1):  # the last step drains (F = +inf)
        new = [r for c in chunks.values() if k < len(c) for r in c[k]]
        if new:
            frontier.deliver(fstate, np.array([r.source for r in new]), np.array([r.arrival for r in new]))
        pool = held + new
        if k == steps:
            mask = [True] * len(pool)
        else:
            mask = frontier.ready(fstate, np.array([r.source for r in pool]),
                                  np.array([r.arrival for r in pool])).tolist()
        ready = [r for r, m in zip(pool, mask, strict=True) if m]
        held = [r for r, m in zip(pool, mask, strict=True) if not m]
        if ready:
            batch, m, c = _judge(tracker, _in_order(ready))
            seen.update(batch)
            markers, clipped = markers + m, clipped + c
    assert not held
    return seen, (markers, clipped, tracker.state.regressions_ignored)


@settings(max_examples=80, deadline=None)
@given(logs())
def test_any_per_source_cutting_gives_the_one_batch_answer_for_every_strategy(log):
    assert _cut_and_held(log) == _one_batch(log)


def test_the_property_sees_markers_regressions_and_clipping():
    """The generator is not vacuous: a fixed log with all three exercised, cut unevenly."""
    cdc = [Row(1 * S, "cdc", "0", 0, 5 * S, True), Row(2 * S, "cdc", "0", 1, 3 * S, True),
           Row(4 * S, "cdc", "0", 2, 4 * S, False), Row(9 * S, "cdc", "0", 3, 9 * S, True)]
    mobile = [Row(a * S, "mobile", "0", i, (a - d) * S, False)
              for i, (a, d) in enumerate([(1, 0), (2, 0), (3, 9), (4, 0), (5, 12), (8, 0)])]
    radar = [Row(a * S, "radar", "1", i, (a + f) * S, False) for i, (a, f) in enumerate([(1, 0), (3, 10), (6, 0)])]
    log = {"cdc": (cdc, [1, 2, 3]), "mobile": (mobile, []), "radar": (radar, [2])}
    seen, (markers, clipped, regressions) = _one_batch(log)
    assert (markers, clipped) == (3, 1)
    assert regressions >= 2  # the older marker and the widening adaptive L
    assert len(seen) == 1 + 6 + 3
    assert _cut_and_held(log) == (seen, (markers, clipped, regressions))

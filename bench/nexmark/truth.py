"""What a complete answer counts, from the generated rows alone (no engine).

Completeness is rows counted in final results / rows. Native Spark cannot
fire the windows still open when a bounded input ends (its watermark only
moves between micro-batches, and no batch follows the last), while lowwater
(``--drain``) and Flink (end of input) fire them all; so every engine's
completeness is also given over the *body*: the windows ending at or before
a cutoff, the event time at ``BODY`` of the run's span, well before the end
of input. There the denominator is counted from the rows: for tumbling and
hopping windows, each row's windows (aligned to the epoch, as all three
engines align them) that end by the cutoff; for sessions, the rows of the
true sessions (every row, gap split per key) that end by the cutoff.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from bench.nexmark.engines import Query

BODY = 0.75


def cutoff_ms(frame: pd.DataFrame) -> int:
    """The body's end: the event time at ``BODY`` of the span."""
    first, last = int(frame["date_time"].min()), int(frame["date_time"].max())
    return first + int(BODY * (last - first))


def expected_body(q: Query, frame: pd.DataFrame, cutoff: int) -> int:
    """(row, window) memberships of windows ending at or before ``cutoff`` (ms)."""
    t = frame["date_time"].to_numpy()
    if q.type == "session":
        gap = q.gap_s * 1000
        s = frame[[q.key or "partition", "date_time"]].sort_values([q.key or "partition", "date_time"])
        key, ts = s.iloc[:, 0].to_numpy(), s["date_time"].to_numpy()
        new = np.ones(len(ts), dtype=bool)
        new[1:] = (key[1:] != key[:-1]) | (ts[1:] - ts[:-1] >= gap)
        session = np.cumsum(new)
        ends = pd.Series(ts).groupby(session).max().to_numpy() + gap  # [first, last + gap)
        sizes = np.bincount(session)[1:]
        return int(sizes[ends <= cutoff].sum())
    size = q.size_s * 1000
    slide = (q.slide_s or q.size_s) * 1000
    first_end = (t // slide + 1) * slide  # the earliest-ending window holding t
    total = 0
    for j in range(size // slide):
        total += int((first_end + j * slide <= cutoff).sum())
    return total


def counted_body(counts: pd.DataFrame, cutoff: int) -> int:
    """Rows counted in final results of windows ending at or before ``cutoff``."""
    return int(counts.loc[counts["window_end_ms"] <= cutoff, "count"].sum())

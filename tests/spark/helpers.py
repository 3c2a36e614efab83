"""Small helpers to compare engine outputs with hand-written tables."""

from __future__ import annotations

import pandas as pd


def secs(ts) -> float:  # noqa: ANN001
    """A UTC timestamp from the outputs as seconds since the epoch."""
    return pd.Timestamp(ts).value / 1e9


def emitted(outcome, *cols: str) -> list[tuple]:  # noqa: ANN001
    """Results as (key, start s, end s, count, <cols>, kind, revision), sorted."""
    r = outcome.results
    if r.empty:
        return []
    out = []
    for row in r.itertuples(index=False):
        d = row._asdict()
        out.append((
            d.get("key"), secs(d["window_start"]), secs(d["window_end"]), d["count"],
            *(d[c] for c in cols), d["kind"], d["revision"],
        ))
    return sorted(out, key=lambda t: tuple((x is None, x) for x in t))


def late_rows(outcome) -> list[tuple]:  # noqa: ANN001
    """Too-late rows as (partition, event_time, window start s, window end s, watermark s), sorted."""
    late = outcome.late
    if late.empty:
        return []
    return sorted(
        (str(r.partition), r.event_time, secs(r.window_start), secs(r.window_end), secs(r.watermark))
        for r in late.itertuples(index=False)
    )

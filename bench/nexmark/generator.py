"""The bid stream of Nexmark's generator, with disorder, a lagging and an idle partition.

Event ids follow Nexmark's ``GeneratorConfig`` (Beam ``sdk/testing/nexmark``):
every 50 events are 1 person, 3 auctions and 46 bids, the event time of event
``i`` is ``i / rate`` seconds after the start. Only bids are written (Q5, Q7 and
Q11 read bids only), but their ids, hot sets and prices are Nexmark's:

* auction: with probability 1/2 the hot auction (the last auction rounded down
  to a multiple of 2), else uniform over the last 100 auctions plus 10 ahead;
* bidder: with probability 3/4 the hot bidder (the last person rounded down to
  a multiple of 4, plus 1), else uniform over the last 1,000 people plus 10;
* price: ``round(10 ** (u * 6) * 100)`` cents, ``u`` uniform in [0, 1).

Then the disorder (times in milliseconds, the unit written):

* arrival = event time + an exponential delay (mean ``delay_ms``), and a
  ``tail`` fraction of rows delayed uniformly by ``tail_ms``;
* rows go to ``partitions`` source partitions uniformly at random;
* partition ``lag_partition`` arrives ``lag_ms`` late (all its rows);
* partition ``idle_partition`` gets no row whose event time falls in the
  ``idle`` stretch (fractions of the event-time span): those rows go to the
  other partitions, so the row count is unchanged.

Rows are sorted by arrival (ties by generation order) and numbered per
partition (``offset``). Deterministic for a seed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

START_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
PERSON, AUCTION, BID = 1, 3, 46  # Nexmark's proportions per epoch of 50 events
EPOCH = PERSON + AUCTION + BID
FIRST_ID = 1000  # Nexmark's FIRST_PERSON_ID and FIRST_AUCTION_ID
HOT_AUCTION_RATIO, HOT_BIDDER_RATIO = 2, 4
IN_FLIGHT_AUCTIONS, AUCTION_ID_LEAD = 100, 10
ACTIVE_PEOPLE, PERSON_ID_LEAD = 1000, 10
COLUMNS = ("partition", "offset", "auction", "bidder", "price", "date_time", "arrival_time")


@dataclass(frozen=True)
class Disorder:
    """How the bids arrive: delays, the partitions, the lagging and the idle one."""

    partitions: int = 8
    delay_ms: float = 300.0
    tail: float = 0.01
    tail_ms: tuple[int, int] = (2_000, 20_000)
    lag_partition: int = 6
    lag_ms: int = 5_000
    idle_partition: int = 7
    idle: tuple[float, float] = (0.4, 0.6)


def bids(n: int, rate: float = 10_000.0, seed: int = 1, disorder: Disorder = Disorder()) -> pd.DataFrame:
    """``n`` bids in arrival order, with :data:`COLUMNS` (times in epoch milliseconds)."""
    rng = np.random.default_rng(seed)
    k = np.arange(n, dtype=np.int64)
    epoch = k // BID
    event_id = epoch * EPOCH + PERSON + AUCTION + k % BID
    event_us = (event_id * (1e6 / rate)).astype(np.int64)
    date_time = START_MS + event_us // 1000

    last_auction = epoch * AUCTION + AUCTION - 1  # lastBase0AuctionId of a bid
    hot_a = rng.integers(0, HOT_AUCTION_RATIO, n) > 0
    low_a = np.maximum(last_auction - IN_FLIGHT_AUCTIONS, 0)
    cold_a = low_a + (rng.random(n) * (last_auction - low_a + 1 + AUCTION_ID_LEAD)).astype(np.int64)
    auction = np.where(hot_a, last_auction // HOT_AUCTION_RATIO * HOT_AUCTION_RATIO, cold_a) + FIRST_ID

    last_person = epoch  # lastBase0PersonId of a bid: one person per epoch
    hot_b = rng.integers(0, HOT_BIDDER_RATIO, n) > 0
    active = np.minimum(last_person + 1, ACTIVE_PEOPLE)
    cold_b = last_person + 1 - active + (rng.random(n) * (active + PERSON_ID_LEAD)).astype(np.int64)
    bidder = np.where(hot_b, last_person // HOT_BIDDER_RATIO * HOT_BIDDER_RATIO + 1, cold_b) + FIRST_ID

    price = np.round(10.0 ** (rng.random(n) * 6.0) * 100.0).astype(np.int64)

    d = disorder
    part = rng.integers(0, d.partitions, n)
    span = max(int(date_time[-1] - date_time[0]), 1) if n else 1
    lo, hi = (date_time[0] + int(f * span) for f in d.idle) if n else (0, 0)
    quiet = (part == d.idle_partition) & (date_time >= lo) & (date_time < hi)
    others = [p for p in range(d.partitions) if p != d.idle_partition]
    part[quiet] = rng.choice(others, int(quiet.sum()))

    delay = rng.exponential(d.delay_ms, n)
    slow = rng.random(n) < d.tail
    delay[slow] = rng.uniform(d.tail_ms[0], d.tail_ms[1], int(slow.sum()))
    arrival = date_time + delay.astype(np.int64) + np.where(part == d.lag_partition, d.lag_ms, 0)

    order = np.argsort(arrival, kind="stable")
    frame = pd.DataFrame({
        "partition": part[order].astype(np.int32),
        "offset": np.zeros(n, dtype=np.int64),
        "auction": auction[order],
        "bidder": bidder[order],
        "price": price[order],
        "date_time": date_time[order],
        "arrival_time": arrival[order],
    })
    frame["offset"] = frame.groupby("partition").cumcount().astype(np.int64)
    return frame


def idle_stretch(frame: pd.DataFrame, disorder: Disorder = Disorder()) -> tuple[int, int]:
    """The event-time interval (ms, half-open) in which the idle partition has no row."""
    first, last = int(frame["date_time"].min()), int(frame["date_time"].max())
    span = max(last - first, 1)
    return tuple(first + int(f * span) for f in disorder.idle)  # type: ignore[return-value]


@dataclass(frozen=True)
class Landed:
    """Where the bids were written: arrival slices (all engines) and whole partitions (Flink)."""

    slices: Path
    partition_files: list[Path]
    files_per_slice: int
    slices_count: int
    rows: int


def land(frame: pd.DataFrame, directory: Path, slices: int, partitions: int) -> Landed:
    """Write ``frame`` as JSON lines: ``slices/part-<slice>-p<k>.jsonl``, one per slice and partition.

    A slice is an equal span of arrival time; within a file, rows are in arrival
    order; every (slice, partition) file exists, empty or not, so that reading
    ``partitions`` files at a time reads exactly one slice. File names sort in
    slice order and modification times increase in that order too (Spark's file
    source orders by modification time). ``partitions/p<k>.jsonl`` holds the
    same lines again, partition ``k``'s slices concatenated: Flink's file source
    reads a file as one split, in order, and a directory's files in no set
    order, so one file per partition is how its per-split watermarks see the
    source partitions (as Kafka partitions would be seen).
    """
    sl_dir, p_dir = directory / "slices", directory / "partitions"
    sl_dir.mkdir(parents=True, exist_ok=True)
    p_dir.mkdir(parents=True, exist_ok=True)
    arrival = frame["arrival_time"].to_numpy()
    first, last = (int(arrival[0]), int(arrival[-1])) if len(arrival) else (0, 0)
    width = (last - first) / slices + 1e-9
    slice_of = np.minimum(((arrival - first) / width).astype(np.int64), slices - 1) if len(arrival) else arrival
    frame = frame.assign(_slice=slice_of)
    p_files = [p_dir / f"p{p}.jsonl" for p in range(partitions)]
    handles = [f.open("w") for f in p_files]
    mtime = 1_700_000_000.0
    try:
        groups = dict(iter(frame.groupby(["_slice", "partition"], sort=True)))
        for s in range(slices):
            for p in range(partitions):
                path = sl_dir / f"part-{s:05d}-p{p}.jsonl"
                g = groups.get((s, p))
                text = "" if g is None else g[list(COLUMNS)].to_json(orient="records", lines=True)
                if text and not text.endswith("\n"):
                    text += "\n"
                path.write_text(text)
                handles[p].write(text)
                mtime += 1.0
                os.utime(path, (mtime, mtime))
    finally:
        for h in handles:
            h.close()
    return Landed(sl_dir, p_files, partitions, slices, len(frame))

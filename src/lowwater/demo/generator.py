"""A synthetic payments stream, landed as JSON Lines files, to show lowwater at work.

The stream models card payments accepted by ~50 merchants (a few busy, most
quiet: Zipf-like popularity) and collected from 8 source partitions, as if
read from a Kafka topic or a landing zone of per-partition feeds. Every row
carries both clocks of the semantics contract (section 1):
``event_time`` (when the payment happened) and ``arrival_time`` (when the
pipeline received it), plus its ``partition`` and ``offset``.

It is built to exercise the three things that make event-time processing
hard, all at once and deterministically (seeded ``numpy`` generator):

- **heavy-tailed lateness**: most rows arrive within a second, a few percent
  tens of seconds late (retries, mobile terminals reconnecting), a fraction
  of a percent minutes late (offline batches). They test out-of-orderness
  bounds, allowed lateness and the late-data policy.
- **a lagging partition** (default 3): every row arrives a constant ~20 s
  later, so its partition watermark trails the others and holds the low
  watermark back (the min, never the max).
- **an idle partition** (default 6): no arrivals for ~90 s of arrival time in
  the middle of the stream; the rows produced meanwhile are delivered in one
  burst when it comes back, keeping their event times. It tests idleness
  (excluded from the min after ``idle_timeout``) and what happens to the
  rows of a partition that rejoins behind the watermark (they are late).

:func:`generate_payments` builds the rows in arrival order,
:func:`write_landing_zone` cuts them into files by arrival time, and
:func:`write_demo` writes the files plus a ``demo.toml`` config for
``lowwater run``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pandas as pd

COLUMNS = ["partition", "offset", "event_time", "arrival_time", "key", "amount", "currency"]
N_MERCHANTS = 50
CURRENCIES = ("EUR", "USD", "GBP")
CURRENCY_WEIGHTS = (0.6, 0.3, 0.1)

# Delay mixture: (probability, kind). Fast rows are exponential; slow and very
# slow rows are uniform over their ranges (seconds).
P_SLOW = 0.04
P_VERY_SLOW = 0.005
FAST_MEAN_S = 0.2
SLOW_RANGE_S = (10.0, 60.0)
VERY_SLOW_RANGE_S = (60.0, 300.0)
# Spacing of the catch-up burst of the quiet partition, in milliseconds per row.
BURST_STEP_MS = 1


@dataclass(frozen=True)
class PaymentsSpec:
    """Shape of the generated payments stream (times in seconds)."""

    rate_per_s: float = 200
    duration_s: float = 600
    partitions: int = 8
    lagging_partition: int = 3
    lag_s: float = 20
    quiet_partition: int = 6
    quiet_from_s: float = 240
    quiet_for_s: float = 90
    seed: int = 7
    start: datetime = datetime(2026, 1, 1, tzinfo=UTC)
    file_span_s: float = 10


def _delays_ms(rng: np.random.Generator, n: int) -> np.ndarray:
    """Heavy-tailed, non-negative delays in whole milliseconds."""
    u = rng.random(n)
    fast = rng.exponential(FAST_MEAN_S, n)
    slow = rng.uniform(*SLOW_RANGE_S, n)
    very_slow = rng.uniform(*VERY_SLOW_RANGE_S, n)
    delay_s = np.where(u < P_VERY_SLOW, very_slow, np.where(u < P_VERY_SLOW + P_SLOW, slow, fast))
    return np.round(delay_s * 1000).astype(np.int64)


def generate_payments(spec: PaymentsSpec = PaymentsSpec()) -> pd.DataFrame:
    """All rows of the stream, in arrival order ``(arrival_time, partition, offset)``.

    Times are float seconds since the epoch with millisecond precision;
    ``offset`` counts 0, 1, 2, ... per partition in arrival order.
    """
    if spec.rate_per_s <= 0 or spec.duration_s <= 0 or spec.partitions < 1:
        msg = "rate_per_s, duration_s and partitions must be positive"
        raise ValueError(msg)
    rng = np.random.default_rng(spec.seed)
    n = int(round(spec.rate_per_s * spec.duration_s))
    start_ms = int(round(spec.start.timestamp() * 1000))

    # Steady event-time rate: one event per 1/rate seconds, jittered inside its slot.
    slot = (np.arange(n) + rng.random(n)) / spec.rate_per_s
    event_ms = start_ms + np.floor(slot * 1000).astype(np.int64)
    partition = rng.integers(0, spec.partitions, n)

    arrival_ms = event_ms + _delays_ms(rng, n)
    if 0 <= spec.lagging_partition < spec.partitions:
        arrival_ms = arrival_ms + np.where(
            partition == spec.lagging_partition, int(round(spec.lag_s * 1000)), 0
        )

    if 0 <= spec.quiet_partition < spec.partitions and spec.quiet_for_s > 0:
        # Rows that would arrive during the outage come back in one burst at its
        # end, in their original arrival order, one every BURST_STEP_MS.
        q_from = start_ms + int(round(spec.quiet_from_s * 1000))
        q_to = q_from + int(round(spec.quiet_for_s * 1000))
        held = np.flatnonzero(
            (partition == spec.quiet_partition) & (arrival_ms >= q_from) & (arrival_ms < q_to)
        )
        held = held[np.lexsort((event_ms[held], arrival_ms[held]))]
        arrival_ms[held] = q_to + BURST_STEP_MS * np.arange(len(held), dtype=np.int64)

    ranks = np.arange(1, N_MERCHANTS + 1, dtype=float)
    popularity = 1.0 / ranks**1.1
    merchant = rng.choice(N_MERCHANTS, size=n, p=popularity / popularity.sum())
    amount = np.maximum(np.round(rng.lognormal(mean=3.2, sigma=1.0, size=n), 2), 0.01)
    currency = rng.choice(len(CURRENCIES), size=n, p=CURRENCY_WEIGHTS)

    # Arrival order; ties inside a partition broken by event time, then generation order.
    order = np.lexsort((np.arange(n), event_ms, partition, arrival_ms))
    df = pd.DataFrame(
        {
            "partition": partition[order].astype(np.int64),
            "event_ms": event_ms[order],
            "arrival_ms": arrival_ms[order],
            "key": np.array([f"m{i:03d}" for i in range(N_MERCHANTS)])[merchant[order]],
            "amount": amount[order],
            "currency": np.array(CURRENCIES)[currency[order]],
        }
    )
    df["offset"] = df.groupby("partition").cumcount().astype(np.int64)
    df["event_time"] = df["event_ms"] / 1000.0
    df["arrival_time"] = df["arrival_ms"] / 1000.0
    return df[COLUMNS].reset_index(drop=True)


def _row_json(row: tuple) -> str:
    part, off, et, at, key, amount, cur = row
    return json.dumps(
        {
            "partition": int(part),
            "offset": int(off),
            "event_time": float(et),
            "arrival_time": float(at),
            "key": str(key),
            "amount": float(amount),
            "currency": str(cur),
        },
        separators=(",", ":"),
    )


def write_landing_zone(df: pd.DataFrame, directory: str | Path, file_span_s: float) -> list[Path]:
    """Write ``df`` as JSON Lines files, one per ``file_span_s`` of arrival time.

    Rows go in arrival order; files are named ``part-00000.jsonl``, ... so that
    name order is arrival order (empty spans make no file). Each file's mtime is
    the end of its span on the arrival clock (at least 1 s after the previous
    one), as files landing one by one would have (the engine reads them in name
    order whatever their modification times).
    Stale ``part-*.jsonl`` files in ``directory`` are removed first.
    """
    if file_span_s <= 0:
        msg = "file_span_s must be positive"
        raise ValueError(msg)
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    for stale in out.glob("part-*.jsonl"):
        stale.unlink()
    if df.empty:
        return []
    rows = df.sort_values(["arrival_time", "partition", "offset"], kind="stable")[COLUMNS]
    span_ms = max(int(round(file_span_s * 1000)), 1)
    arrival_ms = np.round(rows["arrival_time"].to_numpy(dtype=float) * 1000).astype(np.int64)
    bucket = arrival_ms // span_ms
    buckets, starts = np.unique(bucket, return_index=True)
    bounds = [*starts.tolist(), len(rows)]
    width = max(5, len(str(len(buckets) - 1)))

    paths: list[Path] = []
    records = list(rows.itertuples(index=False, name=None))
    last_mtime = float("-inf")
    for i, b in enumerate(buckets.tolist()):
        path = out / f"part-{i:0{width}d}.jsonl"
        lines = (_row_json(r) for r in records[bounds[i] : bounds[i + 1]])
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        mtime = max((b + 1) * span_ms / 1000.0, last_mtime + 1.0)
        os.utime(path, (mtime, mtime))
        last_mtime = mtime
        paths.append(path)
    return paths


# The demo's watermark, window, late and output tables: the file demo and `demo --kafka` share them.
PIPELINE_TABLES = """\
[watermark]
max_out_of_orderness = "5s"
idle_timeout = "30s"
partitions = [{partitions}]

[window]
type = "tumbling"
size = "1m"
allowed_lateness = "10s"
key = ["key"]
aggregations = {{ total = "sum(amount)", biggest = "max(amount)", payments_avg = "avg(amount)" }}

[late]
policy = "side_output"

[output]
path = "out"
"""

_CONFIG = """\
[source]
format = "jsonl"
path = "landing"
partition = "partition"
offset = "offset"
arrival_time = "arrival_time"
event_time = "event_time"
time_unit = "s"
max_files_per_batch = 3

""" + PIPELINE_TABLES + """
[spark]
master = "local[*]"
"""


def write_demo(directory: str | Path, spec: PaymentsSpec = PaymentsSpec()) -> Path:
    """Write ``landing/`` and ``demo.toml`` into ``directory``; return the config path."""
    base = Path(directory)
    base.mkdir(parents=True, exist_ok=True)
    write_landing_zone(generate_payments(spec), base / "landing", spec.file_span_s)
    config = base / "demo.toml"
    parts = ", ".join(str(p) for p in range(spec.partitions))
    config.write_text(_CONFIG.format(partitions=parts), encoding="utf-8")
    return config

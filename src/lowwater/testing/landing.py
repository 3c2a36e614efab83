"""A small JSONL file log for tests and benches: two partitions, a few far-late rows, optional dead letters.

Generated with numpy from a seed, so two calls with the same arguments land
byte-identical files (a reference run and a crashed one compare row for row).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pandas as pd


def land_jsonl(landing: Path, files: int, rows_per_file: int, seed: int = 3, gap_ms: tuple[int, int] = (5, 40),
               far_ms: tuple[int, int] = (5_000, 30_000), dead_letters: bool = False) -> None:
    """``files`` files ``part-NNN.jsonl`` of ``rows_per_file`` rows each under ``landing`` (created).

    Arrivals ``gap_ms`` apart, two partitions with per-partition offsets in
    arrival order, 5 % of rows ``far_ms`` late (the rest exponential, mean
    0.8 s); with ``dead_letters`` each file also gets one malformed line and
    one row without event time. Modification times increase with the name.
    """
    rng = np.random.default_rng(seed)
    landing.mkdir(parents=True)
    n = files * rows_per_file
    arrival = np.cumsum(rng.integers(gap_ms[0], gap_ms[1], n))
    part = rng.integers(0, 2, n)
    far = rng.random(n) <= 0.05
    delay = np.where(far, rng.integers(far_ms[0], far_ms[1], n), rng.exponential(800, n).astype(np.int64))
    offset = np.zeros(n, dtype=np.int64)
    for p in (0, 1):  # per-partition offsets 0, 1, 2, ... in arrival order
        offset[part == p] = np.arange(int((part == p).sum()))
    df = pd.DataFrame({"partition": part, "offset": offset, "event_time": arrival - delay, "arrival_time": arrival,
                       "key": np.char.add("k", rng.integers(0, 5, n).astype(str)),
                       "amount": rng.integers(1, 100, n).astype(float)})
    for i in range(files):
        f = landing / f"part-{i:03d}.jsonl"
        chunk = df.iloc[i * rows_per_file:(i + 1) * rows_per_file]
        text = chunk.to_json(orient="records", lines=True)
        if not text.endswith("\n"):
            text += "\n"
        if dead_letters:
            t = int(chunk["arrival_time"].iloc[-1])
            text += ('{"partition": 0, "offset": -1, "key": "k0"' + "\n"  # malformed JSON
                     + json.dumps({"partition": 1, "offset": -1, "event_time": None, "arrival_time": t, "key": "k1",
                                   "amount": 1.0}) + "\n")  # no event time
        f.write_text(text)
        os.utime(f, (1_700_000_000 + i, 1_700_000_000 + i))

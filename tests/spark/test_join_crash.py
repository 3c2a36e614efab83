"""Crash and restart of an interval join: a run crashed at two points and rerun gives the joined/,
late/ and accounting of an uninterrupted run (the join's state comes back with the offsets, SEMANTICS.md §8).

Both crashes and the restart run in this process, on the shared session (no JVM start):
:func:`~tests.spark.test_crash.crash_here` stops a step at a fault point uncommitted, as
``LOWWATER_FAULT`` leaves it in a process (real kills are test_crash's and test_kafka_ops'
subject; the join's state is what this test follows across them).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from lowwater.config import load_config
from lowwater.spark.engine import Engine

from .helpers import run_cli_here
from .test_crash import crash_here

pytestmark = [pytest.mark.spark, pytest.mark.slow]

FILES, ROWS = 3, 12  # per source: three files of twelve rows, one file of each a micro-batch

CONFIG = """
[[source]]
name = "clicks"
format = "jsonl"
path = "landing/clicks"
partition = "partition"
event_time = "event_time"
arrival_time = "arrival_time"
schema = "partition STRING, event_time DOUBLE, arrival_time DOUBLE, user STRING, click STRING"
max_files_per_batch = 1
watermark = { strategy = "bounded", max_out_of_orderness = "3s" }

[[source]]
name = "orders"
format = "jsonl"
path = "landing/orders"
partition = "partition"
event_time = "event_time"
arrival_time = "arrival_time"
schema = "partition STRING, event_time DOUBLE, arrival_time DOUBLE, user STRING, amount DOUBLE"
max_files_per_batch = 1
watermark = { strategy = "bounded", max_out_of_orderness = "3s" }

[join]
left = "clicks"
right = "orders"
on = ["user"]
lower = "0s"
upper = "5s"
type = "left_outer"
columns = { left = ["click"], right = ["amount"] }

[late]
policy = "side_output"

[output]
path = "out"
"""


def land(root: Path) -> None:
    """Two sources of ``FILES`` files each; every order file ends with one far-late order (too late for the join)."""
    rng = np.random.default_rng(7)
    for name in ("clicks", "orders"):
        landing = root / "landing" / name
        landing.mkdir(parents=True)
        arrival = np.cumsum(rng.uniform(0.5, 1.5, FILES * ROWS))
        event = arrival - rng.uniform(0, 2.5, len(arrival))
        for i in range(FILES):
            rows = []
            for k in range(i * ROWS, (i + 1) * ROWS):
                row = {"partition": "0", "event_time": round(float(event[k]), 3),
                       "arrival_time": round(float(arrival[k]), 3), "user": f"u{rng.integers(0, 4)}"}
                row.update({"click": f"c{k}"} if name == "clicks" else {"amount": float(k)})
                rows.append(row)
            if name == "orders" and i:
                rows[-1]["event_time"] = rows[-1]["arrival_time"] - 20.0
            (landing / f"part-{i:03d}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (root / "pipeline.toml").write_text(CONFIG)


def outputs(root: Path) -> dict:
    out: dict = {}
    for kind in ("joined", "late"):
        df = pd.read_parquet(root / "out" / kind)
        df = df.drop(columns=[c for c in ("source_file",) if c in df.columns]).astype(str)
        out[kind] = sorted(map(tuple, df.itertuples(index=False)))
    out["summary"] = json.loads((root / "out" / "summary.json").read_text())
    return out


def test_a_killed_join_restarts_to_the_uninterrupted_outputs(tmp_path, spark, monkeypatch):
    clean, crashed = tmp_path / "clean", tmp_path / "crashed"
    land(clean)
    land(crashed)
    Engine(load_config(clean / "pipeline.toml"), spark).run(drain=True)
    # 1. a crash after step 1's outputs, before its manifest commit: the step is replayed from step 0's state
    crash_here(spark, crashed, "before_commit", 1, monkeypatch)
    # 2. crash (in this process) right after step 2's manifest commit, before Spark's commit log: the batch
    #    is replayed, recognised as done, and the drain starts from step 2's state
    crash_here(spark, crashed, "after_commit", 2, monkeypatch)
    last = run_cli_here(["run", "pipeline.toml", "--drain", "-q"], crashed)
    assert last.returncode == 0, last.stderr[-3000:]
    a, b = outputs(clean), outputs(crashed)
    assert a["joined"] and a["late"], "the data must give pairs and too-late rows"
    assert any("too_late_for_join" in r for r in a["late"])
    assert len(a["joined"]) == a["summary"]["windows_fired"] and a["summary"]["join"]["left"]["unmatched"] > 0
    assert b["joined"] == a["joined"] and b["late"] == a["late"]
    for k in ("rows", "on_time", "too_late", "dead_letter", "windows_fired", "steps", "join"):
        assert b["summary"][k] == a["summary"][k], k
    assert a["summary"]["join"]["left"]["balanced"] and a["summary"]["join"]["right"]["balanced"]

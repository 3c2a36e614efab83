"""A source that goes quiet releases the arrival frontier only through its ``idle_timeout`` (or the drain).

Source ``beacon`` delivers three rows (arrivals 1-5 s) in the first
micro-batch and nothing after; source ``main`` keeps delivering, one file per
micro-batch, arrivals 2 to 40 s. Without ``idle_timeout`` on beacon's
watermark table, main's rows after 5 s wait behind beacon's frontier until
the drain; with ``idle_timeout = "10s"`` beacon stops holding the frontier
once main's arrivals are 10 s past beacon's last one, and main's rows are
judged (and its windows fire) before the drain (core/frontier.py).
"""

from __future__ import annotations

import json
from functools import reduce
from pathlib import Path

import pandas as pd
import pytest

from lowwater.config import parse_config
from lowwater.io.files import read_batch
from lowwater.spark.engine import Engine

pytestmark = pytest.mark.spark

SCHEMA = "partition STRING, event_time DOUBLE, arrival_time DOUBLE, key STRING, amount DOUBLE"
MAIN = [[{"partition": "0", "event_time": t - 1.0, "arrival_time": float(t), "key": "a", "amount": 1.0}
         for t in range(lo + 2, lo + 12, 2)] for lo in (0, 10, 20, 30)]  # four files, arrivals 2..40
BEACON = [{"partition": "0", "event_time": t - 1.0, "arrival_time": float(t), "key": "b", "amount": 10.0}
          for t in (1, 3, 5)]


def _config(root: Path, idle: bool):  # noqa: ANN202
    beacon_wm = {"strategy": "bounded", "max_out_of_orderness": "2s"}
    if idle:
        beacon_wm["idle_timeout"] = "10s"
    sources = [
        {"name": name, "format": "jsonl", "path": f"landing/{name}", "partition": "partition",
         "event_time": "event_time", "arrival_time": "arrival_time", "schema": SCHEMA, "watermark": wm}
        for name, wm in (("main", {"strategy": "bounded", "max_out_of_orderness": "2s"}), ("beacon", beacon_wm))
    ]
    return parse_config({
        "source": sources,
        "window": {"type": "tumbling", "size": "10s", "key": ["key"], "aggregations": {"total": "sum(amount)"}},
        "late": {"policy": "side_output"},
        "output": {"path": "out"},
    }, base_dir=root)


def _run(spark, root: Path, idle: bool) -> tuple[list, dict, pd.DataFrame, pd.DataFrame]:  # noqa: ANN001
    """One micro-batch per main file (beacon's only file in the first); per step (held rows, windows fired)."""
    cfg = _config(root, idle)
    engine = Engine(cfg, spark)
    steps = []
    try:
        for i, rows in enumerate(MAIN):
            frames = []
            for name, chunk in (("main", rows), ("beacon", BEACON if i == 0 else None)):
                if chunk is None:
                    continue
                f = root / "landing" / name / f"part-{i:05d}.jsonl"
                f.parent.mkdir(parents=True, exist_ok=True)
                f.write_text("".join(json.dumps(r) + "\n" for r in chunk))
                raw = read_batch(spark, cfg.sources[0 if name == "main" else 1], engine.schemas[name], path=str(f))
                frames.append(engine.normalised(name, raw))
            report = engine.process_batch(reduce(lambda a, b: a.unionByName(b), frames), i)
            steps.append((report.held_rows, report.windows_fired))
        summary = engine.summary(engine.drain())
    finally:
        engine.close()
    out = root / "out"
    metrics = pd.read_parquet(out / "metrics").sort_values("spark_batch", kind="stable")
    results = pd.read_parquet(out / "results").sort_values(["key", "window_start"]).reset_index(drop=True)
    return steps, summary, metrics, results


def test_an_idle_source_releases_the_frontier_before_the_drain(spark, tmp_path):
    held, held_summary, held_metrics, held_results = _run(spark, tmp_path / "no-idle", idle=False)
    idle, idle_summary, idle_metrics, idle_results = _run(spark, tmp_path / "idle", idle=True)

    # Without idle_timeout: every main row after beacon's last arrival (5 s) waits, step after step.
    assert [h for h, _ in held] == [3, 8, 13, 18]  # main rows arriving at 6, 8, 10 (and 12, ... 40)
    assert all(fired == 0 for _, fired in held)  # beacon's W holds every window back, too
    # With it: beacon is idle once main's arrivals pass 5 + 10 s (in the second step): nothing held.
    assert [h for h, _ in idle] == [3, 0, 0, 0]
    assert sum(fired for _, fired in idle) > 0  # and its windows fire before the drain
    # The metrics say the same, step by step; the drain judges whatever is left.
    assert held_metrics["held_rows"].tolist()[:4] == [3, 8, 13, 18]
    assert idle_metrics["held_rows"].tolist()[:4] == [3, 0, 0, 0]
    assert held_summary["held_rows"] == idle_summary["held_rows"] == 0
    assert held_summary["rows"] == idle_summary["rows"] == 23
    assert held_summary["too_late"] == idle_summary["too_late"] == 0
    # In order data: the same results either way (only *when* differs).
    cols = ["key", "window_start", "window_end", "count", "total", "kind", "revision"]
    pd.testing.assert_frame_equal(held_results[cols], idle_results[cols])

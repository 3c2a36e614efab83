"""The row clock's Spark seam (spark/row_clock.py) equals the planner's ``W(r)`` on a run's own steps.

The run goes through the engine as always; at each step the planner's input
(the compact projection), the tracker state before it, its per-row ``W`` and
the state after are kept, and ``attach`` recomputes ``W`` from the same rows
on the executors: summaries per partition, the fold, the lookup.
"""

from __future__ import annotations

import json

import pytest

from lowwater.config import parse_config
from lowwater.core.tracker_state import TrackerState
from lowwater.spark.planner import StepPlanner
from lowwater.spark.row_clock import W_COLUMN, attach
from lowwater.testing.scenario import base_config, run_scenario

pytestmark = pytest.mark.spark


def test_the_w_column_equals_the_planners_w_row_for_row(spark, tmp_path, monkeypatch):
    captured = []
    real = StepPlanner.plan

    def spy(self, compact, tracker, prev, **kw):  # noqa: ANN001, ANN003, ANN202
        before = TrackerState.from_json(json.loads(json.dumps(tracker.state.to_json())))
        plan = real(self, compact, tracker, prev, **kw)
        captured.append((compact, before, plan, tracker.state.to_json()))
        return plan

    monkeypatch.setattr(StepPlanner, "plan", spy)
    config = base_config(
        source={"arrival_time": "arrival_time"},
        watermark={"max_out_of_orderness": "2s", "idle_timeout": "5s", "partitions": ["0", "1", "2"]},
    )
    # Three partitions, one lagging, one silent for a while (idle), one late row, a few shared arrivals.
    spec = [
        ("0", 1, 0), ("1", 2, 0), ("2", 1, 1), ("0", 6, 2), ("1", 4, 2), ("0", 12, 3), ("2", 3, 3),
        ("0", 15, 4), ("1", 9, 4), ("0", 21, 12), ("1", 20, 12), ("0", 2, 13), ("1", 25, 14),
        ("2", 30, 20), ("0", 33, 21), ("1", 31, 21), ("0", 40, 30), ("2", 35, 31),
    ]
    rows = [
        {"partition": p, "offset": i, "event_time": float(t), "arrival_time": float(a), "key": "k", "amount": 1.0}
        for i, (p, t, a) in enumerate(spec)
    ]
    run_scenario(spark, config, rows, cuts=[5, 11], drain=False, workdir=tmp_path)
    cfg = parse_config(config, base_dir=tmp_path)
    assert len(captured) == 3
    for compact, before, plan, after in captured:
        out, state, counts = attach(spark.createDataFrame(compact), cfg.watermark, before)
        got = {int(r["_rid"]): int(r[W_COLUMN]) for r in out.select("_rid", W_COLUMN).collect()}
        rid, w, _ = plan.lookup
        assert got == dict(zip(rid.tolist(), w.tolist(), strict=True))
        assert state.to_json() == after
        assert counts.rows == len(rid) and counts.entries <= counts.rows

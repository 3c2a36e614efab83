"""Determinism across ``max_offsets_per_trigger`` on the real broker (SEMANTICS.md §8, issue 17).

The seeds' topic (4 partitions: partition 3 lags by more than L, partition 2
goes quiet, stragglers too late, a few bad values) read with 1 %, 10 % and
100 % of it per trigger (the issue's three cuts; 1 % of its 91 records is one
offset a trigger, which Spark's connector rounds up per partition: 25
steps; 10 % is 9, two offsets a partition: 13 steps) gives the same results,
late rows, dead letters and accounting. 91 records is about the fewest with
which the 10 % cut is still a cut of its own (at 9 offsets a trigger the
connector gives each partition 2; below 80 records it would give 1, the 1 %
cut again) and the too-late rows are two or more (with 80 rows, one).
Spark's connector cuts the small limits across partitions by backlog, not by
record time, so the cut runs hold rows behind the arrival frontier
(``held_rows`` in metrics) and never judge out of arrival order.
The per-partition property is tested in the core (tests/core/test_kafka_frontier.py).
"""

from __future__ import annotations

import json

import pandas as pd
import pytest

from lowwater.config import load_config
from lowwater.spark.engine import Engine

from .test_kafka import kafka_pipeline, outcome, stream

pytestmark = pytest.mark.spark


class Stop(Exception):
    """Stands for the driver stopping after a committed step (its held rows are in the checkpoint)."""


def test_one_ten_and_a_hundred_percent_of_the_topic_per_trigger_agree(spark, kafka_broker, tmp_path,
                                                                             monkeypatch):
    commit = Engine._commit

    rows = stream(92)  # 89 rows: partition 2 quiet from the 80th on, the 80th in (p0's second straggler)
    records = [(r["partition"], r["arrival_time"], json.dumps(
        {"event_time": r["event_time"], "key": r["key"], "amount": r["amount"]})) for r in rows]
    records += [(1, rows[-1]["arrival_time"] + 10, "not json"), (3, rows[-1]["arrival_time"] + 20, None)]
    kafka_broker.create_topic("cuts", 4)
    kafka_broker.produce("cuts", records)
    total = len(records)
    answers = {}
    for share, limit in (("1%", max(1, total // 100)), ("10%", total // 10), ("100%", None)):
        root = tmp_path / share.rstrip("%")
        cfg = kafka_pipeline(root, kafka_broker, "cuts", per_trigger=limit)
        if share == "10%":  # stopped after the first step that holds rows, then the same command again
            def commit_then_stop(self, report, *args, **kwargs) -> None:  # noqa: ANN001, ANN002, ANN003
                commit(self, report, *args, **kwargs)
                if self.store.latest().held_rows:
                    raise Stop(f"step {report.step}")

            monkeypatch.setattr(Engine, "_commit", commit_then_stop)
            with pytest.raises(Exception, match="Stop|step"):
                Engine(load_config(cfg), spark).run(once=True)
            monkeypatch.undo()
            held = Engine(load_config(cfg), spark)
            assert held.store.latest().held_rows > 0  # stopped with rows held behind a lagging partition
            held.close()
        manifest = Engine(load_config(cfg), spark).run(drain=True)
        results, late, metrics = outcome(spark, root, "kafka_partition")
        dead = pd.read_parquet(root / "out" / "dead_letter")
        answers[share] = (results, late, sorted(zip(dead.kafka_partition, dead.kafka_offset, dead.reason,
                                                    strict=True)), manifest.totals, metrics)
    one, ten, full = answers["1%"], answers["10%"], answers["100%"]
    assert full[0] and len(full[1]) >= 2 and len(full[2]) == 2 and full[3]["rows"] == total
    for cut in (one, ten):
        assert cut[:4] == full[:4]
        assert cut[4]["held_rows"].max() > 0  # the partitions were cut unevenly: rows waited for the others
        assert cut[4]["arrival_regressions"].sum() == 0
    assert len(one[4]) > len(ten[4]) > len(full[4])  # more, smaller steps

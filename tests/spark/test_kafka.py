"""Kafka for real: Spark's own connector against a real broker (one per test session, tests/conftest.py).

One topic carries the seeds' stream: four partitions, partition 3 lagging by
more than L (it holds the watermark), partition 2 going quiet (it goes idle and
leaves the min), a few rows too late. The same rows landed as files must give
the same results, late rows and counts (the file source and the Kafka source
held equal), however the topic is cut into micro-batches.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pandas as pd
import pytest

from lowwater.config import load_config
from lowwater.spark.engine import Engine

from .helpers import secs

pytestmark = pytest.mark.spark

T0 = 1_700_000_000_000  # ms: the first arrival (record timestamp)
L_MS = 2_000

WINDOWING = """
[watermark]
max_out_of_orderness = "2s"
idle_timeout = "5s"
partitions = [0, 1, 2, 3]

[window]
type = "tumbling"
size = "5s"
allowed_lateness = "0s"
key = ["key"]
aggregations = { total = "sum(amount)" }

[late]
policy = "side_output"

[output]
path = "out"

[spark]
master = "local[2]"
shuffle_partitions = 2
"""

KAFKA_SOURCE = """
[source]
format = "kafka"
bootstrap_servers = "{servers}"
topic = "{topic}"
max_offsets_per_trigger = {per_trigger}
value_format = "json"
schema = "event_time LONG, key STRING, amount DOUBLE"
event_time = "event_time"
time_unit = "ms"
"""

FILE_SOURCE = """
[source]
format = "jsonl"
path = "landing"
partition = "partition"
offset = "offset"
arrival_time = "arrival_time"
event_time = "event_time"
time_unit = "ms"
schema = "partition INT, offset LONG, arrival_time LONG, event_time LONG, key STRING, amount DOUBLE"
"""


def stream(n: int = 320) -> list[dict]:
    """Rows in arrival order: partition 3 lags 8 s (> L), partition 2 stops after 10 s, p0 has stragglers."""
    rng = random.Random(17)
    rows, offsets = [], [0, 0, 0, 0]
    for i in range(n):
        arrival = T0 + i * 125
        p = i % 4
        if p == 2 and i >= 80:  # quiet from 10 s on: idle after idle_timeout
            continue
        event = arrival - rng.randint(0, 1_500)
        if p == 3:
            event -= 8_000 + rng.randint(0, 2_500)  # lagging, and out of order by more than L now and then
        if p == 0 and i % 40 == 0:
            event -= 20_000  # far behind the watermark: too late
        rows.append({"partition": p, "offset": offsets[p], "arrival_time": arrival, "event_time": event,
                     "key": f"k{i % 3}", "amount": float(i)})
        offsets[p] += 1
    return rows


def produce(broker, topic: str, rows: list[dict], partitions: int = 4) -> None:  # noqa: ANN001
    broker.create_topic(topic, partitions)
    broker.produce(topic, [(r["partition"], r["arrival_time"], json.dumps(
        {"event_time": r["event_time"], "key": r["key"], "amount": r["amount"]})) for r in rows])


def kafka_pipeline(root: Path, broker, topic: str, per_trigger: int = 37) -> Path:  # noqa: ANN001
    root.mkdir(parents=True, exist_ok=True)
    cfg = root / "pipeline.toml"
    cfg.write_text(KAFKA_SOURCE.format(servers=broker.bootstrap, topic=topic, per_trigger=per_trigger) + WINDOWING)
    return cfg


def outcome(spark, root: Path, partition: str) -> tuple[list, list, pd.DataFrame]:  # noqa: ANN001
    """(results, late rows, metrics) of a finished run, in comparable form."""
    res = spark.read.parquet(str(root / "out" / "results")).toPandas()
    results = sorted((r.key, secs(r.window_start), secs(r.window_end), r["count"], r.total, r.kind, r.revision)
                     for _, r in res.iterrows())
    late = spark.read.parquet(str(root / "out" / "late")).toPandas()
    lates = sorted((int(r[partition]), r.event_time, secs(r.window_start), secs(r.watermark), r.reason)
                   for _, r in late.iterrows())
    return results, lates, pd.read_parquet(root / "out" / "metrics")


def test_kafka_topic_equals_the_same_rows_as_files(spark, kafka_broker, tmp_path):
    rows = stream()
    produce(kafka_broker, "payments", rows)
    cfg = kafka_pipeline(tmp_path / "kafka", kafka_broker, "payments")
    summary = Engine(load_config(cfg), spark).run(drain=True)
    results, late, metrics = outcome(spark, tmp_path / "kafka", "kafka_partition")

    files = tmp_path / "files"
    (files / "landing").mkdir(parents=True)
    (files / "landing" / "part-000.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (files / "pipeline.toml").write_text(FILE_SOURCE + WINDOWING)
    f_summary = Engine(load_config(files / "pipeline.toml"), spark).run(drain=True)
    f_results, f_late, _ = outcome(spark, files, "partition")

    assert results == f_results and results
    assert late == f_late and len(late) >= 5  # p0's stragglers and p3's worst, too late against the min
    assert summary.totals == f_summary.totals
    # Cut into micro-batches of 37 offsets: the lagging partition holds W, the quiet one went idle.
    steps = metrics.assign(step=metrics["batch_id"].astype(int)).sort_values("step")
    assert len(steps) >= 8
    assert (steps["holding_partition"].dropna() == "3").mean() > 0.5
    assert any("2" in list(idle) for idle in steps["idle_partitions"].dropna())
    wms = steps["partition_watermarks"].iloc[-2]  # the last step before the drain
    assert min(dict(wms).items(), key=lambda kv: kv[1])[0] == "3"


def test_restart_resumes_from_the_checkpointed_offsets(spark, kafka_broker, tmp_path):
    rows = stream(200)
    produce(kafka_broker, "restart", rows[:120])
    cfg = kafka_pipeline(tmp_path / "restart", kafka_broker, "restart", per_trigger=50)
    first = Engine(load_config(cfg), spark).run(once=True)
    kafka_broker.produce("restart", [(r["partition"], r["arrival_time"], json.dumps(
        {"event_time": r["event_time"], "key": r["key"], "amount": r["amount"]})) for r in rows[120:]])
    # A second command on the same checkpoint (a new engine): only the new offsets are read.
    second = Engine(load_config(cfg), spark).run(drain=True)
    assert first.step >= 1 and second.step > first.step
    assert second.totals["rows"] == len(rows)  # nothing read twice, nothing skipped

    produce(kafka_broker, "clean", rows)
    clean_cfg = kafka_pipeline(tmp_path / "clean", kafka_broker, "clean", per_trigger=1_000)
    clean = Engine(load_config(clean_cfg), spark).run(drain=True)
    assert outcome(spark, tmp_path / "restart", "kafka_partition")[:2] == outcome(
        spark, tmp_path / "clean", "kafka_partition")[:2]
    assert second.totals == clean.totals


def test_bad_values_are_dead_letters_with_topic_partition_and_offset(spark, kafka_broker, tmp_path):
    good = [(0, T0 + 100 * i, json.dumps({"event_time": T0 + 100 * i, "key": "a", "amount": 1.0}))
            for i in range(20)]
    bad = [(1, T0 + 500, "this is not json"),
           (1, T0 + 600, json.dumps({"key": "a", "amount": 2.0})),
           (0, T0 + 3_000, None),
           (1, T0 + 700, "[1, 2]")]
    kafka_broker.create_topic("bad", 2)
    kafka_broker.produce("bad", good[:10] + bad + good[10:])
    cfg = kafka_pipeline(tmp_path / "bad", kafka_broker, "bad")
    manifest = Engine(load_config(cfg), spark).run(drain=True)
    assert manifest.totals["dead_letter"] == len(bad) and manifest.totals["rows"] == len(good) + len(bad)
    dead = pd.read_parquet(tmp_path / "bad" / "out" / "dead_letter")
    got = sorted((r.kafka_topic, r.kafka_partition, r.kafka_offset, r.reason) for r in dead.itertuples())
    assert got == [
        ("bad", 0, 10, "null value (a tombstone)"),
        ("bad", 1, 0, "malformed record"),
        ("bad", 1, 1, "missing event_time (event_time)"),
        ("bad", 1, 2, "malformed record"),
    ]
    assert set(dead["source_file"]) == {"bad-0", "bad-1"}
    res = pd.read_parquet(tmp_path / "bad" / "out" / "results")
    assert res["count"].sum() == len(good)  # the run went on: every good row is in a window


@pytest.mark.parametrize(("edit", "env", "expected"), [
    (("topic = ", "topics = "), {}, "source.topics: expected a non-empty list of topic names"),
    (("", ""), {"LOWWATER_KAFKA_JARS": "{empty}"}, "source.format: kafka needs Spark's Kafka connector"),
])
def test_bad_kafka_configuration_is_one_line_and_exit_2(tmp_path, edit, env, expected):
    from .test_cli import run_cli

    (tmp_path / "empty").mkdir()
    text = KAFKA_SOURCE.format(servers="127.0.0.1:1", topic="t", per_trigger=10) + WINDOWING
    (tmp_path / "pipeline.toml").write_text(text.replace(*edit) if edit[0] else text)
    env = {**os.environ, **{k: v.format(empty=tmp_path / "empty") for k, v in env.items()}}
    proc = run_cli(["run", "pipeline.toml", "--once"], tmp_path, timeout=60, env=env)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.startswith(f"error: {expected}")
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1

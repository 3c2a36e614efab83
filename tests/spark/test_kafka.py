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
from lowwater.testing.outputs import read_output

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
{per_trigger}
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


def stream(n: int = 320, quiet: bool = True) -> list[dict]:
    """Rows in arrival order: partition 3 lags 8 s (> L), partition 2 stops after 10 s, p0 has stragglers.

    Without ``quiet`` every partition gets every 4th row: Spark's connector then
    cuts a limit that is a multiple of 4 into equal per-partition ranges, which
    are also arrival ranges (see docs/kafka.md, micro-batches and arrival order).
    """
    rng = random.Random(17)
    rows, offsets = [], [0, 0, 0, 0]
    for i in range(n):
        arrival = T0 + i * 125
        p = i % 4
        if quiet and p == 2 and i >= 80:  # quiet from 10 s on: idle after idle_timeout
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


def kafka_pipeline(root: Path, broker, topic: str, per_trigger: int | None = None) -> Path:  # noqa: ANN001
    root.mkdir(parents=True, exist_ok=True)
    cfg = root / "pipeline.toml"
    limit = f"max_offsets_per_trigger = {per_trigger}" if per_trigger else ""
    cfg.write_text(KAFKA_SOURCE.format(servers=broker.bootstrap, topic=topic, per_trigger=limit) + WINDOWING)
    return cfg


def outcome(spark, root: Path, partition: str) -> tuple[list, list, pd.DataFrame]:  # noqa: ANN001
    """(results, late rows, metrics) of a finished run, in comparable form."""
    res = read_output(spark, root / "out" / "results")
    results = sorted((r.key, secs(r.window_start), secs(r.window_end), r["count"], r.total, r.kind, r.revision)
                     for _, r in res.iterrows())
    late = read_output(spark, root / "out" / "late")
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
    # The lagging partition holds W, the quiet one went idle (and left the min).
    step = metrics.assign(step=metrics["batch_id"].astype(int)).sort_values("step").iloc[0]
    assert step["holding_partition"] == "3" and list(step["idle_partitions"]) == ["2"]
    wms = dict(step["partition_watermarks"])
    assert min(wms, key=wms.get) == "2" and secs(step["low_watermark"]) == secs(wms["3"])


class Crash(Exception):
    """Stands for kill -9 at a fault point: the step in flight is not committed."""


def test_a_crash_and_a_restart_resume_from_the_checkpointed_offsets(spark, kafka_broker, tmp_path, monkeypatch):
    import lowwater.spark.engine as engine_module

    rows = stream(180, quiet=False)
    records = [(r["partition"], r["arrival_time"], json.dumps(
        {"event_time": r["event_time"], "key": r["key"], "amount": r["amount"]})) for r in rows]
    kafka_broker.create_topic("restart", 4)
    kafka_broker.produce("restart", records[:120])  # 30 a partition: steps of 15 a partition
    cfg = kafka_pipeline(tmp_path / "restart", kafka_broker, "restart", per_trigger=60)

    def fault(point: str, step: int) -> None:
        if (point, step) == ("before_commit", 1):  # step 1 written, its manifest not committed
            raise Crash(point)

    monkeypatch.setattr(engine_module, "_fault", fault)
    with pytest.raises(Exception, match="Crash|before_commit"):
        Engine(load_config(cfg), spark).run(once=True)
    monkeypatch.undo()
    kafka_broker.produce("restart", records[120:])  # produced after the crash: one batch more
    # The same command again (a new engine on the checkpoint): Spark replays batch 1's offsets, then the rest.
    resumed = Engine(load_config(cfg), spark).run(drain=True)
    assert resumed.totals["rows"] == len(rows)  # nothing read twice, nothing skipped
    assert resumed.spark_batch == 2  # batch 1 replayed (not a batch of its own), then batch 2

    clean_cfg = kafka_pipeline(tmp_path / "clean", kafka_broker, "restart")  # the same topic in one step
    clean = Engine(load_config(clean_cfg), spark).run(drain=True)
    assert outcome(spark, tmp_path / "restart", "kafka_partition")[:2] == outcome(
        spark, tmp_path / "clean", "kafka_partition")[:2]
    assert resumed.totals == clean.totals


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
    (('topic = "t"', 'topics = ["t", "u"]'), {},  # several topics: partitions are topic-partitions (ADR 0043)
     "watermark.partitions: '0' is not a topic-partition; source reads several topics (t,u), each with its own "
     "partitions: name them <topic>-<partition>, e.g. 't-0'"),
    (("", ""), {"LOWWATER_KAFKA_JARS": "{empty}"}, "source.format: kafka needs Spark's Kafka connector"),
])
def test_bad_kafka_configuration_is_one_line_and_exit_2(tmp_path, edit, env, expected):
    from .test_cli import run_cli

    (tmp_path / "empty").mkdir()
    text = KAFKA_SOURCE.format(servers="127.0.0.1:1", topic="t", per_trigger="") + WINDOWING
    (tmp_path / "pipeline.toml").write_text(text.replace(*edit) if edit[0] else text)
    env = {**os.environ, **{k: v.format(empty=tmp_path / "empty") for k, v in env.items()}}
    proc = run_cli(["run", "pipeline.toml", "--once"], tmp_path, timeout=60, env=env)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.startswith(f"error: {expected}")
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_a_topic_recreated_under_the_checkpoint_stops_in_one_line_or_is_skipped_when_allowed(
        spark, kafka_broker, tmp_path):
    from lowwater.io.kafka import kafka_failure

    def records(n: int, start: int) -> list[tuple[int, int, str]]:
        return [(0, T0 + 100 * (start + i), json.dumps({"event_time": T0 + 100 * (start + i), "key": "a",
                                                         "amount": 1.0})) for i in range(n)]

    kafka_broker.create_topic("gone", 1)
    kafka_broker.produce("gone", records(30, 0))
    strict = kafka_pipeline(tmp_path / "strict", kafka_broker, "gone")
    lenient = kafka_pipeline(tmp_path / "lenient", kafka_broker, "gone")
    lenient.write_text(lenient.read_text().replace('value_format = "json"', 'value_format = "json"\n'
                                                                            "fail_on_data_loss = false"))
    for cfg in (strict, lenient):
        assert Engine(load_config(cfg), spark).run(once=True).totals["rows"] == 30
    kafka_broker.delete_topic("gone")
    kafka_broker.create_topic("gone", 1)  # offsets start again at 0: the checkpoint's 30 are gone
    kafka_broker.produce("gone", records(10, 100))

    with pytest.raises(Exception) as failed:
        Engine(load_config(strict), spark).run(once=True)
    line = kafka_failure(load_config(strict), failed.value)
    assert line is not None and "\n" not in line, str(failed.value)[:2000]
    assert line.startswith("source.topic 'gone' at 127.0.0.1:") and "fail_on_data_loss" in line
    assert "Reason: Partition gone-0 offset was changed from 30 to 10" in line
    after = Engine(load_config(strict), spark)
    assert after.store.latest().totals["rows"] == 30  # nothing committed
    after.close()

    # fail_on_data_loss = false: the run goes on. Spark plans the range 30 -> 10 as empty and carries on from
    # offset 10, so the recreated topic's first 10 records are skipped as well, silently (docs/kafka.md).
    skipped = Engine(load_config(lenient), spark).run(once=True)
    assert skipped.totals["rows"] == 30 and skipped.step == 1


@pytest.mark.parametrize(("fmt", "good", "bad"), [
    ("json", '{"event_time": 5, "key": "a", "amount": 1.5}', '{"event_time": 5,'),
    ("csv", "5,a,1.5", "5,a,lots"),
])
def test_values_parse_with_the_schema_and_bad_ones_keep_their_text(spark, tmp_path, fmt, good, bad):
    import datetime as dt

    from lowwater.io.kafka import KafkaSource

    cfg = load_config(kafka_pipeline(tmp_path, type("B", (), {"bootstrap": "x:1"})(), "t"),
                      [f'source.value_format="{fmt}"'])
    ts = dt.datetime(2023, 11, 14, tzinfo=dt.UTC)
    records = spark.createDataFrame(
        [(b"k", v.encode() if v else None, "t", 0, i, ts, 0) for i, v in enumerate([good, bad, None])],
        "key BINARY, value BINARY, topic STRING, partition INT, offset BIGINT, timestamp TIMESTAMP, "
        "timestampType INT")
    src = KafkaSource(spark, cfg.source, None, str(tmp_path))
    rows = [r.asDict() for r in src.rows(records).collect()]
    assert (rows[0]["event_time"], rows[0]["key"], rows[0]["amount"], rows[0]["_corrupt_record"]) == (5, "a", 1.5,
                                                                                                      None)
    assert rows[1]["_corrupt_record"] == bad and rows[2]["_corrupt_record"] == "<null value>"
    assert [(r["kafka_topic"], r["kafka_partition"], r["kafka_offset"], r["kafka_key"], r["_file"]) for r in rows] == [
        ("t", 0, i, "k", "t-0") for i in range(3)]


def test_lowwater_run_reads_a_topic_with_the_fetched_connector(spark, kafka_broker, tmp_path):
    """The command a user runs: it reads the topic, a client secret is never printed.

    In this process, on the shared session (which has the fetched connector's jars, as
    ``jars_for`` gives them): a JVM start less. A fresh process putting them on its own
    ``spark.jars``, and the secret kept out of its JVM's output too, is test_kafka_ops'
    SIGKILL test (its two ``lowwater run`` processes).
    """
    from .helpers import run_cli_here

    kafka_broker.create_topic("cli", 2)
    kafka_broker.produce("cli", [(i % 2, T0 + 200 * i, json.dumps({"event_time": T0 + 200 * i, "key": "k",
                                                                    "amount": 1.0})) for i in range(40)]
                         + [(1, T0 + 9_000, "oops")])
    cfg = kafka_pipeline(tmp_path, kafka_broker, "cli")
    cfg.write_text(cfg.read_text().replace('value_format = "json"',
                                           'value_format = "json"\nkafka = { "sasl.jaas.config" = "s3cret-jaas" }'))
    proc = run_cli_here(["run", "pipeline.toml", "--once", "--drain", "-q"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stderr.startswith("lowwater run: reading kafka from kafka://cli; checkpoint ")
    assert "s3cret-jaas" not in proc.stdout + proc.stderr
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert (summary["rows"], summary["on_time"], summary["dead_letter"]) == (41, 40, 1) and summary["balanced"]

"""A Kafka topic as one of several ``[[source]]`` tables, each with its own watermark generator (issue 17).

A topic (two partitions, 30 offsets cut 10 a micro-batch) and a landing
directory (one file) are read together: the topic's partitions and the
directory are lanes of one arrival frontier. The same rows with the topic
landed as a second directory must give the same results and accounting.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest

from lowwater.config import load_config
from lowwater.spark.engine import Engine
from lowwater.testing.outputs import read_output

from .helpers import secs

pytestmark = pytest.mark.spark

T0 = 1_700_000_000_000
FILE_COLUMNS = 'partition = "partition"\noffset = "offset"\narrival_time = "arrival_time"\n'
SCHEMA = "event_time LONG, key STRING, amount DOUBLE"
BANK = f"""
[[source]]
name = "bank"
format = "jsonl"
path = "bank"
{FILE_COLUMNS}event_time = "event_time"
time_unit = "ms"
schema = "partition INT, offset LONG, arrival_time LONG, {SCHEMA}"
watermark = {{ max_out_of_orderness = "1s" }}
"""
PAY_KAFKA = """
[[source]]
name = "pay"
format = "kafka"
bootstrap_servers = "{servers}"
topic = "{topic}"
max_offsets_per_trigger = 10
value_format = "json"
schema = "{schema}"
event_time = "event_time"
time_unit = "ms"
watermark = {{ max_out_of_orderness = "3s", partitions = [0, 1] }}
"""
PAY_FILES = f"""
[[source]]
name = "pay"
format = "jsonl"
path = "pay"
{FILE_COLUMNS}event_time = "event_time"
time_unit = "ms"
schema = "partition INT, offset LONG, arrival_time LONG, {SCHEMA}"
watermark = {{ max_out_of_orderness = "3s", partitions = [0, 1] }}
"""
REST = """
[window]
type = "tumbling"
size = "5s"
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


def _rows(n: int, parts: int, step_ms: int, lag_ms: int, seed: int) -> list[dict]:
    offsets = [0] * parts
    rows = []
    for i in range(n):
        p = i % parts
        arrival = T0 + i * step_ms
        event = arrival - lag_ms - (seed * i) % 1_500 - (6_000 if i % 17 == 5 else 0)  # now and then too late
        rows.append({"partition": p, "offset": offsets[p], "arrival_time": arrival, "event_time": event,
                     "key": f"k{i % 2}", "amount": float(i)})
        offsets[p] += 1
    return rows


def _land(folder, rows) -> None:  # noqa: ANN001
    folder.mkdir(parents=True)
    (folder / "part-00000.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def _results(spark, root) -> list:  # noqa: ANN001
    res = read_output(spark, root / "out" / "results")
    return sorted((r.key, secs(r.window_start), r["count"], r.total, r.kind, r.revision) for _, r in res.iterrows())


def test_a_topic_and_a_directory_as_sources_equal_two_directories(spark, kafka_broker, tmp_path):
    pay, bank = _rows(30, 2, 250, 500, 7), _rows(20, 1, 500, 2_000, 3)
    kafka_broker.create_topic("pay", 2)
    kafka_broker.produce("pay", [(r["partition"], r["arrival_time"], json.dumps(
        {k: r[k] for k in ("event_time", "key", "amount")})) for r in pay])

    mixed, files = tmp_path / "mixed", tmp_path / "files"
    _land(mixed / "bank", bank)
    (mixed / "pipeline.toml").write_text(
        BANK + PAY_KAFKA.format(servers=kafka_broker.bootstrap, topic="pay", schema=SCHEMA) + REST)
    _land(files / "bank", bank)
    _land(files / "pay", pay)
    (files / "pipeline.toml").write_text(BANK + PAY_FILES + REST)

    got = Engine(load_config(mixed / "pipeline.toml"), spark).run(once=True, drain=True)
    want = Engine(load_config(files / "pipeline.toml"), spark).run(once=True, drain=True)
    assert got.totals["rows"] == len(pay) + len(bank) and got.totals["too_late"] > 0
    assert got.totals == want.totals
    assert _results(spark, mixed) == _results(spark, files) and _results(spark, files)
    metrics = pd.read_parquet(mixed / "out" / "metrics")
    assert len(metrics) >= 4  # the topic was cut into several micro-batches (3 of 10 offsets, the drain) ...
    assert metrics["arrival_regressions"].sum() == 0  # ... and nothing was judged out of arrival order
    late = pd.read_parquet(mixed / "out" / "late")
    assert set(late["source"]) <= {"pay", "bank"} and late[late["source"] == "pay"]["kafka_topic"].eq("pay").all()
    last = metrics[metrics["source_watermarks"].notna()].iloc[-1]
    assert sorted(dict(last["source_watermarks"])) == ["bank", "pay"]


def test_an_idle_directory_with_files_waiting_is_not_fooled_by_the_topic_s_cut(spark, kafka_broker, tmp_path):
    # Issue 31: bank (idle_timeout 500 ms) read one file (1.5 s of arrivals) a micro-batch, the topic 10 offsets
    # (2.5 s, L = 0 s: its W follows its clock): the topic reads ahead, yet bank has files landed and waiting,
    # so it is not idle; the answer is that of both read in one batch each.
    pay, bank = _rows(30, 2, 250, 500, 7), _rows(20, 1, 500, 2_000, 3)
    kafka_broker.create_topic("pay-idle", 2)
    kafka_broker.produce("pay-idle", [(r["partition"], r["arrival_time"], json.dumps(
        {k: r[k] for k in ("event_time", "key", "amount")})) for r in pay])
    idle_bank = BANK.replace('max_out_of_orderness = "1s"', 'max_out_of_orderness = "1s", idle_timeout = "500ms"')
    cut, whole = tmp_path / "cut", tmp_path / "whole"
    for root in (cut, whole):
        (root / "bank").mkdir(parents=True)
        for i in range(0, len(bank), 3):
            (root / "bank" / f"part-{i:05d}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in bank[i:i + 3]))
    pay_kafka = PAY_KAFKA.format(servers=kafka_broker.bootstrap, topic="pay-idle", schema=SCHEMA)
    (cut / "pipeline.toml").write_text(idle_bank.replace("[[source]]", "[[source]]\nmax_files_per_batch = 1")
                                       + pay_kafka.replace('"3s"', '"0s"') + REST)
    _land(whole / "pay", pay)
    (whole / "pipeline.toml").write_text(idle_bank + PAY_FILES.replace('"3s"', '"0s"') + REST)

    got = Engine(load_config(cut / "pipeline.toml"), spark).run(once=True, drain=True)
    want = Engine(load_config(whole / "pipeline.toml"), spark).run(once=True, drain=True)
    assert want.totals["rows"] == len(pay) + len(bank) and want.totals["too_late"] > 0
    assert got.totals == want.totals
    assert _results(spark, cut) == _results(spark, whole)
    late = sorted(map(tuple, pd.read_parquet(cut / "out" / "late")[["source", "event_time"]].values.tolist()))
    assert late == sorted(map(tuple, pd.read_parquet(whole / "out" / "late")[["source", "event_time"]].values.tolist()))
    metrics = pd.read_parquet(cut / "out" / "metrics")
    assert len(metrics) >= 5 and metrics["held_rows"].max() > 0  # the topic's rows waited for bank's files
    assert metrics["arrival_regressions"].sum() == 0


JOIN_SCHEMAS = {"clicks": "event_time LONG, user STRING, click STRING",
                "orders": "event_time LONG, user STRING, amount DOUBLE"}
JOIN_REST = """
[join]
left = "clicks"
right = "orders"
on = ["user"]
lower = "0s"
upper = "2s"
type = "left_outer"
columns = { left = ["click"], right = ["amount"] }

[late]
policy = "side_output"

[output]
path = "out"

[spark]
master = "local[2]"
shuffle_partitions = 3
"""


def _join_source(name: str, kafka: str | None) -> str:
    common = ('event_time = "event_time"\ntime_unit = "ms"\n'
              'watermark = { max_out_of_orderness = "1s", partitions = [0, 1] }\n')
    if kafka is None:
        return (f'[[source]]\nname = "{name}"\nformat = "jsonl"\npath = "{name}"\n{FILE_COLUMNS}{common}'
                f'schema = "partition INT, offset LONG, arrival_time LONG, {JOIN_SCHEMAS[name]}"\n')
    return (f'[[source]]\nname = "{name}"\nformat = "kafka"\nbootstrap_servers = "{kafka}"\ntopic = "j-{name}"\n'
            f'max_offsets_per_trigger = 12\nvalue_format = "json"\nschema = "{JOIN_SCHEMAS[name]}"\n{common}')


def test_a_join_of_two_topics_equals_the_join_of_two_directories(spark, kafka_broker, tmp_path):
    # Issue 33 item 4: both join inputs are Kafka topics (two partitions each, 12 offsets a micro-batch); the
    # same rows landed as two directories (one batch each) give the same joined/, late/ and per-side counts.
    clicks = _rows(24, 2, 250, 300, 5)
    orders = _rows(24, 2, 250, 900, 3)
    for i, r in enumerate(clicks):
        r.update(user=f"u{i % 3}", click=f"c{i}")
    for i, r in enumerate(orders):
        r.update(user=f"u{(i + 1) % 3}", amount=float(i))
    payload = {"clicks": ("event_time", "user", "click"), "orders": ("event_time", "user", "amount")}
    for name, rows in (("clicks", clicks), ("orders", orders)):
        kafka_broker.create_topic(f"j-{name}", 2)
        kafka_broker.produce(f"j-{name}", [(r["partition"], r["arrival_time"], json.dumps(
            {k: r[k] for k in payload[name]})) for r in rows])
    topics, files = tmp_path / "topics", tmp_path / "files"
    topics.mkdir()
    (topics / "pipeline.toml").write_text(
        _join_source("clicks", kafka_broker.bootstrap) + _join_source("orders", kafka_broker.bootstrap) + JOIN_REST)
    _land(files / "clicks", clicks)
    _land(files / "orders", orders)
    (files / "pipeline.toml").write_text(_join_source("clicks", None) + _join_source("orders", None) + JOIN_REST)

    engines = {}
    for root in (topics, files):
        engine = Engine(load_config(root / "pipeline.toml"), spark)
        engines[root] = (engine.run(once=True, drain=True), engine.summary(engine.store.latest()))
    (got, got_summary), (want, want_summary) = engines[topics], engines[files]
    assert want.totals["rows"] == 48 and want.totals["too_late"] > 0 and want_summary["join"]["left"]["matched"] > 0
    assert got.totals == want.totals and got_summary["join"] == want_summary["join"]

    def joined(root) -> list:  # noqa: ANN001
        df = read_output(spark, root / "out" / "joined")
        return sorted(map(tuple, df[["user", "click", "amount", "left_event_time", "right_event_time"]]
                          .astype(str).values.tolist()))

    def late(root) -> list:  # noqa: ANN001
        df = read_output(spark, root / "out" / "late")
        return sorted(map(tuple, df[["source", "event_time", "reason"]].astype(str).values.tolist()))

    assert joined(topics) == joined(files) and any("None" in r or "nan" in r for r in joined(files))
    assert late(topics) == late(files) and late(files)
    assert len(pd.read_parquet(topics / "out" / "metrics")) >= 3  # the topics were read in several micro-batches

"""Kafka in operation, against the real broker: a SIGKILLed driver, a continuous run, a broker that goes away.

Each test reads a topic as a user's pipeline does and holds the outcome to a
clean ``--drain`` read of the same topic (SEMANTICS.md §8): the same results,
late rows, dead letters and counts, and every offset read exactly once (the
offsets Spark checkpointed per batch equal the rows lowwater counted per step).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import pytest

from lowwater.config import load_config
from lowwater.spark.engine import Engine

from .helpers import fast_jvm, run_cli_here
from .test_kafka import T0, kafka_pipeline, stream

pytestmark = pytest.mark.spark

DROP = ("duration_s", "watermark_lag_s")  # wall-clock measures: differ from run to run


def as_records(rows: list[dict]) -> list[tuple[int, int, str | None]]:
    return [(r["partition"], r["arrival_time"], r.get("raw") or json.dumps(
        {"event_time": r["event_time"], "key": r["key"], "amount": r["amount"]})) for r in rows]


def outputs(root: Path, cut_free: bool = False) -> dict[str, list]:
    """Every output of a finished run as sorted string tuples (wall-clock measures dropped), and its summary.

    ``cut_free``: without what depends on how the topic was cut into steps (the
    step a row was written in, the watermark a result was emitted at).
    """
    out: dict[str, list] = {}
    for kind in ("results", "late", "dead_letter", "metrics"):
        folder = root / "out" / kind
        df = pd.read_parquet(folder) if folder.exists() else pd.DataFrame()
        drop = [*DROP, "batch_id", *(["watermark"] if kind == "results" else [])] if cut_free else DROP
        df = df.drop(columns=[c for c in drop if c in df.columns]).astype(str)
        out[kind] = sorted(map(tuple, df.itertuples(index=False)))
    summary = json.loads((root / "out" / "summary.json").read_text())
    out["summary"] = [(k, summary[k]) for k in ("rows", "on_time", "late_updates", "too_late", "dead_letter",
                                                 "windows_fired", "revisions", "balanced")]
    return out


def spark_offsets(root: Path, topic: str) -> dict[int, dict[int, int]]:
    """Spark's checkpointed end offsets per batch id: ``{batch: {partition: offset}}``."""
    folder = root / "out" / "_checkpoint" / "spark" / "offsets"
    got = {}
    for f in folder.iterdir():
        if f.name.isdigit():
            source = json.loads(f.read_text().splitlines()[2])  # v1, the batch's metadata, then the source's offsets
            got[int(f.name)] = {int(p): o for p, o in source[topic].items()}
    return got


def rows_per_batch(root: Path) -> dict[int, int]:
    """The records lowwater took in per Spark batch, from its metrics.

    A step judges ``rows`` and keeps ``held_rows`` behind the per-partition
    arrival frontier (docs/kafka.md), so what a batch brought in is the rows it
    judged plus the growth of the held rows over it (the drain step judges
    what was held: it adds nothing to the last batch).
    """
    metrics = pd.read_parquet(root / "out" / "metrics").sort_values("batch_id")
    out: dict[int, int] = {}
    held = 0
    for r in metrics.itertuples():
        now = int(r.held_rows or 0)
        out[int(r.spark_batch)] = out.get(int(r.spark_batch), 0) + int(r.rows) + now - held
        held = now
    return out


def read_per_batch(offsets: dict[int, dict[int, int]], partitions: int) -> dict[int, int]:
    """The records Spark read per batch: its end offsets minus the previous batch's (the topic starts at 0)."""
    zero = dict.fromkeys(range(partitions), 0)
    return {b: sum(o[p] - offsets.get(b - 1, zero)[p] for p in range(partitions)) for b, o in sorted(offsets.items())}


def end_offsets(broker, topic: str, partitions: int) -> dict[int, int]:  # noqa: ANN001
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "lowwater-test-offsets", "log_level": 3})
    try:
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)}
    finally:
        c.close()


def committed_steps(root: Path) -> int:
    state = root / "out" / "_checkpoint" / "lowwater" / "state"
    return max((int(p.name[9:21]) for p in state.glob("manifest-*.json")), default=-1)


def start_run(root: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    """``lowwater run pipeline.toml --drain -q`` as its own process group (driver and JVM die together)."""
    return subprocess.Popen([sys.executable, "-m", "lowwater.cli", "run", "pipeline.toml", "--drain", "-q"],
                            cwd=root, env=fast_jvm({**os.environ, "PYSPARK_PYTHON": sys.executable, **(env or {})}),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)


@pytest.mark.slow  # two driver processes (JVM starts), as the other crash/restart tests
def test_sigkill_of_the_driver_and_a_restart_read_every_offset_once(spark, kafka_broker, tmp_path):  # noqa: ARG001
    """SIGKILL between a step's writes and its commit, then at a random moment; the same command again."""
    rows = stream(160, quiet=False)  # 40 records a partition, in arrival order
    bad = [{"partition": p, "arrival_time": T0 + 80 * 125, "raw": "not json"} for p in range(4)]
    records = as_records(rows[:80] + bad + rows[80:])  # 41 a partition: the backlogs stay even
    kafka_broker.create_topic("sigkill", 4)
    kafka_broker.produce("sigkill", records)
    crashed = kafka_pipeline(tmp_path / "crashed", kafka_broker, "sigkill", per_trigger=40).parent
    clean = kafka_pipeline(tmp_path / "clean", kafka_broker, "sigkill", per_trigger=40).parent
    for root in (crashed, clean):  # a client secret: never printed, by lowwater or its JVM (stderr below)
        cfg = root / "pipeline.toml"
        cfg.write_text(cfg.read_text().replace(
            'value_format = "json"', 'value_format = "json"\nkafka = { "sasl.jaas.config" = "s3cret-jaas" }'))

    # 1. SIGKILL after step 1's outputs are written, before its manifest is committed.
    run = start_run(crashed, {"LOWWATER_FAULT": "before_commit:1:sigkill"})
    # The reference, while that process starts its JVM: the same command on its own checkpoint, uninterrupted,
    # in this process.
    proc = run_cli_here(["run", "pipeline.toml", "--drain", "-q"], clean)
    assert proc.returncode == 0, proc.stderr[-2000:]
    _, err = run.communicate(timeout=240)
    assert run.returncode == -signal.SIGKILL, err.decode()[-2000:]
    assert committed_steps(crashed) == 0
    # A process of its own: the fetched connector on its spark.jars (it read the topic), the start line.
    assert err.decode().startswith("lowwater run: reading kafka from kafka://sigkill; checkpoint "), err.decode()
    assert b"s3cret-jaas" not in err
    # 2. SIGKILL at a random moment after the next run's first commit (steps 2-4 or the drain).
    delay = random.uniform(0.0, 0.8)
    run = start_run(crashed)
    before = committed_steps(crashed)
    deadline = time.monotonic() + 240
    while committed_steps(crashed) <= before and run.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(delay)
    try:
        os.killpg(run.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    assert run.wait(60) == -signal.SIGKILL, f"finished before the kill ({delay:.2f} s after a commit)"
    assert b"s3cret-jaas" not in run.stderr.read()
    # 3. The same command again, to the end.
    proc = run_cli_here(["run", "pipeline.toml", "--drain", "-q"], crashed)
    assert proc.returncode == 0, proc.stderr[-2000:]

    a, b = outputs(clean), outputs(crashed)
    for kind in ("results", "late", "dead_letter", "metrics", "summary"):
        assert b[kind] == a[kind], (kind, delay)
    assert dict(a["summary"])["rows"] == len(records) and dict(a["summary"])["balanced"]
    dead = pd.read_parquet(crashed / "out" / "dead_letter")
    assert sorted(zip(dead["kafka_partition"], dead["kafka_offset"], strict=True)) == [(p, 20) for p in range(4)]
    # Nothing read twice or skipped: each step's rows are exactly the offsets Spark checkpointed for its batch.
    ends = end_offsets(kafka_broker, "sigkill", 4)
    assert ends == {p: 41 for p in range(4)}
    for root in (clean, crashed):
        offsets = spark_offsets(root, "sigkill")
        assert offsets[max(offsets)] == ends
        assert rows_per_batch(root) == read_per_batch(offsets, 4), root.name


CONTINUOUS = """
[watermark]
max_out_of_orderness = "2s"
idle_timeout = "1m"
partitions = [0, 1, 2, 3]

[window]
type = "tumbling"
size = "1s"
allowed_lateness = "0s"
key = ["key"]
aggregations = { total = "sum(amount)" }

[late]
policy = "side_output"

[output]
path = "out"
"""


def bursts(n: int, size: int = 40) -> list[list[dict]]:
    """``n`` bursts of ``size`` rows, each 0.5 s of arrivals over 4 partitions, 3 s of arrival time apart.

    Delays are under 0.3 s (on time by a margin of 1.7 s over L = 2 s) or 30 s
    (too late by far), so a step that sees one partition's part of a burst
    before another's (the producer delivers partitions one after the other)
    cannot change a verdict: the run is comparable with a one-step read.
    """
    rng = random.Random(5)
    out, offsets = [], [0, 0, 0, 0]
    for b in range(n):
        rows = []
        for i in range(size):
            arrival = T0 + b * 3_000 + i * (500 // size)
            p = i % 4
            event = arrival - (30_000 if i % 13 == 7 and b else rng.randint(0, 300))
            rows.append({"partition": p, "offset": offsets[p], "arrival_time": arrival, "event_time": event,
                         "key": f"k{i % 3}", "amount": float(i)})
            offsets[p] += 1
        out.append(rows)
    return out


def test_a_continuous_run_keeps_up_with_a_producer_and_its_offsets_advance_with_its_steps(
        spark, kafka_broker, tmp_path):
    """Bursts produced while the query runs; each step's rows are its batch's checkpointed offsets."""

    kafka_broker.create_topic("live", 4)
    live = kafka_pipeline(tmp_path / "live", kafka_broker, "live")
    text = live.read_text()
    live.write_text(text[:text.index("[watermark]")] + CONTINUOUS)
    engine = Engine(load_config(live), spark)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            engine.run(trigger_interval="300 milliseconds")  # continuous: returns when stopped
        except BaseException as e:  # noqa: BLE001 - reported by the assertions below
            errors.append(e)

    def counted() -> int:
        return sum(r.accounting.rows for r in engine.reports)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    produced, fired = 0, []
    for burst in bursts(3):
        produced += kafka_broker.produce("live", as_records(burst))
        deadline = time.monotonic() + 120
        while counted() < produced and thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert counted() == produced, errors[:1]
        fired.append(sum(r.windows_fired for r in engine.reports))
    engine.request_stop()
    thread.join(60)
    assert not thread.is_alive() and not errors
    # Results appear while the query runs: the second burst moves W past the first's windows, and so on.
    assert fired[0] == 0 and 0 < fired[1] < fired[2], fired

    # lowwater's steps and Spark's offsets advanced together: each step read exactly its batch's offset range,
    # and the last committed step is Spark's last batch.
    offsets = spark_offsets(live.parent, "live")
    assert rows_per_batch(live.parent) == read_per_batch(offsets, 4)
    assert engine.store.latest().spark_batch == max(offsets) and len(offsets) >= 3
    assert offsets[max(offsets)] == end_offsets(kafka_broker, "live", 4)

    # Drained, the continuous run's outputs equal a --drain read of the same topic in one step.
    Engine(load_config(live), spark).run(drain=True)
    once = kafka_pipeline(tmp_path / "once", kafka_broker, "live")
    once.write_text(live.read_text())
    proc = run_cli_here(["run", "pipeline.toml", "--once", "--drain", "-q"], once.parent)
    assert proc.returncode == 0, proc.stderr[-2000:]
    a, b = outputs(once.parent, cut_free=True), outputs(live.parent, cut_free=True)
    for kind in ("results", "late", "dead_letter", "summary"):
        assert b[kind] == a[kind], kind
    assert len(a["late"]) >= 6 and dict(a["summary"])["rows"] == produced


def test_a_broker_away_for_a_while_is_waited_for_or_stops_the_run_in_one_line(spark, tmp_path):
    """A broker of its own (the session's stays up): stopped mid-run, started again.

    A run whose ``broker_timeout`` outlasts the outage waits and resumes by
    itself; one with a short ``broker_timeout`` fails in one line, commits
    nothing, and the same command resumes once the broker is back. Both end
    equal to a clean read of the topic, every offset read once.
    """
    from lowwater.testing.kafka import TestBroker

    broker = TestBroker(tmp_path / "broker")
    broker.start()
    try:
        broker.create_topic("trouble", 4)
        first, second = bursts(2)
        broker.produce("trouble", as_records(first))

        def pipeline(name: str, timeout: str) -> Path:
            cfg = kafka_pipeline(tmp_path / name, broker, "trouble")
            text = cfg.read_text()
            cfg.write_text(text[:text.index("[watermark]")].replace(
                'value_format = "json"', f'value_format = "json"\nbroker_timeout = "{timeout}"') + CONTINUOUS)
            return cfg

        patient, strict = pipeline("patient", "5m"), pipeline("strict", "6s")
        waiting = Engine(load_config(patient), spark)
        errors: list[BaseException] = []

        def run() -> None:
            try:
                waiting.run(trigger_interval="300 milliseconds")
            except BaseException as e:  # noqa: BLE001 - reported by the assertions below
                errors.append(e)

        def counted() -> int:
            return sum(r.accounting.rows for r in waiting.reports)

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        assert Engine(load_config(strict), spark).run(once=True).totals["rows"] == len(first)
        deadline = time.monotonic() + 120
        while counted() < len(first) and thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert counted() == len(first), errors[:1]

        broker.stop()
        t0 = time.monotonic()
        proc = run_cli_here(["run", "pipeline.toml", "--once", "-q"], strict.parent)
        waited = time.monotonic() - t0
        assert proc.returncode == 1, proc.stderr[-2000:]
        line = proc.stderr.strip().splitlines()[-1]  # after the start line: one line, the Kafka client's words
        assert line.startswith(f"error: source.topic 'trouble' at {broker.bootstrap}: Kafka did not answer or does "
                               "not have the topic (waited about 6s (source.broker_timeout)): org.apache.kafka.")
        assert "TimeoutException" in line and "STREAM_FAILED" not in line and "run the same command" in line
        assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) <= 2, proc.stderr[-2000:]
        assert waited >= 6, waited
        after = Engine(load_config(strict), spark)
        assert after.store.latest().totals["rows"] == len(first)  # nothing committed
        after.close()
        assert thread.is_alive() and not errors  # the patient run is still waiting

        broker.start()
        broker.produce("trouble", as_records(second))
        total = len(first) + len(second)
        deadline = time.monotonic() + 180
        while counted() < total and thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert counted() == total, errors[:1]  # it resumed by itself
        waiting.request_stop()
        thread.join(60)
        assert not thread.is_alive() and not errors
        Engine(load_config(patient), spark).run(drain=True)
        proc = run_cli_here(["run", "pipeline.toml", "--drain", "-q"], strict.parent)  # the same command again
        assert proc.returncode == 0, proc.stderr[-2000:]

        clean = pipeline("clean", "5m")
        Engine(load_config(clean), spark).run(once=True, drain=True)
        ends = end_offsets(broker, "trouble", 4)
        expected = outputs(clean.parent, cut_free=True)
        assert dict(expected["summary"])["rows"] == total == sum(ends.values())
        for root in (patient.parent, strict.parent):
            got = outputs(root, cut_free=True)
            for kind in ("results", "late", "summary"):
                assert got[kind] == expected[kind], (root.name, kind)
            offsets = spark_offsets(root, "trouble")
            assert rows_per_batch(root) == read_per_batch(offsets, 4) and offsets[max(offsets)] == ends
    finally:
        broker.stop()


def test_a_topic_recreated_under_a_running_query_stops_it_in_one_line(spark, kafka_broker, tmp_path):
    """fail_on_data_loss = true (the default) while the query runs: its next micro-batch sees the offsets gone."""
    from lowwater.io.kafka import kafka_failure

    def records(n: int) -> list[tuple[int, int, str]]:
        return [(0, T0 + 100 * i, json.dumps({"event_time": T0 + 100 * i, "key": "a", "amount": 1.0}))
                for i in range(n)]

    kafka_broker.create_topic("recreated", 1)
    kafka_broker.produce("recreated", records(20))
    cfg = kafka_pipeline(tmp_path, kafka_broker, "recreated")
    cfg.write_text(cfg.read_text().replace("partitions = [0, 1, 2, 3]", "partitions = [0]"))
    engine = Engine(load_config(cfg), spark)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            engine.run(trigger_interval="300 milliseconds")
        except BaseException as e:  # noqa: BLE001 - the subject of the assertions below
            errors.append(e)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 120
    while sum(r.accounting.rows for r in engine.reports) < 20 and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.1)
    kafka_broker.delete_topic("recreated")
    kafka_broker.create_topic("recreated", 1)
    kafka_broker.produce("recreated", records(5))
    thread.join(120)
    assert not thread.is_alive() and errors, "the query went on over a recreated topic"
    line = kafka_failure(load_config(cfg), errors[0])
    assert line is not None and "\n" not in line, str(errors[0])[:2000]
    # Planned between the deletion and the creation, the topic is missing; after, its offsets went back.
    assert "records the checkpoint expects are gone" in line or "does not have the topic" in line, line
    assert sum(r.accounting.rows for r in engine.reports) == 20
    after = Engine(load_config(cfg), spark)
    assert after.store.latest().totals["rows"] == 20  # nothing committed after the recreation
    after.close()

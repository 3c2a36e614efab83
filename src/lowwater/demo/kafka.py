"""``lowwater demo --kafka``: the payments stream produced into a local Kafka broker, read continuously.

A single-node KRaft broker starts from the jars ``scripts/bootstrap.sh``
fetched (``.jars/broker``; the test suite's broker, ``testing/kafka.py``) under
``DIR/broker``, with a topic ``payments`` of 8 partitions. A producer thread
(``confluent-kafka``) writes the demo's stream (``generator.py``: partition 3
lags ~20 s, partition 6 goes quiet for 90 s and catches up in a burst) with
each record's timestamp its arrival time, paced at ``speed`` seconds of
arrival time per second. The engine reads the topic with Spark's connector
on a processing-time trigger, as ``lowwater run`` does, and logs after each
step the low watermark, every partition's watermark, the partition holding
it and the idle ones (also in ``out/metrics``). It stops cleanly on Ctrl-C,
or with ``run_for_s`` once the stream is produced and read (or that long).
"""

from __future__ import annotations

import json
import logging
import shutil
import signal
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rich.console import Console

from lowwater.config import ConfigError, load_config
from lowwater.demo.generator import PIPELINE_TABLES, PaymentsSpec, generate_payments

log = logging.getLogger("lowwater")

TOPIC = "payments"
CONFIG = """\
[source]
format = "kafka"
bootstrap_servers = "{servers}"
topic = "{topic}"
value_format = "json"
schema = "event_time DOUBLE, key STRING, amount DOUBLE, currency STRING"
event_time = "event_time"
time_unit = "s"

""" + PIPELINE_TABLES + """
[trigger]
interval = "{interval}"

[spark]
master = "{master}"
"""


class Producer(threading.Thread):
    """Writes the stream's rows to the topic in arrival order, ``speed`` seconds of arrival time a second."""

    def __init__(self, servers: str, rows: Any, speed: float) -> None:  # noqa: ANN401 - a pandas DataFrame
        super().__init__(name="lowwater-demo-producer", daemon=True)
        self.servers, self.rows, self.speed = servers, rows, speed
        self.stop = threading.Event()
        self.go = threading.Event()  # set once the query runs: the stream is produced while it is read
        self.produced = 0
        self.error: str | None = None

    def run(self) -> None:
        from confluent_kafka import Producer as KafkaProducer

        while not self.go.wait(0.2):
            if self.stop.is_set():
                return

        producer = KafkaProducer({"bootstrap.servers": self.servers, "linger.ms": 20, "log_level": 3})
        arrival = self.rows["arrival_time"].to_numpy()
        t0, a0 = time.monotonic(), float(arrival[0])
        values = self.rows[["event_time", "key", "amount", "currency"]].to_dict("records")
        for i, (part, ts) in enumerate(zip(self.rows["partition"].tolist(), arrival.tolist(), strict=True)):
            if self.stop.is_set():
                break
            wait = (ts - a0) / self.speed - (time.monotonic() - t0)
            if wait > 0.05:
                producer.flush(10)
                if self.stop.wait(wait):
                    break
            producer.produce(TOPIC, json.dumps(values[i]).encode(), partition=int(part),
                             timestamp=int(round(ts * 1000)))
            producer.poll(0)
            self.produced += 1
        if producer.flush(30) != 0:
            self.error = "records not delivered within 30s"


def watermark_line(step: int, row: Mapping[str, Any]) -> str:
    """One step's watermarks as the demo logs them: W, every partition's, who holds W, who is idle."""
    def hms(t: Any) -> str:  # noqa: ANN401 - a datetime or None
        return "-" if t is None else t.strftime("%H:%M:%S")

    parts = " ".join(f"{p}={hms(t)}" for p, t in sorted(row["partition_watermarks"] or [], key=lambda x: int(x[0])))
    return (f"step {step}: W={hms(row['low_watermark'])} partitions {parts}; held back by "
            f"{row['holding_partition'] or '-'}; idle: {', '.join(row['idle_partitions'] or []) or 'none'}")


def run_kafka_demo(
    directory: Path,
    duration_s: float = 600.0,
    rate_per_s: float = 200.0,
    speed: float = 10.0,
    run_for_s: float | None = None,
    master: str = "local[*]",
    console: Console | None = None,
) -> dict:
    """Start the broker, produce the stream while the engine reads it; stop on Ctrl-C or after ``run_for_s``."""
    from lowwater.io.kafka import jars_for
    from lowwater.observe.hub import Observers
    from lowwater.runtime.session import get_spark
    from lowwater.spark.engine import Engine
    from lowwater.testing.kafka import TestBroker

    console = console or Console(markup=False, highlight=False)
    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    spec = PaymentsSpec(duration_s=duration_s, rate_per_s=rate_per_s)
    rows = generate_payments(spec)
    try:
        broker = TestBroker(directory / "broker")  # its jars missing: one line, as for the connector's
        broker.start()
    except RuntimeError as e:
        raise ConfigError(f"demo --kafka: {str(e).splitlines()[0]}") from None
    producer = Producer(broker.bootstrap, rows, speed)
    try:
        broker.create_topic(TOPIC, spec.partitions)
        cfg_path = directory / "demo.toml"
        cfg_path.write_text(CONFIG.format(servers=broker.bootstrap, topic=TOPIC, master=master, interval="2s",
                                          partitions=", ".join(str(p) for p in range(spec.partitions))))
        cfg = load_config(cfg_path)
        console.print(f"lowwater demo --kafka: broker at {broker.bootstrap}, topic {TOPIC} ({spec.partitions} "
                      f"partitions); producing {len(rows):,} payments at {speed:g}x; config {cfg_path}; Ctrl-C stops")
        engine = Engine(cfg, get_spark(cfg.spark, jars=jars_for(cfg)), observers=Observers(cfg))
        deadline = None if run_for_s is None else time.monotonic() + run_for_s

        def on_step(step: int, row: Mapping[str, Any], totals: Mapping[str, int], _alerts: Mapping) -> None:
            log.info("%s", watermark_line(step, row))
            read_all = not producer.is_alive() and totals.get("rows", 0) + int(row.get("held_rows") or 0) >= len(rows)
            if deadline is not None and (read_all or time.monotonic() > deadline):
                engine.request_stop()

        engine.observers.hooks.append(on_step)
        previous = signal.getsignal(signal.SIGINT)

        def interrupt(_sig: int, _frame: Any) -> None:  # noqa: ANN401
            console.print("stopping after the current step (Ctrl-C)")
            producer.stop.set()
            engine.request_stop()

        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, interrupt)
        producer.start()

        def start_producing() -> None:  # when the query runs (Spark started, the topic subscribed)
            while engine.query is None and not producer.stop.is_set():
                time.sleep(0.2)
            producer.go.set()

        threading.Thread(target=start_producing, daemon=True).start()
        try:
            manifest = engine.run()
        finally:
            if threading.current_thread() is threading.main_thread():
                signal.signal(signal.SIGINT, previous)
        summary = engine.summary(manifest)
    finally:
        producer.stop.set()
        producer.join(10)
        broker.stop()
    console.print(f"produced {producer.produced:,} records; read {summary['rows']:,} rows in {manifest.step + 1} "
                  f"steps; {summary['windows_fired']:,} windows fired, {summary['late_updates']:,} late updates, "
                  f"{summary['too_late']:,} too late; outputs under {cfg.output.path}/ (metrics: per-partition "
                  "watermarks)")
    return {**summary, "produced": producer.produced, "output_path": cfg.output.path}

"""Throughput on a Kafka topic: lowwater's engine against native Spark, same topic, same run.

Produces ``--events`` events (the generator every benchmark shares,
``bench.engine_vs_native.make_log``: arrival order, 8 partitions, 1 % of rows
5-30 s late) into a topic of a local single-node broker (``lowwater.testing.kafka``,
or ``--bootstrap`` for one already running), as JSON values with the arrival
time as the record timestamp, then times, interleaved ``--repeats`` times:

(a) native Spark: ``readStream.format("kafka")`` + ``from_json`` +
    ``withWatermark`` + ``groupBy(window, key)``, append mode, ``noop`` sink,
    available-now trigger, RocksDB state store;
(b) lowwater: the same window and L on the same topic,
    ``Engine.run(once=True, drain=True)`` (``lowwater run --once --drain``;
    outputs, state and checkpoint written for real).

Both read the whole topic from ``earliest`` with the same
``maxOffsetsPerTrigger`` (unset: one micro-batch). One process, one
SparkSession. Prints one JSON line per run, then the medians and the ratio.

    python -m bench.kafka_vs_native --events 2000000
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from bench.engine_vs_native import make_log
from bench.results import record

TOPIC = "bench"


def produce(broker, events: int, keys: int, partitions: int, rate: float) -> None:  # noqa: ANN001
    """The shared log as JSON records, partition by partition in arrival order, timestamp = arrival (ms)."""
    from confluent_kafka import Producer

    log = make_log(events, keys, partitions, rate)
    event_ms = log.column("event_time").cast("int64").to_numpy() // 1000
    arrival_ms = log.column("arrival_time").cast("int64").to_numpy() // 1000
    part = log.column("partition").to_numpy()
    key = log.column("key").to_pylist()
    amount = log.column("amount").to_numpy()
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 50, "batch.size": 1_000_000,
                         "compression.type": "lz4", "queue.buffering.max.messages": 1_000_000,
                         "acks": "all", "enable.idempotence": True, "log_level": 3})
    for i in range(events):
        value = f'{{"event_time":{event_ms[i]},"key":"{key[i]}","amount":{amount[i]}}}'
        while True:
            try:
                producer.produce(TOPIC, value=value.encode(), partition=int(part[i]), timestamp=int(arrival_ms[i]))
                break
            except BufferError:  # the local queue is full: let it drain
                producer.poll(0.05)
        if i % 10_000 == 0:
            producer.poll(0)
    if producer.flush(300) != 0:
        msg = "producing the benchmark topic did not finish within 300 s"
        raise RuntimeError(msg)


def native(spark, bootstrap: str, window_s: int, lateness_s: int, per_trigger: int | None, ckpt: Path) -> float:  # noqa: ANN001
    """Native Spark's tumbling-window query on the topic; seconds."""
    from pyspark.sql import functions as F

    reader = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", TOPIC).option("startingOffsets", "earliest"))
    if per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(per_trigger))
    value = F.from_json(F.col("value").cast("string"), "event_time LONG, key STRING, amount DOUBLE")
    df = (
        reader.load()
        .select(value.alias("v"))
        .select(F.timestamp_millis("v.event_time").alias("event_time"), "v.key", "v.amount")
        .withWatermark("event_time", f"{lateness_s} seconds")
        .groupBy(F.window("event_time", f"{window_s} seconds"), "key")
        .agg(F.count(F.lit(1)).alias("count"), F.sum("amount").alias("total"))
    )
    t0 = time.monotonic()
    q = (df.writeStream.outputMode("append").format("noop").option("checkpointLocation", str(ckpt))
         .trigger(availableNow=True).start())
    q.awaitTermination()
    return time.monotonic() - t0


def lowwater(spark, bootstrap: str, window_s: int, lateness_s: int, per_trigger: int | None, partitions: int,  # noqa: ANN001
             out: Path) -> tuple[float, int]:
    """lowwater on the topic, ``run --once --drain``; seconds and the rows it counted."""
    from lowwater.config import parse_config
    from lowwater.spark.engine import Engine

    source = {"format": "kafka", "bootstrap_servers": bootstrap, "topic": TOPIC, "value_format": "json",
              "schema": "event_time LONG, key STRING, amount DOUBLE", "event_time": "event_time", "time_unit": "ms"}
    if per_trigger:
        source["max_offsets_per_trigger"] = per_trigger
    cfg = parse_config({
        "source": source,
        "watermark": {"max_out_of_orderness": f"{lateness_s}s", "partitions": list(range(partitions))},
        "window": {"type": "tumbling", "size": f"{window_s}s", "allowed_lateness": "0s", "key": ["key"],
                   "aggregations": {"total": "sum(amount)"}},
        "late": {"policy": "drop"},
        "output": {"path": str(out)},
    })
    t0 = time.monotonic()
    manifest = Engine(cfg, spark).run(once=True, drain=True)
    return time.monotonic() - t0, int(manifest.totals.get("rows", 0))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=2_000_000)
    ap.add_argument("--keys", type=int, default=10_000)
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--rate", type=float, default=20_000.0, help="events per second of event time")
    ap.add_argument("--window-s", type=int, default=10)
    ap.add_argument("--lateness-s", type=int, default=5)
    ap.add_argument("--max-offsets-per-trigger", type=int, default=None)
    ap.add_argument("--repeats", type=int, default=2, help="runs of each, interleaved (order alternates)")
    ap.add_argument("--bootstrap", default=None, help="a running broker (default: start a local one)")
    ap.add_argument("--master", default="local[2]")
    args = ap.parse_args(argv)

    from lowwater.config import SparkConfig
    from lowwater.io.kafka import connector_jars
    from lowwater.runtime.session import get_spark
    from lowwater.testing.kafka import TestBroker

    work = Path(tempfile.mkdtemp(prefix="lowwater-bench-kafka-"))
    broker = None
    try:
        if args.bootstrap:
            from types import SimpleNamespace

            from confluent_kafka.admin import AdminClient, NewTopic

            broker = SimpleNamespace(bootstrap=args.bootstrap)
            AdminClient({"bootstrap.servers": args.bootstrap}).create_topics(
                [NewTopic(TOPIC, num_partitions=args.partitions, replication_factor=1)])[TOPIC].result(30)
        else:
            broker = TestBroker(work / "broker")
            broker.start()
            broker.create_topic(TOPIC, args.partitions)
        t0 = time.monotonic()
        produce(broker, args.events, args.keys, args.partitions, args.rate)
        print(json.dumps({"case": "produce", "events": args.events, "seconds": round(time.monotonic() - t0, 2)}),
              flush=True)
        spark = get_spark(SparkConfig(
            master=args.master, app_name="lowwater-bench-kafka", shuffle_partitions=4,
            conf={"spark.sql.streaming.stateStore.providerClass":
                  "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
                  "spark.driver.memory": "6g", "spark.ui.enabled": "false"},
        ), jars=connector_jars())
        rates: dict[str, list[float]] = {"native": [], "lowwater": []}
        for r in range(args.repeats):
            for name in (("native", "lowwater") if r % 2 == 0 else ("lowwater", "native")):
                where = work / f"{name}-{r}"
                if name == "native":
                    secs, rows = native(spark, broker.bootstrap, args.window_s, args.lateness_s,
                                        args.max_offsets_per_trigger, where), args.events
                else:
                    secs, rows = lowwater(spark, broker.bootstrap, args.window_s, args.lateness_s,
                                          args.max_offsets_per_trigger, args.partitions, where)
                    if rows != args.events:
                        msg = f"lowwater counted {rows} rows of {args.events}"
                        raise RuntimeError(msg)
                rates[name].append(args.events / secs)
                print(json.dumps({"case": f"kafka/{name}", "run": r, "events": args.events, "seconds": round(secs, 2),
                                  "events_per_s": round(args.events / secs)}), flush=True)
        native_rate, lw_rate = statistics.median(rates["native"]), statistics.median(rates["lowwater"])
        print(json.dumps({"case": "kafka/ratio", "native_events_per_s": round(native_rate),
                          "lowwater_events_per_s": round(lw_rate),
                          "lowwater_over_native": round(lw_rate / native_rate, 3)}))
        cut = ("one micro-batch" if args.max_offsets_per_trigger is None
               else f"{args.max_offsets_per_trigger} offsets a trigger")
        record("kafka_vs_native", f"kafka_vs_native/{args.partitions} partitions, {cut}", {
            "events": args.events, "native_eps": round(native_rate), "lowwater_eps": round(lw_rate),
            "ratio": round(lw_rate / native_rate, 3), "native_runs_eps": [round(x) for x in rates["native"]],
            "lowwater_runs_eps": [round(x) for x in rates["lowwater"]]})
    finally:
        if isinstance(broker, TestBroker):
            broker.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

"""The Python API on Spark: a user's streaming DataFrame through the engine gives what the TOML pipeline gives.

The rows are tests/spark/test_kafka.py's stream (a lagging partition that holds W, a quiet one that goes
idle, stragglers too late). The TOML pipeline reads them as files (or as a topic, ``format = "kafka"``);
the Python pipeline reads the same files with ``spark.readStream.json`` (or the same topic with
``spark.readStream.format("kafka")`` and the user's own ``from_json``). Results, late rows and the
accounting must be the same.
"""

from __future__ import annotations

import json
import os
import random
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from pyspark.sql import functions as F

import lowwater as lw
from lowwater.config import ConfigError, load_config
from lowwater.core.judge import judge
from lowwater.core.lateness import Lateness
from lowwater.core.tracker import WatermarkTracker
from lowwater.core.watermarks import WatermarkStrategy
from lowwater.core.windows import TumblingWindows
from lowwater.spark.engine import Engine
from lowwater.spark.step import summarise
from lowwater.testing.outputs import read_output

from .test_kafka import FILE_SOURCE, T0, WINDOWING, kafka_pipeline, outcome, produce, stream

pytestmark = pytest.mark.spark

SCHEMA = "partition INT, offset LONG, arrival_time LONG, event_time LONG, key STRING, amount DOUBLE"


def windowed(p: lw.Pipeline, out: Path, *sinks: lw.Sink, partitions: tuple = (0, 1, 2, 3)) -> lw.Pipeline:
    """WINDOWING (test_kafka.py) in Python."""
    return (p.watermark(lw.bounded("2s").with_idleness("5s").with_partitions(*partitions))
            .window(lw.tumbling("5 seconds"), key="key")
            .agg(total=F.sum("amount"))
            .lateness(grace="0s", policy="side_output")
            .write(lw.parquet(out), *sinks))


def test_a_dataframe_of_files_gives_what_the_toml_pipeline_gives(spark, tmp_path):
    rows = stream()
    landing = tmp_path / "files" / "landing"
    landing.mkdir(parents=True)
    (landing / "part-000.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "files" / "pipeline.toml").write_text(FILE_SOURCE + WINDOWING)
    toml_query = lw.Pipeline.from_toml(tmp_path / "files" / "pipeline.toml").start(drain=True, spark=spark)
    toml_query.await_termination()
    want = toml_query.manifest  # what `lowwater run pipeline.toml --drain` commits

    seen: list[tuple[int, int, int, int]] = []

    def callback(batch) -> None:  # noqa: ANN001 - a StepBatch
        results = batch.results.toPandas()
        assert set(results["kind"]) <= {"final"} and batch.revisions.count() == 0
        seen.append((batch.step, len(results), batch.late.count(), batch.metrics["rows"]))

    df = spark.readStream.schema(SCHEMA).json(str(landing))
    pipeline = windowed(lw.stream(df, event_time="event_time", partition="partition", offset="offset",
                                  arrival="arrival_time", time_unit="ms"), tmp_path / "py" / "out",
                        lw.foreach_batch(callback))
    query = pipeline.start(drain=True)
    assert query.await_termination(timeout=300) is True and not query.is_active
    assert outcome(spark, tmp_path / "py", "partition")[:2] == outcome(spark, tmp_path / "files", "partition")[:2]
    assert query.summary == summarise(want)
    assert query.manifest.totals == want.totals

    # The handle: lowwater's progress per committed step, the shape of a StreamingQuery's
    last = query.last_progress
    assert last is not None and last == query.lastProgress and query.status["step"] == last["step"] == 1
    assert last["totals"] == want.totals and query.status["message"] == "Stopped"
    first = query.recent_progress[0]
    assert first["holding_partition"] == "3" and list(first["idle_partitions"]) == ["2"]
    assert first["too_late"] == want.totals["too_late"] > 0 and first["watermark_lag_s"] is not None
    # foreach_batch: each step once, its results and late rows as the Parquet outputs hold them
    metrics = pd.read_parquet(tmp_path / "py" / "out" / "metrics")
    res = pd.read_parquet(tmp_path / "py" / "out" / "results")
    late = pd.read_parquet(tmp_path / "py" / "out" / "late")
    assert [s for s, *_ in seen] == [0, 1]
    rows_of = dict(zip(metrics["batch_id"].astype(int), metrics["rows"], strict=True))
    assert [(n, k, r) for _, n, k, r in seen] == [
        ((res["batch_id"] == s).sum(), (late["batch_id"] == s).sum(), rows_of[s]) for s in (0, 1)]
    # the same pipeline written as TOML (format = "dataframe") and read back with the DataFrame
    path = tmp_path / "py.toml"
    path.write_text(pipeline.to_toml())
    assert replace(lw.Pipeline.from_toml(path, df=df).config, base_dir=".") == replace(pipeline.config, base_dir=".")


def on_time(n: int = 160) -> list[dict]:
    """A second topic's rows, every partition on time, arriving between the first topic's (never at its times)."""
    rng = random.Random(5)
    rows, offsets = [], [0, 0, 0, 0]
    for i in range(n):
        arrival = T0 + i * 250 + 60
        p = i % 4
        rows.append({"partition": p, "offset": offsets[p], "arrival_time": arrival,
                     "event_time": arrival - rng.randint(0, 1_500), "key": f"k{i % 3}", "amount": float(1_000 + i)})
        offsets[p] += 1
    return rows


def late_records(spark, root: Path, topic: str, partition: str, offset: str) -> list[tuple]:  # noqa: ANN001
    late = read_output(spark, root / "out" / "late")
    return sorted((r[topic], int(r[partition]), int(r[offset]), r.reason) for _, r in late.iterrows())


def test_a_kafka_dataframe_with_the_users_from_json_gives_what_format_kafka_gives(spark, kafka_broker, tmp_path,
                                                                                  monkeypatch):
    """Two topics whose partitions share numbers, cut 120 offsets a step: the DataFrame is read as the topic is.

    The first topic is the seeds' stream (its partition 3 lags 8 s); the second's partitions are all on
    time. As with ``format = "kafka"``, each topic-partition is a lane of the arrival frontier (rows held
    behind the partitions with a backlog, so the cut does not matter) and has its own watermark generator
    (ADR 0043): the second topic's partition 3 does not move the first one's on, so the lagging partition
    holds ``W`` instead of having its rows judged too late -- the verdicts are the core tracker's over the
    same rows, one batch, and both doors give them.
    """
    rows, more = stream(), on_time()
    produce(kafka_broker, "api_payments", rows)
    produce(kafka_broker, "api_payments_b", more)
    names = [f"{t}-{p}" for t in ("api_payments", "api_payments_b") for p in range(4)]
    cfg = kafka_pipeline(tmp_path / "toml", kafka_broker, "api_payments", per_trigger=120)
    cfg.write_text(cfg.read_text().replace('topic = "api_payments"', 'topics = ["api_payments", "api_payments_b"]')
                   .replace("partitions = [0, 1, 2, 3]", f"partitions = {json.dumps(names)}"))
    monkeypatch.setenv("LOWWATER_ROW_CLOCK", "driver")  # TOML: W(r) on the driver; the DataFrame: on the executors
    want = Engine(load_config(cfg), spark).run(drain=True)
    monkeypatch.delenv("LOWWATER_ROW_CLOCK")

    raw = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", kafka_broker.bootstrap)
           .option("subscribe", "api_payments,api_payments_b").option("startingOffsets", "earliest")
           .option("maxOffsetsPerTrigger", 120).load())
    value = F.from_json(F.col("value").cast("string"), "event_time LONG, key STRING, amount DOUBLE")
    df = raw.select(value.alias("v"), "topic", "partition", "offset", "timestamp").select(
        "v.*", "topic", "partition", "offset", "timestamp")
    # Several topics: a bare partition number names no one partition (one line, before anything runs)
    with pytest.raises(ConfigError, match=r"^watermark\.partitions: '0' is not a topic-partition; source reads "):
        windowed(lw.stream(df, event_time="event_time", time_unit="ms"), tmp_path / "bare").start(tmp_path / "bare")
    # partition, offset and timestamp: a Kafka DataFrame's, taken by default
    pipeline = windowed(lw.stream(df, event_time="event_time", time_unit="ms"), tmp_path / "py" / "out",
                        partitions=tuple(names))
    src = pipeline.config.source
    assert (src.partition, src.offset, src.arrival_time) == ("partition", "offset", "timestamp")
    total = len(rows) + len(more)
    query = pipeline.start(tmp_path / "py" / "ckpt")  # continuous: runs until stopped
    query.process_all_available()
    assert query.is_active and query.last_progress["totals"]["rows"] == total
    query.stop()
    assert not query.is_active
    # the same pipeline again on its checkpoint: nothing new to read, every open window fires
    again = pipeline.start(tmp_path / "py" / "ckpt", drain=True)
    again.await_termination()
    assert again.manifest.totals == want.totals and again.manifest.drained
    got, toml = outcome(spark, tmp_path / "py", "partition"), outcome(spark, tmp_path / "toml", "kafka_partition")
    assert got[:2] == toml[:2] and got[0] and len(got[1]) >= 5
    late = late_records(spark, tmp_path / "py", "topic", "partition", "offset")
    assert late == late_records(spark, tmp_path / "toml", "kafka_topic", "kafka_partition", "kafka_offset")
    # One generator per topic-partition: the core tracker's verdicts over the same rows in arrival order.
    topics = {"api_payments": rows, "api_payments_b": more}
    expected = too_late(topics, by_topic=True)
    assert {(t, p, o) for t, p, o, _ in late} == expected
    lagging = sum(1 for r in rows if r["partition"] == 3)
    assert sum(1 for t, p, _ in expected if (t, p) == ("api_payments", 3)) < lagging / 4  # it holds W instead
    assert not any(t == "api_payments_b" for t, *_ in expected)  # ... and holds the other topic's rows on time
    shared = too_late(topics, by_topic=False)  # one generator per partition number, as before ADR 0043
    assert sum(1 for t, p, _ in shared if (t, p) == ("api_payments", 3)) > lagging / 2 and shared != expected
    metrics = pd.read_parquet(tmp_path / "py" / "out" / "metrics")
    assert metrics["rows"].sum() == want.totals["rows"] == total
    # metrics name each generator as its lane does: topic-partitions, the holding one among them
    assert {k for m in metrics["partition_watermarks"] for k, _ in m} == set(names)
    holding = set(metrics["holding_partition"].dropna())
    assert holding and holding <= set(names)
    assert metrics["held_rows"].max() > 0 and len(metrics) > 2  # cut into steps, rows held behind the lanes


def too_late(topics: dict[str, list[dict]], by_topic: bool) -> set[tuple[str, int, int]]:
    """The rows (topic, partition, offset) the core judges too late: WINDOWING over every topic's rows at once.

    ``by_topic``: one generator per topic-partition (ADR 0043); else one per partition number.
    """
    recs = sorted((r["arrival_time"], f"{t}-{r['partition']}", r["offset"], t, r) for t, rs in topics.items()
                  for r in rs)
    names = np.array([name if by_topic else str(r["partition"]) for _, name, _, _, r in recs])
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(2_000_000).with_idleness(5_000_000).with_partitions(
        np.unique(names).tolist())
    j = judge(WatermarkTracker(strategy), TumblingWindows(5_000_000), 0, names,
              np.array([r["event_time"] * 1000 for *_, r in recs]), np.array([a * 1000 for a, *_ in recs]))
    return {(t, r["partition"], r["offset"]) for (*_, t, r), v in zip(recs, j.row_verdict, strict=True)
            if v == Lateness.TOO_LATE}


def test_an_endless_rate_source_runs_until_stopped_and_reports_its_progress(spark, tmp_path):
    rate = spark.readStream.format("rate").option("rowsPerSecond", 200).option("numPartitions", 2).load()
    df = rate.select("timestamp", "value", (F.col("value") % 2).alias("p"))
    query = (lw.stream(df, event_time="timestamp", partition="p", offset="value", arrival="timestamp")
             .watermark(lw.bounded("1s"))
             .window(lw.tumbling("1 second"), key="p")
             .agg(total=F.sum("value"), biggest=F.max("value"))
             .write(lw.parquet(tmp_path / "out"))
             .start(tmp_path / "ckpt"))
    try:  # (process_all_available would wait forever here: an endless source always has more, as in Spark)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not sum(p["windows_fired"] for p in query.recent_progress):
            time.sleep(0.5)
        assert query.is_active and query.status["step"] >= 1
        last = query.last_progress
        assert last is not None and last["step"] >= 1 and last["dead_letter"] == 0
        assert last["totals"]["rows"] == last["totals"]["on_time"] + last["totals"]["late_updates"] + last[
            "totals"]["too_late"] > 0
    finally:
        query.stop()
    assert not query.is_active and query.status["message"] == "Stopped"
    res = pd.read_parquet(tmp_path / "out" / "results")
    assert len(res) > 0 and set(res["p"]) <= {0, 1}
    # each fired window holds exactly its rows: value v is row v of the source, timestamps one per 5 ms
    assert (res["count"] > 0).all() and (res["biggest"] <= res["total"]).all()


def test_spark_column_aggregates_map_to_lowwater_aggregates_or_are_refused_in_one_line(spark):  # noqa: ARG001
    from lowwater.api.aggs import agg_text

    assert [agg_text("a", c) for c in (F.sum("amount"), F.count("amount"), F.min(F.col("amount")),
                                       F.max("amount"), F.avg("amount"), F.mean("amount"))] == [
        "sum(amount)", "count(amount)", "min(amount)", "max(amount)", "avg(amount)", "avg(amount)"]
    # The moments and count_if (ADR 0034), under Spark's names; stddev/std/variance are the sample ones, as Spark's.
    assert [agg_text("a", c) for c in (F.stddev("amount"), F.std("amount"), F.stddev_samp("amount"),
                                       F.stddev_pop("amount"), F.variance("amount"), F.var_samp("amount"),
                                       F.var_pop("amount"), F.count_if("ok"))] == [
        "stddev_samp(amount)", "stddev_samp(amount)", "stddev_samp(amount)", "stddev_pop(amount)",
        "var_samp(amount)", "var_samp(amount)", "var_pop(amount)", "count_if(ok)"]
    # What cannot be merged, or is not kept yet, says why in its one line.
    why = [(F.median("amount"), "needs every value of the window"), (F.mode("amount"), "needs every value"),
           (F.first("amount"), "order rows reach a task"), (F.percentile_approx("amount", 0.5), "quantile sketch"),
           (F.approx_count_distinct("amount", 0.01), "HLL sketch"), (F.skewness("amount"), "third moment")]
    for col, reason in why:
        msg = str(pytest.raises(ValueError, agg_text, "agg(x=...)", col).value)
        assert msg.startswith("agg(x=...): ") and "cannot be kept as a mergeable partial" in msg and reason in msg
        assert "\n" not in msg
    refused = {
        "distinct": F.countDistinct("amount", "key"),
        "sum_distinct": F.sum_distinct("amount"),
        "filtered": F.expr("sum(amount) FILTER (WHERE amount > 1)"),
        "expression": F.sum(F.col("amount") * 2),
        "approx": F.approx_count_distinct("amount", 0.01),
        "first": F.first("amount"),
        "aliased": F.sum("amount").alias("t"),
        "star": F.count("*"),
    }
    for name, col in refused.items():
        with pytest.raises(ValueError) as e:
            agg_text(f"agg({name}=...)", col)
        assert str(e.value).startswith(f"agg({name}=...): ") and "\n" not in str(e.value)
    assert "DISTINCT" in str(pytest.raises(ValueError, agg_text, "d", F.sum_distinct("amount")).value)


def test_the_readme_quickstart_runs_and_prints_the_demos_numbers(spark, tmp_path, monkeypatch, capsys):
    from lowwater.demo.generator import PaymentsSpec, write_demo

    cfg = write_demo(tmp_path / "demo-run", PaymentsSpec(duration_s=40, rate_per_s=20))  # what demo.sh writes
    demo = Engine(load_config(cfg), spark)
    manifest = demo.run(drain=True)
    want = demo.summary(manifest)
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    code = readme.split("## Python API", 1)[1].split("```python", 1)[1].split("```", 1)[0]
    monkeypatch.chdir(tmp_path)  # Python's paths; Spark's JVM started elsewhere, so its paths are made absolute:
    code = code.replace('"demo-run/', f'"{tmp_path}/demo-run/')
    namespace: dict = {}
    exec(compile(code, "README.md", "exec"), namespace)  # noqa: S102 - the README's own example
    assert namespace["query"].summary == want and want["rows"] == 800
    assert str(want) in capsys.readouterr().out
    py = pd.read_parquet(tmp_path / "demo-run" / "py-out" / "results").drop(columns="batch_id")
    toml = pd.read_parquet(tmp_path / "demo-run" / "out" / "results").drop(columns="batch_id")
    order = ["key", "window_start", "kind", "revision"]
    pd.testing.assert_frame_equal(py.sort_values(order, ignore_index=True), toml.sort_values(order, ignore_index=True))

    # lw.whatif and lw.reconcile take the pipeline object (the TOML one; the Python one with its log), in this
    # process, on the active session: what `lowwater whatif --config` and `lowwater reconcile` compute
    from lowwater.advisor.advice import advise
    from lowwater.advisor.replay_config import replay_config
    from lowwater.advisor.whatif import SweepSpec, run_whatif

    pipeline = lw.Pipeline.from_toml(cfg)
    five = lw.tumbling("5s")  # windows that fire within the demo's 40 s (its own are a minute)
    grid = lw.whatif(pipeline.window(five, key="key"), lateness=["0s", "2s", "5s"], grace="2s",
                     target_completeness=0.9)
    spec = SweepSpec([0, 2_000_000, 5_000_000], [2_000_000])
    cli = run_whatif(spark, replay_config(None, cfg, None, None, None, None, None, None, None, "5s", None, None,
                                          None), spec)
    assert grid["results"] == cli and len(cli) == 3 and grid["compared"] == []
    assert grid["advice"] == advise(cli, 0.9, None, 30.0) and grid["advice"].startswith("Smallest L")
    python = (lw.stream(namespace["payments"], event_time="event_time", partition="partition", offset="offset",
                        arrival="arrival_time")
              .watermark(lw.bounded("5s").with_idleness("30s").with_partitions(*range(8)))
              .window(five, key="key").write(lw.parquet(tmp_path / "unused")))
    again = lw.whatif(python, lateness=["0s", "2s", "5s"], grace="2s", log=tmp_path / "demo-run" / "landing",
                      compare=[lw.adaptive(0.99, over="1m")])
    batching = "peak_open_windows"  # the TOML source reads 3 files a micro-batch, the DataFrame's files all at once
    assert [{k: v for k, v in r.items() if k != batching} for r in again["results"]] == [
        {k: v for k, v in r.items() if k != batching} for r in cli]
    assert [r["strategy"] for r in again["compared"]] == [
        '{ strategy = "adaptive", target_quantile = 0.99, over = "1m" }']
    summary = lw.reconcile(pipeline)
    assert summary["unexplained"] == 0 and summary["stream_step"] == manifest.step
    assert summary["rows"] == want["rows"] and summary["windows_checked"] == len(toml.drop_duplicates(["key",
                                                                                                   "window_start"]))
    assert (tmp_path / "demo-run" / "out" / "reconcile").is_dir()


NAMED = """
[[source]]
name = "{name}"
format = "jsonl"
path = "landing/{name}"
partition = "partition"
offset = "offset"
arrival_time = "arrival_time"
event_time = "event_time"
time_unit = "ms"
schema = "{schema}"
watermark = {{ max_out_of_orderness = "2s", idle_timeout = "5s" }}
"""

NAMED_WINDOW = """
[window]
type = "tumbling"
size = "5s"
key = ["key"]
aggregations = { total = "sum(amount)" }

[output]
path = "out"
"""


def test_a_union_of_two_dataframes_gives_what_source_tables_give(spark, tmp_path):
    rows = stream()
    sides = {"a": [r for r in rows if r["partition"] < 2], "b": [r for r in rows if r["partition"] >= 2]}
    for name, part in sides.items():
        (tmp_path / "toml" / "landing" / name).mkdir(parents=True)
        (tmp_path / "toml" / "landing" / name / "part-000.jsonl").write_text(
            "".join(json.dumps(r) + "\n" for r in part))
    cfg = tmp_path / "toml" / "pipeline.toml"
    cfg.write_text("".join(NAMED.format(name=n, schema=SCHEMA) for n in sides) + NAMED_WINDOW)
    want = Engine(load_config(cfg), spark).run(drain=True)

    def side(name: str) -> lw.Pipeline:
        df = spark.readStream.schema(SCHEMA).json(str(tmp_path / "toml" / "landing" / name))
        return lw.stream(df, event_time="event_time", partition="partition", offset="offset", arrival="arrival_time",
                         time_unit="ms", name=name).watermark(lw.bounded("2s").with_idleness("5s"))

    query = (side("a").union(side("b")).window(lw.tumbling("5s"), key="key").agg(total=F.sum("amount"))
             .write(lw.parquet(tmp_path / "py" / "out")).start(drain=True))
    query.await_termination()
    got, toml = outcome(spark, tmp_path / "py", "partition"), outcome(spark, tmp_path / "toml", "partition")
    assert got[:2] == toml[:2] and got[0] and got[1]
    assert query.manifest.totals == want.totals and want.totals["rows"] == len(rows)
    late = pd.read_parquet(tmp_path / "py" / "out" / "late")
    assert set(late["source"]) <= {"a", "b"} and len(late) == len(toml[1])


def test_reconcile_refuses_a_dataframe_source_in_one_line(tmp_path):
    from lowwater.config import ConfigError
    from lowwater.reconcile.job import check_supported

    df = spark_free_frame()
    cfg = lw.stream(df, event_time="t").window(lw.tumbling("1m")).write(lw.parquet(tmp_path)).config
    with pytest.raises(ConfigError, match=r'^reconcile: a DataFrame source has no log to recompute from'):
        check_supported(cfg)


def spark_free_frame():  # noqa: ANN201 - what lw.stream reads of a streaming DataFrame, without a session
    return type("DataFrame", (), {"isStreaming": True, "columns": ["t"]})()


def test_the_handle_raises_the_engines_failure_and_ctrl_c_asks_for_a_stop_after_the_step():
    import threading
    from types import SimpleNamespace

    from lowwater.api.running import LowwaterQuery
    from lowwater.config import ConfigError

    stop = threading.Event()

    class Engine:  # what the handle uses of an engine
        query = None
        observers = SimpleNamespace(hooks=[])

        def __init__(self, fail: bool) -> None:
            self.fail = fail

        def run(self, once: bool, drain: bool) -> str:  # noqa: ARG002
            if self.fail:
                raise ConfigError("source.time_unit: event times such as 1.7e12 do not fit")
            stop.wait(30)
            return "manifest"

        def request_stop(self, now: bool = False) -> None:  # noqa: ARG002
            stop.set()

    failed = LowwaterQuery(Engine(fail=True), True, False)
    with pytest.raises(ConfigError, match="source.time_unit"):
        failed.await_termination()
    assert isinstance(failed.exception(), ConfigError) and not failed.is_active
    with pytest.raises(ConfigError):
        failed.process_all_available()

    running = LowwaterQuery(Engine(fail=False), False, False)
    thread = running._thread
    assert running.is_active and running.status["message"] == "Initializing" and running.last_progress is None

    def interrupted(timeout=None):  # noqa: ANN001, ANN202, ARG001 - Ctrl-C while the caller waits
        raise KeyboardInterrupt

    running._thread = SimpleNamespace(join=interrupted, is_alive=thread.is_alive)
    with pytest.raises(KeyboardInterrupt):
        running.await_termination()
    thread.join(30)
    assert stop.is_set() and running.manifest == "manifest"


def test_an_interval_join_in_python_gives_what_the_toml_join_gives(spark, tmp_path):
    # tests/scenarios/join/bounds_and_outer.yaml (test_join.py's first case): clicks in five files, orders in
    # three. TOML: `[join]` reading the landing directories; Python: the same files as streaming DataFrames,
    # three files a micro-batch (Spark's file source takes them in modification-time order), joined with
    # .interval_join.
    from lowwater.api.toml_text import dumps
    from lowwater.testing.join_scenarios import _observed, compare, expected, load_join
    from lowwater.testing.scenario_files import _plain_copy
    from lowwater.testing.scenario_spark import land_inputs

    s = load_join(Path(__file__).parent.parent / "scenarios" / "join" / "bounds_and_outer.yaml")
    for files in land_inputs(s, s.pipeline(base_dir=tmp_path), s.cuts[1]).values():
        for i, f in enumerate(files):
            os.utime(f, (1_700_000_000 + i, 1_700_000_000 + i))
    (tmp_path / "join.toml").write_text(dumps(_plain_copy(s.config)))
    toml = lw.Pipeline.from_toml(tmp_path / "join.toml")
    toml_query = toml.start(drain=True)  # on the active session (a user's cluster's): none of its own
    toml_query.await_termination()
    assert toml_query.engine.spark._jsparkSession.equals(spark._jsparkSession)

    def side(name: str) -> lw.Pipeline:
        src = next(t for t in s.config["source"] if t["name"] == name)
        df = spark.readStream.option("maxFilesPerTrigger", 3).schema(src["schema"]).json(str(tmp_path / src["path"]))
        return lw.stream(df, event_time="event_time", partition="partition", arrival="arrival_time",
                         name=name).watermark(lw.bounded("5s"))

    py = (side("clicks").interval_join(side("orders"), on="user", between=("0s", "10s"), how="left_outer",
                                       columns={"left": ["click"], "right": ["amount"]})
          .write(lw.parquet(tmp_path / "py")))
    assert py.config.join == toml.config.join
    query = py.start(drain=True)
    query.await_termination()
    got = _observed(spark, py.config, tmp_path / "py", query.summary)
    want = _observed(spark, toml.config, tmp_path / "out", toml_query.summary)
    assert not compare(want, expected(s), s) and len(want.joined) == 8
    assert (got.joined, got.too_late, got.counts) == (want.joined, want.too_late, want.counts)
    assert query.summary["join"]["left"]["balanced"] and query.manifest.step >= 2  # several micro-batches


def test_the_api_docstring_examples_that_build_from_a_dataframe_run_on_the_session(spark):
    import doctest
    import importlib

    from tests.test_api_docs import DOCTEST_FLAGS, SPARK_DOCTESTS

    for name in SPARK_DOCTESTS:  # they build pipelines over a rate source; no query starts
        failed, attempted = doctest.testmod(importlib.import_module(name), extraglobs={"lw": lw, "spark": spark},
                                            optionflags=DOCTEST_FLAGS)
        assert failed == 0 and attempted > 0, name

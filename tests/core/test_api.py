"""The Python API's model (lowwater/api): the same PipelineConfig as the TOML file, round trips, argument errors.

No Spark here: a streaming DataFrame is stood in for by an object with its shape (``isStreaming``,
``columns``); the Spark side (a real DataFrame, Column aggregates, running) is tests/spark/test_api.py.
"""

from __future__ import annotations

import copy
import subprocess
import sys
import tomllib
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest
import yaml

import lowwater as lw
from lowwater.config import ConfigError, check_source_path, load_config, parse_config
from lowwater.demo.generator import _CONFIG
from lowwater.testing.transcripts import load_all

SCENARIOS = Path(__file__).parent.parent / "scenarios"
DEMO_COLUMNS = ("partition", "offset", "arrival_time", "event_time", "key", "amount")
KAFKA_COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp", "timestampType")


class DataFrame:
    """What lw.stream reads of a streaming DataFrame: its type name, isStreaming and columns."""

    def __init__(self, *columns: str, streaming: bool = True) -> None:
        self.columns = list(columns)
        self.isStreaming = streaming


def demo_pipeline(df: DataFrame, out: Path) -> lw.Pipeline:
    """The demo's pipeline (src/lowwater/demo/generator.py's TOML), written in Python."""
    return (
        lw.stream(df, event_time="event_time", partition="partition", offset="offset", arrival="arrival_time")
        .watermark(lw.bounded("5s").with_idleness("30 seconds").with_partitions(0, 1, 2, 3))
        .window(lw.tumbling("1 minute"), key="key")
        .agg(total="sum(amount)", biggest="max(amount)", payments_avg="avg(amount)")
        .lateness(grace="10s", policy="side_output")
        .write(lw.parquet(out))
    )


def test_the_python_pipeline_is_the_demo_toml_pipeline(tmp_path):
    (tmp_path / "demo.toml").write_text(_CONFIG.format(partitions="0, 1, 2, 3"))
    toml = load_config(tmp_path / "demo.toml")
    py = demo_pipeline(DataFrame(*DEMO_COLUMNS), tmp_path / "out").config
    assert py.window == toml.window
    assert py.watermark == toml.watermark
    assert py.late_policy == toml.late_policy
    assert py.output == toml.output
    assert py.early == toml.early
    src, want = py.source, toml.source
    assert (src.event_time, src.partition, src.offset, src.arrival_time, src.time_unit) == (
        want.event_time, want.partition, want.offset, want.arrival_time, want.time_unit)
    assert (src.format, src.path) == ("dataframe", "dataframe://default")


def test_every_scenario_file_round_trips_through_to_toml_and_from_toml(tmp_path):
    scenarios = [t.scenario for f in sorted(SCENARIOS.rglob("*.yaml")) for t in load_all(f)]
    assert len(scenarios) >= 20
    for s in scenarios:
        data = copy.deepcopy(s.config)
        text = lw.Pipeline(copy.deepcopy(data), base_dir=str(tmp_path)).to_toml()
        assert tomllib.loads(text) == data, s.name
        path = tmp_path / f"{s.name}.toml"
        path.write_text(text)
        try:
            want = parse_config(copy.deepcopy(data), base_dir=tmp_path)
        except ConfigError as e:  # tests/scenarios/refused.yaml: the same one line from either door
            with pytest.raises(ConfigError) as got:
                lw.Pipeline.from_toml(path)
            assert str(got.value) == str(e), s.name
            continue
        again = lw.Pipeline.from_toml(path)
        assert again.config == want, s.name
        assert tomllib.loads(again.to_toml()) == tomllib.loads(lw.Pipeline.from_toml(path).to_toml())


def test_a_python_pipeline_round_trips_through_its_toml(tmp_path):
    df = DataFrame(*DEMO_COLUMNS)
    py = (demo_pipeline(df, tmp_path / "out").clip(max_future_skew="1m").trigger(early=1000)
          .accumulate("retracting").with_checkpoint(tmp_path / "ckpt"))
    path = tmp_path / "p.toml"
    path.write_text(py.to_toml())
    back = lw.Pipeline.from_toml(path, df=df)
    assert replace(back.config, base_dir=".") == replace(py.config, base_dir=".")
    cfg = back.config
    assert cfg.early is not None and cfg.early.every_rows == 1000
    assert cfg.window.accumulation == "retracting"
    assert cfg.watermark.max_future_skew_us == 60_000_000
    assert cfg.output.checkpoint == str(tmp_path / "ckpt")
    # the other builders, each one key of the file
    hop = py.window(lw.hopping("1m", "30s"), key=["key", "partition"]).config.window
    assert (hop.type, hop.size_us, hop.slide_us, hop.key) == ("hopping", 60_000_000, 30_000_000, ("key", "partition"))
    assert hop.aggregations == cfg.window.aggregations  # .window keeps the aggregates already given
    ses = py.window(lw.session(gap="30s")).config.window
    assert (ses.type, ses.gap_us) == ("session", 30_000_000)
    wm = py.watermark(lw.adaptive(target_quantile=0.99, over="10m", max_lateness="2m")).config.watermark
    assert wm.max_future_skew_us == 60_000_000  # .clip survives a new strategy
    assert "adaptive" in lw.Pipeline.to_toml(py.watermark(lw.adaptive(over="10m")))
    every = py.trigger(early="5s").config.early
    assert every is not None and every.every_us == 5_000_000


def test_a_kafka_dataframe_gives_its_partition_offset_and_timestamp_by_default(tmp_path):
    df = DataFrame(*KAFKA_COLUMNS, "amount", "event_time")
    src = lw.stream(df, event_time="event_time").window(lw.tumbling("1m")).write(lw.parquet(tmp_path)).config.source
    assert (src.partition, src.offset, src.arrival_time) == ("partition", "offset", "timestamp")
    src = (lw.stream(df, event_time="event_time", arrival=None, offset="amount").window(lw.tumbling("1m"))
           .write(lw.parquet(tmp_path)).config.source)
    assert (src.partition, src.offset, src.arrival_time) == ("partition", "amount", None)
    plain = lw.stream(DataFrame("timestamp", "value"), event_time="timestamp")  # a rate source: no roles taken
    assert plain.data["source"] == {"format": "dataframe", "event_time": "timestamp", "time_unit": "s"}


def test_a_kafka_dataframe_runs_as_a_topic_only_with_the_records_columns_in_their_roles(tmp_path):
    from lowwater.api.stream import kafka_roles

    def source(df: DataFrame, **roles: str | None):  # noqa: ANN202
        return lw.stream(df, event_time="event_time", **roles).window(lw.tumbling("1m")).write(
            lw.parquet(tmp_path)).config.source

    df = DataFrame(*KAFKA_COLUMNS, "amount", "event_time")
    assert kafka_roles(source(df), df.columns)
    assert not kafka_roles(source(df, partition="key"), df.columns)  # a partition of its own: any DataFrame
    assert not kafka_roles(source(df, arrival=None), df.columns)
    no_topic = DataFrame(*(c for c in KAFKA_COLUMNS if c != "topic"), "event_time")
    assert not kafka_roles(source(no_topic), no_topic.columns)  # no topic: no topic-partition lanes


@pytest.mark.parametrize(("build", "error", "names"), [
    (lambda p: lw.tumbling("1 fortnight"), ValueError, "tumbling(size=...)"),
    (lambda p: lw.tumbling(0), ValueError, "tumbling(size=...)"),
    (lambda p: lw.hopping("1m", "7s"), ValueError, "hopping(slide=...)"),
    (lambda p: lw.session(gap=[1]), TypeError, "session(gap=...)"),
    (lambda p: lw.bounded("-5s"), ValueError, "bounded(max_out_of_orderness=...)"),
    (lambda p: lw.bounded("5s").with_idleness("soon"), ValueError, "with_idleness(timeout=...)"),
    (lambda p: lw.adaptive(target_quantile="high"), TypeError, "adaptive(target_quantile=...)"),
    (lambda p: lw.adaptive(target_quantile=1.5), ValueError, "target_quantile"),
    (lambda p: lw.punctuated(marker=""), TypeError, "punctuated(marker=...)"),
    (lambda p: lw.stream(DataFrame("a"), event_time="ts"), ValueError, "stream(event_time='ts')"),
    (lambda p: lw.stream(DataFrame("ts"), event_time="ts", partition="p"), ValueError, "stream(partition='p')"),
    (lambda p: lw.stream(DataFrame("ts", streaming=False), event_time="ts"), TypeError, "stream(df)"),
    (lambda p: lw.stream([1, 2], event_time="ts"), TypeError, "stream(df)"),
    (lambda p: lw.stream(DataFrame("ts"), event_time="ts", time_unit="ns"), ValueError, "stream(time_unit=...)"),
    (lambda p: p.watermark("5s"), TypeError, "watermark(strategy)"),
    (lambda p: p.window("1m"), TypeError, "window(shape)"),
    (lambda p: p.window(lw.tumbling("1m"), key=3), TypeError, "window(key=...)"),
    (lambda p: p.agg(p99="percentile(amount, 0.99)"), ValueError, "agg(p99=...)"),
    (lambda p: p.agg(n="count(*)"), ValueError, "agg(n=...)"),
    (lambda p: p.agg(n=42), TypeError, "agg(n=...)"),
    (lambda p: p.agg(), ValueError, "agg(**aggregates)"),
    (lambda p: p.lateness(grace="a while"), ValueError, "lateness(grace=...)"),
    (lambda p: p.lateness(policy="keep"), ValueError, "lateness(policy=...)"),
    (lambda p: p.accumulate("sideways"), ValueError, "accumulate(mode=...)"),
    (lambda p: p.trigger(early="never"), ValueError, "trigger(early=...)"),
    (lambda p: p.clip(max_future_skew="later"), ValueError, "clip(max_future_skew=...)"),
    (lambda p: p.write(), ValueError, "write(*sinks)"),
    (lambda p: p.write("out"), TypeError, "write(*sinks)"),
    (lambda p: p.write(lw.parquet("a"), lw.delta("b")), ValueError, "write(*sinks)"),
    (lambda p: p.write(lw.delta("a"), lw.postgres("postgresql://h/db", path="a")), ValueError, "write(*sinks)"),
    (lambda p: lw.postgres("mysql://h/db"), ValueError, "postgres(url=...)"),
    (lambda p: lw.postgres("postgresql://h/db", results="r"), ValueError, "postgres(results=...)"),
    (lambda p: lw.foreach_batch("print"), TypeError, "foreach_batch(fn)"),
    (lambda p: lw.parquet(None), TypeError, "parquet(path=...)"),
    # checks that need the source's columns: the file's parser, its one line naming the key
    (lambda p: lw.stream(DataFrame("ts"), event_time="ts").watermark(lw.bounded("1s").with_idleness("1m"))
     .window(lw.tumbling("1m")).write(lw.parquet("o")).config, ValueError, "watermark.idle_timeout"),
    (lambda p: p.window(lw.tumbling("1m"), key="count").config, ValueError, "window.key"),
    (lambda p: lw.stream(DataFrame("ts"), event_time="ts").write(lw.parquet("o")).config, ValueError, "window"),
    (lambda p: lw.stream(DataFrame("ts"), event_time="ts").window(lw.tumbling("1m")).config, ValueError, "output"),
])
def test_a_bad_argument_is_one_error_naming_it(build, error, names):
    p = lw.stream(DataFrame(*DEMO_COLUMNS), event_time="event_time").window(lw.tumbling("1m")).write(lw.parquet("o"))
    with pytest.raises(error) as e:
        build(p)
    assert names in str(e.value)
    assert "\n" not in str(e.value)


def test_from_toml_needs_the_dataframe_of_a_dataframe_source_and_refuses_one_for_files(tmp_path):
    df = DataFrame(*DEMO_COLUMNS)
    path = tmp_path / "p.toml"
    path.write_text(demo_pipeline(df, tmp_path / "out").to_toml())
    with pytest.raises(ValueError, match=r"from_toml\(df=\.\.\.\).*pass the streaming DataFrame"):
        lw.Pipeline.from_toml(path)
    (tmp_path / "demo.toml").write_text(_CONFIG.format(partitions="0"))
    with pytest.raises(ValueError, match=r"from_toml\(df=\.\.\.\).*reads jsonl"):
        lw.Pipeline.from_toml(tmp_path / "demo.toml", df=df)
    with pytest.raises(ValueError, match="not found"):
        lw.Pipeline.from_toml(tmp_path / "missing.toml")
    # relative paths resolve against the file's directory, as for lowwater run, and to_toml writes them absolute
    files = lw.Pipeline.from_toml(tmp_path / "demo.toml", overrides=["source.path=elsewhere"])
    assert files.config.source.path == str(tmp_path / "elsewhere")
    assert str(tmp_path / "elsewhere") in files.to_toml()


def test_lowwater_run_refuses_a_dataframe_source_in_one_line(tmp_path):
    cfg = demo_pipeline(DataFrame(*DEMO_COLUMNS), tmp_path / "out").config
    with pytest.raises(ConfigError, match=r"source.format: \"dataframe\" is a streaming DataFrame handed in from Py"):
        check_source_path(cfg.source, cfg.base_dir)
    for key, value in (("path", "landing"), ("schema", "a INT")):
        with pytest.raises(ConfigError, match=rf"source.{key}: not for format = \"dataframe\""):
            parse_config({**cfg_dict(tmp_path), "source": {"format": "dataframe", "event_time": "t", key: value}})


def cfg_dict(tmp_path: Path) -> dict:
    return tomllib.loads(demo_pipeline(DataFrame(*DEMO_COLUMNS), tmp_path / "out").to_toml())


def test_import_lowwater_does_not_import_pyspark():
    code = ("import sys, lowwater as lw; lw.stream; lw.Pipeline; "
            "sys.exit(1 if any(m == 'pyspark' or m.startswith('pyspark.') for m in sys.modules) else 0)")
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_a_postgres_password_is_not_in_the_reprs(tmp_path):
    sink = lw.postgres("postgresql://me:s3cret@db:5432/x", path=tmp_path, results_table="r")
    p = demo_pipeline(DataFrame(*DEMO_COLUMNS), tmp_path).write(lw.parquet(tmp_path), sink)
    assert p.config.output.postgres is not None and p.config.output.postgres.results_table == "r"
    assert "s3cret" not in repr(sink) and "s3cret" not in repr(p) and "window: type='tumbling'" in repr(p)


def test_a_union_of_named_streams_is_source_tables_each_with_its_watermark(tmp_path):
    radar, cdc = DataFrame("sensor_ts", "received_at", "antenna", "key", "v"), DataFrame(
        "commit_ts", "ingested_at", "shard", "key", "v", "is_marker")
    a = (lw.stream(radar, event_time="sensor_ts", partition="antenna", arrival="received_at", time_unit="ms",
                   name="radar").watermark(lw.bounded("100ms")).clip(max_future_skew="1m"))
    b = lw.stream(cdc, event_time="commit_ts", partition="shard", arrival="ingested_at",
                  name="cdc").watermark(lw.punctuated(marker="is_marker"))
    p = a.union(b).window(lw.tumbling("10s"), key="key").agg(total="sum(v)").write(lw.parquet(tmp_path / "out"))
    cfg = p.config
    assert [s.name for s in cfg.sources] == ["radar", "cdc"] and cfg.named_sources and cfg.multi_source
    assert cfg.strategies["radar"].max_out_of_orderness_us == 100_000
    assert cfg.strategies["radar"].max_future_skew_us == 60_000_000
    assert cfg.strategies["cdc"].marker == "is_marker"
    assert p.frames(cfg) == {"radar": radar, "cdc": cdc}
    path = tmp_path / "u.toml"
    path.write_text(p.to_toml())
    assert "[[source]]" in path.read_text()
    back = lw.Pipeline.from_toml(path, df={"radar": radar, "cdc": cdc})
    assert replace(back.config, base_dir=".") == replace(cfg, base_dir=".")
    with pytest.raises(ValueError, match=r"from_toml\(df=\.\.\.\): .*several DataFrame sources"):
        lw.Pipeline.from_toml(path, df=radar)
    with pytest.raises(ValueError, match=r"from_toml\(df=\.\.\.\): expected a DataFrame for each of radar, cdc"):
        lw.Pipeline.from_toml(path, df={"radar": radar})
    with pytest.raises(ValueError, match=r"union\(\.\.\.\): name each stream"):
        lw.stream(radar, event_time="sensor_ts").union(b)
    with pytest.raises(ValueError, match=r"union\(\*others\): give the window"):
        a.union(b.window(lw.tumbling("1s")))
    with pytest.raises(ValueError, match=r"watermark\(strategy\): a union's streams each have their own"):
        a.union(b).watermark(lw.bounded("1s"))
    with pytest.raises(ValueError, match=r"source.cdc.arrival_time: with several sources every source needs"):
        _ = a.union(lw.stream(cdc, event_time="commit_ts", arrival=None, name="cdc")).window(
            lw.tumbling("1s")).write(lw.parquet(tmp_path)).config
    with pytest.raises(ValueError, match=r"stream\(name=\.\.\.\)"):
        lw.stream(radar, event_time="sensor_ts", name="a b")


def test_lowwater_run_on_a_dataframe_toml_is_one_line_and_exit_2_before_spark(tmp_path):
    (tmp_path / "p.toml").write_text(demo_pipeline(DataFrame(*DEMO_COLUMNS), tmp_path / "out").to_toml())
    proc = subprocess.run([sys.executable, "-m", "lowwater.cli", "run", "p.toml", "--once"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.startswith('error: source.format: "dataframe" is a streaming DataFrame handed in from Python')
    assert len(proc.stderr.strip().splitlines()) == 1


def join_sides() -> tuple[lw.Pipeline, lw.Pipeline]:
    """tests/scenarios/join/bounds_and_outer.yaml's two sources as named streams."""
    cols = ("partition", "event_time", "arrival_time", "user")
    return tuple(lw.stream(DataFrame(*cols, extra), event_time="event_time", partition="partition",
                           arrival="arrival_time", name=name).watermark(lw.bounded("5s"))
                 for name, extra in (("clicks", "click"), ("orders", "amount")))


def test_an_interval_join_is_the_toml_files_join_table(tmp_path):
    clicks, orders = join_sides()
    p = clicks.interval_join(orders, on="user", between=("0s", "10 seconds"), how="left_outer",
                             columns={"left": ["click"], "right": ["amount"]}).write(lw.parquet(tmp_path / "out"))
    scenario = yaml.safe_load((SCENARIOS / "join" / "bounds_and_outer.yaml").read_text())["config"]
    want = parse_config({**scenario, "late": {"policy": "side_output"}}, base_dir=tmp_path)
    got = p.config
    assert got.join == want.join and got.window == want.window
    assert [s.watermark for s in got.sources] == [s.watermark for s in want.sources]
    assert p.data["join"]["lower"] == "0s" and p.data["join"]["upper"] == "10s"
    assert tomllib.loads(p.to_toml())["join"] == p.data["join"]  # the file's [join] table
    back = clicks.interval_join(orders, on=["user"], between=("-5s", timedelta(minutes=1))).write(
        lw.parquet(tmp_path)).config.join
    assert back is not None and (back.bounds.lower_us, back.bounds.upper_us) == (-5_000_000, 60_000_000)


@pytest.mark.parametrize(("build", "error", "names"), [
    (lambda a, b: a.interval_join(b, on="user", between="10s"), TypeError, "interval_join(between=...)"),
    (lambda a, b: a.interval_join(b, on=[], between=("0s", "1s")), ValueError, "interval_join(on=...)"),
    (lambda a, b: a.interval_join(b, on="user", between=("0s", "soon")), ValueError, "(..., upper)"),
    (lambda a, b: a.interval_join(b, on="user", between=("0s", "1s"), how="full"), ValueError, "interval_join(how"),
    (lambda a, b: a.interval_join(b, on="user", between=("0s", "1s"), columns={"middle": []}), ValueError,
     "interval_join(columns=...)"),
    (lambda a, b: a.interval_join(b.write(lw.parquet("o")), on="user", between=("0s", "1s")), ValueError,
     "interval_join(other)"),
    (lambda a, b: a.interval_join(lw.stream(DataFrame("t", "user"), event_time="t"), on="user",
                                  between=("0s", "1s")), ValueError, "interval_join(other)"),
    # checks across the two sides: the file's parser, its one line naming the key
    (lambda a, b: a.interval_join(b, on="user", between=("5s", "1s")).write(lw.parquet("o")).config, ValueError,
     "join.lower"),
    (lambda a, b: a.interval_join(b, on="user", between=("0s", "1s")).window(lw.session(gap="1m"))
     .write(lw.parquet("o")).config, ValueError, "after a [join] is not supported"),
])
def test_a_bad_join_argument_is_one_error_naming_it(build, error, names):
    with pytest.raises(error) as e:
        build(*join_sides())
    assert names in str(e.value) and "\n" not in str(e.value)


def test_whatif_and_reconcile_refuse_a_bad_argument_in_one_line_before_spark(tmp_path):
    (tmp_path / "demo.toml").write_text(_CONFIG.format(partitions="0"))
    (tmp_path / "landing").mkdir()
    (tmp_path / "landing" / "part-0.jsonl").write_text(
        '{"partition": 0, "offset": 0, "event_time": 1.0, "arrival_time": 1.0, "key": "a", "amount": 1.0, '
        '"currency": "EUR"}\n')
    files = lw.Pipeline.from_toml(tmp_path / "demo.toml")
    py = demo_pipeline(DataFrame(*DEMO_COLUMNS), tmp_path / "out")
    (tmp_path / "kafka.toml").write_text('[source]\nformat = "kafka"\nbootstrap_servers = "b:9092"\ntopic = "t"\n'
                                         'schema = "a DOUBLE"\nevent_time = "a"\n[window]\ntype = "tumbling"\n'
                                         'size = "10s"\n[output]\npath = "out"\n')
    kafka = lw.Pipeline.from_toml(tmp_path / "kafka.toml")
    cases = [
        (lambda: lw.whatif("demo.toml"), TypeError, "whatif(pipeline)"),
        (lambda: lw.whatif(py), ValueError, "whatif(log=...): a DataFrame source has no log"),
        (lambda: lw.whatif(files, lateness="soon"), ValueError, "whatif(lateness=...)"),
        (lambda: lw.whatif(files, lateness=[]), ValueError, "whatif(lateness=...)"),
        (lambda: lw.whatif(files, grace=["0s", "-1s"]), ValueError, "whatif(grace=...)"),
        (lambda: lw.whatif(files, target_completeness=99.9), ValueError, "(99.9% is 0.999)"),
        (lambda: lw.whatif(files, latency_budget="0s"), ValueError, "whatif(latency_budget=...)"),
        (lambda: lw.whatif(files, compare=[42]), TypeError, "whatif(compare=...)"),
        (lambda: lw.whatif(files, compare=["sideways 3s"]), ValueError, "whatif(compare=...)"),
        (lambda: lw.whatif(files, log=tmp_path / "nowhere"), ValueError, "INPUT"),
        (lambda: lw.whatif(py, log=tmp_path / "landing", log_format="xml"), ValueError, "source.format"),
        (lambda: lw.whatif(kafka), ValueError, "whatif(pipeline): a Kafka source is not replayed"),
        (lambda: lw.reconcile(py), ValueError, "reconcile: a DataFrame source has no log to recompute from"),
        (lambda: lw.reconcile(files, since="the other day"), ValueError, "reconcile(since=...): 'the other day'"),
        (lambda: lw.reconcile(files, apply="yes"), TypeError, "reconcile(apply=...)"),
        (lambda: lw.reconcile(files.window(lw.tumbling("1m"), key="nokey")), ValueError, "nokey"),
    ]
    for build, error, text in cases:
        with pytest.raises(error) as e:
            build()
        assert text in str(e.value) and "\n" not in str(e.value), (text, str(e.value))



def test_a_window_after_an_interval_join_is_the_toml_files_join_and_window(tmp_path):
    clicks, orders = join_sides()
    columns = {"left": ["click"], "right": ["amount"]}
    p = (clicks.interval_join(orders, on="user", between=("0s", "10s"), columns=columns)
         .window(lw.tumbling("1 minute"), key="user").write(lw.parquet(tmp_path / "out")))
    cfg = p.config
    assert cfg.join is not None and cfg.join.window is not None
    assert cfg.join.window.type == "tumbling" and cfg.join.window.size_us == 60_000_000
    (tmp_path / "p.toml").write_text(p.to_toml())
    assert load_config(tmp_path / "p.toml").join == cfg.join  # the file's [join] and [window], read back


def test_min_by_and_max_by_of_the_event_time_are_first_and_last_by_time(tmp_path):
    """``F.min_by(c, ts)`` ordered by the event-time column is kept as ``first_by_time(c)`` (ADR 0034); by another
    column it is refused in one line: ties of it would be broken by the order rows reach a task."""
    p = lw.stream(DataFrame(*DEMO_COLUMNS), event_time="event_time").window(lw.tumbling("1m"), key="key")
    cfg = p.agg(first="min_by(amount, event_time)", last="MAX_BY(amount, event_time)").write(
        lw.parquet(tmp_path / "o")).config
    assert [(a.func, a.column) for a in cfg.window.aggregations] == [("first_by_time", "amount"),
                                                                      ("last_by_time", "amount")]
    with pytest.raises(ValueError, match=r"^agg\(f=\.\.\.\): min_by\(amount, offset\) cannot be kept as a mergeable "
                                         r"partial: ties of offset are broken by the order rows reach a task") as e:
        p.agg(f="min_by(amount, offset)")
    assert "\n" not in str(e.value) and "(event_time)" in str(e.value)
    ses = lw.stream(DataFrame(*DEMO_COLUMNS), event_time="event_time").window(lw.session(gap="5s")).agg(
        f="min_by(amount, event_time)").write(lw.parquet(tmp_path / "o")).config  # sessions keep it (ADR 0038)
    assert [(a.func, a.column) for a in ses.window.aggregations] == [("first_by_time", "amount")]


def test_a_percentile_keeps_its_fraction_through_the_file(tmp_path):
    p = (lw.stream(DataFrame(*DEMO_COLUMNS), event_time="event_time").window(lw.tumbling("1m"), key="key")
         .agg(med="approx_percentile(amount, 0.5)", d="approx_count_distinct(amount)")
         .write(lw.parquet(tmp_path / "o")))
    assert [(a.func, a.fraction) for a in p.config.window.aggregations] == [("approx_percentile", 0.5),
                                                                            ("approx_count_distinct", None)]
    (tmp_path / "p.toml").write_text(p.to_toml())
    df = DataFrame(*DEMO_COLUMNS)
    assert lw.Pipeline.from_toml(tmp_path / "p.toml", df=df).config.window == p.config.window
    with pytest.raises(ValueError, match=r"^agg\(med=\.\.\.\): "):
        p.agg(med="approx_percentile(amount, 2)")

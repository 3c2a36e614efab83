"""``lowwater whatif`` / ``delays`` INPUT and flags, checked before Spark starts (typer's runner, in process)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from lowwater.cli import _input_format, _replay_config, app

runner = CliRunner()


def invoke(*args: str):
    result = runner.invoke(app, list(args))
    lines = result.stderr.strip().splitlines()
    return result.exit_code, lines


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("events.csv", "csv"),
        ("events.JSONL", "jsonl"),  # case-insensitive
        ("events.ndjson", "jsonl"),
        ("events.parquet", "parquet"),
        ("events.txt", None),  # not a format's extension: --format is needed
    ],
)
def test_format_from_a_file_extension(tmp_path, name, expected):
    (tmp_path / name).write_text("x\n")
    assert _input_format(str(tmp_path / name)) == expected


def test_format_from_a_directory_or_a_glob(tmp_path):
    for i in range(2):
        (tmp_path / f"part-{i}.csv").write_text("x\n")
    (tmp_path / "_SUCCESS").write_text("")  # markers do not count
    assert _input_format(str(tmp_path)) == "csv"
    assert _input_format(str(tmp_path / "*.csv")) == "csv"
    (tmp_path / "more.jsonl").write_text("x\n")
    assert _input_format(str(tmp_path)) is None  # mixed: the jsonl default (or --format) decides


def test_a_single_file_is_a_log(tmp_path):
    f = tmp_path / "events.csv"
    f.write_text("event_time,key\n1,a\n")
    cfg = _replay_config(str(f), None, None, "event_time", None, None, None, "key", None, None, None, None, None)
    assert (cfg.source.format, cfg.source.path) == ("csv", str(f))
    forced = _replay_config(str(f), None, "jsonl", "event_time", None, None, None, None, None, None, None, None, None)
    assert forced.source.format == "jsonl"  # --format wins over the extension


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--target-completeness", "99.9"], "error: --target-completeness 99.9: expected a fraction in (0, 1] "
                                            "(99.9% is 0.999)"),
        (["--target-completeness", "0"], "error: --target-completeness 0: expected a fraction in (0, 1]"),
        (["--latency-budget", "0s"], "error: --latency-budget 0s: expected a positive duration"),
    ],
)
def test_bad_whatif_flags_are_one_line_and_exit_2(tmp_path, args, message):
    f = tmp_path / "events.jsonl"
    f.write_text('{"event_time": 1}\n')
    code, lines = invoke("whatif", str(f), "--event-time", "event_time", *args)
    assert (code, lines) == (2, [message])


@pytest.mark.parametrize("command", ["whatif", "delays"])
def test_bad_inputs_are_one_line_and_exit_2(tmp_path, command):
    (tmp_path / "events.txt").write_text("x\n")
    cases = {
        str(tmp_path / "nope"): f"error: INPUT {tmp_path / 'nope'}: no such file or directory",
        str(tmp_path / "*.csv"): f"error: INPUT {tmp_path / '*.csv'}: the pattern matches no files",
        str(tmp_path / "events.txt"): f"error: INPUT {tmp_path / 'events.txt'}: cannot tell its format from the "
                                      "extension; pass --format",
    }
    for path, message in cases.items():
        code, lines = invoke(command, path, "--event-time", "event_time", "--arrival-time", "a")
        assert (code, lines) == (2, [message]), path


NAMED = """
[[source]]
name = "{name}"
path = "{path}"
event_time = "event_time"
arrival_time = "arrival_time"
"""


def test_one_source_table_takes_input_or_reads_its_configured_path(tmp_path):
    (tmp_path / "landing").mkdir()
    (tmp_path / "landing" / "part-0.csv").write_text("event_time,arrival_time\n1,1\n")
    other = tmp_path / "events.jsonl"
    other.write_text('{"event_time": 1, "arrival_time": 1}\n')
    config = tmp_path / "pipeline.toml"
    config.write_text(NAMED.format(name="cdc", path="landing"))
    args = (None, None, None, None, None, None, None, None, None, None, None)
    own = _replay_config(None, config, *args)
    assert (own.source.name, own.source.path, own.source.format) == ("cdc", str(tmp_path / "landing"), "csv")
    given = _replay_config(str(other), config, *args)
    assert (given.source.path, given.source.format) == (str(other), "jsonl")  # INPUT replaces the table's path


def test_input_is_required_without_config():
    code, lines = invoke("whatif", "--event-time", "event_time")
    assert (code, lines) == (2, ["error: INPUT is required (or --config with a source path)"])


def test_several_sources_read_their_own_paths_and_delays_refuses_them(tmp_path):
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    config = tmp_path / "pipeline.toml"
    config.write_text(NAMED.format(name="a", path="a") + NAMED.format(name="b", path="nope"))
    code, lines = invoke("whatif", "--config", str(config))
    assert (code, lines) == (2, [f"error: source.b.path {tmp_path / 'nope'}: no such file or directory"])
    code, lines = invoke("delays", str(tmp_path / "a"), "--config", str(config))
    assert (code, lines) == (2, ["error: --config has 2 sources (a, b); this command reads one source only"])


KAFKA_CONFIG = """
[source]
format = "kafka"
bootstrap_servers = "broker1:9092"
topics = ["payments", "refunds"]
max_offsets_per_trigger = 100
schema = "event_time DOUBLE, key STRING, amount DOUBLE"
event_time = "event_time"

[watermark]
max_out_of_orderness = "3s"
partitions = ["payments-0", "refunds-0"]

[window]
type = "tumbling"
size = "1m"
key = ["key"]
aggregations = { total = "sum(amount)" }

[output]
path = "out"
"""


def test_a_kafka_config_without_a_snapshot_is_one_line_that_says_what_to_pass(tmp_path):
    cfg = tmp_path / "pipeline.toml"
    cfg.write_text(KAFKA_CONFIG)
    code, lines = invoke("whatif", "--config", str(cfg))
    assert (code, lines) == (2, [
        'error: source.format = "kafka": a replay reads files, not the topic: pass a snapshot of it as INPUT '
        "(rows of the value's fields and the record's kafka_partition, kafka_offset and kafka_timestamp columns, "
        "e.g. lowwater whatif snapshot/ --config ...)"])


def test_a_kafka_config_replays_a_snapshot_of_its_topic_with_the_records_columns(tmp_path):
    cfg = tmp_path / "pipeline.toml"
    cfg.write_text(KAFKA_CONFIG)
    (tmp_path / "snapshot").mkdir()
    (tmp_path / "snapshot" / "part-0.jsonl").write_text(
        '{"event_time": 1.5, "key": "a", "amount": 2.0, "kafka_topic": "payments", "kafka_partition": 0, '
        '"kafka_offset": 0, "kafka_timestamp": "2026-11-27T00:00:02Z"}\n')
    replay = _replay_config(str(tmp_path / "snapshot"), cfg, None, None, None, None, None, None, None, None, None,
                            None, None)
    src = replay.source
    assert (src.format, src.path, src.kafka) == ("jsonl", str(tmp_path / "snapshot"), None)
    assert (src.event_time, src.partition, src.offset, src.arrival_time) == (
        "event_time", "kafka_partition", "kafka_offset", "kafka_timestamp")
    assert src.watermark.max_out_of_orderness_us == 3_000_000
    # Several topics: the engine's generators are per topic-partition, so are the replay's (ADR 0043)
    assert src.topic_column == "kafka_topic" and src.watermark.declared_partitions == ("payments-0", "refunds-0")
    assert replay.window.size_us == 60_000_000 and replay.window.key == ("key",)
    flagged = _replay_config(str(tmp_path / "snapshot"), cfg, None, None, None, "p", None, None, None, None, None,
                             None, None)
    assert flagged.source.partition == "p"  # a flag still names another column
    one = tmp_path / "one.toml"
    one.write_text(KAFKA_CONFIG.replace('topics = ["payments", "refunds"]', 'topic = "payments"')
                   .replace('["payments-0", "refunds-0"]', "[0, 1]"))
    single = _replay_config(str(tmp_path / "snapshot"), one, *[None] * 11).source
    assert single.topic_column is None and single.watermark.declared_partitions == ("0", "1")  # numbers, as ever
    cfg.write_text(KAFKA_CONFIG.replace('["payments-0", "refunds-0"]', "[0, 1]"))
    code, lines = invoke("whatif", str(tmp_path / "snapshot"), "--config", str(cfg))
    assert (code, lines) == (2, [
        "error: watermark.partitions: '0' is not a topic-partition; source reads several topics (column "
        "kafka_topic), each with its own partitions: name them <topic>-<partition>, e.g. '<topic>-0'"])

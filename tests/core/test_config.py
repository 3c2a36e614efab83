"""Configuration: the issue's example works as written; every error names its key."""

from __future__ import annotations

import pytest

from lowwater.config import ConfigError, load_config, parse_override
from lowwater.time import to_duration_us

EXAMPLE = """
[source]
format = "jsonl"              # jsonl | csv | parquet
path = "landing/payments"     # a directory; files are read in name order
partition = "partition"       # column with the source partition
offset = "offset"             # optional: order within a partition
arrival_time = "arrival_time" # optional
event_time = "event_time"
time_unit = "s"               # for numeric time columns: s | ms | us
max_files_per_batch = 1

[watermark]
max_out_of_orderness = "3s"
idle_timeout = "1m"           # optional
partitions = [0, 1, 2, 3]     # optional: declared partitions

[window]
type = "tumbling"             # tumbling | hopping (with slide = "5s")
size = "10s"
allowed_lateness = "0s"
key = ["key"]                 # optional: no key = one global group
aggregations = { total = "sum(amount)", biggest = "max(amount)" }   # count is always there, as `count`

[late]
policy = "side_output"        # drop | side_output

[output]
path = "out"                  # checkpoint under it unless `checkpoint` is given

[spark]
master = "local[*]"           # and [spark.conf] for any spark.* setting
"""


def write(tmp_path, text):
    p = tmp_path / "p.toml"
    p.write_text(text)
    return p


def test_the_issue_example_parses(tmp_path):
    cfg = load_config(write(tmp_path, EXAMPLE))
    assert cfg.source.path == str(tmp_path / "landing/payments")
    assert cfg.watermark.max_out_of_orderness_us == 3_000_000
    assert cfg.watermark.idle_timeout_us == 60_000_000
    assert cfg.watermark.declared_partitions == ("0", "1", "2", "3")
    assert cfg.window.size_us == 10_000_000 and cfg.window.key == ("key",)
    assert [a.name for a in cfg.window.aggregations] == ["total", "biggest"]
    assert cfg.output.checkpoint == str(tmp_path / "out") + "/_checkpoint"


def test_overrides(tmp_path):
    cfg = load_config(write(tmp_path, EXAMPLE), ["spark.master=local[2]", "window.size=\"1m\""])
    assert cfg.spark.master == "local[2]" and cfg.window.size_us == 60_000_000
    assert parse_override("a.b=3") == (["a", "b"], 3)


def test_spark_conf_dotted_keys(tmp_path):
    cfg = load_config(write(tmp_path, EXAMPLE + "\n[spark.conf]\nspark.sql.shuffle.partitions = 8\n"))
    assert cfg.spark.conf == {"spark.sql.shuffle.partitions": "8"}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (("[late]", "[late]\ncolour = 1"), "unknown key late.colour"),
        (('max_out_of_orderness = "3s"', 'max_out_of_orderness = "3 parsecs"'), "watermark.max_out_of_orderness"),
        (('format = "jsonl"', 'format = "xml"'), "source.format"),
        (('type = "tumbling"', 'type = "hopping"'), "window.slide is required"),
        (('policy = "side_output"', 'policy = "keep"'), "late.policy"),
        (('total = "sum(amount)"', 'total = "median(amount)"'), "window.aggregations.total"),
        (("[spark]", "[sparks]"), "unknown section [sparks]"),
        (('arrival_time = "arrival_time" # optional', ""), "watermark.idle_timeout: needs source.arrival_time"),
    ],
)
def test_errors_name_the_key(tmp_path, change, message):
    old, new = change
    assert old in EXAMPLE
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        load_config(write(tmp_path, EXAMPLE.replace(old, new, 1)))


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "nope.toml")


@pytest.mark.parametrize(
    ("text", "us"),
    [
        ("10s", 10_000_000),
        ("250ms", 250_000),
        ("5m", 300_000_000),
        ("1h", 3_600_000_000),
        ("1.5s", 1_500_000),
        (2, 2_000_000),
    ],
)
def test_durations(text, us):
    assert to_duration_us(text) == us


@pytest.mark.parametrize("bad", ["10", "ten seconds", "-1s", "1y"])
def test_bad_durations(bad):
    with pytest.raises(ValueError):
        to_duration_us(bad)


SESSION = EXAMPLE.replace('type = "tumbling"', 'gap = "30s"\ntype = "session"').replace('size = "10s"\n', "")


def test_session_window_and_early_trigger(tmp_path):
    cfg = load_config(write(tmp_path, SESSION + '\n[trigger]\nearly = "every 1000 rows"\n'))
    assert cfg.window.is_session and cfg.window.gap_us == 30_000_000
    assert cfg.window.assigner().gap_us == 30_000_000
    assert cfg.early is not None and cfg.early.every_rows == 1000
    cfg = load_config(write(tmp_path, EXAMPLE + '\n[trigger]\nearly = "every 5s"\n'))
    assert cfg.early is not None and cfg.early.every_us == 5_000_000 and not cfg.window.is_session
    assert load_config(write(tmp_path, EXAMPLE)).early is None
    assert load_config(write(tmp_path, EXAMPLE)).trigger_interval_us is None
    cfg = load_config(write(tmp_path, EXAMPLE + '\n[trigger]\ninterval = "2s"\n'))
    assert cfg.trigger_interval_us == 2_000_000 and cfg.early is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (SESSION.replace('gap = "30s"\n', ""), "window.gap is required"),
        (SESSION.replace('gap = "30s"', 'gap = "30s"\nsize = "10s"'), "window.size: not for type"),
        (SESSION.replace('gap = "30s"', 'gap = "0s"'), "window.gap: must be positive"),
        (EXAMPLE.replace('size = "10s"', 'size = "10s"\ngap = "5s"'), "window.gap: only for"),
        (EXAMPLE + '\n[trigger]\nearly = "sometimes"\n', "trigger.early"),
        (EXAMPLE + '\n[trigger]\nearly = "every 0 rows"\n', "trigger.early"),
        (EXAMPLE + '\n[trigger]\nlate = "every 1 rows"\n', "unknown key trigger.late"),
        (EXAMPLE + '\n[trigger]\ninterval = "soon"\n', "trigger.interval"),
        (EXAMPLE + '\n[trigger]\ninterval = "0s"\n', "trigger.interval: must be at least 1ms"),
    ],
)
def test_session_and_trigger_errors(tmp_path, text, message):
    with pytest.raises(ConfigError, match=message):
        load_config(write(tmp_path, text))


@pytest.mark.parametrize(
    ("typical_us", "unit", "fits"),
    [
        (1.7e15, "s", None),  # epoch seconds read as seconds: 2023
        (31e6, "s", None),  # 31 s after the epoch (relative test times): no unit puts it in 2000-2100
        (31e9, "ms", None),  # 31,000 s read as ms: still 1970 in every unit
        (1.7e18, "s", "ms"),  # epoch ms read as seconds: year ~55,900
        (1.7e18, "ms", "us"),  # epoch µs read as ms
        (1.7e12, "ms", "s"),  # epoch seconds read as ms: January 1970, as seconds 2023
        (1.7e21, "s", "us"),  # epoch µs read as seconds (overflows int64 µs; judged from the raw value)
        (1.7e24, "s", "none"),  # epoch ns: after 2200 in every unit
    ],
)
def test_misread_time_unit_names_the_unit_that_fits(typical_us, unit, fits):
    from lowwater.time import misread_time_unit

    problem = misread_time_unit(typical_us, unit)
    if fits is None:
        assert problem is None
    elif fits == "none":
        assert problem == "they fall after the year 2200 read as any of s, ms, us since the epoch"
    else:
        assert problem is not None and problem.endswith(f'set source.time_unit = "{fits}"')
        assert f'read as time_unit = "{unit}"' in problem and "2023-11-14" in problem

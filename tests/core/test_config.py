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


def test_shuffle_partitions_is_a_whole_number_or_one_line(tmp_path):
    assert load_config(write(tmp_path, EXAMPLE), ["spark.shuffle_partitions=8"]).spark.shuffle_partitions == 8
    for bad in ('"many"', "0", "1.5", "true"):
        with pytest.raises(ConfigError, match="spark.shuffle_partitions: expected a whole number, 1 or more"):
            load_config(write(tmp_path, EXAMPLE), [f"spark.shuffle_partitions={bad}"])


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
        # results/ would hold two columns of that name
        (('key = ["key"]', 'key = ["key", "kind"]'), "window.key: 'kind' is the name of a column results/ adds"),
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


# --- several sources ([[source]]), each with its own watermark table (issue 13) -------------------------------

THREE = """
[[source]]
name = "radar"
format = "jsonl"
path = "landing/radar"
partition = "antenna"
arrival_time = "received_at"
event_time = "sensor_ts"
time_unit = "ms"
watermark = { strategy = "bounded", max_out_of_orderness = "100ms", max_future_skew = "1m" }

[[source]]
name = "cdc"
format = "parquet"
path = "landing/orders_cdc"
partition = "shard"
arrival_time = "ingested_at"
event_time = "commit_ts"
watermark = { strategy = "punctuated", marker = "is_commit_marker" }

[[source]]
name = "mobile"
format = "jsonl"
path = "landing/mobile"
partition = "region"
arrival_time = "received_at"
event_time = "tapped_at"
watermark = MOBILE_WATERMARK

[window]
size = "10s"
key = ["user"]
aggregations = { total = "sum(amount)" }

[output]
path = "out"
""".replace("MOBILE_WATERMARK", '{ strategy = "adaptive", target_quantile = 0.999, over = "10m", min_lateness = "1s", '
                                'max_lateness = "2m", idle_timeout = "1m" }')  # one line in the TOML


def test_three_sources_each_with_its_strategy(tmp_path):
    cfg = load_config(write(tmp_path, THREE))
    assert cfg.named_sources and cfg.multi_source
    assert [s.name for s in cfg.sources] == ["radar", "cdc", "mobile"]
    radar, cdc, mobile = cfg.sources
    assert radar.path == str(tmp_path / "landing/radar") and radar.unit_us == 1_000 and radar.format == "jsonl"
    assert (radar.watermark.kind, radar.watermark.max_out_of_orderness_us) == ("bounded", 100_000)
    assert radar.watermark.max_future_skew_us == 60_000_000 and radar.marker is None
    assert cdc.watermark.kind == "punctuated" and cdc.marker == "is_commit_marker"
    assert cdc.required_columns == ["commit_ts", "shard", "ingested_at", "is_commit_marker"]
    assert mobile.watermark.kind == "adaptive" and mobile.watermark.idle_timeout_us == 60_000_000
    assert mobile.watermark.generator.over_us == 600_000_000
    assert mobile.watermark.generator.max_lateness_us == 120_000_000
    assert list(cfg.strategies) == ["radar", "cdc", "mobile"]
    assert cfg.strategies["cdc"] is cdc.watermark
    assert cfg.columns_for(cdc) == ["commit_ts", "shard", "ingested_at", "is_commit_marker", "user", "amount"]
    for one_source_only in ("source", "watermark", "required_columns"):
        with pytest.raises(ConfigError, match=r"has 3 sources \(radar, cdc, mobile\)"):
            getattr(cfg, one_source_only)


def test_one_source_keeps_its_keys_and_may_be_named(tmp_path):
    cfg = load_config(write(tmp_path, EXAMPLE))
    assert not cfg.named_sources and not cfg.multi_source
    assert cfg.source.name == "default" and cfg.strategies == {"default": cfg.watermark}
    assert cfg.required_columns == ["event_time", "partition", "offset", "arrival_time", "key", "amount"]
    cfg = load_config(write(tmp_path, EXAMPLE.replace("[source]", '[source]\nname = "payments"')))
    assert cfg.source.name == "payments" and not cfg.source.named
    cfg = load_config(write(tmp_path, EXAMPLE.replace('max_out_of_orderness = "3s"',
                                                      'strategy = "punctuated"\nmarker = "is_marker"')))
    assert cfg.watermark.kind == "punctuated" and cfg.source.marker == "is_marker"
    assert cfg.required_columns[-3:] == ["is_marker", "key", "amount"]


def _one_named(watermark: str, **columns: str) -> str:
    cols = {"path": "in", "event_time": "ts", "arrival_time": "at", "partition": "p", **columns}
    body = "\n".join(f'{k} = "{v}"' for k, v in cols.items() if v)
    return f'[[source]]\nname = "radar"\n{body}\nwatermark = {watermark}\n[window]\nsize = "1s"\n[output]\npath = "o"\n'


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (THREE.replace('name = "cdc"', 'name = "radar"'), "source.name: two sources are named 'radar'"),
        (THREE.replace('name = "cdc"\n', ""), r"source.name: required in every \[\[source\]\] table \(source number 2"),
        (THREE.replace('name = "cdc"', 'name = "c.d.c"'), "source.name: 'c.d.c' is not a plain name"),
        (EXAMPLE.replace("[source]", '[source]\nname = "pay ments"'), "source.name: 'pay ments' is not a plain name"),
        (THREE.replace('arrival_time = "ingested_at"\n', ""),
         "^source.cdc.arrival_time: with several sources every source needs arrival_time: arrival order across "
         r"sources is \(arrival_time, source, partition, offset\)$"),
        (_one_named('{ strategy = "adaptive", rows = 100 }', arrival_time=""),
         "^source.radar.watermark.strategy: adaptive needs source.radar.arrival_time"),
        (_one_named('{ idle_timeout = "1m" }', arrival_time=""),
         r"^source.radar.watermark.idle_timeout: needs source.radar.arrival_time \(idleness is measured on the"),
        (_one_named('{ max_future_skew = "1m" }', arrival_time=""),
         "^source.radar.watermark.max_future_skew: needs source.radar.arrival_time"),
        (_one_named('{ partitions = ["a"] }', partition=""),
         "^source.radar.watermark: partitions and idle_timeout need source.radar.partition"),
        (_one_named('{ strategy = "punctuated", marker = "ts" }'),
         "^source.radar.watermark.marker: 'ts' is source.radar.event_time"),
        (_one_named('{ strategy = "punctuated", marker = "m", colour = 1 }'),
         '^source.radar.watermark.colour: not a key of strategy = "punctuated"'),
        (_one_named('{ strategy = "bounded", max_lateness = "1m" }'),
         '^source.radar.watermark.max_lateness: not a key of strategy = "bounded"'),
        (_one_named('{ max_out_of_orderness = "soon" }'), "^source.radar.watermark.max_out_of_orderness: "),
        (_one_named('"5s"'), "^source.radar.watermark: expected a table"),
        (_one_named("{}").replace('path = "in"', 'path = "in"\ncolour = "red"'), "^unknown key source.radar.colour"),
        (_one_named("{}").replace('format = "jsonl"\n', "").replace('path = "in"', 'path = "in"\nformat = "xml"'),
         "^source.radar.format: 'xml' is not one of"),
        (_one_named("{}").replace('event_time = "ts"\n', ""), "^source.radar.event_time is required"),
        (THREE + '\n[watermark]\nmax_out_of_orderness = "1s"\n',
         r"^\[watermark\]: with \[\[source\]\] tables each source has its own watermark table"),
        (EXAMPLE.replace('max_out_of_orderness = "3s"', 'strategy = "adaptive"\nrows = 10').replace(
            'arrival_time = "arrival_time" # optional', "").replace('idle_timeout = "1m"', ""),
         "^watermark.strategy: adaptive needs source.arrival_time"),
        (EXAMPLE.replace('max_out_of_orderness = "3s"', 'strategy = "sloppy"'),
         "^watermark.strategy: 'sloppy' is not one of bounded, punctuated, adaptive"),
    ],
)
def test_source_errors_name_the_key(tmp_path, text, message):
    with pytest.raises(ConfigError, match=message):
        load_config(write(tmp_path, text))


def test_one_named_source_needs_no_arrival_time(tmp_path):
    cfg = load_config(write(tmp_path, _one_named("{}", arrival_time="")))
    assert cfg.named_sources and not cfg.multi_source and cfg.source.key("path") == "source.radar.path"
    assert cfg.watermark.max_out_of_orderness_us == 0 and cfg.watermark.kind == "bounded"


def test_set_a_named_sources_keys(tmp_path):
    p = write(tmp_path, THREE)
    cfg = load_config(p, ["source.radar.path=elsewhere/radar", "source.radar.watermark.max_out_of_orderness=\"1s\"",
                          "source.mobile.watermark.target_quantile=0.99"])
    radar = cfg.sources[0]
    assert radar.path == str(tmp_path / "elsewhere/radar")  # --set paths resolve against the TOML's directory
    assert radar.watermark.max_out_of_orderness_us == 1_000_000
    assert radar.watermark.max_future_skew_us == 60_000_000  # the rest of the inline table stays
    assert cfg.sources[2].watermark.generator.target_quantile == 0.99
    unknown = r"^--set 'source.sonar.path=x': no source is named 'sonar' \(sources: radar, cdc, mobile\)$"
    with pytest.raises(ConfigError, match=unknown):
        load_config(p, ["source.sonar.path=x"])
    with pytest.raises(ConfigError, match=r"name the source: source.<name>.path=\.\.\."):
        load_config(p, ["source.path=x"])
    single = load_config(write(tmp_path, EXAMPLE), ["source.path=elsewhere"])
    assert single.source.path == str(tmp_path / "elsewhere")


def test_source_path_checked_per_source(tmp_path):
    from lowwater.config import check_source_path

    cfg = load_config(write(tmp_path, THREE))
    (tmp_path / "landing/radar").mkdir(parents=True)
    check_source_path(cfg.sources[0], cfg.base_dir)
    with pytest.raises(ConfigError, match=f"^source.cdc.path: {tmp_path}/landing/orders_cdc does not exist"):
        check_source_path(cfg.sources[1], cfg.base_dir)
    single = load_config(write(tmp_path, EXAMPLE))
    with pytest.raises(ConfigError, match="^source.path: "):
        check_source_path(single.source, single.base_dir)


def test_check_columns(tmp_path):
    from lowwater.config import check_columns

    cfg = load_config(write(tmp_path, THREE))
    radar = ["sensor_ts", "antenna", "received_at", "amount"]
    with pytest.raises(ConfigError, match=r"^window.key: column 'user' is missing from source 'radar' "
                                          r"\(its columns: amount, antenna, received_at, sensor_ts\)$"):
        check_columns(cfg, {"radar": radar})
    check_columns(cfg, {"radar": [*radar, "user"]})  # the others are checked when their schemas are known
    with pytest.raises(ConfigError, match="^source.cdc.watermark.marker: column 'is_commit_marker' is missing"):
        check_columns(cfg, {"cdc": ["commit_ts", "shard", "ingested_at", "user", "amount"]})
    single = load_config(write(tmp_path, EXAMPLE))
    with pytest.raises(ConfigError, match=r"^source.partition: column 'partition' not found in the input \(columns: "):
        check_columns(single, {"default": ["event_time", "offset", "arrival_time", "key", "amount"]})
    with pytest.raises(ConfigError, match="^window.aggregations: column 'amount' not found in the input"):
        check_columns(single, {"default": ["event_time", "partition", "offset", "arrival_time", "key"]})
    # An input column with the name of one late/ and dead_letter/ add: refused, not a crash when they are written.
    cols = ["event_time", "partition", "offset", "arrival_time", "key", "amount"]
    for own in ("watermark", "window_start", "window_end", "reason", "source_file", "raw"):
        with pytest.raises(ConfigError, match=f"^source: the input has a column named '{own}', which late/ and "
                                              "dead_letter/ add to each row's own columns"):
            check_columns(single, {"default": [*cols, own]})
    check_columns(single, {"default": [*cols, "reasons"]})
    with pytest.raises(ConfigError, match="^source: source 'radar' has a column named 'reason'"):
        check_columns(cfg, {"radar": [*radar, "user", "reason"]})


# Computed with the code before the split into a package (lowwater 0.x, issue 12): a checkpoint started then
# stores exactly this, so a single [source] must keep producing it.
FINGERPRINT_BEFORE = {
    "source.format": "jsonl",
    "source.path": "/base/landing/payments",
    "source.schema": "struct<a:int>",
    "source.event_time": "event_time",
    "source.partition": "partition",
    "source.offset": "offset",
    "source.arrival_time": "arrival_time",
    "source.time_unit": "s",
    "watermark.max_out_of_orderness": "3s",
    "watermark.out_of_orderness_by_partition": "0=250ms, 1=5s",
    "watermark.idle_timeout": "unset",
    "watermark.partitions": "0, 1, 2, 3",
    "watermark.max_future_skew": "1m",
    "window.type": "tumbling",
    "window.size": "10s",
    "window.slide": "unset",
    "window.offset": "0s",
    "window.gap": "unset",
    "window.allowed_lateness": "0s",
    "window.key": "key",
    "window.aggregations": "total = sum(amount), biggest = max(amount)",
    "window.accumulation": "accumulating",
    "trigger.early": "unset",
}


def test_single_source_fingerprint_is_unchanged():
    import tomllib

    from lowwater.config import parse_config
    from lowwater.io.checkpoint import fingerprint

    text = EXAMPLE.replace('idle_timeout = "1m"', 'max_future_skew = "1m"\n'
                           'out_of_orderness_by_partition = { "1" = "5s", "0" = "250ms" }')
    fp = fingerprint(parse_config(tomllib.loads(text), base_dir="/base"), "struct<a:int>")
    assert fp == FINGERPRINT_BEFORE and list(fp) == list(FINGERPRINT_BEFORE)
    punctuated = parse_config(tomllib.loads(EXAMPLE.replace('max_out_of_orderness = "3s"',
                                                            'strategy = "punctuated"\nmarker = "m"')), "/base")
    fp = fingerprint(punctuated, "struct<a:int>")
    assert fp["watermark.strategy"] == "punctuated marker=m"
    assert fp["watermark.max_out_of_orderness"] == "unset (strategy = punctuated)"  # a switch is noticed


def test_several_sources_fingerprint_per_source(tmp_path):
    from lowwater.io.checkpoint import differences, fingerprint

    cfg = load_config(write(tmp_path, THREE))
    schemas = {"radar": "struct<r:int>", "cdc": "struct<c:int>", "mobile": "struct<m:int>"}
    fp = fingerprint(cfg, schemas)
    assert fp["source.path"] == "[[source]] radar, cdc, mobile"
    assert fp["source.cdc.schema"] == "struct<c:int>" and fp["source.radar.time_unit"] == "ms"
    assert fp["source.radar.watermark"] == "bounded max_out_of_orderness=100ms, max_future_skew=1m"
    assert fp["source.cdc.watermark"] == "punctuated marker=is_commit_marker"
    assert fp["source.mobile.watermark"] == ("adaptive target_quantile=0.999, over=10m, min_lateness=1s, "
                                             "max_lateness=2m, idle_timeout=1m")
    tighter = load_config(write(tmp_path, THREE), ["source.radar.watermark.max_out_of_orderness=\"50ms\""])
    assert differences(fp, fingerprint(tighter, schemas)) == ["source.radar.watermark"]
    single = load_config(write(tmp_path, EXAMPLE))
    assert "source.path" in differences(fp, fingerprint(single, "struct<r:int>"))  # switching layouts is refused

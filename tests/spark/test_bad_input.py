"""Bad input never stops the streaming run: every kind of bad row mixed into a good stream,
an empty file, an empty directory and a file deleted after it was listed."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
import pytest

from lowwater.config import load_config
from lowwater.spark.engine import Engine
from lowwater.testing.outputs import read_output

from .test_cli import CONFIG, ROWS

pytestmark = pytest.mark.spark

COLS = ["partition", "offset", "event_time", "arrival_time", "key", "amount"]
BAD = [
    ("this is not json", "malformed record"),
    ('{"partition": 0, "offset": 90, "arrival_time": 1, "key": "a", "amount": 1}', "missing event_time"),
    ('{"partition": 0, "offset": 91, "event_time": "yesterday", "arrival_time": 1, "key": "a", "amount": 1}',
     "malformed record: wrong type for event_time"),
    ('{"partition": 1, "offset": 92, "event_time": 4000, "arrival_time": 1, "key": "a", "amount": "lots"}',
     "malformed record: wrong type for amount"),
    ('{"offset": 93, "event_time": 4000, "arrival_time": 1, "key": "a", "amount": 1}', "missing partition"),
]


def write(path: Path, rows: list[tuple], extra: list[str], i: int) -> None:
    lines = [json.dumps(dict(zip(COLS, r, strict=True))) for r in rows] + extra
    path.write_text("".join(ln + "\n" for ln in lines))
    os.utime(path, (1_700_000_000 + i, 1_700_000_000 + i))


def run(spark, root: Path, bad: bool, monkeypatch) -> tuple[list[tuple], pd.DataFrame, dict]:  # noqa: ANN001
    landing = root / "landing"
    landing.mkdir(parents=True)
    # A declared schema, as in production: inference would type a column by its bad values.
    schema = 'schema = "partition INT, offset LONG, event_time LONG, arrival_time LONG, key STRING, amount DOUBLE"'
    text = CONFIG.format(fmt="jsonl").replace('time_unit = "ms"', f'time_unit = "ms"\n{schema}')
    (root / "pipeline.toml").write_text(text)
    lines = [b for b, _ in BAD] if bad else []
    write(landing / "part-000.jsonl", ROWS[:4], lines, 0)
    if bad:
        write(landing / "part-001.jsonl", [], [], 1)  # an empty file
        (landing / "part-001b").mkdir()  # an empty partition directory
    write(landing / "part-002.jsonl", ROWS[4:], lines, 2)
    doomed = landing / "part-003.jsonl"
    if bad:  # listed with the rest, deleted before its micro-batch reads it
        write(doomed, [(0, 50, 40_000, 40_100, "zzz", 1.0)], [], 3)
        real = Engine.process_batch

        def delete_then_process(self, df, spark_batch, **kw):  # noqa: ANN001, ANN003, ANN202
            doomed.unlink(missing_ok=True)
            return real(self, df, spark_batch, **kw)

        monkeypatch.setattr(Engine, "process_batch", delete_then_process)
    engine = Engine(load_config(root / "pipeline.toml"), spark)
    summary = engine.summary(engine.run(drain=True))
    monkeypatch.undo()
    res = read_output(spark, root / "out" / "results")
    emitted = sorted(
        (r.key, str(r.window_start), str(r.window_end), r["count"], r.total, r.kind, r.revision)
        for _, r in res.iterrows()
    )
    dead = root / "out" / "dead_letter"
    dl = read_output(spark, dead) if dead.exists() else pd.DataFrame()
    return emitted, dl, summary


def test_bad_rows_empty_files_and_vanished_files_never_stop_the_run(spark, tmp_path, monkeypatch):
    clean, _, s_clean = run(spark, tmp_path / "clean", False, monkeypatch)
    mixed, dead, s = run(spark, tmp_path / "bad", True, monkeypatch)
    assert mixed == clean and clean  # the good rows give the same results; the vanished file's key is absent
    assert not any(e[0] == "zzz" for e in mixed)
    assert len(dead) == 2 * len(BAD) and dead["reason"].notna().all()
    for _, reason in BAD:
        assert sum(r.startswith(reason) for r in dead["reason"]) >= 2, reason
    assert (dead["reason"] == "malformed record").sum() == 2 and "this is not json" in set(dead["raw"])
    assert s["dead_letter"] == 2 * len(BAD) and s["rows"] == s_clean["rows"] + 2 * len(BAD)
    assert s["balanced"] and (s["on_time"], s["late_updates"], s["too_late"]) == (
        s_clean["on_time"], s_clean["late_updates"], s_clean["too_late"])


def test_a_bigint_sum_beyond_its_range_is_refused_in_one_line_never_wrapped(spark, tmp_path):
    """Arrow's int64 sum wraps around silently: the step is refused with one line naming the column instead."""
    from lowwater.cli.run import refused_line

    landing = tmp_path / "landing"
    landing.mkdir()
    big = 9_223_372_036_854_775_000  # three of them are ~2.8e19, beyond 2^63
    (landing / "a.jsonl").write_text("".join(json.dumps({"t": 1_767_225_600 + i, "k": "a", "v": big}) + "\n"
                                             for i in range(3)))
    cfg_path = tmp_path / "p.toml"
    cfg_path.write_text('[source]\nformat = "jsonl"\npath = "landing"\nevent_time = "t"\ntime_unit = "s"\n'
                        'schema = "t LONG, k STRING, v LONG"\n[window]\nsize = "10s"\nkey = ["k"]\n'
                        'aggregations = { total = "sum(v)" }\n[output]\npath = "out"\n')
    cfg = load_config(cfg_path)
    engine = Engine(cfg, spark)
    with pytest.raises(Exception) as caught:  # noqa: PT011 - a Spark-wrapped Python error
        engine.run(drain=True)
    engine.close()
    line = refused_line(caught.value)
    assert line is not None and "sum(v)" in line and "DECIMAL" in line and "\n" not in line, line
    emitted = read_output(spark, tmp_path / "out" / "results")
    assert len(emitted) == 0  # nothing wrapped was written


def test_a_decimal_sum_beyond_its_type_is_refused_in_one_line_never_wrapped(spark, tmp_path):
    """Arrow's decimal128 sum wraps past 2^127 (3 x 9.9e37 gave -4.0e37, exit 0): refused in one line instead;
    a window whose sum fits is summed exactly."""
    from lowwater.cli.run import refused_line

    landing = tmp_path / "landing"
    landing.mkdir()
    rows = [("a", "9" * 37 + "0")] * 3 + [("b", "9" * 37)] * 2  # a: ~3.0e38, beyond DECIMAL(38,0); b: fits
    (landing / "a.jsonl").write_text("".join(json.dumps({"t": 1_767_225_600 + i, "k": k, "v": v}) + "\n"
                                             for i, (k, v) in enumerate(rows)))
    cfg_path = tmp_path / "p.toml"
    cfg_path.write_text('[source]\nformat = "jsonl"\npath = "landing"\nevent_time = "t"\ntime_unit = "s"\n'
                        'schema = "t LONG, k STRING, v DECIMAL(38,0)"\n[window]\nsize = "10s"\nkey = ["k"]\n'
                        'aggregations = { total = "sum(v)" }\n[output]\npath = "out"\n')
    engine = Engine(load_config(cfg_path), spark)
    with pytest.raises(Exception) as caught:  # noqa: PT011 - a Spark-wrapped Python error
        engine.run(drain=True)
    engine.close()
    line = refused_line(caught.value)
    assert line is not None and "sum(v)" in line and "DECIMAL(38,0)" in line and "\n" not in line, line
    assert len(read_output(spark, tmp_path / "out" / "results")) == 0  # nothing wrapped was written
    (landing / "a.jsonl").write_text("".join(json.dumps({"t": 1_767_225_600 + i, "k": "b", "v": "9" * 37}) + "\n"
                                             for i in range(2)))
    import shutil

    shutil.rmtree(tmp_path / "out")
    engine = Engine(load_config(cfg_path), spark)
    engine.run(drain=True)
    engine.close()
    got = read_output(spark, tmp_path / "out" / "results")
    assert [int(x) for x in got["total"]] == [2 * (10**37 - 1)]  # exact, 38 digits


def test_a_nanosecond_parquet_timestamp_is_one_line_naming_the_fix(spark, tmp_path):
    """pandas writes nanosecond timestamps by default, which Spark cannot read: inferring the schema is a
    configuration error (exit 2 in the CLI), reading them with a given schema names the file and column."""
    from lowwater.cli.run import refused_line
    from lowwater.config import ConfigError

    landing = tmp_path / "landing"
    landing.mkdir()
    ts = pd.to_datetime([1_767_225_600 + i for i in range(3)], unit="s", utc=True)
    pd.DataFrame({"t": ts, "k": ["a"] * 3, "v": [1.0, 2.0, 3.0]}).to_parquet(landing / "a.parquet", index=False)
    base = ('[source]\nformat = "parquet"\npath = "landing"\nevent_time = "t"\n{schema}[window]\nsize = "10s"\n'
            'key = ["k"]\naggregations = {{ total = "sum(v)" }}\n[output]\npath = "out"\n')
    cfg_path = tmp_path / "p.toml"
    cfg_path.write_text(base.format(schema=""))
    with pytest.raises(ConfigError) as caught:
        Engine(load_config(cfg_path), spark)
    assert "TIMESTAMP(NANOS" in str(caught.value) and 'coerce_timestamps="us"' in str(caught.value)
    assert str(caught.value).startswith("source.path: ") and "\n" not in str(caught.value)

    cfg_path.write_text(base.format(schema='schema = "t TIMESTAMP, k STRING, v DOUBLE"\n'))
    engine = Engine(load_config(cfg_path), spark)
    with pytest.raises(Exception) as failed:  # noqa: PT011 - a Spark-wrapped Java error
        engine.run(drain=True)
    engine.close()
    line = refused_line(failed.value)
    assert line is not None and "a.parquet: column t is stored as Parquet INT64" in line and "\n" not in line, line
    assert 'coerce_timestamps="us"' in line and "the step was not committed" in line
    assert len(read_output(spark, tmp_path / "out" / "results")) == 0


NY_CONFIG = """
[source]
path = "landing"
event_time = "dep"
arrival_time = "arr"
time_zone = "America/New_York"
[window]
size = "1h"
key = ["origin"]
aggregations = { n = "count(flight)" }
[output]
path = "out"
"""


def test_case_clashing_keys_are_dead_letters_on_a_first_run_and_naive_times_take_the_zone(spark, tmp_path):
    """Issue 31: `Origin` next to `origin` (JSON keys differing in case) on the very first run is a dead letter
    with its reason, not a traceback; naive times with time_zone = "America/New_York" are 5 h behind UTC in
    winter, times with an offset are left as they are."""
    from .helpers import run_cli_here

    (tmp_path / "landing").mkdir()
    (tmp_path / "pipeline.toml").write_text(NY_CONFIG)
    rows = [
        {"dep": "2013-01-01 20:45:00", "arr": "2013-01-01 23:10:00", "origin": "EWR", "flight": "UA1"},
        {"dep": "2013-01-01 20:50:00", "arr": "2013-01-01 23:20:00", "Origin": "JFK", "flight": "B6"},
        {"dep": "2013-01-02T01:55:00Z", "arr": "2013-01-02T04:30:00Z", "origin": "EWR", "flight": "AA5"},
        {"dep": "2013-01-02 09:00:00", "arr": "2013-01-02 11:00:00", "origin": "LGA", "flight": "DL2"},
    ]
    (tmp_path / "landing" / "h00.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    got = run_cli_here(["run", "pipeline.toml", "--once", "--drain", "-q"], tmp_path)
    assert got.returncode == 0, got.stderr[-3000:]
    assert "Traceback" not in got.stderr and "(time zone America/New_York)" in got.stderr
    dead = pd.read_parquet(tmp_path / "out" / "dead_letter")
    assert list(dead["reason"]) == [
        "malformed record: key 'Origin' differs from column 'origin' only in case (Spark's column names ignore case)"]
    assert json.loads(dead["raw"][0])["Origin"] == "JFK"
    res = pd.read_parquet(tmp_path / "out" / "results")
    got_windows = sorted((r.origin, r.window_start.isoformat(), r.n) for r in res.itertuples())
    assert got_windows == [("EWR", "2013-01-02T01:00:00+00:00", 2),  # 20:45 in New York and 01:55Z
                           ("LGA", "2013-01-02T14:00:00+00:00", 1)]

"""A source's columns read before Spark starts (``io/headers.py``), and the refusals they allow (issue 31)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from lowwater.cli import app
from lowwater.config import parse_config
from lowwater.io import headers
from lowwater.io.headers import parse_ddl, read_header
from tests.spark.helpers import run_cli_here


def _src(path: Path, fmt: str = "jsonl", **extra):
    data = {"source": {"path": str(path), "format": fmt, "event_time": "t", **extra},
            "window": {"size": "1h", "key": ["k"]}, "output": {"path": str(path.parent / "out")}}
    return parse_config(data).source


def test_jsonl_keys_and_types(tmp_path):
    land = tmp_path / "landing"
    land.mkdir()
    (land / "a.jsonl").write_text("\n".join(json.dumps(r) for r in [
        {"t": 1, "k": "a", "id": "UA1", "n": 1, "x": 1.5, "when": "2013-01-01 20:45:00"},
        {"t": 2, "k": "b", "id": "UA2", "n": 2, "x": 2, "Origin": "EWR"},
    ]) + "\n\nnot json\n")
    h = read_header(_src(land))
    assert h.complete
    assert h.columns == {"t": "bigint", "k": "string", "id": "string", "n": "bigint", "x": "double",
                         "when": "string", "Origin": "string"}
    assert h.naive == {"when"}


def test_jsonl_beyond_the_budget_settles_only_text(tmp_path, monkeypatch):
    land = tmp_path / "landing"
    land.mkdir()
    (land / "a.jsonl").write_text("".join(json.dumps({"t": i, "k": "a", "n": i}) + "\n" for i in range(100)))
    monkeypatch.setattr(headers, "JSON_BUDGET_BYTES", 200)
    h = read_header(_src(land))
    assert not h.complete  # a later line may add a column or turn n into a string
    assert h.columns == {"t": None, "k": "string", "n": None}


def test_parquet_footers(tmp_path):
    land = tmp_path / "landing"
    land.mkdir()
    t = pa.table({"t": pa.array([1], pa.int64()), "k": ["a"], "amt": pa.array([1], pa.decimal128(12, 2)),
                  "local": pa.array([0], pa.timestamp("us")), "utc": pa.array([0], pa.timestamp("us", "UTC")),
                  "tags": pa.array([[1]], pa.list_(pa.int32()))})
    pq.write_table(t, land / "a.parquet")
    pq.write_table(t, land / "b.parquet")
    (land / "_SUCCESS").write_text("")  # skipped, as Spark skips it
    h = read_header(_src(land, "parquet"))
    assert h.complete and h.naive == {"local"}
    assert h.columns == {"t": "bigint", "k": "string", "amt": "decimal(12,2)", "local": "timestamp_ntz",
                         "utc": "timestamp", "tags": "array"}
    pq.write_table(t.drop(["tags"]), land / "c.parquet")
    assert not read_header(_src(land, "parquet")).complete  # footers differ: Spark decides


def test_csv_header_and_text_columns(tmp_path):
    land = tmp_path / "landing"
    land.mkdir()
    (land / "a.csv").write_text("t,k,id,n,when\n1,a,UA1,3,2013-01-01 20:45:00\n2,b,,4,2013-01-01 21:00:00\n")
    h = read_header(_src(land, "csv"))
    assert h.complete and h.columns == {"t": None, "k": "string", "id": "string", "n": None, "when": None}
    assert h.naive == {"when"}


def test_ddl_and_saved_schema(tmp_path):
    assert parse_ddl("a STRING, `b c` DECIMAL(12, 2), d long, e ARRAY<INT>, f: timestamp") == {
        "a": "string", "b c": "decimal(12,2)", "d": "bigint", "e": "array<int>", "f": "timestamp"}
    assert parse_ddl("a STRING COMMENT 'x'") is None  # not plain: Spark parses it
    saved = tmp_path / "source_schema.json"
    saved.write_text(json.dumps({"type": "struct", "fields": [
        {"name": "t", "type": "long", "nullable": True, "metadata": {}},
        {"name": "tags", "type": {"type": "array", "elementType": "string", "containsNull": True},
         "nullable": True, "metadata": {}}]}))
    h = read_header(_src(tmp_path / "nowhere"), saved)
    assert h.complete and h.columns == {"t": "long", "tags": "array"}
    assert read_header(_src(tmp_path, "jsonl", schema="t DOUBLE, k STRING")).columns == {"t": "double", "k": "string"}


TOML = """
[source]
path = "landing"
event_time = "t"
[window]
size = "1h"
key = ["k"]
aggregations = {{ a = "{agg}" }}
[output]
path = "out"
"""


@pytest.mark.parametrize(("agg", "line"), [
    ("sum(id)", "window.aggregations.a: sum(id) needs a number, but column 'id' is string"),
    ("count(fare)", "window.aggregations: column 'fare' not found in the input (columns: id, k, t)"),
])
def test_run_refuses_before_spark_starts(tmp_path, monkeypatch, agg, line):
    """One line, exit 2, and no SparkSession was ever asked for."""
    import lowwater.runtime.session as session

    def no_jvm(*_a, **_k):
        raise AssertionError("the JVM was started")

    monkeypatch.setattr(session, "get_spark", no_jvm)
    (tmp_path / "landing").mkdir()
    (tmp_path / "landing" / "a.jsonl").write_text('{"t": 1, "k": "a", "id": "UA1"}\n')
    (tmp_path / "p.toml").write_text(TOML.format(agg=agg))
    got = CliRunner().invoke(app, ["run", str(tmp_path / "p.toml"), "--once"])
    assert got.exit_code == 2, got.output
    assert line in " ".join(got.output.split())
    assert not (tmp_path / "out" / "results").exists()


def test_run_warns_once_about_naive_clocks_before_spark_starts(tmp_path, monkeypatch):
    import lowwater.runtime.session as session

    def no_jvm(*_a, **_k):
        raise RuntimeError("no JVM in this test")

    monkeypatch.setattr(session, "get_spark", no_jvm)
    (tmp_path / "landing").mkdir()
    (tmp_path / "landing" / "a.jsonl").write_text('{"t": "2013-01-01 20:45:00", "k": "a", "id": "UA1"}\n' * 3)
    (tmp_path / "p.toml").write_text(TOML.format(agg="count(id)"))
    got = run_cli_here(["run", "p.toml", "--once"], tmp_path)  # gives back the output lock it took
    said = " ".join((got.stdout + got.stderr).split())
    assert said.count("source.time_zone is not set: 't' holds timestamps without a zone, read as UTC") == 1
    assert "could not start Spark: no JVM in this test" in said and got.returncode == 2
    (tmp_path / "p.toml").write_text(TOML.format(agg="count(id)").replace('event_time = "t"',
                                                                          'event_time = "t"\ntime_zone = "UTC"'))
    got = run_cli_here(["run", "p.toml", "--once"], tmp_path)
    said = " ".join((got.stdout + got.stderr).split())
    assert "time_zone is not set" not in said and "no JVM in this test" in said


def test_parquet_columns_differing_in_case_are_one_line():
    """Spark's errors (as PySpark words them) for a Parquet file with `origin` and `Origin`: one line each."""
    from lowwater.io.files import _clash_line, unreadable_parquet

    read = ("An error occurred while calling o37.showString. : org.apache.spark.SparkException: "
            "[FAILED_READ_FILE.NO_HINT] Encountered error while reading file file:///l/a.parquet. SQLSTATE: KD001 "
            "at org.apache...\nCaused by: org.apache.spark.SparkRuntimeException: Found duplicate field(s) "
            '"origin": [origin, Origin] in case-insensitive mode.\n\tat org.apache.spark...')
    assert unreadable_parquet(RuntimeError(read)) == (
        "file:///l/a.parquet: Parquet columns origin, Origin differ only in case, which Spark's column names "
        "ignore: rename one in the file")
    inferred = ("[COLUMN_ALREADY_EXISTS] The column `origin` already exists. Choose another name or rename the "
                "existing column. SQLSTATE: 42711")
    assert _clash_line(RuntimeError(inferred)) == (
        "the input has two columns named 'origin' in different cases; Spark's column names ignore case: rename "
        "one in the files")
    assert unreadable_parquet(RuntimeError("something else")) is None

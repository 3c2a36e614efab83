"""Bad input with several sources: bad rows are dead letters with their reason, bad configurations one line + exit 2.

Configuration errors go through ``lowwater run cfg.toml`` (typer's runner, in
process: the session's SparkSession is reused, so the error found at engine
start -- a window key missing from one source's schema -- costs no JVM start).
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from lowwater.cli import app
from lowwater.testing.scenario_files import MARKER_WITHOUT_EVENT_TIME, Scenario
from lowwater.testing.scenario_spark import run_spark

pytestmark = pytest.mark.spark


def test_a_marker_row_without_event_time_is_a_dead_letter(spark, tmp_path):
    schema = "shard STRING, commit_ts DOUBLE, ingested_at DOUBLE, is_marker INT, key STRING, amount DOUBLE"
    config = {
        "source": [{"name": "cdc", "format": "jsonl", "path": "landing/cdc", "partition": "shard",
                    "event_time": "commit_ts", "arrival_time": "ingested_at", "schema": schema,
                    "watermark": {"strategy": "punctuated", "marker": "is_marker"}}],
        "window": {"type": "tumbling", "size": "10s", "key": ["key"], "aggregations": {"total": "sum(amount)"}},
        "late": {"policy": "side_output"},
        "output": {"path": "out"},
    }
    rows = [
        {"shard": "s0", "commit_ts": 2.0, "ingested_at": 3.0, "is_marker": 0, "key": "a", "amount": 1.0},
        {"shard": "s0", "commit_ts": 1.0, "ingested_at": 4.0, "is_marker": 1, "key": None, "amount": None},
        {"shard": "s0", "commit_ts": None, "ingested_at": 5.0, "is_marker": 1, "key": None, "amount": None},
        {"shard": "s0", "commit_ts": 12.0, "ingested_at": 13.0, "is_marker": 0, "key": "a", "amount": 2.0},
    ]
    got = run_spark(spark, Scenario("marker", "", config, {"cdc": rows}, [{}], {}), {}, workdir=tmp_path)
    assert got.dead_letters == [("cdc", f"{MARKER_WITHOUT_EVENT_TIME} (commit_ts)")]
    # A row and a dead letter; the valid marker moved W and is counted apart (not a row).
    assert (got.counts["rows"], got.counts["dead_letter"], got.counts["markers"]) == (3, 1, 1)
    dead = pd.read_parquet(tmp_path / "out" / "dead_letter")
    assert dead[["source", "ingested_at", "is_marker"]].values.tolist() == [["cdc", 5.0, 1]]
    assert dead["source_file"].str.endswith("part-00000.jsonl").all()


SOURCE = """
[[source]]
name = "{name}"
format = "jsonl"
path = "landing/{name}"
event_time = "event_time"
{arrival}watermark = {watermark}
"""

TAIL = """
[window]
type = "tumbling"
size = "10s"
key = ["key"]
aggregations = { total = "sum(amount)" }

[output]
path = "out"
"""

BOUNDED = '{ strategy = "bounded", max_out_of_orderness = "2s" }'
ADAPTIVE = '{ strategy = "adaptive", target_quantile = 0.9, over = "10s" }'
ARRIVAL = 'arrival_time = "arrival_time"\n'


def _source(name: str, watermark: str = BOUNDED, arrival: str = ARRIVAL) -> str:
    return SOURCE.format(name=name, arrival=arrival, watermark=watermark)


CASES = [
    ("two sources with one name", _source("radar") + _source("radar"),
     "error: source.name: two sources are named 'radar'"),
    ("adaptive without arrival_time", _source("mobile", ADAPTIVE, arrival=""),
     "error: source.mobile.watermark.strategy: adaptive needs source.mobile.arrival_time (the delay "
     "arrival_time - event_time is measured on the arrival clock)"),
    ("one of several without arrival_time", _source("radar") + _source("optical", arrival=""),
     "error: source.optical.arrival_time: with several sources every source needs arrival_time: arrival order "
     "across sources is (arrival_time, source, partition, offset)"),
    ("[watermark] next to [[source]]", _source("radar") + '\n[watermark]\nmax_out_of_orderness = "1s"\n',
     "error: [watermark]: with [[source]] tables each source has its own watermark table "
     "(watermark = { strategy = ..., ... } inside the [[source]])"),
]


def _invoke(root: Path, toml: str) -> tuple[int, list[str]]:
    (root / "pipeline.toml").write_text(toml)
    result = CliRunner().invoke(app, ["run", str(root / "pipeline.toml"), "--once", "-q"])
    return result.exit_code, result.stderr.strip().splitlines()


@pytest.mark.parametrize(("name", "sources", "expected"), CASES, ids=[c[0] for c in CASES])
def test_configuration_errors_are_one_line_and_exit_2(tmp_path, name, sources, expected):
    for d in ("radar", "optical", "mobile"):
        (tmp_path / "landing" / d).mkdir(parents=True)
    code, lines = _invoke(tmp_path, sources + TAIL)
    assert (code, lines) == (2, [expected])


def test_a_key_column_missing_from_one_source_is_found_at_engine_start(spark, tmp_path):
    """The schemas are known once Spark reads the files: the message names the source and the key."""
    rows = {"radar": {"event_time": 1.0, "arrival_time": 1.0, "key": "a", "amount": 1.0},
            "optical": {"event_time": 1.0, "arrival_time": 2.0, "station": "x", "amount": 1.0}}  # no "key"
    for name, row in rows.items():
        (tmp_path / "landing" / name).mkdir(parents=True)
        (tmp_path / "landing" / name / "part-0.jsonl").write_text(json.dumps(row) + "\n")
    code, lines = _invoke(tmp_path, _source("radar") + _source("optical") + TAIL)
    assert code == 2, lines
    errors = [ln for ln in lines if ln.startswith("error:")]
    assert errors == ["error: window.key: column 'key' is missing from source 'optical' (its columns: "
                      "amount, arrival_time, event_time, station)"], lines
    assert not (tmp_path / "out" / "results").exists()  # nothing ran

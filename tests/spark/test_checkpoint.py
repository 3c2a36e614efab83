"""What a checkpoint accepts on a restart (``io/checkpoint.py``), in-process on the shared session.

* a change of any fingerprinted key is refused, naming the key, its old and new values;
* harmless changes (Spark settings, ``max_files_per_batch``, ...) are accepted;
* an explicit ``source.schema`` that differs from the saved one is refused;
* a drained checkpoint refuses new rows, or with ``after_drain`` judges them against ``W = +inf``.
"""

from __future__ import annotations

import copy
import json
import logging
import os
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from lowwater.config import ConfigError, parse_config
from lowwater.core.lateness import DRAINED_REASON
from lowwater.io.checkpoint import FINGERPRINT_FILE, DrainedInputError
from lowwater.io.files import read_batch
from lowwater.io.lock import LOCK_NAME
from lowwater.spark.engine import Engine
from lowwater.testing.scenario import base_config

pytestmark = pytest.mark.spark

T0 = 1_700_000_000.0  # real epoch seconds: a watermark in 1970 can only be a +inf written wrongly
ROWS = [
    {"partition": "0", "offset": 0, "event_time": T0 + 1, "arrival_time": T0 + 1, "key": "a", "amount": 1.0},
    {"partition": "1", "offset": 0, "event_time": T0 + 2, "arrival_time": T0 + 2, "key": "b", "amount": 2.0},
    {"partition": "0", "offset": 1, "event_time": T0 + 14, "arrival_time": T0 + 14, "key": "a", "amount": 3.0},
    {"partition": "1", "offset": 1, "event_time": T0 + 15, "arrival_time": T0 + 15, "key": "a", "amount": 4.0},
]
LATER = [  # after a drain: on time for any real watermark, too late for W = +inf
    {"partition": "0", "offset": 2, "event_time": T0 + 21, "arrival_time": T0 + 21, "key": "a", "amount": 5.0},
    {"partition": "1", "offset": 2, "event_time": T0 + 22, "arrival_time": T0 + 22, "key": "c", "amount": 6.0},
]


def config() -> dict:
    cfg = base_config()
    cfg["source"].update({"arrival_time": "arrival_time", "offset": "offset"})
    return cfg


def land(directory: Path, name: str, rows: list[dict], mtime: int) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    f = directory / name
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    os.utime(f, (mtime, mtime))
    return f


@pytest.fixture(scope="module")
def started(spark, tmp_path_factory) -> Path:
    """A checkpoint with one committed step (not drained)."""
    root = tmp_path_factory.mktemp("started")
    f = land(root / "landing", "part-000.jsonl", ROWS, 1_700_000_000)
    cfg = parse_config(config(), base_dir=root)
    engine = Engine(cfg, spark)
    engine.process_batch(read_batch(spark, cfg.source, engine.schema, path=str(f)), 0)
    engine.close()
    assert (root / "out" / "_checkpoint" / "lowwater" / FINGERPRINT_FILE).exists()
    return root


def changed(section: str, **values) -> dict:
    cfg = config()
    cfg.setdefault(section, {}).update(values)
    return cfg


def without(cfg: dict, section: str, *keys: str) -> dict:
    for k in keys:
        cfg[section].pop(k)
    return cfg


@pytest.mark.parametrize(
    ("cfg", "key", "old", "new"),
    [
        (changed("window", size="5s"), "window.size", "10s", "5s"),
        (changed("window", type="hopping", slide="5s"), "window.type", "tumbling", "hopping"),
        (without(changed("window", type="session", gap="5s"), "window", "size"), "window.type", "tumbling", "session"),
        (changed("window", offset="2s"), "window.offset", "0s", "2s"),
        (changed("window", allowed_lateness="5s"), "window.allowed_lateness", "0s", "5s"),
        (changed("window", key=["partition"]), "window.key", "key", "partition"),
        (changed("window", key=[]), "window.key", "key", "unset"),
        (changed("window", aggregations={"total": "max(amount)"}), "window.aggregations",
         "total = sum(amount)", "total = max(amount)"),
        (changed("window", accumulation="retracting"), "window.accumulation", "accumulating", "retracting"),
        (changed("watermark", max_out_of_orderness="3s"), "watermark.max_out_of_orderness", "0s", "3s"),
        (changed("watermark", idle_timeout="1m"), "watermark.idle_timeout", "unset", "1m"),
        (changed("watermark", partitions=[0, 1]), "watermark.partitions", "unset", "0, 1"),
        (changed("watermark", out_of_orderness_by_partition={"1": "4s"}), "watermark.out_of_orderness_by_partition",
         "unset", "1=4s"),
        (changed("watermark", max_future_skew="1m"), "watermark.max_future_skew", "unset", "1m"),
        (changed("trigger", early="every 2 rows"), "trigger.early", "unset", "every 2 rows"),
        (changed("source", time_unit="ms"), "source.time_unit", "s", "ms"),
        (changed("source", event_time="arrival_time"), "source.event_time", "event_time", "arrival_time"),
        (changed("source", partition="key"), "source.partition", "partition", "key"),
        (without(config(), "source", "offset"), "source.offset", "offset", "unset"),
        (changed("source", format="csv"), "source.format", "jsonl", "csv"),
        (changed("source", path="elsewhere"), "source.path", None, None),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_a_fingerprinted_change_is_refused_naming_the_key(spark, started, cfg, key, old, new):
    fingerprint = started / "out" / "_checkpoint" / "lowwater" / FINGERPRINT_FILE
    before = fingerprint.read_text()
    with pytest.raises(ConfigError) as err:
        Engine(parse_config(copy.deepcopy(cfg), base_dir=started), spark)
    line = str(err.value)
    assert line.startswith(f"{key}: changed from "), line
    if old is not None:
        assert f"from {old!r} to {new!r}" in line
    assert "use a new output.path, or delete" in line and "\n" not in line
    assert fingerprint.read_text() == before  # nothing rewritten
    assert not (started / "out" / LOCK_NAME).exists()  # the refused engine gave the lock back


@pytest.mark.parametrize(
    "cfg",
    [
        changed("spark", master="local[1]", shuffle_partitions=3, conf={"spark.sql.ansi.enabled": "true"}),
        changed("source", max_files_per_batch=7),
        changed("trigger", interval="2s"),
        changed("late", policy="drop"),
    ],
    ids=["spark", "max_files_per_batch", "trigger.interval", "late.policy"],
)
def test_a_harmless_change_is_accepted(spark, started, cfg):
    engine = Engine(parse_config(cfg, base_dir=started), spark)
    engine.close()
    assert engine.store.latest().step == 0


def test_before_the_first_step_any_change_goes_and_an_old_checkpoint_adopts(spark, tmp_path, caplog):
    land(tmp_path / "landing", "part-000.jsonl", ROWS, 1_700_000_000)
    Engine(parse_config(config(), base_dir=tmp_path), spark).close()
    # Nothing computed yet: a different window is simply the configuration from now on.
    cfg = parse_config(changed("window", size="5s"), base_dir=tmp_path)
    engine = Engine(cfg, spark)
    f = tmp_path / "landing" / "part-000.jsonl"
    engine.process_batch(read_batch(spark, cfg.source, engine.schema, path=str(f)), 0)
    engine.close()
    # A checkpoint of an older lowwater (no fingerprint) adopts the current one, with a log line...
    (tmp_path / "out" / "_checkpoint" / "lowwater" / FINGERPRINT_FILE).unlink()
    with caplog.at_level(logging.WARNING, logger="lowwater"):
        Engine(cfg, spark).close()
    assert any("no configuration fingerprint" in r.getMessage() for r in caplog.records)
    # ... and is held to it afterwards.
    with pytest.raises(ConfigError, match="^window.size: changed from '5s' to '10s'"):
        Engine(parse_config(config(), base_dir=tmp_path), spark)


def test_an_explicit_schema_that_differs_from_the_saved_one_is_refused(spark, started):
    cfg = config()
    cfg["source"]["schema"] = cfg["source"]["schema"].replace("amount DOUBLE", "amount STRING")
    with pytest.raises(ConfigError) as err:
        Engine(parse_config(cfg, base_dir=started), spark)
    line = str(err.value)
    assert line.startswith("source.schema: differs from the schema this checkpoint was started with")
    assert "column 'amount' is double there and string here" in line and "\n" not in line
    same = config()  # the same schema, written again: fine
    Engine(parse_config(same, base_dir=started), spark).close()


def test_a_drained_checkpoint_refuses_new_rows_unless_asked_to_continue(spark, tmp_path):
    landing = tmp_path / "landing"
    land(landing, "part-000.jsonl", ROWS, 1_700_000_000)
    cfg = parse_config(config(), base_dir=tmp_path)
    drained = Engine(cfg, spark).run(drain=True)
    assert drained.drained
    out = tmp_path / "out"
    before = sorted(p.relative_to(out) for p in out.rglob("batch_id=*"))

    land(landing, "part-001.jsonl", LATER, 1_700_000_001)
    with pytest.raises(DrainedInputError) as err:
        Engine(cfg, spark).run(once=True)
    line = str(err.value)
    assert "was drained" in line and "2 new row(s)" in line and "--after-drain" in line and "\n" not in line
    engine = Engine(cfg, spark)
    assert engine.store.latest().step == drained.step  # nothing committed
    engine.close()
    assert sorted(p.relative_to(out) for p in out.rglob("batch_id=*")) == before  # nothing written
    assert not (out / LOCK_NAME).exists()

    # Asked to continue: the same rows (Spark replays the refused batch) are judged against W = +inf.
    cont = Engine(cfg, spark, after_drain=True)
    final = cont.run(once=True)
    summary = cont.summary(final)
    assert (summary["rows"], summary["too_late"], summary["balanced"]) == (6, 2, True)
    assert final.step == drained.step + 1 and final.drained
    late = spark.read.parquet(str(out / "late"))
    assert late.count() == 2
    assert {r.reason for r in late.select("reason").collect()} == {DRAINED_REASON}
    # No 1970 anywhere: the +inf watermark is never written as an epoch-0 timestamp.
    for kind, column in (("late", "watermark"), ("results", "watermark"), ("metrics", "low_watermark")):
        frame = spark.read.parquet(str(out / kind))
        assert frame.filter(F.year(column) <= 1970).count() == 0, kind
    results = spark.read.parquet(str(out / "results"))
    assert results.filter(F.col("batch_id") == final.step).count() == 0  # too late: no window changed


def test_a_checkpoint_of_spark_s_file_source_is_refused_not_misread(spark, tmp_path):
    """Offsets of the older file source (modification-time order) cannot be resumed in name order."""
    cfg = parse_config(config(), base_dir=tmp_path)
    land(Path(cfg.source.path), "part-0.jsonl", ROWS, 1_000)
    offsets = Path(cfg.output.checkpoint) / "spark" / "offsets"
    offsets.mkdir(parents=True)
    (offsets / "0").write_text('v1\n{"batchWatermarkMs":0,"batchTimestampMs":0,"conf":{}}\n{"logOffset":0}\n')
    with pytest.raises(ConfigError, match=r"^output.checkpoint: .* written by an older lowwater .*to start fresh"):
        Engine(cfg, spark)
    (offsets / "1").write_text('v1\n{"batchWatermarkMs":0,"batchTimestampMs":0,"conf":{}}\n{"position":1}\n')
    Engine(cfg, spark).close()  # the file log's offsets resume

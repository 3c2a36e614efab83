"""``lowwater reconcile`` on a Parquet log of sums, nothing clipped, unread or corrected: the fast path.

Order columns the footers prove null-free are not read, and a null anywhere
else still makes the same dead letter as in the stream (``io/footers.py``);
the tally grouped and partitioned by window (``attribution.tally(by_window)``)
gives the same comparison as the general plan, and still names a tampered
window.
"""

from __future__ import annotations

import glob
import os
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lowwater.config import ConfigError, load_config
from lowwater.reconcile import log, report
from lowwater.reconcile.job import reconcile
from lowwater.reconcile.position import stream_position
from lowwater.spark.engine import Engine

pytestmark = pytest.mark.spark

T0 = 1_767_225_600
# (partition, offset, event s, arrival s, key, amount), one list per file, in arrival order.
FILES = [
    [(0, 0, 1, 1, "a", 1.0), (1, 0, 2, 2, "a", 2.0), (0, 1, 12, 12, "a", 3.0), (1, 1, 13, 13, "b", 4.0),
     (0, 2, 25, 25, "a", 5.0), (1, 2, 26, 26, "b", 6.0)],
    [(0, 3, 3, 27, "a", 100.0),  # W = 23 by now: its window [0, 10) has fired -> too late
     (None, 4, 30, 30, "a", 7.0),  # no partition: a dead letter
     (1, None, 31, 31, "b", 8.0),  # no offset: a dead letter
     (0, 5, 32, 32, "a", 9.0), (1, 3, 33, 33, "b", 10.0)],
]


def _land(landing: Path) -> None:
    def ts(s: float) -> datetime:
        return datetime.fromtimestamp(T0 + s, UTC)

    for i, rows in enumerate(FILES):
        p, o, e, a, k, v = zip(*rows, strict=True)
        table = pa.table({"partition": pa.array(p, pa.int32()), "offset": pa.array(o, pa.int64()),
                          "event_time": pa.array([ts(x) for x in e], pa.timestamp("us", "UTC")),
                          "arrival_time": pa.array([ts(x) for x in a], pa.timestamp("us", "UTC")),
                          "key": pa.array(k), "amount": pa.array(v, pa.float64())})
        pq.write_table(table, landing / f"part-{i}.parquet")


def _pipeline(spark, tmp_path: Path, window: str):  # noqa: ANN001, ANN202
    landing = tmp_path / "landing"
    landing.mkdir()
    _land(landing)
    cfg_path = tmp_path / "p.toml"
    cfg_path.write_text('[source]\nformat = "parquet"\npath = "landing"\nevent_time = "event_time"\n'
                        'partition = "partition"\noffset = "offset"\narrival_time = "arrival_time"\n'
                        'max_files_per_batch = 1\n[watermark]\nmax_out_of_orderness = "2s"\npartitions = [0, 1]\n'
                        f'[window]\n{window}\nkey = ["key"]\naggregations = {{ total = "sum(amount)" }}\n'
                        '[late]\npolicy = "side_output"\n[output]\npath = "out"\n')
    cfg = load_config(cfg_path)
    engine = Engine(cfg, spark)
    engine.run(once=True)
    engine.close()
    return cfg


def _compared(spark, cfg, monkeypatch=None) -> tuple[dict, pd.DataFrame]:  # noqa: ANN001
    """The summary and the differing windows; with ``monkeypatch``, by the general plan (as if rows could be
    clipped: the tally then groups by flags too and the per-window aggregation shuffles again)."""
    if monkeypatch is not None:
        monkeypatch.setattr(log, "may_clip", lambda _cfg: True)
    result = reconcile(spark, cfg)
    frame = result.frame.toPandas()
    if monkeypatch is not None:
        monkeypatch.undo()
    return result.summary, frame.sort_values(["key", "_ws"]).reset_index(drop=True)


def test_footer_proven_columns_are_not_read_and_dead_letters_still_count(spark, tmp_path, monkeypatch):
    cfg = _pipeline(spark, tmp_path, 'size = "10s"')
    assert len(pd.read_parquet(tmp_path / "out" / "dead_letter")) == 2  # the stream's own verdict

    # Reconcile's jobs run without Spark's small "fast" aggregation map, and without the adaptive planner's
    # partition coalescing, which folded the comparison (three shuffles under a union) into ONE task
    # (job.JOB_CONF); the session's own settings restored after, also when a job fails.
    two_level = "spark.sql.codegen.aggregate.map.twolevel.enabled"
    coalesce = "spark.sql.adaptive.coalescePartitions.enabled"
    spark.conf.set(two_level, "true")
    spark.conf.set(coalesce, "true")
    in_force, write = [], report.write_parquet

    def spy(frame, path):  # noqa: ANN001, ANN202
        in_force.append((spark.conf.get(two_level), spark.conf.get(coalesce)))
        return write(frame, path)

    monkeypatch.setattr(report, "write_parquet", spy)
    result = reconcile(spark, cfg)
    assert in_force == [("false", "false")]
    assert (spark.conf.get(two_level), spark.conf.get(coalesce)) == ("true", "true")
    # The differing windows are read back from reconcile/, which the comparing tasks wrote, a file each.
    written = sorted((tmp_path / "out" / "reconcile").glob("*.parquet"))
    assert 1 <= len(written) <= int(spark.conf.get("spark.sql.shuffle.partitions"))
    assert result.frame.count() == len(pd.read_parquet(tmp_path / "out" / "reconcile")) > 0
    monkeypatch.setattr(report, "write_parquet", lambda frame, path: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        reconcile(spark, cfg)
    assert (spark.conf.get(two_level), spark.conf.get(coalesce)) == ("true", "true")
    monkeypatch.undo()
    spark.conf.unset(coalesce)

    s, frame = _compared(spark, cfg)
    assert s["dead_letter"] == 2 and s["rows"] == 9  # the checks of columns with nulls stayed
    assert s["unexplained"] == 0
    assert s["causes"]["too_late"] == {"rows": 1, "total": 100.0}
    general, general_frame = _compared(spark, cfg, monkeypatch)
    assert general == s
    pd.testing.assert_frame_equal(general_frame, frame)

    # arrival_time is null-free in every footer: never read; partition and offset have nulls: read and checked.
    schema = log.input_schema(spark, cfg)
    the_log, _ = log.read_log(spark, cfg, schema, stream_position(spark, cfg), persist=False, files=False)
    plan = the_log.select("_dead", "_event_us", "key", "amount")._jdf.queryExecution().executedPlan().toString()
    read = plan.split("ReadSchema: ", 1)[1].split(">", 1)[0]
    assert "partition" in read and "offset" in read and "arrival_time" not in read, read

    # A configuration the outputs were not computed with is refused, as the run refuses it: compared anyway,
    # every window would differ and be called unexplained.
    changed = tmp_path / "changed.toml"
    changed.write_text((tmp_path / "p.toml").read_text().replace('size = "10s"', 'size = "20s"'))
    with pytest.raises(ConfigError, match=r"^window\.size: changed from '10s' to '20s' since this checkpoint was "
                                          r"started; the pipeline's outputs were computed with the old value"):
        reconcile(spark, load_config(changed))


def test_hopping_windows_by_window_equal_the_general_plan_and_a_tampered_window_is_named(spark, tmp_path,
                                                                                       monkeypatch):
    cfg = _pipeline(spark, tmp_path, 'type = "hopping"\nsize = "10s"\nslide = "5s"')
    s, frame = _compared(spark, cfg)
    assert s["unexplained"] == 0
    assert s["causes"]["too_late"] == {"rows": 2, "total": 200.0}  # one row, too late for both its windows
    general, general_frame = _compared(spark, cfg, monkeypatch)
    assert general == s
    pd.testing.assert_frame_equal(general_frame, frame)

    # The last step's emissions are their windows' latest: add 1 to one of their counts.
    last = max(glob.glob(str(tmp_path / "out" / "results" / "batch_id=*")), key=lambda d: int(d.rsplit("=", 1)[1]))
    f = next(f for f in sorted(glob.glob(f"{last}/*.parquet")) if pq.read_table(f).num_rows)
    t = pq.read_table(f)
    counts = t.column("count").to_pylist()
    counts[0] += 1
    pq.write_table(t.set_column(t.schema.get_field_index("count"), "count", pa.array(counts, pa.int64())), f)
    for crc in glob.glob(os.path.join(last, ".*.crc")):
        os.remove(crc)
    row = t.slice(0, 1).to_pylist()[0]
    s, _ = _compared(spark, cfg)
    assert s["unexplained"] == 1
    named = s["unexplained_windows"][0]
    assert named["key"] == row["key"] and named["unexplained_count"] == -1

"""Sinks are self-contained (issue 34 item 5): PostgreSQL stages the frame it is given, alone or first.

The reference (PostgreSQL after Parquet, the engine's order) is tests/spark/test_postgres.py; here the
same pipeline runs with the sinks reversed, and the sink takes frames with no Parquet output at all.
"""

from __future__ import annotations

import datetime as dt

import pandas as pd
import psycopg
import pytest
from pyspark.sql import types as T

from lowwater.config import PostgresConfig, parse_config
from lowwater.io.postgres import PostgresSink
from lowwater.spark.engine import Engine

from .test_cli import land
from .test_postgres import pg_config, table

pytestmark = pytest.mark.spark

TABLES = {"results_table": "r5", "late_table": "l5", "dead_letter_table": "d5", "metrics_table": "m5"}


def test_postgres_first_receives_what_parquet_after_it_wrote(spark, pg_server, tmp_path):
    """The engine's sinks reversed: PostgreSQL stages each frame before Parquet writes it."""
    land(tmp_path, "jsonl")
    cfg = parse_config(pg_config(tmp_path, pg_server.url, **TABLES), tmp_path)
    engine = Engine(cfg, spark)
    parquet, pg = engine.sinks.sinks
    assert isinstance(pg, PostgresSink)
    engine.sinks.sinks[:] = [pg, parquet]
    engine.run(drain=True)
    pipe = cfg.output.path
    results = pd.read_parquet(f"{pipe}/results")
    cols = ["batch_id", "key", "count", "total", "biggest", "kind", "revision"]
    with psycopg.connect(pg_server.url) as conn:
        rows, names = _rows_and_columns(conn, "r5", pipe)
    got = pd.DataFrame(rows, columns=names)
    results["batch_id"] = results["batch_id"].astype(int)
    key = lambda df: sorted(map(tuple, df[cols].astype(str).itertuples(index=False)))  # noqa: E731
    assert len(results) > 0 and key(got) == key(results)
    assert (results["kind"] == "revision").sum() == 1
    late = table(pg_server.url, "l5", pipe)
    assert len(late) == len(pd.read_parquet(f"{pipe}/late")) == 1
    with psycopg.connect(pg_server.url) as conn:
        steps = conn.execute("SELECT m.batch_id, m.rows FROM m5 m JOIN lowwater_batches b "
                             "USING (lw_pipeline, batch_id) WHERE lw_pipeline = %s ORDER BY 1", (pipe,)).fetchall()
    metrics = pd.read_parquet(f"{pipe}/metrics").sort_values("batch_id")
    assert steps == [(int(b), int(r)) for b, r in zip(metrics["batch_id"], metrics["rows"], strict=True)]


def test_a_frame_staged_alone_is_delivered_once(spark, pg_server):
    """No engine, no Parquet: the sink given frames directly; a replayed step is recognised and adds nothing."""
    schema = T.StructType([
        T.StructField("key", T.StringType()), T.StructField("window_start", T.TimestampType()),
        T.StructField("window_end", T.TimestampType()), T.StructField("total", T.DoubleType()),
        T.StructField("kind", T.StringType()), T.StructField("revision", T.LongType()),
    ])
    t0 = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    rows = [("a", t0, t0 + dt.timedelta(seconds=10), 3.0, "final", 0),
            ("b", t0, t0 + dt.timedelta(seconds=10), 4.5, "final", 0)]
    frame = spark.createDataFrame(rows, schema).repartition(2)
    pg = PostgresConfig(url=pg_server.url, **{k: f"{v}_alone" for k, v in TABLES.items()})
    for attempt in range(2):  # the second: a replay of step 0 after its delivery
        sink = PostgresSink(pg, "alone", ("key",))
        sink.prepare("results", frame.limit(0))
        sink.begin_step(0)
        sink.write("results", 0, frame)
        assert sink.deliver(0, 7, {"rows": 2}) is (attempt == 0)
    with psycopg.connect(pg_server.url) as conn:
        got = conn.execute("SELECT batch_id, key, window_start, window_end, total, kind, revision FROM r5_alone "
                           "WHERE lw_pipeline = 'alone' ORDER BY key").fetchall()
    assert got == [(0, *r) for r in rows]
    with psycopg.connect(pg_server.url) as conn:
        delivered = conn.execute("SELECT m.batch_id, m.rows, b.spark_batch FROM m5_alone m JOIN lowwater_batches b "
                                 "USING (lw_pipeline, batch_id) WHERE lw_pipeline = 'alone'").fetchall()
    assert delivered == [(0, 2, 7)]


def _rows_and_columns(conn: psycopg.Connection, name: str, pipeline: str) -> tuple[list, list[str]]:
    cur = conn.execute(psycopg.sql.SQL("SELECT * FROM {} WHERE lw_pipeline = %s").format(
        psycopg.sql.Identifier(name)), (pipeline,))
    return cur.fetchall(), [d.name for d in cur.description]

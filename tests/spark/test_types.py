"""Every Spark type survives every output; timestamps are UTC instants; +inf is never 1970 (issue 12).

The inputs are dated 2026, so a 1970 anywhere in an output is a bug (an
overflowed or unset timestamp), not data.
"""

from __future__ import annotations

import os
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pandas as pd
import psycopg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lowwater.config import parse_config
from lowwater.io.files import read_batch
from lowwater.spark.engine import Engine
from lowwater.testing.scenario import base_config, run_scenario, table
from lowwater.time import MAX_TIMESTAMP_US

pytestmark = pytest.mark.spark

BASE = datetime(2026, 1, 1, tzinfo=UTC)
DRAINED = datetime(2262, 4, 11, 23, 47, 16, 854775, tzinfo=UTC)  # the documented +inf watermark
OUTPUTS = ("results", "late", "dead_letter", "metrics")


def at(seconds: float | None) -> datetime | None:
    return None if seconds is None else BASE + timedelta(seconds=seconds)


# -- a Parquet source with every type --------------------------------------------------------

TYPES = pa.schema([
    ("partition", pa.int32()), ("offset", pa.int64()),
    ("event_time", pa.timestamp("us", tz="UTC")), ("arrival_time", pa.timestamp("us", tz="UTC")),
    ("key", pa.string()), ("qty", pa.int32()), ("amount", pa.decimal128(12, 2)),
    ("local_ts", pa.timestamp("us")), ("day", pa.date32()), ("blob", pa.binary()),
    ("tags", pa.list_(pa.string())), ("attrs", pa.map_(pa.string(), pa.int32())),
    ("info", pa.struct([("a", pa.int32()), ("b", pa.string())])),
])


def typed_row(offset: int, event_s: float | None, qty: int, amount: str) -> dict:
    return {
        "partition": 0, "offset": offset, "event_time": at(event_s), "arrival_time": at(100 + offset),
        "key": "k", "qty": qty, "amount": Decimal(amount),
        "local_ts": datetime(2026, 3, 4, 5, 6, 7, 890123 + offset), "day": date(2026, 2, 1 + offset),
        "blob": bytes([0, 255, offset]), "tags": ["x", f"t{offset}"], "attrs": {"n": offset, "m": -1},
        "info": {"a": offset, "b": f"s{offset}"},
    }


FILES = [
    # arrival order = offset; L = 0, one partition, windows of 10 s, no grace
    [typed_row(0, 1, 1, "0.10"), typed_row(1, 2, 2, "0.20"),
     typed_row(2, 15, 4, "1000000000.01"),  # W -> 15: [0, 10) fires
     typed_row(3, 3, 8, "0.03"),  # too late (10 <= 15)
     typed_row(4, None, 16, "0.04")],  # no event time: dead letter
    [typed_row(5, 22, 32, "0.05"), typed_row(6, 4, 64, "0.06")],  # W -> 22; too late
]
AFTER_DRAIN = [typed_row(7, 30, 128, "0.07")]  # lands after the drain: too late against W = +inf

AGGS = {"total": "sum(amount)", "units": "sum(qty)", "least": "min(amount)", "most": "max(qty)",
        "mean": "avg(amount)", "mean_qty": "avg(qty)", "n_qty": "count(qty)"}


def write_file(path: Path, rows: list[dict], i: int) -> Path:
    pq.write_table(pa.Table.from_pylist(rows, TYPES), path)
    os.utime(path, (1_700_000_000 + i, 1_700_000_000 + i))
    return path


def typed_config(**output: object) -> dict:
    return {
        "source": {"format": "parquet", "path": "landing", "partition": "partition", "offset": "offset",
                   "arrival_time": "arrival_time", "event_time": "event_time"},
        "watermark": {"max_out_of_orderness": "0s"},
        "window": {"type": "tumbling", "size": "10s", "allowed_lateness": "0s", "key": ["key"],
                   "aggregations": AGGS},
        "late": {"policy": "side_output"},
        "output": {"path": "out", **output},
    }


def read(path: Path) -> pa.Table:
    """An output as a reader sees it (pyarrow's dataset: hive ``batch_id``, ``_``/``.`` files ignored)."""
    return pq.read_table(path)


def no_1970(out: Path) -> None:
    for kind in OUTPUTS:
        t = read(out / kind)
        for f in t.schema:
            if pa.types.is_timestamp(f.type) or pa.types.is_date(f.type):
                years = {v.year for v in t.column(f.name).to_pylist() if v is not None}
                assert 1970 not in years, (kind, f.name, years)


def test_every_spark_type_reaches_late_dead_letter_and_postgres(spark, pg_server, tmp_path):
    landing = tmp_path / "landing"
    landing.mkdir()
    files = [write_file(landing / f"part-{i}.parquet", rows, i) for i, rows in enumerate(FILES)]
    cfg = parse_config(typed_config(kind="postgres", postgres={
        "url": pg_server.url, "results_table": "tr", "late_table": "tl", "dead_letter_table": "td",
        "metrics_table": "tm"}), tmp_path)
    engine = Engine(cfg, spark, after_drain=True)  # the file after the drain is judged, not refused
    types = {f.name: f.dataType for f in engine.schema.fields}
    assert isinstance(types["event_time"], T.TimestampType) and isinstance(types["local_ts"], T.TimestampNTZType)
    assert isinstance(types["amount"], T.DecimalType) and isinstance(types["attrs"], T.MapType)
    for i, f in enumerate(files):  # one micro-batch per file, as foreachBatch would
        engine.process_batch(read_batch(spark, cfg.source, engine.schema, path=str(f)), i)
    engine.drain()
    late_file = write_file(landing / "part-9.parquet", AFTER_DRAIN, 9)
    engine.process_batch(read_batch(spark, cfg.source, engine.schema, path=str(late_file)), 5)
    summary = engine.summary(engine.store.latest())
    assert (summary["too_late"], summary["dead_letter"], summary["rows"]) == (3, 1, 8) and summary["balanced"]
    assert summary["final_watermark"] == "2262-04-11T23:47:16.854775Z"
    assert summary["final_watermark_us"] == MAX_TIMESTAMP_US
    out = tmp_path / "out"

    # late/ and dead_letter/: every input column with its own type and value, whatever the batch.
    source = pa.Table.from_pylist([r for rows in [*FILES, AFTER_DRAIN] for r in rows], TYPES)
    by_offset = {r["offset"]: r for r in source.to_pylist()}
    late = read(out / "late")
    dead = read(out / "dead_letter")
    for t in (late, dead):
        for f in TYPES:
            want = f.type if not pa.types.is_timestamp(f.type) or f.type.tz is None else pa.timestamp("us", "UTC")
            assert t.schema.field(f.name).type.equals(want, check_metadata=False) or (
                pa.types.is_list(want) and t.schema.field(f.name).type.value_type == want.value_type), f.name
    late_rows = sorted(late.to_pylist(), key=lambda r: r["offset"])
    assert [r["offset"] for r in late_rows] == [3, 6, 7]
    for r in late_rows + dead.to_pylist():
        src = by_offset[r["offset"]]
        for c in TYPES.names:
            assert r[c] == src[c], (r["offset"], c, r[c], src[c])
    assert late.schema.field("watermark").type == pa.timestamp("us", "UTC")
    assert [r["watermark"] for r in late_rows] == [at(15), at(22), DRAINED]  # +inf: the documented max, never 1970
    assert [r["window_start"] for r in late_rows] == [at(0), at(0), at(30)]
    assert dead.num_rows == 1 and dead.to_pylist()[0]["reason"].startswith("missing event_time")

    # results: aggregate types as Spark SQL types them, decimal sums exact.
    res = read(out / "results")
    s = res.schema
    assert s.field("total").type == pa.decimal128(22, 2) and s.field("units").type == pa.int64()
    assert s.field("least").type == pa.decimal128(12, 2) and s.field("most").type == pa.int32()
    assert s.field("mean").type == pa.decimal128(16, 6) and s.field("mean_qty").type == pa.float64()
    assert s.field("window_start").type == pa.timestamp("us", "UTC")
    rows = {r["window_start"]: r for r in res.to_pylist()}
    first = rows[at(0)]
    assert (first["total"], first["units"], first["least"], first["most"]) == (Decimal("0.30"), 3, Decimal("0.10"), 2)
    assert first["mean"] == Decimal("0.150000") and first["mean_qty"] == 1.5 and first["n_qty"] == 2
    assert rows[at(10)]["total"] == Decimal("1000000000.01") and rows[at(10)]["watermark"] == at(22)
    assert rows[at(20)]["watermark"] == DRAINED  # fired by the drain

    # metrics: the drained low watermark is the same max timestamp.
    metrics = read(out / "metrics").to_pylist()
    drained = [m for m in metrics if m["batch_id"] >= 2]  # the drain (step 2) and the step after it
    assert drained and all(m["low_watermark"] == DRAINED for m in drained)
    no_1970(out)

    # PostgreSQL: the same values, in the matching column types.
    with psycopg.connect(pg_server.url) as conn:
        kinds = dict(conn.execute(
            "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = 'tl'").fetchall())
        got_late = conn.execute(
            "SELECT \"offset\", event_time, local_ts, day, amount, blob, tags, attrs, info, watermark, qty "
            "FROM tl WHERE lw_pipeline = %s ORDER BY \"offset\"", (cfg.output.path,)).fetchall()
        got_dead = conn.execute("SELECT \"offset\", amount, blob, attrs FROM td WHERE lw_pipeline = %s",
                                (cfg.output.path,)).fetchall()
        total = conn.execute("SELECT total, units, mean FROM tr WHERE lw_pipeline = %s AND window_start = %s",
                             (cfg.output.path, at(0))).fetchall()
        low = conn.execute("SELECT low_watermark FROM tm WHERE lw_pipeline = %s AND batch_id >= 2",
                           (cfg.output.path,)).fetchall()
    assert kinds["amount"] == "numeric" and kinds["blob"] == "bytea" and kinds["day"] == "date"
    assert kinds["event_time"] == "timestamp with time zone" and kinds["watermark"] == "timestamp with time zone"
    assert kinds["local_ts"] == "timestamp without time zone"
    assert kinds["tags"] == kinds["attrs"] == kinds["info"] == "jsonb"
    assert [r[0] for r in got_late] == [3, 6, 7]
    for off, ev, local, day, amount, blob, tags, attrs, info, _wm, qty in got_late:
        src = by_offset[off]
        assert (ev, local, day, amount, bytes(blob), qty) == (
            src["event_time"], src["local_ts"], src["day"], src["amount"], src["blob"], src["qty"])
        assert tags == src["tags"] and attrs == dict(src["attrs"]) and info == src["info"]
    assert got_late[-1][9] == DRAINED
    assert [(r[0], r[1], bytes(r[2]), r[3]) for r in got_dead] == [(4, Decimal("0.04"), bytes([0, 255, 4]),
                                                                     {"n": 4, "m": -1})]
    assert total == [(Decimal("0.30"), 3, Decimal("0.150000"))]
    assert low and all(r[0] == DRAINED for r in low)


# -- a CSV source with ISO times -------------------------------------------------------------

CSV = """partition,offset,event_time,arrival_time,key,amount
0,0,2026-01-01T00:00:01Z,2026-01-01T00:00:01.5Z,a,1.5
0,1,2026-01-01T00:00:13Z,2026-01-01T00:00:13.5Z,a,2.5
0,2,2026-01-01T00:00:02Z,2026-01-01T00:00:14Z,a,4.0
"""


def test_csv_iso_timestamps_with_too_late_rows(spark, tmp_path):
    (tmp_path / "landing").mkdir()
    (tmp_path / "landing" / "part-0.csv").write_text(CSV)
    data = typed_config()
    data["source"]["format"] = "csv"
    data["window"]["aggregations"] = {"total": "sum(amount)"}
    cfg = parse_config(data, tmp_path)
    engine = Engine(cfg, spark)
    assert isinstance(engine.schema["event_time"].dataType, T.TimestampType)  # Spark infers ISO text as TIMESTAMP
    summary = engine.summary(engine.run(drain=True))
    assert (summary["rows"], summary["on_time"], summary["too_late"]) == (3, 2, 1)
    late = pd.read_parquet(tmp_path / "out" / "late")
    assert len(late) == 1 and late["amount"].tolist() == [4.0]
    assert str(late["event_time"].dt.tz) == "UTC" and late["event_time"].iloc[0] == pd.Timestamp(at(2))
    assert late["watermark"].iloc[0] == pd.Timestamp(at(13))
    results = pd.read_parquet(tmp_path / "out" / "results")
    assert sorted(results["total"]) == [1.5, 2.5] and str(results["window_end"].dt.tz) == "UTC"
    assert (results["watermark"] == pd.Timestamp(DRAINED)).sum() == 1  # [10, 20) fires in the drain
    no_1970(tmp_path / "out")


# -- aggregate types, tumbling and session windows -------------------------------------------

AGG_SCHEMA = "partition STRING, offset LONG, event_time DOUBLE, key STRING, qty INT, amount DECIMAL(12,2), price DOUBLE"
AGG_ROWS = table("""
p  offset  t   key  qty  amount  price
0  0       1   a    1    0.10    0.1
0  1       2   a    2    0.20    0.2
0  2       4   b    -    0.70    0.5
0  3       12  a    4    0.01    1.0    # W -> 12: [0,10) fires
0  4       3   a    8    0.02    2.0    # late update of [0,10) (grace 5 s): a revision
0  5       30  a    16   -       4.0
""")


@pytest.mark.parametrize("window", [{"type": "tumbling", "size": "10s"}, {"type": "session", "gap": "5s"}])
def test_aggregate_types_follow_spark_sql(spark, tmp_path, window):
    rows = [{"partition": r["p"], "offset": r["offset"], "event_time": r["t"], "key": r["key"], "qty": r["qty"],
             "amount": r["amount"], "price": r["price"]} for r in AGG_ROWS]
    aggs = {"s_qty": "sum(qty)", "s_amt": "sum(amount)", "s_price": "sum(price)", "lo_amt": "min(amount)",
            "hi_qty": "max(qty)", "avg_amt": "avg(amount)", "avg_qty": "avg(qty)", "n_amt": "count(amount)"}
    cfg = base_config(source={"schema": AGG_SCHEMA, "offset": "offset"},
                      window={**window, "allowed_lateness": "5s", "aggregations": aggs})
    if window["type"] == "session":
        del cfg["window"]["size"]
    o = run_scenario(spark, cfg, rows, cuts=[3], workdir=tmp_path)
    assert o.summary["late_updates"] == 1 and o.summary["balanced"]
    got = spark.read.parquet(str(tmp_path / "out" / "results"))
    # Spark SQL's own aggregates over the same columns give the types to match.
    src = spark.createDataFrame([], AGG_SCHEMA).groupBy("key").agg(
        F.sum("qty").alias("s_qty"), F.sum("amount").alias("s_amt"), F.sum("price").alias("s_price"),
        F.min("amount").alias("lo_amt"), F.max("qty").alias("hi_qty"), F.avg("amount").alias("avg_amt"),
        F.avg("qty").alias("avg_qty"), F.count("amount").alias("n_amt"))
    for name in aggs:
        assert got.schema[name].dataType == src.schema[name].dataType, name
    # Exact: 0.10 + 0.20 is 0.30 as a decimal sum (the double column gives 0.30000000000000004).
    first = min((r for r in got.collect() if r.key == "a"), key=lambda r: r.window_start)
    assert (first.kind, first.s_amt, first.s_qty, first.avg_amt, first.avg_qty) == (
        "final", Decimal("0.30"), 3, Decimal("0.150000"), 1.5)
    assert first.s_price == 0.1 + 0.2 != 0.3
    (rev,) = [r for r in got.collect() if r.kind == "revision"]
    if window["type"] == "tumbling":  # [0, 10) is still live at W = 12: the revision folds 0.10 + 0.20 + 0.02
        assert (rev.s_amt, rev.s_qty, rev.lo_amt, rev.hi_qty, rev.avg_amt) == (
            Decimal("0.32"), 11, Decimal("0.02"), 8, Decimal("0.106667"))
    else:  # the session [1, 7) was freed at W = 12 = 7 + grace: the late row revises its own [3, 8)
        assert (rev.s_amt, rev.s_qty, rev.lo_amt, rev.hi_qty) == (Decimal("0.02"), 8, Decimal("0.02"), 8)
    b = next(r for r in got.collect() if r.key == "b")
    assert (b.s_qty, b.avg_qty, b.s_amt, b.avg_amt, b.n_amt) == (None, None, Decimal("0.70"), Decimal("0.700000"), 1)


# -- count/min/max of strings, dates, timestamps and booleans (issue 31) ------------------------

TEXT_SCHEMA = ("partition STRING, offset LONG, event_time DOUBLE, key STRING, flight STRING, dep DATE, "
               "seen TIMESTAMP, ok BOOLEAN")
TEXT_ROWS = table("""
p  offset  t   key  flight  dep         seen                 ok
0  0       1   a    UA10    2013-01-03  2013-01-01T05:00:00Z true
0  1       2   a    -       2013-01-01  2013-01-01T04:00:00Z -
0  2       4   b    b6      -           -                    false
0  3       12  a    AA1     2013-01-02  2013-01-01T06:00:00Z false  # W -> 12: [0,10) fires
0  4       3   a    Zz9     2013-01-09  2013-01-01T01:00:00Z false  # late update of [0,10): a revision
0  5       30  a    é1      2012-12-31  2013-01-01T00:00:00Z true
""")


@pytest.mark.parametrize("window", [{"type": "tumbling", "size": "10s"}, {"type": "session", "gap": "5s"}])
def test_count_min_max_of_text_dates_and_timestamps_equal_spark_sql(spark, tmp_path, window):
    """``count(string)`` counts, ``min``/``max`` of strings, dates and timestamps compare, revisions included:
    each window's last emission equals Spark's own batch aggregate over the same rows, in Spark's types."""
    rows = [{"partition": r["p"], "offset": r["offset"], "event_time": r["t"], "key": r["key"],
             "flight": r["flight"], "dep": r["dep"], "seen": r["seen"], "ok": r["ok"]} for r in TEXT_ROWS]
    for r in rows:
        r["ok"] = None if r["ok"] is None else r["ok"] == "true"
    aggs = {"n": "count(flight)", "lo": "min(flight)", "hi": "max(flight)", "last_dep": "max(dep)",
            "first_seen": "min(seen)", "n_ok": "count(ok)", "any_ok": "max(ok)"}
    cfg = base_config(source={"schema": TEXT_SCHEMA, "offset": "offset"},
                      window={**window, "allowed_lateness": "30s", "aggregations": aggs})
    if window["type"] == "session":
        del cfg["window"]["size"]
    o = run_scenario(spark, cfg, rows, cuts=[4], workdir=tmp_path)
    assert o.summary["dead_letter"] == 0 and o.summary["late_updates"] == 1 and o.summary["balanced"]
    got = spark.read.parquet(str(tmp_path / "out" / "results"))
    src = spark.createDataFrame([], TEXT_SCHEMA)
    ts = F.timestamp_seconds("event_time")
    win = F.window(ts, "10 seconds") if window["type"] == "tumbling" else F.session_window(ts, "5 seconds")
    exprs = [F.count("flight").alias("n"), F.min("flight").alias("lo"), F.max("flight").alias("hi"),
             F.max("dep").alias("last_dep"), F.min("seen").alias("first_seen"), F.count("ok").alias("n_ok"),
             F.max("ok").alias("any_ok")]
    for name in aggs:
        assert got.schema[name].dataType == src.groupBy("key").agg(*exprs).schema[name].dataType, name
    batch = read_batch(spark, parse_config(cfg, base_dir=tmp_path).source, T.StructType.fromDDL(TEXT_SCHEMA),
                       files=False)
    want = {(r.key, r.w.start, r.w.end): tuple(r[1:-1]) for r in
            batch.groupBy("key", win.alias("w")).agg(*exprs).select("key", *aggs, "w").collect()}
    last = {}
    for r in sorted(got.collect(), key=lambda r: r.revision):
        last[(r.key, r.window_start.replace(tzinfo=None), r.window_end.replace(tzinfo=None))] = tuple(
            r[a] for a in aggs)
    assert len(want) == 4
    for k, v in want.items():
        assert last[k] == v, k
    a = next(v for k, v in want.items() if k[0] == "a" and k[1].second <= 1)
    assert a[:4] == (2, "UA10", "Zz9", date(2013, 1, 9))  # the late row revised it: strings by code point


# -- empty outputs ---------------------------------------------------------------------------


def test_empty_outputs_read_as_empty_tables_with_their_columns(spark, tmp_path):
    rows = table("""
    partition  offset  event_time  key  amount
    0          0       1           a    1.0
    0          1       12          a    2.0
    """)
    o = run_scenario(spark, base_config(source={"offset": "offset"}), rows, workdir=tmp_path)
    assert o.summary["too_late"] == 0 and o.summary["dead_letter"] == 0
    out = tmp_path / "out"
    late = pd.read_parquet(out / "late")  # no late row ever: still a table
    assert late.empty and {"partition", "event_time", "amount", "watermark", "window_start", "reason",
                           "source_file"} <= set(late.columns)
    dead = pd.read_parquet(out / "dead_letter")
    assert dead.empty and {"key", "raw", "reason", "source_file"} <= set(dead.columns)
    assert str(late["watermark"].dtype) == "datetime64[us, UTC]"
    # Outputs with rows read whole (one schema across the empty file and the steps' files).
    results = pd.read_parquet(out / "results")
    assert len(results) == 2 and set(results["batch_id"].astype(int)) == {0, 1}
    assert spark.read.parquet(str(out / "late")).count() == 0
    assert len(pd.read_parquet(out / "metrics")) == 2
    for kind in OUTPUTS:  # every field nullable in every file
        for f in Path(out, kind).rglob("*.parquet"):
            assert all(fld.nullable for fld in pq.read_schema(f)), (kind, f)

"""``lowwater reconcile`` end to end on tiny pipelines run by ``lowwater run --once`` (issue 16).

One small log: two partitions, partition 1 lagging so that two of its rows
are too late, one row whose event time is clipped (``max_future_skew``),
plus a file landed after the run (in flight) and windows still open. Each
test runs the pipeline once and reconciles it a few times.
"""

from __future__ import annotations

import glob
import json
import os
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lowwater.config import load_config
from lowwater.reconcile.job import reconcile

from .helpers import run_cli_here

pytestmark = pytest.mark.spark

T0 = 1_767_225_600  # 2026-01-01T00:00:00Z

# (partition, event s, arrival s, key, amount), in arrival order, one list per file.
FILES = [
    [(0, 1, 1, "a", 1), (1, 2, 2, "a", 2), (0, 4, 4, "b", 3), (1, 6, 6, "b", 4), (0, 12, 12, "a", 5),
     (1, 13, 13, "a", 6)],
    [(0, 24, 24, "a", 7), (1, 23, 24, "b", 8), (0, 26, 26, "a", 9), (0, 500, 26.5, "b", 50), (1, 27, 27, "b", 10)],
    [(1, 3, 28, "a", 100), (0, 35, 35, "b", 11), (1, 8, 36, "b", 200), (1, 36, 36, "a", 12)],
]
IN_FLIGHT = [(0, 14, 40, "a", 1000), (0, 41, 41, "b", 13)]


def _land(landing: Path, i: int, rows: list[tuple]) -> None:
    lines = [json.dumps({"partition": p, "offset": j, "event_time": T0 + t, "arrival_time": T0 + a, "key": k,
                         "amount": float(v)}) for j, (p, t, a, k, v) in enumerate(rows)]
    (landing / f"part-{i:03d}.jsonl").write_text("\n".join(lines) + "\n")


WITH_MAX = 'total = "sum(amount)", top = "max(amount)"'  # a max: late/ is matched row by row (late.mark)
SUMS = 'total = "sum(amount)", mean = "avg(amount)", spread = "stddev(amount)"'  # sums only (a stddev's moments too):
# late/ is taken out of the totals (late.as_pairs)


def _toml(window: str, late: str = "side_output", output: str = "", aggregations: str = WITH_MAX,
          amount: str = "DOUBLE", partitions: str = "[0, 1]", skew: str = 'max_future_skew = "30s"') -> str:
    """The pipeline of these tests: ``FILES`` landed as JSON lines, windows by ``window``."""
    return f"""
[source]
format = "jsonl"
path = "landing"
partition = "partition"
offset = "offset"
arrival_time = "arrival_time"
event_time = "event_time"
time_unit = "s"
max_files_per_batch = 1
schema = "partition INT, offset LONG, event_time DOUBLE, arrival_time DOUBLE, key STRING, amount {amount}"

[watermark]
max_out_of_orderness = "2s"
partitions = {partitions}
{skew}

[window]
{window}
key = ["key"]
aggregations = {{ {aggregations} }}

[late]
policy = "{late}"

[output]
path = "out"
{output}
"""


def _pipeline(tmp: Path, window: str, late: str = "side_output", output: str = "", aggregations: str = WITH_MAX,
              ) -> Path:
    landing = tmp / "landing"
    landing.mkdir(parents=True)
    for i, rows in enumerate(FILES):
        _land(landing, i, rows)
    cfg = tmp / "pipeline.toml"
    cfg.write_text(_toml(window, late, output, aggregations))
    run = run_cli_here(["run", str(cfg), "--once", "-q"], tmp)
    assert run.returncode == 0, run.stdout + run.stderr
    _land(landing, 9, IN_FLIGHT)  # lands after the run: in flight
    return cfg


def _reconcile(spark, cfg: Path):  # noqa: ANN001, ANN202
    return reconcile(spark, load_config(cfg))


def _results(cfg: Path) -> pd.DataFrame:
    df = pd.read_parquet(cfg.parent / "out" / "results")
    df["batch_id"] = df["batch_id"].astype(int)
    return df.sort_values([c for c in df.columns if c != "watermark"]).reset_index(drop=True)


def _utc(col: pd.Series) -> pd.Series:
    """Timestamps from Spark's ``toPandas`` (naive, in the session's zone: UTC here) as UTC instants."""
    return col.dt.tz_localize("UTC") if col.dt.tz is None else col.dt.tz_convert("UTC")


def _tamper_parquet(cfg: Path) -> tuple[str, str]:
    """Add 1 to the count of one emitted row; returns (key, window start) of its window."""
    for f in sorted(glob.glob(str(cfg.parent / "out" / "results" / "batch_id=*" / "*.parquet"))):
        t = pq.read_table(f)
        if t.num_rows and "batch_id=-1" not in f:
            counts = t.column("count").to_pylist()
            counts[0] += 1
            pq.write_table(t.set_column(t.schema.get_field_index("count"), "count", pa.array(counts, pa.int64())), f)
            for crc in glob.glob(os.path.join(os.path.dirname(f), ".*.crc")):
                os.remove(crc)
            row = t.slice(0, 1).to_pylist()[0]
            return row["key"], row["window_start"].strftime("%Y-%m-%dT%H:%M:%S")
    raise AssertionError("no result row to edit")


@pytest.mark.parametrize("aggregations", [SUMS, WITH_MAX], ids=["sums", "with_max"])
def test_side_output_explained_then_a_tampered_row_then_apply_twice(spark, tmp_path, aggregations):
    cfg = _pipeline(tmp_path, 'type = "tumbling"\nsize = "10s"', aggregations=aggregations)
    r = _reconcile(spark, cfg)
    s = r.summary
    late = pd.read_parquet(tmp_path / "out" / "late")
    assert s["unexplained"] == 0, s
    assert s["causes"]["too_late"]["rows"] == len(late) == 2
    assert s["causes"]["too_late"]["total"] == 300.0
    assert s["causes"]["in_flight"]["rows"] >= 2  # the file landed after the run, and the open windows
    frame = r.frame.toPandas()
    assert set(frame["status"]) <= {"explained", "open"}
    explained = frame[frame["status"] == "explained"]
    causes = explained["too_late_total"] + explained["in_flight_total"] + explained["clipped_total"]
    assert (explained["diff_total"] == causes).all()
    # The row written at 500 s arrived at 26.5 s: clipped, the stream counted it in [20, 30) of key b.
    assert s["clipped_rows"] == 1 and s["causes"]["clipped"]["rows"] == 0  # +1 at 500 s, -1 in [20, 30)
    moved = explained[(explained["key"] == "b") & (explained["clipped_rows"] == -1)]
    assert moved["clipped_total"].tolist() == [-50.0] and moved["diff_total"].tolist() == [-50.0]

    # A second copy of a too-late row slipped into its file: late/ holds one copy, so only one of the two
    # identical rows is late; the other is a row the stream never counted -> unexplained, window named.
    log_file = tmp_path / "landing" / "part-002.jsonl"
    kept = log_file.read_text()
    log_file.write_text(kept.splitlines()[0] + "\n" + kept)
    doubled = _reconcile(spark, cfg).summary
    assert doubled["unexplained"] == 1, doubled
    assert [(w["key"], w["window_start"]) for w in doubled["unexplained_windows"]] == [("a", "2026-01-01T00:00:00Z")]
    log_file.write_text(kept)
    _check_every_file_read(spark, cfg, slip=aggregations == SUMS)
    if aggregations == WITH_MAX:
        return  # the rest does not depend on how late/ is matched: run once (the PostgreSQL test has a max)

    key, start = _tamper_parquet(cfg)
    bad = run_cli_here(["reconcile", str(cfg), "-q"], tmp_path)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert f"key={key} window_start={start}" in bad.stdout

    first = run_cli_here(["reconcile", str(cfg), "-q", "--apply"], tmp_path)
    assert first.returncode == 1  # the edit is still reported; the corrections make the sink right again
    once = _results(cfg)
    assert (once["kind"] == "correction").sum() >= 3
    second = run_cli_here(["reconcile", str(cfg), "-q", "--apply", "--json", str(tmp_path / "s.json")], tmp_path)
    assert second.returncode == 0, second.stdout + second.stderr
    pd.testing.assert_frame_equal(_results(cfg), once)  # twice == once, row for row
    after = json.loads((tmp_path / "s.json").read_text())
    assert after["corrections"] == 0 and after["unexplained"] == 0
    # Every fired window now folds to the batch truth: only windows the stream has not fired still differ.
    assert {w["status"] for w in after["largest"]} <= {"open"}


def _check_every_file_read(spark, cfg: Path, slip: bool) -> None:  # noqa: ANN001
    """With the in-flight file set aside the stream has read every file: explained as before (sums: the log is
    read without file names, ``log.read_log``'s ``files=False``; a max: with them, for the hash match).

    ``slip``: then a second copy of a late/ row (the log holds one): taken
    out twice, its window is unexplained; then undone.
    """
    in_flight = cfg.parent / "landing" / "part-009.jsonl"
    aside = cfg.parent / "part-009.jsonl"
    in_flight.rename(aside)
    try:
        whole = _reconcile(spark, cfg).summary
        assert whole["unexplained"] == 0 and whole["files_read"] == whole["files_landed"] == 3, whole
        assert whole["causes"]["too_late"]["rows"] == 2 and whole["causes"]["in_flight"]["rows"] >= 1, whole
        if slip:
            _slip_a_late_row(spark, cfg)
    finally:
        aside.rename(in_flight)


def _slip_a_late_row(spark, cfg: Path) -> None:  # noqa: ANN001
    late_dir = cfg.parent / "out" / "late"
    f = next(f for f in sorted(late_dir.rglob("*.parquet")) if pq.read_table(f).num_rows)
    kept = f.read_bytes()
    t = pq.read_table(f)
    pq.write_table(pa.concat_tables([t, t.slice(0, 1)]), f)
    for crc in f.parent.glob(".*.crc"):
        crc.unlink()
    try:
        s = _reconcile(spark, cfg).summary
        assert s["unexplained"] == 1, s
        (w,) = s["unexplained_windows"]
        row = t.slice(0, 1).to_pylist()[0]
        assert w["key"] == row["key"] and w["unexplained_count"] == -1  # expected: one row fewer than counted
    finally:
        f.write_bytes(kept)


def test_drop_policy_hopping_retracting_is_explained_from_the_log(spark, tmp_path):
    cfg = _pipeline(tmp_path, 'type = "hopping"\nsize = "10s"\nslide = "5s"\naccumulation = "retracting"\n'
                    'allowed_lateness = "3s"', late="drop")
    s = _reconcile(spark, cfg).summary
    assert s["unexplained"] == 0, s
    assert s["causes"]["dropped"]["rows"] >= 2 and s["causes"]["too_late"]["rows"] == 0
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["too_late"] >= 1


def test_side_output_hopping_discarding_takes_late_out_per_window(spark, tmp_path):
    """A row too late for one of its hopping windows: late/ holds that pair; a discarding avg is not compared."""
    cfg = _pipeline(tmp_path, 'type = "hopping"\nsize = "10s"\nslide = "5s"\naccumulation = "discarding"\n'
                    'allowed_lateness = "3s"', aggregations=SUMS)
    r = _reconcile(spark, cfg)
    s = r.summary
    late = pd.read_parquet(tmp_path / "out" / "late")
    assert s["unexplained"] == 0, s["unexplained_windows"]
    assert s["causes"]["too_late"]["rows"] == len(late) == 4  # two rows, each too late for both its windows
    assert s["causes"]["too_late"]["total"] == late["amount"].sum() == 600.0
    frame = r.frame.toPandas()
    assert frame["stream_mean"].isna().all() and frame["unexplained_mean"].isna().all()  # deltas' avg: no fold


def test_session_windows_in_discarding_mode(spark, tmp_path):
    cfg = _pipeline(tmp_path, 'type = "session"\ngap = "5s"\naccumulation = "discarding"')
    r = _reconcile(spark, cfg)
    s = r.summary
    assert s["unexplained"] == 0, s
    assert s["causes"]["too_late"]["rows"] == len(pd.read_parquet(tmp_path / "out" / "late")) == 2
    frame = r.frame.toPandas()
    frame["window_start"], frame["window_end"] = _utc(frame["window_start"]), _utc(frame["window_end"])
    first = frame[(frame["key"] == "a") & (frame["window_start"] == pd.Timestamp(T0 + 1, unit="s", tz="UTC"))]
    # The batch session [1, 8) holds the too-late row at 3, which the stream's session [1, 7) never had.
    assert first["window_end"].tolist() == [pd.Timestamp(T0 + 8, unit="s", tz="UTC")]
    assert first["stream_total"].tolist() == [3.0] and first["batch_total"].tolist() == [103.0]


def test_count_min_max_of_a_string_column_are_recomputed_and_a_tampered_max_is_flagged(spark, tmp_path):
    """Issue 31: count/min/max of a text column reconcile (compared as strings, no difference to subtract)."""
    cfg = _pipeline(tmp_path, 'type = "tumbling"\nsize = "10s"',
                    aggregations='n = "count(key)", lo = "min(key)", hi = "max(key)"')
    s = _reconcile(spark, cfg).summary
    assert s["unexplained"] == 0 and s["causes"]["too_late"]["rows"] == 2, s
    for f in sorted((tmp_path / "out" / "results").glob("batch_id=*/*.parquet")):
        t = pq.read_table(f)
        if t.num_rows:
            hi = pa.array(["~"] * t.num_rows, pa.string())
            pq.write_table(t.set_column(t.schema.get_field_index("hi"), "hi", hi), f)
            for crc in f.parent.glob(".*.crc"):
                crc.unlink()
    r = _reconcile(spark, cfg)
    assert r.summary["unexplained"] >= 1
    frame = r.frame.toPandas()
    wrong = frame[frame["status"] == "unexplained"]
    assert (wrong["stream_hi"] == "~").all() and (wrong["batch_hi"] == wrong["key"]).all()


def test_postgres_tampered_row_then_apply_twice_and_current_is_the_truth(spark, pg_server, tmp_path):
    import psycopg

    out = ('kind = "postgres"\n[output.postgres]\n'
           f'url = "{pg_server.url}"\nresults_table = "rec_results"\nlate_table = "rec_late"\n'
           'dead_letter_table = "rec_dead"\nmetrics_table = "rec_metrics"\nbatches_table = "rec_batches"')
    cfg = _pipeline(tmp_path, 'type = "tumbling"\nsize = "10s"', output=out)
    truth = _reconcile(spark, cfg)
    assert truth.summary["unexplained"] == 0, truth.summary
    fired = truth.frame.toPandas()  # now: a Reconciliation's frame reads reconcile/, which the next run overwrites
    with psycopg.connect(pg_server.url, autocommit=True) as conn:
        conn.execute("UPDATE rec_results SET total = total + 1 WHERE ctid = (SELECT ctid FROM rec_results "
                     "WHERE kind = 'final' AND key = 'b' ORDER BY window_start LIMIT 1)")
    bad = run_cli_here(["reconcile", str(cfg), "-q"], tmp_path)
    assert bad.returncode == 1 and "key=b window_start=2026-01-01T00:00:00Z" in bad.stdout, bad.stdout

    def rows() -> list[tuple]:
        with psycopg.connect(pg_server.url) as conn:
            return sorted(conn.execute("SELECT key, window_start, window_end, count, total, top, kind, revision, "
                                       "batch_id FROM rec_results").fetchall())

    assert run_cli_here(["reconcile", str(cfg), "-q", "--apply"], tmp_path).returncode == 1
    once = rows()
    assert any(r[6] == "correction" for r in once)
    again = run_cli_here(["reconcile", str(cfg), "-q", "--apply"], tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    assert rows() == once  # twice == once, row for row
    after = _reconcile(spark, cfg)
    assert set(after.frame.toPandas()["status"]) <= {"open"}  # every fired window folds to the batch truth
    fired = fired[fired["status"] != "open"]
    with psycopg.connect(pg_server.url) as conn:
        current = {(k, ws): (n, t) for k, ws, n, t in conn.execute(
            "SELECT key, window_start, count, total FROM rec_results_current").fetchall()}
    fired["window_start"] = _utc(fired["window_start"])
    assert len(fired) >= 3
    for w in fired.itertuples():
        assert current[(w.key, w.window_start.to_pydatetime())] == (w.batch_count, w.batch_total)


def test_bad_options_are_one_line_and_exit_2(tmp_path):
    """Refused before Spark starts: a time that is not one, a plot that is not HTML, sessions with drop."""
    cfg = tmp_path / "p.toml"
    base = ('[source]\nformat = "jsonl"\npath = "landing"\nevent_time = "t"\n[window]\n{window}\n'
            '[late]\npolicy = "{late}"\n[output]\npath = "out"\n')
    cfg.write_text(base.format(window='size = "10s"', late="side_output"))
    for args, needle in ((["--from", "yesterday"], "--from"), (["--plot", "x.png"], "--plot")):
        r = run_cli_here(["reconcile", str(cfg), *args], tmp_path)
        assert r.returncode == 2 and needle in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    cfg.write_text(base.format(window='type = "session"\ngap = "5s"', late="drop"))
    r = run_cli_here(["reconcile", str(cfg)], tmp_path)
    assert r.returncode == 2 and "session" in r.stderr, r.stderr


def test_double_sums_are_compared_to_a_tolerance_of_their_rows_magnitude(spark):
    """A total with a huge too-late row taken back out is off by ulps of the huge row, not of the result."""
    from pyspark.sql import functions as F

    from lowwater.config import parse_config
    from lowwater.reconcile.compare import side_by_side
    from lowwater.reconcile.position import StreamPosition

    cfg = parse_config({"source": {"format": "jsonl", "path": "x", "event_time": "t"},
                        "window": {"size": "10s", "key": ["k"], "aggregations": {"total": "sum(v)"}},
                        "output": {"path": "out"}})
    # Window 0: rows 1e17 (too late) and 0.3: the expected total (1e17 + 0.3) - 1e17 is 0.0 in doubles, the
    # stream counted 0.3. Window 1: the same numbers with no magnitude known: an unexplained 0.3.
    rows = [("a", 0, 1e17 + 0.3, (1e17 + 0.3) - 1e17, 0.3, 1e17 + 0.3),
            ("a", 10_000_000, 1e17 + 0.3, (1e17 + 0.3) - 1e17, 0.3, None)]
    out = spark.createDataFrame(rows, "k string, _ws long, t_total double, e_total double, s_total double, "
                                      "m_total double").select(
        "k", "_ws", (F.col("_ws") + 10_000_000).alias("_we"), F.lit(2).cast("long").alias("t_count"),
        F.lit(1).cast("long").alias("e_count"), F.lit(1).cast("long").alias("s_count"), "t_total", "e_total",
        "s_total", "m_total", F.lit(0).alias("_last_rev"), F.lit(0).alias("_dead_n"), F.lit(0).alias("_clipped_n"))
    position = StreamPosition(step=1, watermark_us=10**12, read_files=(), landed_files=0, drained=True)
    got = {r["_ws"]: r["status"] for r in side_by_side(cfg, out, position).collect()}
    assert got == {0: "explained", 10_000_000: "unexplained"}


def test_an_average_over_no_rows_is_null_even_when_its_sum_is_zero(spark):
    """Reconcile's expected value of a window whose every row was taken back out: sum 0 over 0 rows -> null."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    from lowwater.core.partials import SUM
    from lowwater.spark.aggtypes import result_expr

    df = spark.createDataFrame([(0, 0.0, 0), (2, 3.0, 2)], "s_dec long, s_dbl double, nn long").select(
        F.col("s_dec").cast("decimal(20,2)").alias("s_dec"), "s_dbl", "nn")
    for name, dt in (("s_dec", T.DecimalType(10, 2)), ("s_dbl", T.DoubleType())):
        avg = result_expr("avg", dt, lambda f, name=name: F.col(name) if f is SUM else F.col("nn"))
        got = [r[0] for r in df.select(avg).collect()]
        assert got[0] is None and float(got[1]) == (1.0 if name == "s_dec" else 1.5), (name, got)


def test_a_window_whose_every_row_was_too_late_expects_no_sum(spark):
    """late/ taken back out of a window it emptied: the expected total is null (no row), not x - x = 0."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    from lowwater.config import parse_config
    from lowwater.reconcile import attribution
    from lowwater.reconcile.compare import side_by_side
    from lowwater.reconcile.log import TRUTH
    from lowwater.reconcile.position import StreamPosition
    from lowwater.reconcile.stream import fold_aggs

    cfg = parse_config({"source": {"format": "jsonl", "path": "x", "event_time": "t"},
                        "window": {"size": "10s", "key": ["k"], "aggregations": {"total": "sum(v)"}},
                        "output": {"path": "out"}})
    # One log row in [0, 10s) of key a, and the same row from late/ (taken back out); the stream emitted nothing.
    pairs = spark.createDataFrame([("a", 0, 10_000_000, TRUTH, 5.0, False), ("a", 0, 10_000_000, TRUTH, 5.0, True)],
                                  "k string, _ws long, _we long, _role int, _v0 double, _neg boolean").select(
        "*", F.lit(None).cast("string").alias("_file"), F.lit(False).alias("_clipped"), F.lit(False).alias("_unread"),
        F.lit(False).alias("_covered"), F.col("_neg").alias("_late"))
    position = StreamPosition(step=1, watermark_us=10**12, read_files=(), landed_files=1, drained=True)
    tallied = attribution.causes(attribution.tally(cfg, pairs), "side_output", position)
    emitted = spark.createDataFrame([], "k string, _ws long, _we long, count long, total double, kind string, "
                                        "revision long, batch_id long")
    out = attribution.per_window(cfg, tallied, {"v": T.DoubleType()}, emitted, fold_aggs(cfg, emitted.schema))
    (row,) = side_by_side(cfg, out, position).collect()
    assert row["status"] == "explained" and row["too_late_rows"] == 1 and row["too_late_total"] == 5.0, row
    assert row["batch_total"] == 5.0 and row["stream_total"] is None and row["unexplained_total"] is None, row


def test_a_batch_sum_beyond_a_bigint_is_one_line_not_a_stack(tmp_path):
    """The stream's sum fits (the second huge row was too late); the batch truth's does not: one line, exit 1."""
    landing = tmp_path / "landing"
    landing.mkdir()
    big = 9_000_000_000_000_000_000
    for i, (t, a, v) in enumerate([(1, 1, big), (20, 20, 1), (2, 21, big)]):  # the last: too late for [0, 10)
        row = {"partition": 0, "offset": i, "event_time": T0 + t, "arrival_time": T0 + a, "key": "k", "amount": v}
        (landing / f"part-{i:03d}.jsonl").write_text(json.dumps(row) + "\n")
    cfg = tmp_path / "pipeline.toml"
    cfg.write_text(_toml('size = "10s"', aggregations='total = "sum(amount)"', amount="LONG", partitions="[0]",
                         skew=""))
    run = run_cli_here(["run", str(cfg), "--once", "-q"], tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert len(pq.read_table(tmp_path / "out" / "late")) == 1  # the second huge row: not in the stream's sum
    r = run_cli_here(["reconcile", str(cfg), "-q"], tmp_path)
    lines = [ln for ln in r.stderr.strip().splitlines() if ln.startswith("error:")]
    assert r.returncode == 1 and len(lines) == 1 and "sum" in lines[0], r.stderr[-3000:]
    assert "Traceback" not in r.stderr and "at org.apache" not in r.stderr, r.stderr[-3000:]


KEPT = ('n = "count_distinct(amount)", s = "collect_set(amount)", first = "first_by_time(amount)", '
        'last = "last_by_time(amount)", l = "collect_list(amount)", d = "approx_count_distinct(amount)", '
        'p = "approx_percentile(amount, 0.5)"')


def test_distinct_counts_collections_first_last_and_sketches_are_explained_then_applied(spark, tmp_path):
    """ADR 0039: the aggregates kept beyond sums reconcile (retracting). Key b's window [0, 10) lost its too-late
    row (200 at 8 s): the batch's last value, set and distinct count hold it, the stream's do not, and the
    cause is too_late. The row clipped from 500 s to 26.5 s sits in b's [20, 30) by its clipped time between
    the rows at 23 s and 27 s, as the stream placed it. An edited set is unexplained; --apply corrects it and
    the too-late window, a second reconcile finds only open windows."""
    from lowwater.reconcile.run import reconciled

    cfg = _pipeline(tmp_path, 'type = "tumbling"\nsize = "10s"\naccumulation = "retracting"', aggregations=KEPT)
    r = _reconcile(spark, cfg)
    s = r.summary
    assert s["unexplained"] == 0 and s["causes"]["too_late"]["rows"] == 2, s
    frame = r.frame.toPandas()
    frame["window_start"] = _utc(frame["window_start"])
    b0 = frame[(frame["key"] == "b") & (frame["window_start"] == pd.Timestamp(T0, unit="s", tz="UTC"))].iloc[0]
    assert b0["status"] == "explained" and b0["too_late_rows"] == 1
    assert (b0["batch_last"], b0["stream_last"], b0["batch_n"], b0["stream_n"]) == (200.0, 4.0, 3, 2)
    assert list(b0["batch_s"]) == [3.0, 4.0, 200.0] and list(b0["stream_s"]) == [3.0, 4.0]
    assert list(b0["batch_l"]) == [3.0, 4.0, 200.0] and (b0["batch_first"], b0["batch_d"]) == (3.0, 3)
    assert (b0["batch_p"], b0["stream_p"]) == (4.0, 3.0)  # Spark's median of {3, 4, 200} and of {3, 4}
    results = pd.read_parquet(tmp_path / "out" / "results")  # (arrays: not sortable as _results sorts)
    results["window_start"] = _utc(results["window_start"])
    b20 = results[(results["key"] == "b") & (results["window_start"] == pd.Timestamp(T0 + 20, unit="s", tz="UTC"))]
    assert list(b20.iloc[-1]["l"]) == [8.0, 50.0, 10.0]  # the clipped row at its clipped time, explained

    for f in sorted((tmp_path / "out" / "results").glob("batch_id=*/*.parquet")):  # an edited set
        t = pq.read_table(f)
        if t.num_rows:
            i = t.schema.get_field_index("s")
            pq.write_table(t.set_column(i, "s", pa.array([[-1.0]] * t.num_rows, t.schema.field(i).type)), f)
            for crc in f.parent.glob(".*.crc"):
                crc.unlink()
            break
    with reconciled(load_config(cfg), None, None, True, lambda jars, conf: spark) as applied:
        assert applied.summary["unexplained"] >= 1 and applied.summary["corrections"] >= 2  # the edit is named
    fixed = pd.read_parquet(tmp_path / "out" / "results")
    fixed["window_start"] = _utc(fixed["window_start"])
    corr = fixed[(fixed["kind"] == "correction") & (fixed["key"] == "b")
                 & (fixed["window_start"] == pd.Timestamp(T0, unit="s", tz="UTC"))]
    assert len(corr) == 1 and list(corr.iloc[0]["s"]) == [3.0, 4.0, 200.0] and corr.iloc[0]["last"] == 200.0
    again = _reconcile(spark, cfg).summary
    assert again["unexplained"] == 0 and {w["status"] for w in again["largest"]} <= {"open"}, again


def test_sessions_recompute_distinct_counts_last_by_time_and_sketches_and_an_edit_is_unexplained(spark, tmp_path):
    """ADR 0039 for session windows (retracting, side_output): key b's batch session [4, 13) holds the too-late
    row (200 at 8 s) that the stream's session [4, 11) never had: its last value, distinct count and HLL estimate
    differ, explained by too_late. The row clipped from 500 s to 26.5 s is b's last by its clipped time, as the
    stream placed it. An edited distinct count is unexplained."""
    kept = 'n = "count_distinct(amount)", last = "last_by_time(amount)", d = "approx_count_distinct(amount)"'
    cfg = _pipeline(tmp_path, 'type = "session"\ngap = "5s"\naccumulation = "retracting"', aggregations=kept)
    r = _reconcile(spark, cfg)
    s = r.summary
    assert s["unexplained"] == 0 and s["causes"]["too_late"]["rows"] == 2, s
    frame = r.frame.toPandas()
    frame["window_start"], frame["window_end"] = _utc(frame["window_start"]), _utc(frame["window_end"])
    b = frame[(frame["key"] == "b") & (frame["window_start"] == pd.Timestamp(T0 + 4, unit="s", tz="UTC"))].iloc[0]
    assert b["window_end"] == pd.Timestamp(T0 + 13, unit="s", tz="UTC")
    assert b["status"] == "explained" and b["too_late_rows"] == 1 and pd.isna(b["not_compared"])
    assert (b["batch_last"], b["stream_last"], b["batch_n"], b["stream_n"], b["batch_d"], b["stream_d"]) == (
        200.0, 4.0, 3, 2, 3, 2)
    b23 = (frame["key"] == "b") & (frame["window_start"] == pd.Timestamp(T0 + 23, unit="s", tz="UTC"))
    assert not b23.any()  # [23, 32): last = 10.0 (27 s) in both, the clipped row's 50.0 at 26.5 s before it

    for f in sorted((tmp_path / "out" / "results").glob("batch_id=*/*.parquet")):  # b's session's distinct count
        t = pq.read_table(f)
        df = t.to_pandas()
        hit = (df["key"] == "b") & (_utc(df["window_start"]) == pd.Timestamp(T0 + 4, unit="s", tz="UTC"))
        if hit.any():
            i = t.schema.get_field_index("n")
            edited = [99 if h else v for h, v in zip(hit, t.column("n").to_pylist(), strict=True)]
            pq.write_table(t.set_column(i, "n", pa.array(edited, t.schema.field(i).type)), f)
            for crc in f.parent.glob(".*.crc"):
                crc.unlink()
    wrong = _reconcile(spark, cfg).summary["unexplained_windows"]  # (--apply: sessions are not corrected yet)
    assert [(w["key"], w["window_start"], w["window_end"], w["unexplained_n"]) for w in wrong] == [
        ("b", "2026-01-01T00:00:04Z", "2026-01-01T00:00:13Z", -97)]  # 2 expected (the too-late row out), 99 read

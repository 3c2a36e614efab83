"""``lowwater reconcile`` of session windows whose stream emitted several intervals per batch session (issue 31).

One partition, gap 5 s, grace 10 s, three files read a step each (times in seconds, ``W`` = the largest event
so far - 2):

* key ``a``: [1, 8) and [10, 15) fire, then ``a@7`` (within grace) merges them: a revision of [1, 15);
* key ``b``: [40, 45) and [48, 53) fire and are freed, then ``b@44`` bridges them too late: the batch session
  [40, 53) holds two heads (and the late row), whose average is their rows' average;
* key ``d``: the same with a null amount in the first part: the average of two heads with a null among their
  rows cannot be weighted, so it is named as not compared;
* key ``s``: [100, 107) fires and is freed, then late rows within grace build [112, 117) ... [100, 117) around
  it, each a revision, without it (it was freed): a split that accumulating mode cannot tell from a merge by
  bounds and revisions; emitted at W = 118, past [100, 107)'s freeing, it is read both ways;
* keys ``x``, ``y``: a session fired late, one still open.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lowwater.config import load_config
from lowwater.reconcile.job import reconcile

from .helpers import run_cli_here
from .test_reconcile import T0, _toml

pytestmark = pytest.mark.spark

# (event s, arrival s, key, amount), in arrival order, one list per file (a step each). A row sees the W of the
# rows before it, and sessions fire before each row (SEMANTICS.md): the same emissions however the log is cut.
FILES = [
    [(1, 1, "a", 1.0), (3, 3, "a", 2.0), (10, 10, "a", 3.0), (18, 18, "a", 4.0),
     (7, 19, "a", 5.0)],  # W = 16: merges [1, 8) and [10, 15) within grace
    [(40, 40, "b", 10.0), (41, 41, "d", None), (48, 48, "b", 20.0), (49, 49, "d", 6.0),
     (70, 70, "x", 1.0),  # W = 68: b's and d's sessions fired and freed
     (44, 71, "b", 1000.0), (45, 72, "d", 1000.0)],  # too late: they would have bridged
    [(100, 100, "s", 1.0), (102, 101, "s", 2.0), (120, 120, "y", 1.0),  # W = 118: [100, 107) fired and freed
     (112, 121, "s", 3.0), (108, 122, "s", 4.0), (104, 123, "s", 5.0), (100, 124, "s", 6.0)],  # -> [100, 117)
]
MEAN = 'total = "sum(amount)", mean = "avg(amount)", top = "max(amount)"'


def _pipeline(tmp: Path, mode: str) -> Path:
    landing = tmp / "landing"
    landing.mkdir(parents=True)
    offset = 0
    for i, rows in enumerate(FILES):
        lines = []
        for t, a, k, v in rows:
            lines.append(json.dumps({"partition": 0, "offset": offset, "event_time": T0 + t, "arrival_time": T0 + a,
                                     "key": k, "amount": v}))
            offset += 1
        (landing / f"part-{i:03d}.jsonl").write_text("\n".join(lines) + "\n")
    cfg = tmp / "pipeline.toml"
    window = f'type = "session"\ngap = "5s"\nallowed_lateness = "10s"\naccumulation = "{mode}"'
    cfg.write_text(_toml(window, aggregations=MEAN, partitions="[0]", skew=""))
    run = run_cli_here(["run", str(cfg), "--once", "-q"], tmp)
    assert run.returncode == 0, run.stdout + run.stderr
    return cfg


@pytest.mark.parametrize("mode", ["accumulating", "discarding", "retracting"])
def test_merged_and_bridged_sessions_are_explained_and_a_tampered_row_is_not(spark, tmp_path, mode):
    cfg = _pipeline(tmp_path, mode)
    r = reconcile(spark, load_config(cfg))
    s = r.summary
    assert s["unexplained"] == 0, s["unexplained_windows"]
    assert s["causes"]["too_late"]["rows"] == 2 and s["causes"]["too_late"]["total"] == 2000.0, s
    frame = {row["key"]: row for row in r.frame.collect()}
    b = frame["b"]  # [40, 53): the two heads' rows, without the late one
    assert (b["batch_count"], b["stream_count"], b["stream_total"]) == (3, 2, 30.0), b
    if mode != "discarding":  # a discarding average has no fold (docs/reconcile.md)
        assert b["stream_mean"] == 15.0 and b["not_compared"] is None, b
        assert frame["d"]["stream_mean"] is None and frame["d"]["not_compared"] == "mean", frame["d"]
        assert s["not_compared"] == {"mean": 1}, s
    else:  # named in every window
        assert s["not_compared"] == {"mean": s["windows_checked"]} and b["not_compared"] == "mean", s
    assert "a" not in frame  # the merged session is the batch's: nothing differs
    res = pq.read_table(cfg.parent / "out" / "results").to_pandas()
    a = res[res["key"] == "a"]
    # [1, 15): the merge of [1, 8) and [10, 15), a revision of both finals
    merged = a[(_secs(a["window_start"]) == 1) & (_secs(a["window_end"]) == 15)]
    assert merged["kind"].tolist() == ["revision"] and len(a[a["kind"] == "final"]) >= 2, a
    assert (a["kind"] == "retraction").sum() == (2 if mode == "retracting" else 0), a
    split = res[res["key"] == "s"]  # [100, 107)'s final, then [100, 117) without its rows: 6 rows in all
    ends = _secs(split["window_end"])
    assert split[ends == 107]["kind"].tolist() == ["final"] and split[ends == 117]["revision"].max() == 4, split
    assert "s" not in frame  # explained: the batch session [100, 117) equals [100, 107) and [100, 117) together
    _tamper(cfg, "b")  # one of b's heads counts a row more
    bad = run_cli_here(["reconcile", str(cfg), "-q"], tmp_path)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "unexplained: key=b window_start=2026-01-01T00:00:40Z" in bad.stdout, bad.stdout
    assert "count off by -1" in bad.stdout and "key=a" not in bad.stdout, bad.stdout


def _secs(ts: pd.Series) -> pd.Series:
    """Timestamps as seconds after ``T0``."""
    return (pd.to_datetime(ts, utc=True) - pd.Timestamp(T0, unit="s", tz="UTC")).dt.total_seconds()


def _tamper(cfg: Path, key: str) -> None:
    """Add 1 to the count of the first emission of ``key`` (b's are never replaced: freed, not merged)."""
    for f in sorted((cfg.parent / "out" / "results").glob("batch_id=*/*.parquet")):
        t = pq.read_table(f)
        rows = t.column("key").to_pylist()
        if key in rows:
            counts = t.column("count").to_pylist()
            counts[rows.index(key)] += 1
            pq.write_table(t.set_column(t.schema.get_field_index("count"), "count", pa.array(counts, pa.int64())), f)
            for crc in f.parent.glob(".*.crc"):
                crc.unlink()
            return
    raise AssertionError(f"no emission of {key}")


def test_a_merged_average_is_compared_to_its_last_digit_or_named_as_not_compared(spark):
    """Several heads: a decimal average within one unit of its last digit is explained, two units are not; with a
    null among the rows it is not compared (stream value null, named in ``not_compared``)."""
    from pyspark.sql import functions as F

    from lowwater.config import parse_config
    from lowwater.reconcile.compare import side_by_side
    from lowwater.reconcile.position import StreamPosition

    cfg = parse_config({"source": {"format": "jsonl", "path": "x", "event_time": "t"},
                        "window": {"type": "session", "gap": "5s", "key": ["k"], "aggregations": {"m": "avg(v)"}},
                        "output": {"path": "out"}})
    # (window start, expected avg, stream avg, heads, a null among the rows)
    rows = [(0, "3.333333", "3.333334", 2, False), (10, "3.333333", "3.333335", 2, False),
            (20, "3.333333", "3.333334", 1, False), (30, "3.333333", "9.000000", 2, True)]
    counts = [F.lit(3).cast("long").alias(c) for c in ("t_count", "e_count", "s_count")]
    avgs = [F.col(c).cast("decimal(14,6)").alias(n) for c, n in (("e", "t_m"), ("e", "e_m"), ("s", "s_m"))]
    out = spark.createDataFrame(rows, "_ws long, e string, s string, _heads long, _nulls_m boolean").select(
        F.lit("a").alias("k"), "_ws", (F.col("_ws") + 5_000_000).alias("_we"), *counts, *avgs, "_heads",
        "_nulls_m", F.lit(0).alias("_last_rev"), F.lit(0).alias("_dead_n"), F.lit(0).alias("_clipped_n"))
    position = StreamPosition(step=1, watermark_us=10**12, read_files=(), landed_files=0, drained=True)
    got = {r["_ws"]: (r["status"], r["not_compared"], r["stream_m"] is None)
           for r in side_by_side(cfg, out, position).collect()}
    assert got == {0: ("explained", None, False), 10: ("unexplained", None, False),
                   20: ("unexplained", None, False), 30: ("explained", "m", True)}

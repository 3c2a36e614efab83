"""count_if and the variances/standard deviations on Spark (ADR 0034), against Spark's own batch aggregates.

One out-of-order log (late updates within grace, nulls, cut into micro-batches) runs through tumbling windows
(the executors' Arrow fold) and session windows (the session machine's path), both retracting: the most stateful
mode, and its revisions carry the accumulating value. Each window still standing equals
``groupBy(...).agg(F.count_if, F.stddev, ...)`` over the same rows: counts exactly, the moments to 1e-9 (Spark
folds them by Welford's update, in another order), and every retraction carries the value it takes back.
``reconcile`` with a standard deviation: ``tests/spark/test_reconcile.py``.
"""

from __future__ import annotations

import math
import random

import numpy as np
import pandas as pd
import pytest
from pyspark.sql import functions as F

from lowwater.testing.scenario import base_config, run_scenario

pytestmark = pytest.mark.spark

SCHEMA = ("partition STRING, offset LONG, event_time DOUBLE, key STRING, amount DOUBLE, qty INT, "
          "price DECIMAL(10,2), flag BOOLEAN")
AGGS = {"ok": "count_if(flag)", "sd": "stddev(amount)", "sdp": "stddev_pop(amount)", "v": "variance(qty)",
        "vp": "var_pop(qty)", "sdd": "std(price)", "total": "sum(amount)"}
# Spark's own functions, by name (a Column needs a running session).
SPARK = {"ok": ("count_if", "flag"), "sd": ("stddev", "amount"), "sdp": ("stddev_pop", "amount"),
         "v": ("variance", "qty"), "vp": ("var_pop", "qty"), "sdd": ("std", "price"), "total": ("sum", "amount")}
# first/last by event time (tumbling and sessions), against Spark's min_by/max_by ordered by
# (event time, arrival): the same tie-break; the value of the first row may be null, as min_by's.
# Collections likewise: Spark's count_distinct, collect_set sorted (ours is), collect_list by (event, arrival).
TIMED = {**AGGS, "f": "first_by_time(amount)", "l": "last_by_time(qty)", "fp": "first_by_time(price)",
         "lf": "last_by_time(flag)", "nd": "count_distinct(qty)", "cs": "collect_set(qty)",
         "cl": "collect_list(amount)", "ad": "approx_count_distinct(qty)", "aa": "approx_count_distinct(amount)",
         "p5": "approx_percentile(amount, 0.5)", "p9": "approx_percentile(qty, 0.9)"}
# Approximate: the same DataSketches HLL as Spark's hll_sketch_agg (equal; Spark's takes no double), or the exact
# distinct count within 3 relative standard errors of lg K 12 (1.6 %). Spark's own approx_count_distinct (HLL++,
# rsd 0.05) is another sketch: it counted 3 of a window's 4 amounts here.
APPROX = {"aa": 3 * 0.0163}


def _in_order(c: str):  # noqa: ANN202 - a Column
    entries = F.collect_list(F.when(F.col(c).isNotNull(), F.struct("event_time", "offset", F.col(c).alias("v"))))
    return F.transform(F.array_sort(entries), lambda x: x.getField("v"))


SPARK_TIMED = {**SPARK, "f": ("min_by", "amount"), "l": ("max_by", "qty"), "fp": ("min_by", "price"),
               "lf": ("max_by", "flag"), "nd": ("count_distinct", "qty"),
               "cs": lambda: F.array_sort(F.collect_set("qty")), "cl": lambda: _in_order("amount"),
               "ad": lambda: F.hll_sketch_estimate(F.hll_sketch_agg("qty")), "aa": ("count_distinct", "amount"),
               "p5": lambda: _kll("amount", 0.5), "p9": lambda: _kll("qty", 0.9)}


# Spark's session_window with two distinct aggregates (count_distinct of qty and of amount: its Expand rewrite)
# counts a session's rows, not its distinct values (4 for the qty 1, 2, 1, 3 of one session): over sessions the
# distinct counts are Spark's size(collect_set) of the same rows.
SPARK_SESSION = {**SPARK_TIMED, "nd": lambda: F.size(F.collect_set("qty")),
                 "aa": lambda: F.size(F.collect_set("amount"))}


def _kll(c: str, p: float):  # noqa: ANN202 - a Column: Spark's own KLL sketch (k 200) of the column, at rank p
    sketch = F.kll_sketch_agg_double(F.col(c).cast("double"))
    return F.when(F.kll_sketch_get_n_double(sketch) > 0, F.kll_sketch_get_quantile_double(sketch, F.lit(p)))
COUNTS = ("ok",)
CUTS = [23, 40, 41]


def _rows() -> list[dict]:
    """60 rows in arrival order: events drift forward with disorder up to 14 s (late updates, no too-late row)."""
    rnd = random.Random(34)
    out = []
    for i in range(60):
        t = max(0.0, i * 1.0 - rnd.choice([0, 0, 0, 3, 8, 14]) + rnd.random())
        out.append({
            "partition": "0", "offset": i, "event_time": round(t, 3), "key": rnd.choice("ab"),
            "amount": None if i % 11 == 5 else round(rnd.gauss(1e4, 50), 2),  # a large mean: the moments' test
            "qty": rnd.randint(-3, 40), "price": None if i % 13 == 0 else rnd.randint(1, 99999) / 100,
            "flag": None if i % 7 == 3 else rnd.random() < 0.4,
        })
    return out


ROWS = _rows()


def _config(window: dict, aggs: dict = AGGS) -> dict:
    cfg = base_config(window={"allowed_lateness": "100s", "aggregations": aggs, **window})
    cfg["source"]["schema"] = SCHEMA
    return cfg


def _batch(spark, landing, session: bool, funcs: dict = SPARK) -> dict[tuple, dict]:  # noqa: ANN001
    """Spark's own aggregates over the same rows (the files the run read), per (key, window start s, end s)."""
    df = spark.read.schema(SCHEMA).json(str(landing)).withColumn("ts", F.timestamp_seconds("event_time"))
    assert df.count() == len(ROWS)
    win = F.session_window("ts", "5 seconds") if session else F.window("ts", "10 seconds")
    arrival = F.struct("event_time", "offset")  # one partition: its offsets are the arrival order
    aggs = [(how() if callable(how) else getattr(F, how[0])(how[1], arrival) if how[0].endswith("_by")
             else getattr(F, how[0])(how[1])).alias(n) for n, how in funcs.items()]
    got = df.groupBy("key", win.alias("w")).agg(*aggs).collect()
    return {(r["key"], r["w"].start.timestamp(), r["w"].end.timestamp()): {n: r[n] for n in funcs} for r in got}


def _same(got: dict, want: dict) -> None:
    for name, w in want.items():
        g = _none(got[name])  # pandas reads a null double as NaN
        if isinstance(w, list):  # a collection: the same values in the same order
            assert g == w, (name, got, want)
        elif name in APPROX:
            assert abs(g - w) <= APPROX[name] * w, (name, got, want)
        elif name in COUNTS or w is None or isinstance(w, bool):
            assert g == w, (name, got, want)
        else:
            assert g is not None and math.isclose(float(g), float(w), rel_tol=1e-9, abs_tol=1e-9), (name, got, want)


def _emissions(results: pd.DataFrame) -> pd.DataFrame:
    df = results.copy()
    df["ws"] = df["window_start"].map(lambda t: t.timestamp())
    df["we"] = df["window_end"].map(lambda t: t.timestamp())
    return df.sort_values(["key", "ws", "we", "revision", "batch_id"], kind="stable")


def _retracted(results: pd.DataFrame, names: dict = AGGS) -> dict[tuple, dict]:
    """Retracting: the windows still standing (emissions minus retractions), counts and sums added up, the other
    aggregates from the last non-retraction; every retraction carries the value emitted before it."""
    out = {}
    for (key, ws, we), g in _emissions(results).groupby(["key", "ws", "we"]):
        sign = g["kind"].map(lambda k: -1 if k == "retraction" else 1)
        shown = g[g["kind"] != "retraction"]
        for r in g[g["kind"] == "retraction"].itertuples():
            before = shown[shown["revision"] == r.revision]
            assert len(before) == 1, (key, ws, r)
            _same({n: getattr(r, n) for n in names}, {n: _none(before.iloc[0][n]) for n in names})
        if sign.sum() == 0:
            continue  # taken back (a session merged into another)
        assert sign.sum() == 1, g
        value = {n: shown.iloc[-1][n] for n in names}
        value["ok"] = int((sign * g["ok"]).sum())
        value = {n: _none(v) if n in ("cs", "cl") else v for n, v in value.items()}
        value["total"] = float((sign * g["total"].fillna(0)).sum()) if shown.iloc[-1]["total"] is not None else None
        out[(key, ws, we)] = value
    return out


def _none(v: object) -> object:
    if isinstance(v, (list, np.ndarray)):
        return [x.item() if isinstance(x, np.generic) else x for x in v]
    return None if pd.isna(v) else v


def _check(got: dict[tuple, dict], want: dict[tuple, dict]) -> None:
    assert sorted(got) == sorted(want)
    for w, value in want.items():
        _same(got[w], value)


def test_new_aggregates_equal_sparks_batch_with_revisions_retractions_and_sessions(spark, tmp_path):
    ret = run_scenario(spark, _config({"accumulation": "retracting"}, TIMED), ROWS, cuts=CUTS,
                       workdir=tmp_path / "ret")
    s = ret.summary
    assert s["late_updates"] > 5 and s["too_late"] == 0 and s["revisions"] > 5, s  # the revisions are exercised
    # Each revision retracts the value before it (none before a window's first emission: it had no on-time row).
    assert s["revisions"] >= (ret.results["kind"] == "retraction").sum() > 5
    _check(_retracted(ret.results, TIMED), _batch(spark, tmp_path / "ret" / "landing", False, SPARK_TIMED))
    assert ret.results["ok"].dtype == "int64" and ret.results["sd"].dtype == "float64"
    assert ret.results["l"].dtype == "int32"  # the column type, int (as Spark max_by(qty, ...))
    # A late row earlier by event time than a fired window's first changes it: a revision and its retraction.
    revised = ret.results[ret.results["kind"] == "retraction"]
    assert any(_none(r.f) != _none(ret.results[(ret.results["key"] == r.key)
                                             & (ret.results["window_start"] == r.window_start)
                                             & (ret.results["revision"] == r.revision + 1)
                                             & (ret.results["kind"] == "revision")].iloc[0]["f"])
               for r in revised.itertuples()), "no revision changed first_by_time"

    # With early firings the emitted value is kept in state (``_e`` columns): structs, arrays and sketch bytes too.
    early = _config({"accumulation": "retracting"}, TIMED)
    early["trigger"] = {"early": "every 3 rows"}
    ear = run_scenario(spark, early, ROWS, cuts=CUTS, workdir=tmp_path / "early")
    assert (ear.results["kind"] == "provisional").sum() >= 3
    shown = _emissions(ear.results[ear.results["kind"] != "retraction"])
    standing = {w: {n: _none(g.iloc[-1][n]) for n in TIMED} for w, g in shown.groupby(["key", "ws", "we"])}
    _check(standing, _batch(spark, tmp_path / "early" / "landing", False, SPARK_TIMED))  # the last value: the whole

    # Sessions keep them too (ADR 0038): the session machine's state carries the by-time structs (with the step and
    # arrival order), arrays and sketch bytes across the cuts, through merges of sessions and their retractions.
    sessions = _config({"type": "session", "gap": "5s", "accumulation": "retracting"}, TIMED)
    sessions["window"].pop("size")
    ses = run_scenario(spark, sessions, ROWS, cuts=CUTS, workdir=tmp_path / "ses")
    assert ses.summary["late_updates"] > 5 and ses.summary["too_late"] == 0
    taken_back = ses.results[ses.results["kind"] == "retraction"]
    assert len(taken_back) > 5 and taken_back["cl"].map(len).min() > 0  # retractions carry whole collections
    _check(_retracted(ses.results, TIMED), _batch(spark, tmp_path / "ses" / "landing", True, SPARK_SESSION))


def test_a_session_stddev_over_several_heads_is_named_not_compared(spark):
    """Heads' standard deviations do not merge (their means are not emitted): a batch session of two heads leaves
    it uncompared, named in ``not_compared``; of one head it is compared."""
    from lowwater.config import parse_config
    from lowwater.reconcile.compare import side_by_side
    from lowwater.reconcile.position import StreamPosition

    cfg = parse_config({"source": {"format": "jsonl", "path": "x", "event_time": "t"},
                        "window": {"type": "session", "gap": "5s", "key": ["k"], "aggregations": {"sd": "stddev(v)"}},
                        "output": {"path": "out"}})
    rows = [(0, 1.5, 1.5, 1), (10, 1.5, 2.5, 1), (20, 1.5, 9.0, 2)]  # (window start, expected, stream, heads)
    counts = [F.lit(3).cast("long").alias(c) for c in ("t_count", "e_count", "s_count")]
    out = spark.createDataFrame(rows, "_ws long, e double, s double, _heads long").select(
        F.lit("a").alias("k"), "_ws", (F.col("_ws") + 5_000_000).alias("_we"), *counts, F.col("e").alias("t_sd"),
        F.col("e").alias("e_sd"), F.col("s").alias("s_sd"), "_heads", F.lit(True).alias("_nulls_sd"),
        F.lit(0).alias("_last_rev"), F.lit(0).alias("_dead_n"), F.lit(0).alias("_clipped_n"))
    position = StreamPosition(step=1, watermark_us=10**12, read_files=(), landed_files=0, drained=True)
    got = {r["_ws"]: (r["status"], r["not_compared"]) for r in side_by_side(cfg, out, position).collect()}
    assert got == {0: ("explained", None), 10: ("unexplained", None), 20: ("explained", "sd")}


def test_the_executors_value_inputs_are_the_cores():
    """``aggtypes.arrow_input`` (the executors) and ``partials.input_value`` (the core) give the same inputs."""
    from decimal import Decimal

    import pyarrow as pa
    from pyspark.sql import types as T

    from lowwater.core.partials import SQUARE, TRUE, input_value
    from lowwater.spark.aggtypes import arrow_input, input_type

    cases = [(pa.array([3, None, -4], pa.int32()), T.IntegerType(), SQUARE, [9, None, 16]),
             (pa.array([1.5, None, float("nan")]), T.DoubleType(), SQUARE, [2.25, None, None]),
             (pa.array([Decimal("1.10"), None], pa.decimal128(4, 2)), T.DecimalType(4, 2), SQUARE, [1.1 * 1.1, None]),
             (pa.array([True, False, None]), T.BooleanType(), TRUE, [1, None, None])]
    for col, dt, of, want in cases:
        got = arrow_input(col, dt, of)
        assert got.to_pylist() == want, (dt, of)
        assert got.type == {"bigint": pa.int64(), "double": pa.float64()}[input_type(dt, of).simpleString()]
        core = [input_value(v, of) for v in col.to_pylist()]
        assert [None if x != x else x for x in core] == want, (dt, of)
    with pytest.raises(OverflowError, match="^lowwater: sum overflow: a square"):  # past a bigint: the step fails
        arrow_input(pa.array([2**32], pa.int64()), T.LongType(), SQUARE)


def test_a_sessions_partial_values_cross_to_json_and_arrow_and_back():
    """``sessions/values.py``: every value input of every column kind goes to the state's JSON (as a retraction's
    values are kept) and back unchanged, and into the Arrow type of its state column; fields nobody reads are null."""
    import json
    from decimal import Decimal

    import pyarrow as pa
    from pyspark.sql import types as T
    from pyspark.sql.pandas.types import to_arrow_type

    from lowwater.core.aggregates import AggSpec
    from lowwater.core.partials import BY_TIME, COLLECTED, add_row_where, empty, input_value
    from lowwater.spark.operators.sessions.values import NULLED, slots, special_inputs
    from lowwater.spark.operators.windowed.fold import StateLayout

    types = {"d": T.DecimalType(10, 2), "s": T.StringType(), "x": T.DoubleType(), "t": T.TimestampType(),
             "q": T.IntegerType()}
    # Values as they travel (a timestamp as its µs); NaN is null.
    nan = float("nan")
    rows = {"d": [Decimal("1.10"), nan, Decimal("-3.25")], "s": ["b", "a", nan], "x": [2.5, nan, -0.5],
            "t": [10**15, 7, nan], "q": [3, 3, nan]}
    funcs = ("first_by_time", "last_by_time", "collect_set", "collect_list", "approx_count_distinct")
    specs = (*(AggSpec(f"{f}_{c}", f, c) for c in types for f in funcs), AggSpec("p", "approx_percentile", "x", 0.5))
    lay = StateLayout.of((), (), specs, types)
    special, slot = special_inputs(lay), slots(lay)
    assert set(special.values()) == {BY_TIME, *COLLECTED}
    adds = [of in COLLECTED or (of != BY_TIME and c in ("d", "x", "q"))
            for c, of in zip(lay.values, lay.inputs, strict=True)]
    p = empty(len(lay.values))
    for r in range(3):
        add_row_where(p, [input_value(rows[c][r], lay.input_of(j), (5, 1, r, 0)) if j in special else rows[c][r]
                          for j, c in enumerate(lay.values)], adds)
    text = json.dumps([s.to_json(v) for s, v in zip(slot, p, strict=True)], default=str)
    back = [s.load(x) for s, x in zip(slot, json.loads(text, parse_float=Decimal), strict=True)]
    state = {f.name: f.dataType for f in lay.schema().fields}
    for (c, _, _), s, v, b in zip(lay.partial_fields(), slot, p, back, strict=True):
        if s.of == NULLED:
            assert b is None, c
        else:
            assert (b.data == v.data) if s.of in ("hll", "kll") else (b == v), (c, v, b)
        got = pa.array([s.to_arrow(v)], to_arrow_type(state[c]))  # the state column's own type takes it
        assert got.null_count == (1 if s.of == NULLED or v is None else 0), c

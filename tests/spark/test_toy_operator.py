"""A new operator is one module plus one registration line (issue 34 item 7, issue 32 item 2).

The toy operator, ``window.type = "key_count"``: a running count of rows per
key, and per step, for each key it saw, the ``W(r)`` of that key's latest row
(read from the clock columns every operator gets, never from a plan's
broadcast). Its state is its own layout (key, total) in one bucket, not the
windowed layout. Registered here, it runs a TOML pipeline through the engine
with both row clocks (the driver's on the first step of a checkpoint with
numeric event times, the executors' after it); no existing file knows it.
"""

from __future__ import annotations

import json
import tomllib
from collections import defaultdict

import numpy as np
import pytest
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lowwater.config import ConfigError, parse_config
from lowwater.core.accounting import Accounting
from lowwater.core.judge import arrival_order, judge
from lowwater.core.tracker import WatermarkTracker
from lowwater.spark.engine import Engine
from lowwater.spark.operators import OperatorContext, register_operator, unregister_operator
from lowwater.spark.state import Bucket, BucketStateStore, Manifest
from lowwater.spark.step import OperatorResult, StepPlan
from lowwater.time import NEG_INF

from .test_cli import CONFIG, ROWS, land

pytestmark = pytest.mark.spark

BUCKET = 0  # every key's count is one bucket


class KeyCounts:
    """A :class:`~lowwater.spark.operators.protocol.WindowOperator`: rows counted per key, nothing ever late."""

    driver_clock_only: str | None = None

    def __init__(self, ctx: OperatorContext) -> None:
        self.ctx, self.key = ctx, ctx.cfg.window.key[0]
        self.store = BucketStateStore(ctx.spark, ctx.state_dir, self.state_schema())

    def state_schema(self) -> T.StructType:
        return T.StructType([T.StructField(self.key, T.StringType()), T.StructField("total", T.LongType())])

    def empty_results(self) -> DataFrame:
        fields = [*self.state_schema().fields, T.StructField("rows", T.LongType()),
                  T.StructField("last_w_us", T.LongType())]
        return self.ctx.spark.createDataFrame([], T.StructType(fields))

    def row_columns(self) -> list[str]:
        return [self.key]

    def summary(self, manifest: Manifest) -> dict:
        state = self.store.read(manifest, {BUCKET})
        return {"keys_counted": 0 if state is None else state.count()}

    def step(self, parsed: DataFrame, plan: StepPlan, prev: Manifest, step: int,
             cache: list[DataFrame]) -> OperatorResult:
        assert plan.rows is not None
        rows = plan.rows.frame_with_clock([self.key])
        latest = Window.partitionBy(self.key).orderBy(F.desc("_seq"), F.desc("_seq_minor"))
        counted = (rows.withColumn("_i", F.row_number().over(latest))
                   .groupBy(self.key).agg(F.count("*").alias("rows"),
                                          F.max(F.when(F.col("_i") == 1, F.col("_w"))).alias("last_w_us")))
        before = self.store.read(prev, {BUCKET})
        if before is None:
            before = self.ctx.spark.createDataFrame([], self.state_schema())
        merged = (before.withColumn("rows", F.lit(None).cast("long")).withColumn("last_w_us", F.lit(None).cast("long"))
                  .unionByName(counted.withColumn("total", F.col("rows")))
                  .groupBy(self.key).agg(F.sum("total").alias("total"), F.max("rows").alias("rows"),
                                         F.max("last_w_us").alias("last_w_us")))
        merged.persist()
        cache.append(merged)
        self.ctx.sinks.write("results", step, merged.filter(F.col("rows").isNotNull()))
        self.ctx.sinks.clear("late", step)
        written = self.store.write(step, merged.select(self.key, "total").withColumn("_bucket", F.lit(BUCKET)))
        n = plan.data_rows
        acc = Accounting(rows=n + plan.dead, on_time=n, dead_letter=plan.dead, clipped=plan.clipped)
        buckets = {b: Bucket(version=step, fired=False, rows=r, bytes=size) for b, (r, size) in written.items()}
        return OperatorResult(accounting=acc, buckets=buckets or dict(prev.buckets))

    def drain(self, prev: Manifest, step: int, cache: list[DataFrame]) -> OperatorResult:
        self.ctx.sinks.clear("results", step)
        return OperatorResult(accounting=Accounting(), buckets=dict(prev.buckets))


@pytest.fixture
def registered():
    register_operator("key_count", KeyCounts, window_types=["key_count"])  # the operator's one registration line
    yield
    unregister_operator("key_count")


def _config(tmp_path) -> dict:  # noqa: ANN001
    data = tomllib.loads(CONFIG.format(fmt="jsonl"))
    data["window"] = {"type": "key_count", "size": "10s", "key": ["key"]}
    return data


def _core_w(cfg) -> list[int]:  # noqa: ANN001
    """Each row of ROWS's ``W(r)`` by the core (arrival order over the whole log: W does not depend on cuts)."""
    arrival = np.array([r[3] * 1000 for r in ROWS], dtype=np.int64)
    parts = np.array([r[0] for r in ROWS])
    order = arrival_order(len(ROWS), arrival, parts, np.array([r[1] for r in ROWS]))
    j = judge(WatermarkTracker(cfg.watermark), cfg.window.assigner(), cfg.window.allowed_lateness_us,
              np.array([str(p) for p in parts[order]], dtype=object),
              np.array([r[2] * 1000 for r in ROWS], dtype=np.int64)[order], arrival[order])
    w = np.empty(len(ROWS), dtype=np.int64)
    w[order] = j.watermark_us
    return w.tolist()


def test_a_registered_operator_is_configurable_and_refused_once_unregistered(registered, tmp_path):
    assert parse_config(_config(tmp_path), tmp_path).window.operator == "key_count"
    with pytest.raises(ValueError, match="registered already"):
        register_operator("key_count", KeyCounts)
    unregister_operator("key_count")
    try:
        with pytest.raises(ConfigError, match=r"^window\.type: 'key_count' is not one of tumbling, hopping, session$"):
            parse_config(_config(tmp_path), tmp_path)
    finally:  # the fixture unregisters it again
        register_operator("key_count", KeyCounts, window_types=["key_count"])


def test_the_toy_operator_runs_through_the_engine_with_its_own_state_and_outputs(registered, spark, tmp_path):
    land(tmp_path, "jsonl")
    cfg = parse_config(_config(tmp_path), tmp_path)
    engine = Engine(cfg, spark)
    manifest = engine.run(drain=True)
    assert manifest.totals["rows"] == len(ROWS) and manifest.totals["on_time"] == len(ROWS)  # nothing late to it
    # Its own state layout: one row per key with its running total.
    state = engine.store.read(manifest, {BUCKET}).collect()
    assert sorted((r["key"], r["total"]) for r in state) == [("a", 6), ("b", 2)]
    # Per step (one landed file each), per key: the rows seen, the running total, the W(r) of its latest row.
    w = _core_w(cfg)
    expected = []
    for step, (lo, hi) in enumerate(((0, 4), (4, len(ROWS)))):
        seen: dict[str, list[int]] = defaultdict(list)
        for i in range(lo, hi):
            seen[ROWS[i][4]].append(i)
        for key, rows in seen.items():
            total = sum(1 for r in ROWS[:hi] if r[4] == key)
            latest = max(rows, key=lambda i: (ROWS[i][3], ROWS[i][0], ROWS[i][1]))
            expected.append((step, key, len(rows), total, w[latest]))
    got = spark.read.parquet(str(tmp_path / "out" / "results")).collect()
    assert sorted((r["batch_id"], r["key"], r["rows"], r["total"], r["last_w_us"]) for r in got) == sorted(expected)
    assert w[0] == NEG_INF and len({e[4] for e in expected}) > 2  # W(r) moved within and between the steps
    # The engine's summary carries the operator's own beside its accounting.
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["keys_counted"] == 2 and summary["rows"] == len(ROWS) and summary["balanced"]
    # The driver's clock planned the first step (numeric event times), the executors' the second.
    assert engine.row_clock is not None

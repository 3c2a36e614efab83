"""The interval join through Spark against a brute-force nested loop over the admitted rows (SEMANTICS.md §9).

Hypothesis draws two-source logs (as tests/core/test_join.py does), cuts each
source into files at random, and a random number of shuffle partitions: the
keyed pass on the executors (spark/operators/join/executor.py) must give exactly
the pairs, unmatched left rows, too-late rows and per-side counts of a nested
loop over the rows admitted by ``W(r)``, whatever the partitioning, the cut and
whether a step finds out which key buckets its rows touch.
A checkpoint without bucket summaries (the driver join's) is read whole once.
"""

from __future__ import annotations

import copy
import tempfile
from functools import reduce
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from lowwater.config import parse_config
from lowwater.core.join import JoinType
from lowwater.io.files import read_batch
from lowwater.spark.engine import Engine
from lowwater.spark.operators.join import operator as join_operator
from lowwater.testing.join_scenarios import _observed, compare, expected, load_join, one_batch_clock, run_spark
from lowwater.testing.scenario_files import Scenario
from lowwater.testing.scenario_spark import land_inputs
from lowwater.time import NEG_INF
from tests.core.test_join import _config, join_logs

pytestmark = [pytest.mark.spark, pytest.mark.slow]

S = 1_000_000
SCHEMA = {"clicks": "partition STRING, event_time DOUBLE, arrival_time DOUBLE, user STRING, cid STRING",
          "orders": "partition STRING, event_time DOUBLE, arrival_time DOUBLE, user STRING, oid STRING"}


def nested_loop(raw: dict, inputs: dict[str, list[dict]]) -> tuple[list, list, dict]:
    """Pairs (key, left s, right s or None, cid, oid), too-late rows and per-side counts, by brute force."""
    cfg = parse_config(copy.deepcopy(raw))
    jc = cfg.join
    rows, order, event, w = one_batch_clock(cfg, inputs)
    admitted: dict[str, list[tuple]] = {jc.left: [], jc.right: []}
    late = []
    for k, i in enumerate(order.tolist()):
        name, r = rows[i]
        if w[k] > NEG_INF and event[k] < w[k]:
            late.append((name, float(r["event_time"])))
        else:
            admitted[name].append((r["user"], int(event[k]), r.get("cid") or r.get("oid")))
    pairs, matched_right = [], set()
    counts = {side: dict.fromkeys(("rows", "matched", "unmatched", "too_late", "dead_letter", "pending"), 0)
              for side in ("left", "right")}
    for lk, lt, cid in admitted[jc.left]:
        partners = [(j, rt, oid) for j, (rk, rt, oid) in enumerate(admitted[jc.right])
                    if rk == lk and jc.bounds.matches(lt, rt)]
        pairs += [(lk, lt / S, rt / S, cid, oid) for _, rt, oid in partners]
        matched_right.update(j for j, _, _ in partners)
        counts["left"]["matched" if partners else "unmatched"] += 1
        if not partners and jc.type == JoinType.LEFT_OUTER:
            pairs.append((lk, lt / S, None, cid, None))
    counts["right"]["matched"] = len(matched_right)
    counts["right"]["unmatched"] = len(admitted[jc.right]) - len(matched_right)
    for side, name in (("left", jc.left), ("right", jc.right)):
        counts[side]["rows"] = len(inputs[name])
        counts[side]["too_late"] = sum(n == name for n, _ in late)
    return sorted(pairs, key=_order), sorted(late), counts


def _order(t: tuple) -> tuple:
    return tuple((x is None, x) for x in t)


def _with_columns(raw: dict, inputs: dict[str, list[dict]]) -> None:
    """Each source's schema, and an id column each side chooses (so joined/ shows which rows paired)."""
    for src in raw["source"]:
        src["schema"] = SCHEMA[src["name"]]
    raw["join"]["columns"] = {"left": ["cid"], "right": ["oid"]}
    for name, rows in inputs.items():
        for i, r in enumerate(rows):
            r["cid" if name == "clicks" else "oid"] = f"{name[0]}{i}"


@st.composite
def spark_join_logs(draw):
    raw, inputs, _ = draw(join_logs())
    _with_columns(raw, inputs)
    cuts = {name: draw(st.lists(st.integers(1, max(1, len(rows) - 1)), max_size=3)) for name, rows in inputs.items()}
    # spread 0: every step takes its rows to touch every bucket (join.SPREAD), no job to find out
    return raw, inputs, cuts, draw(st.integers(1, 7)), draw(st.sampled_from([0, join_operator.SPREAD]))


def _carried_match() -> tuple:
    """A pair in the first micro-batch, freed by the second: the matched flags must survive the state."""
    raw = _config(0, 5, "left_outer", 0, 0)
    inputs = {
        "clicks": [{"partition": "0", "event_time": 10.0, "arrival_time": 10.0, "user": "a"},
                   {"partition": "0", "event_time": 30.0, "arrival_time": 30.0, "user": "a"}],
        "orders": [{"partition": "0", "event_time": 12.0, "arrival_time": 12.0, "user": "a"},
                   {"partition": "1", "event_time": 31.0, "arrival_time": 31.0, "user": "b"}],
    }
    _with_columns(raw, inputs)
    return raw, inputs, {"clicks": [1], "orders": [1]}, 3, 0  # every bucket read (no job to find out)


@settings(max_examples=3, deadline=None)
@given(spark_join_logs())
@example(_carried_match())
def test_the_join_on_the_executors_is_the_nested_loop_for_any_cut_and_partitioning(spark, case):
    raw, inputs, cuts, partitions, spread = case
    before, spread_before = spark.conf.get("spark.sql.shuffle.partitions"), join_operator.SPREAD
    spark.conf.set("spark.sql.shuffle.partitions", str(partitions))
    join_operator.SPREAD = spread
    try:
        with tempfile.TemporaryDirectory(prefix="lowwater-join-diff-") as work:
            got, summary = run_spark(spark, Scenario("diff", "", raw, inputs, [cuts], {}), cuts, workdir=Path(work))
            joined = pd.read_parquet(Path(work) / "out" / "joined")
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", before)
        join_operator.SPREAD = spread_before
    pairs, late, counts = nested_loop(raw, inputs)

    def secs(ts: object) -> float | None:
        return None if pd.isna(ts) else pd.Timestamp(ts).value / 1e9

    rows = sorted(((r.user, secs(r.left_event_time), secs(r.right_event_time), r.cid,
                    None if pd.isna(r.oid) else r.oid) for r in joined.itertuples()), key=_order)
    assert rows == pairs
    assert got.too_late == late
    assert got.counts == counts
    assert summary["rows"] == sum(map(len, inputs.values())) and summary["balanced"]



def test_a_checkpoint_without_bucket_summaries_is_read_whole_and_rebucketed(spark, tmp_path):
    # The driver join's checkpoints had no join/m<step>.json (its state was one bucket): with the summaries
    # gone after every step, each step reads every live bucket and re-buckets the rows by key; the answer
    # is the scenario's.
    s = load_join(Path(__file__).parent.parent / "scenarios" / "join" / "bounds_and_outer.yaml")
    cfg = s.pipeline(base_dir=tmp_path)
    files = land_inputs(s, cfg, s.cuts[1])
    engine = Engine(cfg, spark)
    removed = 0
    try:
        for i in range(max(map(len, files.values()))):
            frames = [engine.normalised(src.name, read_batch(spark, src, engine.schemas[src.name],
                                                             path=str(files[src.name][i])))
                      for src in cfg.sources if i < len(files[src.name])]
            engine.process_batch(reduce(lambda a, b: a.unionByName(b), frames), i)
            for f in Path(engine.operator.state_dir, "join").glob("m*.json"):
                f.unlink()
                removed += 1
        summary = engine.summary(engine.drain())
    finally:
        engine.close()
    assert removed >= 3
    got = _observed(spark, cfg, Path(cfg.output.path), summary)
    assert not compare(got, expected(s), s)

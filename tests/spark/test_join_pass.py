"""The join's keyed pass (spark/operators/join/executor.py) as plain Arrow, against one core join over the whole log.

No Spark session: the executor function is called on Arrow tables as
``mapInArrow`` would call it, step after step, its state rows fed back into
the next step and the key buckets split over tasks at random. Pairs, their
watermarks, too-late rows and the per-side counts equal those of one
:class:`~lowwater.core.join.IntervalJoin` (or ``TemporalJoin``) fed every step (milliseconds, so
hypothesis runs many logs; the Spark runs are tests/spark/test_join_differential.py).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql import types as T

from lowwater.config.join import JoinConfig
from lowwater.core.join import JoinBounds, JoinRow, JoinType, Side, run_batch
from lowwater.core.temporal_join import TEMPORAL_BOUNDS, JoinKind, new_join
from lowwater.spark.operators.join.executor import COUNTS, make_join_pass, out_schema, state_columns
from lowwater.time import NEG_INF

TYPES = {"user": T.StringType(), "cid": T.LongType(), "oid": T.LongType()}
STATE = [n for n, _ in state_columns(JoinConfig("l", "r", ("user",), JoinBounds(0, 0), JoinType.INNER,
                                                ("cid",), ("oid",)), TYPES)]


@st.composite
def logs(draw):
    lower = draw(st.integers(-5, 5))
    kind = draw(st.sampled_from(list(JoinKind)))  # the temporal join runs through the same pass
    bounds = JoinBounds(lower, lower + draw(st.integers(0, 10))) if kind == JoinKind.INTERVAL else TEMPORAL_BOUNDS
    jc = JoinConfig("l", "r", ("user",), bounds, draw(st.sampled_from(list(JoinType))), ("cid",), ("oid",),
                    kind=kind)
    n = draw(st.integers(0, 40))
    w, steps, rows = NEG_INF, [], []
    for seq in range(n):
        if seq and draw(st.booleans()):
            w = max(w, 0) + draw(st.integers(0, 4)) if draw(st.booleans()) else w
        side = draw(st.sampled_from(list(Side)))
        rows.append((JoinRow(side, (draw(st.sampled_from(["a", "b", "c", None])),), draw(st.integers(0, 40)), seq),
                     w))
    cuts = sorted(set(draw(st.lists(st.integers(1, max(1, n - 1)), max_size=5))))
    bounds = [0, *[c for c in cuts if 0 < c < n], n]
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        w = max(w, 0) + draw(st.integers(0, 6)) if hi == n or draw(st.booleans()) else w
        steps.append((rows[lo:hi], max([w, *[r[1] for r in rows[lo:hi]]])))
    return jc, steps, draw(st.integers(1, 4))


def _table(rows: list, state: pa.Table | None, buckets: int) -> pa.Table:
    new = pa.table({
        "side": [r.side.value for r, _ in rows], "k_user": pa.array([r.key[0] for r, _ in rows], pa.string()),
        "event_us": pa.array([r.event_us for r, _ in rows], pa.int64()),
        "seq": pa.array([r.seq for r, _ in rows], pa.int64()), "matched": pa.nulls(len(rows), pa.bool_()),
        "left_cid": pa.array([r.seq if r.side == Side.LEFT else None for r, _ in rows], pa.int64()),
        "right_oid": pa.array([r.seq if r.side == Side.RIGHT else None for r, _ in rows], pa.int64()),
        "_role": pa.array([1] * len(rows), pa.int32()), "_rid": pa.array([r.seq for r, _ in rows], pa.int64()),
        "_w": pa.array([w for _, w in rows], pa.int64()),
    })
    parts = [new] if state is None else [state, new]
    t = pa.concat_tables(parts, promote_options="default")
    bucket = [sum(map(ord, k or "")) % buckets for k in t.column("k_user").to_pylist()]
    return t.append_column("_bucket", pa.array(bucket, pa.int32()))


@settings(max_examples=300, deadline=None)
@given(logs())
def test_the_pass_over_buckets_and_steps_equals_one_core_join(case):
    jc, steps, tasks = case
    core = new_join(jc.kind, jc.bounds, jc.type)
    want_pairs, want_late = [], []
    schema = out_schema(jc, TYPES)
    got_pairs, got_late, deltas = [], [], np.zeros(len(COUNTS), dtype=np.int64)
    state = None
    for rows, w_end in steps:
        b = run_batch(core, [r for r, _ in rows], [w for _, w in rows], w_end)
        want_pairs += [(e.left.seq, None if e.right is None else e.right.seq, e.watermark_us) for e in b.emitted]
        want_late += [(t.row.seq, t.watermark_us) for t in b.too_late]
        table = _table(rows, state, 5)
        fn = make_join_pass(jc, schema, w_end, False, None)
        out = []
        for task in range(tasks):  # each task sees whole buckets, as after repartition("_bucket")
            part = table.filter(pa.array([b % tasks == task for b in table.column("_bucket").to_pylist()], pa.bool_()))
            out += list(fn(iter(part.to_batches())))
        res = pa.Table.from_batches(out, schema=out[0].schema) if out else None
        if res is None:
            state = None
            continue
        kind = res.column("_out").to_pylist()
        # every kept row is in this step's table, so its bucket summaries give the whole held output W
        lows = [r["_m_min_event"] for r, k in zip(res.to_pylist(), kind, strict=True) if k == "B"]
        assert min([w_end, *lows]) == core.output_watermark(w_end)
        for r, k in zip(res.to_pylist(), kind, strict=True):
            if k == "J":
                got_pairs.append((r["_j_cid"], r["_j_oid"], r["_j_w_us"]))
            elif k == "T":
                got_late.append((r["_rid"], r["_w"]))
            elif k == "C":
                deltas += np.array([r[c] for c in COUNTS], dtype=np.int64)
        s = res.filter(pc.equal(res.column("_out"), "S")).select(STATE)
        state = s.append_column("_role", pa.array([0] * s.num_rows, pa.int32())) if s.num_rows else None
    assert sorted(got_pairs, key=str) == sorted(want_pairs, key=str)
    assert sorted(got_late) == sorted(want_late)
    want = [v for side in Side for v in core.counts()[side].as_dict().values()]
    assert deltas.tolist() == want
    open_rows = 0 if state is None else state.num_rows
    assert open_rows == core.state.open_rows

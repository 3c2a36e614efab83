"""The temporal (stream-table) join in the pure core (core/temporal_join.py): versions, waiting, late rows.

The scenario files (tests/scenarios/join/temporal_*.yaml) run with every cut via
tests/core/test_join.py's scenario test and through Spark in tests/spark/test_join.py.
"""

from __future__ import annotations

import copy

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lowwater.config import ConfigError, parse_config
from lowwater.core.join import JoinRow, JoinType, Side, TooLate
from lowwater.core.temporal_join import TEMPORAL_BOUNDS, TemporalJoin
from lowwater.testing.join_scenarios import one_batch_clock, run_join_log
from lowwater.time import NEG_INF

from .test_join import S, _config, _source_rows


def _row(side: Side, key: str | None, t: int, seq: int) -> JoinRow:
    return JoinRow(side, (key,), t, seq)


def test_a_left_row_waits_until_w_passes_its_time():
    j = TemporalJoin(TEMPORAL_BOUNDS, JoinType.INNER)
    j.on_row(_row(Side.RIGHT, "EUR", 0, 0), NEG_INF)
    j.on_row(_row(Side.LEFT, "EUR", 10, 1), NEG_INF)
    assert j.advance(10) == []  # W = 10: a version at 10 s could still be admitted
    j.on_row(_row(Side.RIGHT, "EUR", 10, 2), 10)
    [got] = j.advance(11)
    assert (got.left.event_us, got.right.event_us) == (10, 10)  # the version from 10 s, inclusive
    j.check()


def test_versions_at_the_same_time_the_later_arrival_wins_and_older_ones_are_freed():
    j = TemporalJoin(TEMPORAL_BOUNDS, JoinType.INNER)
    for seq, t in enumerate([0, 5, 5]):
        j.on_row(_row(Side.RIGHT, "k", t, seq), NEG_INF)
    j.on_row(_row(Side.LEFT, "k", 7, 3), NEG_INF)
    [got] = j.advance(8)
    assert got.right.seq == 2
    assert [e.row.seq for e in j.state.right[("k",)]] == [2]  # only the newest at or before W is kept
    c = j.counts()[Side.RIGHT]
    assert (c.matched, c.unmatched, c.pending) == (1, 2, 0)
    j.drain()
    j.check()


def test_late_rows_of_either_side_are_too_late_and_a_null_key_matches_nothing():
    j = TemporalJoin(TEMPORAL_BOUNDS, JoinType.LEFT_OUTER)
    assert isinstance(j.on_row(_row(Side.RIGHT, "k", 3, 0), 4), TooLate)
    assert isinstance(j.on_row(_row(Side.LEFT, "k", 3, 1), 4), TooLate)
    j.on_row(_row(Side.RIGHT, None, 5, 2), 4)
    j.on_row(_row(Side.LEFT, None, 6, 3), 4)
    [got] = j.drain()
    assert got.right is None and got.left.seq == 3  # left outer: emitted with nulls
    counts = j.counts()
    assert (counts[Side.LEFT].too_late, counts[Side.LEFT].unmatched) == (1, 1)
    assert (counts[Side.RIGHT].too_late, counts[Side.RIGHT].unmatched) == (1, 1)
    j.check()


def test_the_output_watermark_is_held_by_the_waiting_left_rows_only():
    j = TemporalJoin(TEMPORAL_BOUNDS, JoinType.INNER)
    j.on_row(_row(Side.RIGHT, "k", 1, 0), NEG_INF)
    j.on_row(_row(Side.LEFT, "k", 6, 1), NEG_INF)
    assert j.output_watermark(5) == 5
    j.advance(5)
    assert j.output_watermark(9) == 6
    j.advance(9)
    assert j.output_watermark(9) == 9  # the kept version does not hold it


@pytest.mark.parametrize(("key", "value", "message"), [
    ("upper", "10s", 'join.upper: not for kind = "temporal"'),
    ("kind", "asof", "join.kind: expected one of interval, temporal"),
])
def test_bad_temporal_configuration_is_one_line(key, value, message):
    raw = _temporal_config("inner", 0, 0)
    raw["join"][key] = value
    with pytest.raises(ConfigError, match=message):
        parse_config(raw)


def _temporal_config(join_type: str, l_left: int, l_right: int) -> dict:
    raw = _config(0, 0, join_type, l_left, l_right)
    raw["join"] = {k: v for k, v in raw["join"].items() if k not in ("lower", "upper")}
    raw["join"]["kind"] = "temporal"
    return raw


def brute_force(cfg, inputs: dict[str, list[dict]]) -> tuple[list, list]:  # noqa: ANN001
    """Each admitted left row with the admitted right row of its key valid at its time (one batch's W(r))."""
    jc = cfg.join
    rows, order, event, w = one_batch_clock(cfg, inputs)
    admitted: dict[str, list] = {jc.left: [], jc.right: []}
    late = []
    for k, i in enumerate(order.tolist()):
        name, r = rows[i]
        if w[k] > NEG_INF and event[k] < w[k]:
            late.append((name, float(r["event_time"])))
        else:
            admitted[name].append((r["user"], int(event[k]), k))
    out = []
    for key, t, _ in admitted[jc.left]:
        versions = [(vt, vk) for rk, vt, vk in admitted[jc.right] if rk == key and vt <= t]
        if versions:
            out.append((str(key), t / S, max(versions)[0] / S))
        elif jc.type == JoinType.LEFT_OUTER:
            out.append((str(key), t / S, None))
    return sorted(out, key=lambda x: tuple((v is None, v) for v in x)), sorted(late)


@st.composite
def temporal_logs(draw):
    raw = _temporal_config(draw(st.sampled_from(["inner", "left_outer"])), draw(st.integers(0, 6)),
                           draw(st.integers(0, 6)))
    inputs = {"clicks": _source_rows(draw, 14), "orders": _source_rows(draw, 14)}
    n = len(inputs["clicks"]) + len(inputs["orders"])
    return raw, inputs, draw(st.lists(st.integers(1, max(1, n - 1)), max_size=6))


@settings(max_examples=300, deadline=None)
@given(temporal_logs())
def test_any_cut_gives_the_brute_force_temporal_join_of_the_admitted_rows(case):
    raw, inputs, cuts = case
    cfg = parse_config(copy.deepcopy(raw))
    one = run_join_log(cfg, inputs)
    cut = run_join_log(cfg, inputs, cuts)
    assert (cut.joined, cut.too_late, cut.counts) == (one.joined, one.too_late, one.counts)  # §8
    joined, late = brute_force(cfg, inputs)
    assert one.joined == joined
    assert one.too_late == late
    for side in ("left", "right"):  # every row in exactly one class after the drain
        c = one.counts[side]
        assert c["pending"] == 0
        assert c["rows"] == c["matched"] + c["unmatched"] + c["too_late"] + c["dead_letter"]
    assert one.counts["left"]["matched"] == sum(r[2] is not None for r in joined)

"""The interval join in the pure core (SEMANTICS.md §9): scenario files, bounds, freeing, outer rows, §8.

The same scenario files run through Spark in tests/spark/test_join.py.
"""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lowwater.config import parse_config
from lowwater.core.join import IntervalJoin, JoinBounds, JoinRow, JoinType, Side, TooLate
from lowwater.testing.join_scenarios import compare, expected, load_join, one_batch_clock, run_join_log
from lowwater.testing.join_scenarios import run_core as run_join
from lowwater.time import NEG_INF, POS_INF

SCENARIOS = Path(__file__).parent.parent / "scenarios" / "join"
FILES = sorted(SCENARIOS.glob("*.yaml"))
S = 1_000_000


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_scenario_files_whatever_the_cut(path):
    s = load_join(path)
    n = sum(len(v) for v in s.input.values())
    one = run_join(s)
    assert not compare(one, expected(s), s)
    every_row = run_join(s, list(range(1, n)))  # one batch per row
    assert (every_row.joined, every_row.too_late, every_row.counts) == (one.joined, one.too_late, one.counts)


@pytest.mark.parametrize(("lower", "upper", "left", "right", "match"), [
    (0, 10, 10, 10, True),    # right - left = lower: inclusive
    (0, 10, 10, 20, True),    # = upper: inclusive
    (0, 10, 10, 21, False),   # one past upper
    (0, 10, 10, 9, False),    # one before lower
    (-5, 5, 10, 5, True),     # a negative lower: the right row may come first
    (-5, 5, 10, 4, False),
    (3, 3, 0, 3, True),       # lower = upper: one exact offset
])
def test_bounds_are_inclusive(lower, upper, left, right, match):
    assert JoinBounds(lower, upper).matches(left, right) is match


def _row(side: Side, t: int, seq: int, key: str = "k") -> JoinRow:
    return JoinRow(side, (key,), t, seq)


def test_left_outer_emits_an_unmatched_row_once_when_the_watermark_proves_it():
    # left a at 10, upper 5: a partner could still be admitted while W <= 15.
    #   W:   ... 15 | 16 -> freed, emitted with W = 16; nothing more afterwards, not even at the drain
    j = IntervalJoin(JoinBounds(0, 5), JoinType.LEFT_OUTER)
    assert j.on_row(_row(Side.LEFT, 10, 0), NEG_INF) == []
    assert j.advance(15) == []                       # W = a.t + upper: a right row at 15 is still admissible
    assert j.on_row(_row(Side.RIGHT, 15, 1, "other"), 15) == []
    out = j.advance(16)
    assert [(e.left.event_us, e.right, e.watermark_us) for e in out] == [(10, None, 16)]
    assert j.advance(100) == [] and j.drain() == []
    j.check()
    assert j.counts()[Side.LEFT].unmatched == 1 and j.counts()[Side.LEFT].pending == 0


def test_inner_join_never_emits_unmatched_rows_but_counts_them():
    j = IntervalJoin(JoinBounds(0, 5), JoinType.INNER)
    j.on_row(_row(Side.LEFT, 10, 0), NEG_INF)
    j.on_row(_row(Side.RIGHT, 1, 1), NEG_INF)  # -9: outside, freed when W > 1
    assert j.drain() == []
    j.check()
    assert (j.counts()[Side.LEFT].unmatched, j.counts()[Side.RIGHT].unmatched) == (1, 1)


def test_a_row_behind_the_watermark_is_too_late_and_never_buffered():
    j = IntervalJoin(JoinBounds(0, 5), JoinType.INNER)
    j.on_row(_row(Side.LEFT, 10, 0), NEG_INF)
    got = j.on_row(_row(Side.RIGHT, 12, 1), 13)    # 12 < W(r) = 13: would have matched, too late
    assert isinstance(got, TooLate) and got.watermark_us == 13 and got.reason == "too_late_for_join"
    assert j.on_row(_row(Side.RIGHT, 13, 2), 13) != []  # event_time = W(r) is not late
    j.check()
    assert j.counts()[Side.RIGHT].too_late == 1 and j.state.open_rows == 2


def test_a_null_key_matches_nothing_and_a_left_outer_join_emits_it_alone():
    j = IntervalJoin(JoinBounds(0, 5), JoinType.LEFT_OUTER)
    j.on_row(JoinRow(Side.LEFT, (None,), 10, 0), NEG_INF)
    assert j.on_row(JoinRow(Side.RIGHT, (None,), 12, 1), NEG_INF) == []
    assert [(e.left.key, e.right) for e in j.drain()] == [((None,), None)]
    j.check()


def test_freeing_follows_each_sides_bound():
    # left a at 10 (upper 5): kept while W <= 15; right b at 10 (lower -3): kept while W <= 13.
    j = IntervalJoin(JoinBounds(-3, 5), JoinType.INNER)
    j.on_row(_row(Side.LEFT, 10, 0, "x"), NEG_INF)
    j.on_row(_row(Side.RIGHT, 10, 1, "y"), NEG_INF)
    j.advance(13)
    assert j.state.open_rows == 2
    j.advance(14)
    assert list(j.state.right) == [] and list(j.state.left) == [("x",)]
    j.advance(16)
    assert j.state.open_rows == 0


def test_the_output_watermark_is_held_back_by_the_buffered_rows():
    j = IntervalJoin(JoinBounds(0, 30), JoinType.LEFT_OUTER)
    j.on_row(_row(Side.LEFT, 10, 0), NEG_INF)
    j.advance(25)
    assert j.output_watermark(25) == 10   # the left row at 10 may still be emitted (paired or alone)
    j.advance(41)                         # freed (and emitted, unmatched)
    assert j.output_watermark(41) == 41
    assert j.output_watermark(POS_INF) == POS_INF


# -- the whole log: any cut, and a brute-force join of the admitted rows --------------------------

def _signed(seconds: int) -> str:
    return f"{'-' if seconds < 0 else ''}{abs(seconds)}s"


def _config(lower: int, upper: int, join_type: str, l_left: int, l_right: int) -> dict:
    def source(name: str, bound: int) -> dict:
        return {"name": name, "format": "jsonl", "path": f"landing/{name}", "partition": "partition",
                "event_time": "event_time", "arrival_time": "arrival_time",
                "watermark": {"strategy": "bounded", "max_out_of_orderness": f"{bound}s"}}
    return {
        "source": [source("clicks", l_left), source("orders", l_right)],
        "join": {"left": "clicks", "right": "orders", "on": ["user"], "type": join_type,
                 "lower": _signed(lower), "upper": _signed(upper),
                 "columns": {"left": [], "right": []}},
        "late": {"policy": "side_output"},
        "output": {"path": "out"},
    }


def brute_force(cfg, inputs: dict[str, list[dict]]) -> tuple[list, list]:
    """Every pair within the bounds whose rows were both admitted (not too late by W(r), one batch)."""
    jc = cfg.join
    rows, order, event, w = one_batch_clock(cfg, inputs)
    admitted = {Side.LEFT: [], Side.RIGHT: []}
    late = []
    for k, i in enumerate(order.tolist()):
        name, r = rows[i]
        if w[k] > NEG_INF and event[k] < w[k]:
            late.append((name, float(r["event_time"])))
        else:
            admitted[Side.LEFT if name == jc.left else Side.RIGHT].append((r["user"], int(event[k])))
    pairs = []
    for lk, lt in admitted[Side.LEFT]:
        partners = [rt for rk, rt in admitted[Side.RIGHT] if rk == lk and jc.bounds.matches(lt, rt)]
        pairs += [(str(lk), lt / S, rt / S) for rt in partners]
        if not partners and jc.type == JoinType.LEFT_OUTER:
            pairs.append((str(lk), lt / S, None))
    return sorted(pairs, key=lambda t: tuple((x is None, x) for x in t)), sorted(late)


def _source_rows(draw, n_max: int) -> list[dict]:
    n = draw(st.integers(0, n_max))
    rows = [{"partition": draw(st.sampled_from(["0", "1"])), "event_time": float(draw(st.integers(0, 40))),
             "user": draw(st.sampled_from(["a", "b"]))} for _ in range(n)]
    for r in rows:
        r["arrival_time"] = r["event_time"] + draw(st.integers(0, 20))
    return sorted(rows, key=lambda r: r["arrival_time"])  # each source's files are in arrival order


@st.composite
def join_logs(draw):
    lower = draw(st.integers(-5, 5))
    upper = lower + draw(st.integers(0, 10))
    raw = _config(lower, upper, draw(st.sampled_from(["inner", "left_outer"])), draw(st.integers(0, 6)),
                  draw(st.integers(0, 6)))
    inputs = {"clicks": _source_rows(draw, 14), "orders": _source_rows(draw, 14)}
    n = len(inputs["clicks"]) + len(inputs["orders"])
    cuts = draw(st.lists(st.integers(1, max(1, n - 1)), max_size=6))
    return raw, inputs, cuts


@settings(max_examples=300, deadline=None)
@given(join_logs())
def test_any_cut_gives_the_brute_force_join_of_the_admitted_rows(case):
    raw, inputs, cuts = case
    cfg = parse_config(copy.deepcopy(raw))
    one = run_join_log(cfg, inputs)
    cut = run_join_log(cfg, inputs, cuts)
    assert (cut.joined, cut.too_late, cut.counts) == (one.joined, one.too_late, one.counts)  # §8
    pairs, late = brute_force(cfg, inputs)
    assert one.joined == pairs
    assert one.too_late == late
    for side in ("left", "right"):  # the identity of §9, per side, after the drain (nothing pending)
        c = one.counts[side]
        assert c["pending"] == 0
        assert c["rows"] == c["matched"] + c["unmatched"] + c["too_late"] + c["dead_letter"]


def test_state_stays_bounded_over_a_steady_run():
    # One click and one order a second for an hour, orders 0-20 s after their click, L = 3 s and 5 s:
    # the open rows stay under rate x (upper - lower + L_left + L_right), within a factor 1.5.
    rng = np.random.default_rng(7)
    lower, upper, l_left, l_right, seconds = 0, 30, 3, 5, 3600
    clicks = [{"partition": "0", "event_time": float(t), "arrival_time": float(t + rng.integers(0, l_left + 1)),
               "user": f"u{t % 50}"} for t in range(seconds)]
    orders = [{"partition": "0", "event_time": float(t + rng.integers(0, 21)), "user": f"u{t % 50}"}
              for t in range(seconds)]
    for r in orders:
        r["arrival_time"] = r["event_time"] + float(rng.integers(0, l_right + 1))
    orders.sort(key=lambda r: r["arrival_time"])
    clicks.sort(key=lambda r: r["arrival_time"])
    cfg = parse_config(_config(lower, upper, "inner", l_left, l_right))
    got = run_join_log(cfg, {"clicks": clicks, "orders": orders}, list(range(100, 2 * seconds, 100)), drain=False)
    rate = 2  # rows a second, both sides
    bound = rate * (upper - lower + l_left + l_right)
    assert 0 < got.max_open_rows <= 1.5 * bound, (got.max_open_rows, bound)
    assert got.counts["left"]["matched"] > 0.9 * seconds


def test_the_slow_side_governs_whatever_its_own_bound():
    # The orders lag the clicks by ~50 s, but W is the min of both inputs: the orders' own watermark
    # (their latest event time - L) holds it, so even L = 0 on the orders loses nothing, while the
    # clicks wait in the buffer. A watermark taken from the clicks alone (latest click - 1 s) would
    # have made every order too late.
    s = load_join(SCENARIOS / "slow_side_governs.yaml")
    got = run_join(s)
    assert got.counts["right"]["too_late"] == 0 and got.max_open_rows >= 5  # the clicks wait for the orders
    for src in s.config["source"]:
        if src["name"] == "orders":
            src["watermark"]["max_out_of_orderness"] = "0s"
    tight = run_join(s)
    assert (tight.joined, tight.too_late) == (got.joined, [])
    clicks_alone = [c["event_time"] - 1 for c in s.input["clicks"] if c["arrival_time"] < 55]  # before order 1
    assert max(clicks_alone) > 5  # ... the first order (event time 5) would already be behind it

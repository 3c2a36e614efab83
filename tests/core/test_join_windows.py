"""Windows after a join (core/join_windows.py): the join's held output watermark drives them.

The scenario file (tests/scenarios/join/windows_after_join.yaml) runs here with
every cut via tests/core/test_join.py's scenario test; this file holds the
window results to a brute force over the brute-force join, whatever the cut,
and checks that a window fires only once the hold reaches its end.
"""

from __future__ import annotations

import copy
from collections import Counter
from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from lowwater.config import parse_config
from lowwater.core.join import IntervalJoin, JoinBounds, Joined, JoinRow, JoinType, Side
from lowwater.core.join_windows import JoinWindows, joined_event_us, run_joined_batch
from lowwater.core.windows import TumblingWindows
from lowwater.testing.join_scenarios import compare, expected, load_join, run_join_log
from lowwater.time import NEG_INF

from . import test_temporal_join
from .test_join import S, brute_force, join_logs

SCENARIO = Path(__file__).parent.parent / "scenarios" / "join" / "windows_after_join.yaml"


def test_a_pair_is_stamped_with_its_later_row():
    left, right = JoinRow(Side.LEFT, ("u",), 4, 0), JoinRow(Side.RIGHT, ("u",), 12, 1)
    assert joined_event_us(Joined(left, right, 0)) == 12
    assert joined_event_us(Joined(right, left, 0)) == 12  # whichever side is later
    assert joined_event_us(Joined(left, None, 0)) == 4  # an unmatched left row: its own


def test_a_window_waits_for_the_hold_not_for_w():
    # A click at 8 s is buffered (upper 10 s): W = 15 s passes the window [0, 10) but the hold stays
    # at 8 s, so a pair the click may still make (an order up to 18 s, admitted while W <= 18 s)
    # still lands in a window the hold keeps open; the window fires once the click is freed.
    join = IntervalJoin(JoinBounds(0, 10 * S), JoinType.LEFT_OUTER)
    windows = JoinWindows(TumblingWindows(10 * S), 0, [None])

    def cols(j):  # noqa: ANN001, ANN202
        return j.left.key, {}

    got = run_joined_batch(join, windows, cols, [JoinRow(Side.LEFT, ("u",), 8 * S, 0)], [NEG_INF], 15 * S)
    assert (got.hold_us, got.results) == (8 * S, [])
    got = run_joined_batch(join, windows, cols, [JoinRow(Side.RIGHT, ("u",), 17 * S, 1)], [15 * S], 16 * S)
    assert got.results == []  # the pair (8 s, 17 s) is stamped 17 s: window [10, 20), still open
    got = run_joined_batch(join, windows, cols, [], [], 30 * S)  # W > 18 s frees the click
    assert [(r.start_us // S, r.end_us // S, r.count) for r in got.results] == [(10, 20, 1)]
    assert got.hold_us == 30 * S and windows.behind() == 0


def test_the_scenario_file_in_one_batch_and_one_row_a_batch():
    s = load_join(SCENARIO)
    n = sum(len(v) for v in s.input.values())
    one = run_join_log(s.pipeline(), s.input)
    assert not compare(one, expected(s), s)
    every_row = run_join_log(s.pipeline(), s.input, list(range(1, n)))
    assert (every_row.results, every_row.joined, every_row.counts) == (one.results, one.joined, one.counts)


@st.composite
def windowed_join_logs(draw):
    if draw(st.booleans()):
        raw, inputs, cuts = draw(join_logs())
    else:  # windows after a temporal join: its held output watermark is its waiting left rows'
        raw, inputs, cuts = draw(test_temporal_join.temporal_logs())
    size = draw(st.integers(1, 12))
    slide = draw(st.sampled_from([d for d in range(1, size + 1) if size % d == 0]))
    raw["window"] = ({"type": "tumbling", "size": f"{size}s"} if slide == size
                     else {"type": "hopping", "size": f"{size}s", "slide": f"{slide}s"})
    raw["window"]["key"] = ["user"]
    return raw, inputs, cuts


@settings(max_examples=200, deadline=None)
@given(windowed_join_logs())
def test_window_results_are_the_brute_force_windows_of_the_brute_force_join(case):
    raw, inputs, cuts = case
    cfg = parse_config(copy.deepcopy(raw))
    one = run_join_log(cfg, inputs)
    cut = run_join_log(cfg, inputs, cuts)
    assert (cut.results, cut.joined, cut.counts) == (one.results, one.joined, one.counts)  # §8
    pairs, _ = (brute_force if cfg.join.kind == "interval" else test_temporal_join.brute_force)(cfg, inputs)
    assigner = cfg.join.window.assigner()
    counts: Counter = Counter()
    for key, lt, rt in pairs:
        t = round((lt if rt is None else max(lt, rt)) * S)
        a = assigner.assign(np.array([t], dtype=np.int64))
        counts.update((key, s / S, e / S) for s, e in zip(a.start.tolist(), a.end.tolist(), strict=True))
    want = sorted((k, s, e, "final", 0, n) for (k, s, e), n in counts.items())
    assert one.results == want  # every joined row counted once per window, on time, no revision

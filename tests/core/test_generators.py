"""Each watermark generator alone: tables with timelines, regressions, and the sliding quantile.

Timelines: one column per row in arrival order; ``M`` marks a marker row,
``.`` a data row; ``W_p`` is the partition watermark after the row.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lowwater.core.watermarks import (
    Adaptive,
    BoundedOutOfOrderness,
    PartitionRows,
    Punctuated,
    StrategyError,
    WatermarkStrategy,
    WithIdleness,
    strategy_from_table,
)
from lowwater.core.watermarks.quantiles import range_quantiles
from lowwater.time import NEG_INF, POS_INF


def rows(events, arrivals=None, markers=None) -> PartitionRows:
    return PartitionRows(
        np.array(events, dtype=np.int64),
        None if arrivals is None else np.array(arrivals, dtype=np.int64),
        None if markers is None else np.array([m == "M" for m in markers]),
    )


@pytest.mark.parametrize(
    ("events", "bound", "expected"),
    [
        # W_p = running max - L; a row behind the max does not move it
        ([10, 5, 20], 2, [8, 8, 18]),
        # L = 0: W_p is the max itself
        ([3, 3, 1, 4], 0, [3, 3, 3, 4]),
    ],
)
def test_bounded_table(events, bound, expected):
    g = BoundedOutOfOrderness(bound).build()
    e = g.on_rows(rows(events))
    assert e.watermark_us.tolist() == expected
    assert e.regressions == 0 and e.active_until_us is None
    assert g.watermark_us == expected[-1] and g.lateness_us == bound


def test_bounded_per_partition_overrides():
    s = WatermarkStrategy.for_bounded_out_of_orderness(5).with_bounds({"slow": 30})
    assert s.generator_for("slow").build().on_rows(rows([100])).watermark_us.tolist() == [70]
    assert s.generator_for("fast").build().on_rows(rows([100])).watermark_us.tolist() == [95]


@pytest.mark.parametrize(
    ("events", "markers", "expected", "regressions"),
    [
        # event  5  3  9  12 4  8
        # row    .  M  .  M  .  M
        # W_p    -  3  3  12 12 12   the marker at 8 proposes a regression: ignored, counted
        ([5, 3, 9, 12, 4, 8], ".M.M.M", [NEG_INF, 3, 3, 12, 12, 12], 1),
        # data rows only: no promise, however far their event times go
        ([5, 50, 500], "...", [NEG_INF] * 3, 0),
        # a marker at the same time as the last one is no regression
        ([7, 7, 1], "MM.", [7, 7, 7], 0),
    ],
)
def test_punctuated_table(events, markers, expected, regressions):
    g = Punctuated("is_marker").build()
    e = g.on_rows(rows(events, markers=markers))
    assert e.watermark_us.tolist() == expected
    assert e.regressions == regressions
    assert g.reported and g.lateness_us is None


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(-50, 50), st.booleans()), min_size=1, max_size=40))
def test_punctuated_data_rows_never_move_the_watermark(log):
    events = [e for e, _ in log]
    markers = "".join("M" if m else "." for _, m in log)
    wp = Punctuated("m").build().on_rows(rows(events, markers=markers)).watermark_us.tolist()
    before = [NEG_INF, *wp[:-1]]
    for (event, marker), b, a in zip(log, before, wp, strict=True):
        assert a == (max(b, event) if marker else b)


def test_adaptive_widens_during_a_burst_and_tightens_after():
    # 30 rows 1 s late, a burst of 10 rows 40 s late, then 40 rows 1 s late; one row a second.
    #   arrival  0 .......... 29 30 ... 39 40 ............ 79
    #   delay    1 .......... 1  40 ... 40 1  ............ 1
    #   L        1 .......... 1  40 ... 40 40 (burst in window) 1 (burst out of the last 20 rows)
    delays = [1] * 30 + [40] * 10 + [1] * 40
    arrivals = list(range(len(delays)))
    events = [a - d for a, d in zip(arrivals, delays, strict=True)]
    spec = Adaptive(target_quantile=0.9, rows=20, min_lateness_us=0, max_lateness_us=60)
    g = spec.build()
    lateness = []
    for i in range(len(events)):  # one row at a time, to read L after each
        g.on_rows(rows(events[i : i + 1], arrivals[i : i + 1]))
        lateness.append(g.lateness_us)
    assert lateness[:30] == [1] * 30  # steady: the 90th percentile delay is 1
    assert max(lateness) == 40 and lateness.index(40) > 30  # widens during the burst
    assert lateness[-1] == 1  # tightens once the burst has left the window
    # The same rows in one call: the same W_p (deterministic, independent of the cut).
    whole = spec.build().on_rows(rows(events, arrivals))
    assert whole.watermark_us[-1] == g.watermark_us
    assert np.all(np.diff(whole.watermark_us) >= 0)  # W_p never moves back ...
    assert whole.regressions > 0  # ... the widening proposed lower values: ignored, counted


def test_adaptive_window_by_arrival_time_and_clamps():
    # over = 10: only rows that arrived in the last 10 µs count; L clamped to [2, 5]
    #   arrival  0   1   20  21
    #   delay    9   0   0   1
    #   L        5   5   2   2     (9 clamped to 5; at 20 the first two rows are out of the window)
    spec = Adaptive(target_quantile=1.0, over_us=10, min_lateness_us=2, max_lateness_us=5)
    g = spec.build()
    e = g.on_rows(rows([-9, 1, 20, 20], [0, 1, 20, 21]))
    assert e.watermark_us.tolist() == [-14, -4, 18, 18]
    assert g.lateness_us == 2
    assert g.snapshot()["arrivals_us"] == [20, 21]  # only the rows a later window can see are carried


def test_adaptive_snapshot_restores_exactly():
    spec = Adaptive(target_quantile=0.5, rows=3)
    arrivals = [0, 1, 2, 3, 4, 5]
    events = [0, -5, 2, 3, -10, 5]
    whole = spec.build().on_rows(rows(events, arrivals)).watermark_us.tolist()
    first = spec.build()
    got = first.on_rows(rows(events[:4], arrivals[:4])).watermark_us.tolist()
    resumed = spec.build(first.snapshot())
    got += resumed.on_rows(rows(events[4:], arrivals[4:])).watermark_us.tolist()
    assert got == whole


@pytest.mark.parametrize(
    "inner",
    [BoundedOutOfOrderness(0), Punctuated("m"), Adaptive(target_quantile=1.0, rows=2)],
    ids=["bounded", "punctuated", "adaptive"],
)
def test_idleness_wraps_any_generator(inner):
    # arrival  100 104
    # active until 110 114 (last arrival + 10); W_p is the inner generator's, untouched
    plain = inner.build().on_rows(rows([3, 7], [100, 104], "MM")).watermark_us.tolist()
    g = WithIdleness(inner, 10).build()
    e = g.on_rows(rows([3, 7], [100, 104], "MM"))
    assert e.watermark_us.tolist() == plain
    assert e.active_until_us.tolist() == [110, 114]
    assert g.active_until_us(0) == 114
    assert WithIdleness(inner, 10).kind == inner.kind
    # never reported: measured from the run's first arrival; no arrival yet: never idle
    fresh = WithIdleness(inner, 10).build()
    assert fresh.active_until_us(50) == 60 and fresh.active_until_us(NEG_INF) == POS_INF
    restored = WithIdleness(inner, 10).build(g.snapshot())
    assert restored.active_until_us(0) == 114 and restored.watermark_us == g.watermark_us


@pytest.mark.parametrize(
    ("spec", "has_arrival", "has_marker", "message"),
    [
        (WithIdleness(BoundedOutOfOrderness(0), 5), False, False, "idleness needs an arrival clock"),
        (Adaptive(rows=5), False, False, "adaptive watermarks need an arrival clock"),
        (Punctuated("is_marker"), True, False, "need the marker column ('is_marker')"),
    ],
)
def test_missing_columns_are_one_clear_error(spec, has_arrival, has_marker, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        spec.check_inputs(has_arrival, has_marker)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.integers(-20, 20), min_size=1, max_size=50),
    st.data(),
    st.sampled_from([0.01, 0.5, 0.9, 0.99, 0.999, 1.0]),
)
def test_range_quantiles_equal_sorting_each_window(values, data, q):
    n = len(values)
    lo = data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=10))
    hi = [data.draw(st.integers(a + 1, n)) for a in lo]
    got = range_quantiles(np.array(values), np.array(lo), np.array(hi), q).tolist()
    for a, b, g in zip(lo, hi, got, strict=True):
        window = sorted(values[a:b])
        assert g == window[max(1, math.ceil(Fraction(str(q)) * len(window))) - 1]


def test_strategy_from_table_builds_each_strategy():
    s = strategy_from_table({"max_out_of_orderness": "5s", "out_of_orderness_by_partition": {"a": "1m"}})
    assert (s.kind, s.bound_for("a"), s.bound_for("b")) == ("bounded", 60_000_000, 5_000_000)
    p = strategy_from_table({"strategy": "punctuated", "marker": "is_commit_marker", "idle_timeout": "1m"})
    assert (p.kind, p.marker, p.idle_timeout_us) == ("punctuated", "is_commit_marker", 60_000_000)
    a = strategy_from_table(
        {"strategy": "adaptive", "target_quantile": 0.999, "over": "10m", "min_lateness": "1s",
         "max_lateness": "2m", "idle_timeout": "1m", "partitions": ["n", "s"], "max_future_skew": "1m"}
    )
    assert a.generator == Adaptive(0.999, None, 600_000_000, 1_000_000, 120_000_000)
    assert (a.idle_timeout_us, a.declared_partitions, a.max_future_skew_us) == (60_000_000, ("n", "s"), 60_000_000)
    assert strategy_from_table({}) == WatermarkStrategy()  # today's default: bounded, L = 0


@pytest.mark.parametrize(
    ("table", "message"),
    [
        # an unknown strategy names the key and the choices
        ({"strategy": "magic"}, "source.watermark.strategy: 'magic' is not one of bounded, punctuated, adaptive"),
        # a key of another strategy
        ({"strategy": "punctuated", "marker": "m", "rows": 5}, 'source.watermark.rows: not a key of strategy = "punct'),
        ({"max_lateness": "1m"}, 'source.watermark.max_lateness: not a key of strategy = "bounded"'),
        # punctuated without its marker column
        ({"strategy": "punctuated"}, "source.watermark.marker: expected a non-empty string"),
        # adaptive: a window is required, the quantile is a probability, the clamp is ordered
        ({"strategy": "adaptive"}, "source.watermark.rows / over: an adaptive watermark needs a window"),
        ({"strategy": "adaptive", "rows": 10, "target_quantile": 2}, "source.watermark.target_quantile: expected"),
        ({"strategy": "adaptive", "rows": 10, "target_quantile": "high"}, "source.watermark.target_quantile: expected"),
        ({"strategy": "adaptive", "rows": 0}, "source.watermark.rows: expected a positive integer"),
        ({"strategy": "adaptive", "over": "soon"}, "source.watermark.over: not a duration"),
        (
            {"strategy": "adaptive", "rows": 5, "min_lateness": "2m", "max_lateness": "1m"},
            "source.watermark.max_lateness: must not be below min_lateness",
        ),
        # the common keys
        ({"idle_timeout": "0s"}, "source.watermark.idle_timeout: must be positive"),
        ({"partitions": []}, "source.watermark.partitions: expected a non-empty list"),
        ({"out_of_orderness_by_partition": {"a": "x"}}, "source.watermark.out_of_orderness_by_partition.a: not a"),
    ],
)
def test_strategy_table_errors_name_the_key(table, message):
    with pytest.raises(StrategyError) as err:
        strategy_from_table(table, where="source.watermark")
    assert str(err.value).startswith(message)
    assert "\n" not in str(err.value)

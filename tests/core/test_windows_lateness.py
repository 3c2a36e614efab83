"""Window assignment and lateness verdicts as tables (SEMANTICS.md §3-§4).

Timeline for a tumbling window of 10 with grace 5, watermark W(r):

    [0 ............ 10)  end=10      end+G=15
    W(r) <  10  -> on time
    10 <= W(r) < 15  -> late update (a revision)
    W(r) >= 15  -> too late (drop / side output)
"""

from __future__ import annotations

import numpy as np
import pytest

from lowwater.core.accounting import Accounting
from lowwater.core.aggregates import AggSpec
from lowwater.core.lateness import Lateness, classify, fired, freed, row_verdicts
from lowwater.core.windows import HoppingWindows, TumblingWindows


@pytest.mark.parametrize(
    ("event", "start"),
    [
        (0, 0),  # start is inclusive
        (9, 0),
        (10, 10),  # a row at exactly end belongs to the next window
        (-1, -10),  # before the epoch
    ],
)
def test_tumbling_assignment(event, start):
    a = TumblingWindows(10).assign(np.array([event]))
    assert (a.start[0], a.end[0]) == (start, start + 10)


def test_tumbling_offset():
    a = TumblingWindows(10, offset_us=3).assign(np.array([2, 3, 12, 13]))
    assert a.start.tolist() == [-7, 3, 3, 13]


@pytest.mark.parametrize(
    ("event", "windows"),
    [
        (7, [(0, 10), (5, 15)]),
        (5, [(0, 10), (5, 15)]),
        (10, [(5, 15), (10, 20)]),
        (4, [(-5, 5), (0, 10)]),
    ],
)
def test_hopping_assignment(event, windows):
    a = HoppingWindows(10, 5).assign(np.array([event]))
    assert list(zip(a.start.tolist(), a.end.tolist(), strict=True)) == windows
    assert a.row.tolist() == [0, 0]


def test_hopping_needs_a_divisible_slide():
    with pytest.raises(ValueError):
        HoppingWindows(10, 3)


@pytest.mark.parametrize(
    ("w", "verdict"),
    [
        (9, Lateness.ON_TIME),  # end 10 > W
        (10, Lateness.LATE_UPDATE),  # end == W: the window has fired
        (14, Lateness.LATE_UPDATE),  # still within grace
        (15, Lateness.TOO_LATE),  # end + G == W
        (99, Lateness.TOO_LATE),
    ],
)
def test_classify_table(w, verdict):
    assert classify(np.array([10]), np.array([w]), 5).tolist() == [verdict]


def test_fire_and_free():
    assert fired(10, 10) and not fired(10, 9)
    assert freed(10, 15, 5) and not freed(10, 14, 5)


def test_row_verdict_is_the_worst_window():
    rows = np.array([0, 0, 1, 1])
    verdicts = np.array([Lateness.ON_TIME, Lateness.TOO_LATE, Lateness.ON_TIME, Lateness.LATE_UPDATE])
    assert row_verdicts(rows, verdicts, 3).tolist() == [2, 1, 0]


def test_accounting_identity():
    acc = Accounting.from_verdicts(np.array([0, 0, 1, 2], dtype=np.int8), dead_letter=3)
    assert (acc.rows, acc.on_time, acc.late_updates, acc.too_late, acc.dead_letter) == (7, 2, 1, 1, 3)
    assert acc.balanced
    acc.check()
    assert acc.completeness() == 3 / 4
    broken = Accounting(rows=5, on_time=1)
    with pytest.raises(AssertionError):
        broken.check()
    assert (acc + acc).rows == 14


@pytest.mark.parametrize("bad", ["total", "sum amount", "median(x)", "sum()"])
def test_aggregation_spec_errors(bad):
    with pytest.raises(ValueError):
        AggSpec.parse("x", bad)


def test_aggregation_spec():
    assert AggSpec.parse("t", " avg( amount ) ") == AggSpec("t", "avg", "amount")

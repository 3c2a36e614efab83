"""Accumulation modes (issue 6, part): what each revision carries, and the fold
property -- folding a window's emissions as the mode prescribes gives the
batch recomputation over its admitted rows."""

from __future__ import annotations

import pytest

from lowwater.testing.scenario import base_config, run_scenario

from .helpers import emitted
from .test_scenarios import OUT_OF_ORDER, rows_of

pytestmark = pytest.mark.spark


def cfg(mode: str) -> dict:
    return base_config(
        watermark={"max_out_of_orderness": "2s"},
        window={"allowed_lateness": "20s", "accumulation": mode,
                "aggregations": {"total": "sum(amount)", "high": "max(amount)"}},
    )


def window_a(outcome) -> list[tuple]:
    return [e for e in emitted(outcome, "total") if e[0] == "a" and e[1] == 0]


def fold(rows: list[tuple], mode: str) -> tuple[int, float]:
    """(count, total) of a window from its emissions, in emission order (revision, retractions first)."""
    order = sorted(rows, key=lambda e: (e[-1], e[-2] != "retraction"))
    if mode == "accumulating":
        last = order[-1]
        return last[3], last[4]
    if mode == "discarding":
        return sum(e[3] for e in order), sum(e[4] for e in order)
    n = t = 0
    for e in order:  # retracting: add values, subtract retractions
        sign = -1 if e[-2] == "retraction" else 1
        n, t = n + sign * e[3], t + sign * e[4]
    return n, t


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("accumulating", [("a", 0, 10, 2, 3.0, "final", 0), ("a", 0, 10, 3, 13.0, "revision", 1),
                          ("a", 0, 10, 4, 113.0, "revision", 2)]),
        ("discarding", [("a", 0, 10, 1, 10.0, "revision", 1), ("a", 0, 10, 1, 100.0, "revision", 2),
                        ("a", 0, 10, 2, 3.0, "final", 0)]),
        ("retracting", [("a", 0, 10, 2, 3.0, "final", 0), ("a", 0, 10, 2, 3.0, "retraction", 0),
                        ("a", 0, 10, 3, 13.0, "retraction", 1), ("a", 0, 10, 3, 13.0, "revision", 1),
                        ("a", 0, 10, 4, 113.0, "revision", 2)]),
    ],
)
def test_modes_and_their_fold(spark, mode, expected):
    rows = rows_of(OUT_OF_ORDER)
    whole = run_scenario(spark, cfg(mode), rows)
    cut = run_scenario(spark, cfg(mode), rows, cuts=[2, 4, 5])
    assert window_a(whole) == expected
    assert cut.emissions() == whole.emissions()
    # Batch recomputation over the admitted rows of [0, 10): 1, 2, 10, 100 -> (4, 113).
    assert fold(window_a(whole), mode) == (4, 113.0)

"""The one partial layout (core/partials.py): the merge is a commutative monoid, the fast path obeys the table,
and every aggregate is read as the table says, nulls included."""

from __future__ import annotations

import math
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lowwater.core import partials
from lowwater.core.aggregates import FUNCTIONS
from lowwater.core.partials import (
    OUTPUTS,
    columns,
    empty,
    layout,
    merge_into,
    merged,
    of_rows,
    output,
    signed_sum,
    stored,
)

NAN = math.nan
N_VALUES = 3


def _or_null(values: st.SearchStrategy) -> st.SearchStrategy:
    return st.one_of(values, st.just(NAN))


# One column per kind (bigint, double, decimal), exact values only, so associativity is equality; NaN is null.
row = st.tuples(_or_null(st.integers(-50, 50)), _or_null(st.integers(-50, 50).map(float)),
                _or_null(st.integers(-5000, 5000).map(lambda x: Decimal(x) / 100)))
rows = st.lists(row, max_size=8)


def _nonnull(vs: list) -> list:
    return [v for v in vs if v == v]


def _by_table(rs: list[tuple]) -> list:
    """The partial of ``rs`` straight from the table: each field folds its column's values with its ``fold``."""
    folds = {
        "count_all": lambda vs: len(vs),
        "count": lambda vs: len(_nonnull(vs)),
        "sum": lambda vs: sum(_nonnull(vs)) if _nonnull(vs) else None,
        "min": lambda vs: min(_nonnull(vs)) if _nonnull(vs) else None,
        "max": lambda vs: max(_nonnull(vs)) if _nonnull(vs) else None,
    }
    return [folds[f.fold]([r[i or 0] for r in rs]) for _, f, i in layout(N_VALUES)]


def _merge_by_table(p: list, q: list) -> list:
    """``p ⊕ q`` straight from the table: each field merges with its ``merge``, null the identity."""
    ops = {"sum": lambda a, b: a + b, "min": min, "max": max}
    return [a if b is None else b if a is None else ops[f.merge](a, b)
            for a, b, (_, f, _) in zip(p, q, layout(N_VALUES), strict=True)]


def test_the_persisted_column_names():
    assert columns(2) == ["_n", "_s0", "_mn0", "_mx0", "_nn0", "_s1", "_mn1", "_mx1", "_nn1"]
    assert [(f.fold, f.merge) for _, f, _ in layout(1)] == [
        ("count_all", "sum"), ("sum", "sum"), ("min", "min"), ("max", "max"), ("count", "sum")]


def test_every_aggregate_function_reads_the_layout():
    assert tuple(OUTPUTS) == FUNCTIONS
    assert {f: ([(r.field.name, r.of) for r in o.reads], o.finish) for f, o in OUTPUTS.items()} == {
        "count": ([("nonnull", "")], "value"), "sum": ([("sum", "")], "value"), "min": ([("min", "")], "value"),
        "max": ([("max", "")], "value"), "avg": ([("sum", ""), ("nonnull", "")], "ratio"),
        "count_if": ([("nonnull", "true")], "value"),
        **{f: ([("nonnull", ""), ("sum", ""), ("sum", "square")], f)
           for f in ("var_samp", "var_pop", "stddev_samp", "stddev_pop")},
        "first_by_time": ([("min", "by_time")], "timed_value"), "last_by_time": ([("max", "by_time")], "timed_value"),
        "count_distinct": ([("sum", "set")], "size"), "collect_set": ([("sum", "set")], "collected"),
        "collect_list": ([("sum", "list")], "collected"), "approx_count_distinct": ([("sum", "hll")], "estimate"),
        "approx_percentile": ([("sum", "kll")], "quantile")}


@given(rs=rows)
def test_the_fast_path_folds_rows_as_the_table_says(rs):
    assert of_rows(rs, N_VALUES) == _by_table(rs)


@given(a=rows, b=rows)
def test_the_fast_merge_is_the_table_merge_and_the_fold_of_all_rows(a, b):
    pa_, pb = of_rows(a, N_VALUES), of_rows(b, N_VALUES)
    assert merged(pa_, pb) == _merge_by_table(pa_, pb) == of_rows(a + b, N_VALUES)


@given(a=rows, b=rows, c=rows)
def test_merge_is_associative_and_commutative_with_the_empty_partial_as_identity(a, b, c):
    p, q, r = (of_rows(x, N_VALUES) for x in (a, b, c))
    assert merged(merged(p, q), r) == merged(p, merged(q, r))
    assert merged(p, q) == merged(q, p)
    assert merged(p, empty(N_VALUES)) == p == merged(empty(N_VALUES), p)


@given(a=rows, b=rows)
def test_merge_into_leaves_the_other_partial_alone(a, b):
    p, q = of_rows(a, N_VALUES), of_rows(b, N_VALUES)
    q0 = list(q)
    merge_into(p, q)
    assert q == q0


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([], {"count": 0, "sum": None, "min": None, "max": None, "avg": None}),  # no rows
        ([NAN, NAN], {"count": 0, "sum": None, "min": None, "max": None, "avg": None}),  # rows, no values
        ([3, NAN, 1, 8], {"count": 3, "sum": 12, "min": 1, "max": 8, "avg": 4.0}),  # nulls skipped
        ([Decimal("1.10"), Decimal("2.25")],  # exact
         {"count": 2, "sum": Decimal("3.35"), "min": Decimal("1.10"), "max": Decimal("2.25"),
          "avg": Decimal("1.675")}),
        ([-0.0], {"count": 1, "sum": 0.0, "min": -0.0, "max": -0.0, "avg": 0.0}),  # a sum starts from 0
    ],
)
def test_outputs_from_a_partial(values, expected):
    p = of_rows([(v,) for v in values], 1)
    got = {f: output(f, p, 0) for f in expected}
    assert got == expected
    assert all(type(got[f]) is type(expected[f]) for f in ("count", "sum"))
    if values == [-0.0]:
        assert math.copysign(1, got["sum"]) == 1.0
    assert partials.rows(p) == len(values)


def test_output_reads_the_right_value_column():
    p = of_rows([(1, 10), (2, NAN), (3, 30)], 2)
    assert [output(f, p, 1) for f in FUNCTIONS[:5]] == [2, 40, 10, 30, 20.0]
    assert [output(f, p, 0) for f in FUNCTIONS[:5]] == [3, 6, 1, 3, 2.0]


def test_stored_keeps_values_and_makes_counts_ints():
    p = of_rows([(1.5,), (NAN,)], 1)
    p[0], p[4] = float(p[0]), float(p[4])  # as a count may come back from a float column
    assert stored(p) == [2, 1.5, 1.5, 1.5, 1]
    assert [type(v) for v in stored(p)] == [int, float, float, float, int]
    assert stored(empty(1)) == [0, None, None, None, 0]


@given(a=rows, b=rows)
def test_a_retraction_undoes_the_counts_and_sums(a, b):
    p, q = of_rows(a, N_VALUES), of_rows(b, N_VALUES)
    back = signed_sum([(1, merged(p, q)), (-1, q)], N_VALUES)
    for j, (_, f, _) in enumerate(layout(N_VALUES)):
        if f.merge == "sum":
            assert back[j] == p[j], f.name
        else:
            assert back[j] is None

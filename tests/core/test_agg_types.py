"""Which column types each aggregate takes (Spark SQL's rule), checked before the run (issue 31)."""

from __future__ import annotations

import math

import pytest

from lowwater.config import ConfigError, check_columns, parse_config
from lowwater.core.aggregates import ANY, NUMERIC, ORDERED, AggSpec, type_class, type_problem
from lowwater.core.partials import add_row, add_row_where, empty, output
from lowwater.core.sessions import SessionMachine


@pytest.mark.parametrize(("type_name", "cls"), [
    ("bigint", NUMERIC), ("int", NUMERIC), ("tinyint", NUMERIC), ("double", NUMERIC),
    ("decimal(12,2)", NUMERIC), ("DECIMAL(38, 0)", NUMERIC), ("LONG", NUMERIC),  # DDL spellings too
    ("string", ORDERED), ("varchar(10)", ORDERED), ("date", ORDERED), ("timestamp", ORDERED),
    ("timestamp_ntz", ORDERED), ("boolean", ORDERED),
    ("array<int>", ANY), ("map<string,int>", ANY), ("struct<a:int>", ANY), ("binary", ANY),  # counted only
])
def test_type_class(type_name, cls):
    assert type_class(type_name) == cls


@pytest.mark.parametrize(("expr", "type_name", "ok"), [
    ("count(c)", "string", True), ("count(c)", "array<int>", True), ("count(c)", "boolean", True),
    ("min(c)", "string", True), ("max(c)", "date", True), ("min(c)", "timestamp", True),
    ("max(c)", "decimal(10,2)", True), ("min(c)", "array<int>", False),
    ("sum(c)", "string", False), ("avg(c)", "date", False), ("sum(c)", "boolean", False),
    ("sum(c)", "bigint", True), ("avg(c)", "decimal(10,2)", True),
])
def test_type_problem(expr, type_name, ok):
    problem = type_problem(AggSpec.parse("a", expr), type_name)
    assert (problem is None) == ok
    if not ok:
        assert f"column 'c' is {type_name}" in problem


BASE = {
    "source": {"path": "landing", "event_time": "t", "partition": "p"},
    "window": {"size": "1h", "key": ["origin"], "aggregations": {}},
    "output": {"path": "out"},
}


def _cfg(aggs: dict[str, str]):
    return parse_config({**BASE, "window": {**BASE["window"], "aggregations": aggs}})


def test_check_columns_with_types_refuses_a_sum_of_text_in_one_line():
    types = {"t": "bigint", "p": "string", "origin": "string", "flight_id": "string", "dep": "date"}
    check_columns(_cfg({"n": "count(flight_id)", "lo": "min(flight_id)", "last": "max(dep)"}), {"default": types})
    with pytest.raises(ConfigError, match=r"^window.aggregations.s: sum\(flight_id\) needs a number, but column "
                                          r"'flight_id' is string; if it holds numbers as text, declare it a number "
                                          r"in source.schema \(e.g. DOUBLE\)$"):
        check_columns(_cfg({"n": "count(flight_id)", "s": "sum(flight_id)"}), {"default": types})
    with pytest.raises(ConfigError, match=r"^window.aggregations.a: avg\(dep\) needs a number, but column 'dep' is "
                                          r"date$"):
        check_columns(_cfg({"a": "avg(dep)"}), {"default": types})
    # Unknown types (None) and plain name lists are not judged: only what is known refuses.
    check_columns(_cfg({"s": "sum(flight_id)"}), {"default": {**types, "flight_id": None}})
    check_columns(_cfg({"s": "sum(flight_id)"}), {"default": list(types)})


def test_a_missing_column_is_named_before_its_type():
    with pytest.raises(ConfigError, match="^window.aggregations: column 'fare' not found"):
        check_columns(_cfg({"s": "sum(fare)"}), {"default": {"t": "bigint", "p": "string", "origin": "string"}})


def test_strings_and_dates_are_counted_and_compared_never_added():
    nan = math.nan
    p = empty(2)
    for row in (("JFK", 3), (nan, 1), ("EWR", nan), ("LGA", 8)):
        add_row_where(p, row, (False, True))
    assert p == [4, None, "EWR", "LGA", 3, 12, 1, 8, 3]
    assert (output("count", p, 0), output("min", p, 0), output("max", p, 0)) == (3, "EWR", "LGA")
    numbers = empty(2)
    for row in ((2, 3), (nan, 1), (5, nan), (1, 8)):
        add_row(numbers, row)
    p2 = empty(2)
    for row in ((2, 3), (nan, 1), (5, nan), (1, 8)):
        add_row_where(p2, row, (True, True))
    assert p2 == numbers  # all summed: the same as add_row


def test_session_machine_folds_text_values():
    m = SessionMachine(gap_us=10, grace_us=0, n_values=1, summed=(False,))
    for t, v in ((1, "b"), (3, "a"), (5, "c")):
        m.process("k", t, -(2**62), (v,), t)
    m.advance(100)
    (e,) = m.take_emissions()
    assert tuple(e.agg) == (3, None, "a", "c", 3)

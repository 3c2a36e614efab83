"""Aggregations over a window's admitted rows, the types each takes, and the value inputs they read.

Every aggregate is read from mergeable partial state (row count, and per value
input: sum, min, max, non-null count), so on-time rows, late updates and
stored state combine by addition / min / max: ``avg = sum / non-null``,
``count_if(c)`` the non-null count of the input "1 where ``c`` is true", and
the variances and standard deviations come from the moments (non-null count,
sum, and the sum of the input "``c`` squared"), ``first_by_time``/``last_by_time``
the min/max of the input "(event time, arrival order, ``c``)". The layout and the function ->
field mapping are ``core/partials.py``; ``ALIASES`` are Spark's other names.

Which column types an aggregate takes is Spark SQL's rule (:data:`NEEDS`):
``count`` counts the non-null values of any type, ``min``/``max`` compare
numbers, strings (by code point), dates, timestamps and booleans, ``sum``,
``avg`` and the variances need numbers, ``count_if`` a boolean; ``first_by_time``
and ``last_by_time`` take what ``min``/``max`` take. Types are
Spark's type names (``DataType.simpleString``: ``int``, ``decimal(12,2)``,
``string``, ``array<int>``): the check runs on a schema read before Spark
starts (``io/headers.py``) and on Spark's own.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from lowwater.core.partials import COLUMN, OUTPUTS

FUNCTIONS = tuple(OUTPUTS)  # count, sum, min, max, avg, count_if, the variances, first/last_by_time, collections
# Spark SQL's other names of the same aggregates (``stddev`` and ``variance`` are the sample ones, as in Spark).
ALIASES = {"stddev": "stddev_samp", "std": "stddev_samp", "variance": "var_samp"}
_NAMES = sorted([*FUNCTIONS, *ALIASES], key=len, reverse=True)
_AGG = re.compile(rf"^\s*({'|'.join(_NAMES)})\s*\(\s*([A-Za-z_][A-Za-z0-9_.]*)\s*(?:,\s*([0-9.eE+-]+)\s*)?\)\s*$",
                  re.I)
WITH_FRACTION = ("approx_percentile",)  # func(column, p): p in [0, 1]


@dataclass(frozen=True)
class AggSpec:
    """One output aggregate: ``name = func(column)``."""

    name: str
    func: str
    column: str
    fraction: float | None = None  # ``approx_percentile``'s p

    @property
    def text(self) -> str:
        """``func(column)``, or ``func(column, p)``: as the file holds it."""
        p = "" if self.fraction is None else f", {self.fraction}"
        return f"{self.func}({self.column}{p})"

    @classmethod
    def parse(cls, name: str, expr: str) -> AggSpec:
        """``AggSpec.parse("total", "sum(amount)")``; raises ValueError when malformed."""
        m = _AGG.match(str(expr))
        forms = ", ".join(f + ("(column, p)" if f in WITH_FRACTION else "(column)") for f in FUNCTIONS)
        if not m or (m.group(3) is None) != (m.group(1).lower() not in WITH_FRACTION):
            msg = f"aggregation {name!r}: {expr!r} is not one of {forms}"
            raise ValueError(msg)
        func = m.group(1).lower()
        fraction = None
        if m.group(3) is not None:
            try:
                fraction = float(m.group(3))
            except ValueError:
                fraction = -1.0
            if not 0.0 <= fraction <= 1.0:
                msg = f"aggregation {name!r}: {expr!r}: p must be a number from 0 to 1"
                raise ValueError(msg)
        return cls(name, ALIASES.get(func, func), m.group(2), fraction)


# What each aggregate needs of its column's type, as a class of :func:`type_class`.
NUMERIC, ORDERED, ANY, BOOLEAN = "numeric", "ordered", "any", "boolean"
NEEDS = {"count": ANY, "sum": NUMERIC, "avg": NUMERIC, "min": ORDERED, "max": ORDERED, "count_if": BOOLEAN,
         "first_by_time": ORDERED, "last_by_time": ORDERED,  # a value that travels as itself (``aggtypes``)
         "count_distinct": ORDERED, "collect_set": ORDERED, "collect_list": ORDERED, "approx_count_distinct": ORDERED,
         "approx_percentile": NUMERIC,
         **dict.fromkeys(("var_samp", "var_pop", "stddev_samp", "stddev_pop"), NUMERIC)}
_TAKES = {NUMERIC: {NUMERIC}, ORDERED: {NUMERIC, ORDERED}, ANY: {NUMERIC, ORDERED, ANY}}
_NEED_TEXT = {NUMERIC: "a number", ORDERED: "a number, string, date, timestamp or boolean", BOOLEAN: "a boolean"}
_NUMERIC_TYPES = frozenset({"tinyint", "smallint", "int", "bigint", "float", "double",
                            "byte", "short", "integer", "long", "real"})
_ORDERED_TYPES = frozenset({"string", "boolean", "date", "timestamp", "timestamp_ntz", "timestamp_ltz"})


def type_class(type_name: str) -> str:
    """:data:`NUMERIC`, :data:`ORDERED` (strings, dates, timestamps, booleans) or :data:`ANY` for a Spark type name.

    >>> [type_class(t) for t in ("bigint", "decimal(12,2)", "string", "date", "array<int>")]
    ['numeric', 'numeric', 'ordered', 'ordered', 'any']
    """
    t = type_name.strip().lower()
    base = t.split("(", 1)[0].strip()
    if base in _NUMERIC_TYPES or base in ("decimal", "dec", "numeric"):
        return NUMERIC
    if base in _ORDERED_TYPES or base in ("varchar", "char"):
        return ORDERED
    return ANY


def type_problem(spec: AggSpec, type_name: str) -> str | None:
    """Why ``spec`` cannot aggregate a column of type ``type_name`` (None: it can)."""
    need = NEEDS[spec.func]
    if need == BOOLEAN:
        if type_name.strip().lower() in ("boolean", "bool"):
            return None
    elif type_class(type_name) in _TAKES[need]:
        return None
    return f"{spec.func}({spec.column}) needs {_NEED_TEXT[need]}, but column {spec.column!r} is {type_name}"


BY_TIME_FUNCS = ("first_by_time", "last_by_time")
COLLECTIONS = ("count_distinct", "collect_set", "collect_list", "approx_count_distinct", "approx_percentile")


def windowed_only(specs: tuple[AggSpec, ...] | list[AggSpec], where: str) -> str | None:
    """Why ``where`` (windows after a join, reconcile) cannot keep these aggregates (None: it can).

    A by-time input orders rows by (event time, arrival order), and only the tumbling/hopping operator and the
    session machine carry a row's arrival order across steps into their state (ADRs 0034, 0038).
    """
    for s in specs:
        if s.func in BY_TIME_FUNCS:
            return (f"{s.name} = {s.func}({s.column}): {where} do not keep a row's arrival order, which breaks "
                    "ties of event time, so first/last by event time is kept by tumbling, hopping and session "
                    "windows only")
        if s.func in COLLECTIONS:
            return (f"{s.name} = {s.func}({s.column}): {where} do not keep a collection's values in their state "
                    "yet, so distinct counts and collections are kept by tumbling, hopping and session windows only")
    return None


def value_columns(specs: list[AggSpec]) -> list[str]:
    """Distinct input columns the aggregates read, in first-use order."""
    out: list[str] = []
    for s in specs:
        if s.column not in out:
            out.append(s.column)
    return out


def value_inputs(specs: list[AggSpec]) -> list[tuple[str, str]]:
    """The value inputs of a partial, (column, what of it: ``partials.INPUTS``), in partial order.

    First every aggregated column itself, in first-use order (:func:`value_columns`: the
    layout of a pipeline of ``count/sum/min/max/avg`` is unchanged), then the other inputs
    the aggregates read (a column's squares, its true values) in first-use order.
    """
    out = [(c, COLUMN) for c in value_columns(specs)]
    for s in specs:
        for r in OUTPUTS[s.func].reads:
            if (s.column, r.of) not in out:
                out.append((s.column, r.of))
    return out


def input_index(inputs: list[tuple[str, str]], spec: AggSpec) -> Callable[[str], int]:
    """Where each value input of ``spec``'s column sits (for ``partials.output``)."""
    return lambda of: inputs.index((spec.column, of))

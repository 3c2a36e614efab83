"""Aggregations over a window's admitted rows: ``count`` plus ``sum/min/max/avg``, and the types each takes.

Every aggregate is read from mergeable partial state (row count, and per value
column: sum, min, max, non-null count), so on-time rows, late updates and
stored state combine by addition / min / max, and ``avg = sum / non-null``:
the layout and the function -> field mapping are ``core/partials.py``.

Which column types an aggregate takes is Spark SQL's rule (:data:`NEEDS`):
``count`` counts the non-null values of any type, ``min``/``max`` compare
numbers, strings (by code point), dates, timestamps and booleans, ``sum`` and
``avg`` need numbers. Types are Spark's type names (``DataType.simpleString``:
``int``, ``decimal(12,2)``, ``string``, ``array<int>``): the check runs on a
schema read before Spark starts (``io/headers.py``) and on Spark's own.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from lowwater.core.partials import OUTPUTS

FUNCTIONS = tuple(OUTPUTS)  # count, sum, min, max, avg
_AGG = re.compile(rf"^\s*({'|'.join(FUNCTIONS)})\s*\(\s*([A-Za-z_][A-Za-z0-9_.]*)\s*\)\s*$")


@dataclass(frozen=True)
class AggSpec:
    """One output aggregate: ``name = func(column)``."""

    name: str
    func: str
    column: str

    @classmethod
    def parse(cls, name: str, expr: str) -> AggSpec:
        """``AggSpec.parse("total", "sum(amount)")``; raises ValueError when malformed."""
        m = _AGG.match(str(expr))
        if not m:
            msg = f"aggregation {name!r}: {expr!r} is not one of {', '.join(f + '(column)' for f in FUNCTIONS)}"
            raise ValueError(msg)
        return cls(name, m.group(1), m.group(2))


# What each aggregate needs of its column's type, as a class of :func:`type_class`.
NUMERIC, ORDERED, ANY = "numeric", "ordered", "any"
NEEDS = {"count": ANY, "sum": NUMERIC, "avg": NUMERIC, "min": ORDERED, "max": ORDERED}
_TAKES = {NUMERIC: {NUMERIC}, ORDERED: {NUMERIC, ORDERED}, ANY: {NUMERIC, ORDERED, ANY}}
_NEED_TEXT = {NUMERIC: "a number", ORDERED: "a number, string, date, timestamp or boolean"}
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
    if type_class(type_name) in _TAKES[need]:
        return None
    return f"{spec.func}({spec.column}) needs {_NEED_TEXT[need]}, but column {spec.column!r} is {type_name}"


def value_columns(specs: list[AggSpec]) -> list[str]:
    """Distinct input columns the aggregates read, in first-use order."""
    out: list[str] = []
    for s in specs:
        if s.column not in out:
            out.append(s.column)
    return out

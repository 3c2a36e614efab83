"""Aggregate result types as Spark SQL gives them, and partials that keep them exact.

lowwater folds every aggregate from mergeable partials (``_s`` sum, ``_mn``
min, ``_mx`` max, ``_nn`` non-null count per value column; the one layout is
``core/partials.py``). Their types follow the value column, so a result
has the type Spark SQL's own ``sum``/``min``/``max``/``avg``/``count`` would
give, and sums of integers and decimals are exact (payments):

=======================  ==========================  =============  ================================  =======
value column             ``sum`` (and ``_s``)         ``min/max``    ``avg``                           count
=======================  ==========================  =============  ================================  =======
byte/short/int/bigint    bigint                      column type    double                            bigint
decimal(p, s)            decimal(min(38, p+10), s)   decimal(p, s)  decimal(min(38, p+4), min(38,    bigint
                                                                    s+4)), rounded half up
float/double             double                      column type    double                            bigint
string of numbers        double                      double         double                            bigint
=======================  ==========================  =============  ================================  =======

A sum that overflows its type fails the step loudly (Arrow's checked cast,
Spark's ANSI cast), as Spark SQL's ``sum`` does with ANSI mode on.
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lowwater.core.partials import OUTPUTS, Field, layout

_INTEGRAL = (T.ByteType, T.ShortType, T.IntegerType, T.LongType)
_FLOATING = (T.FloatType, T.DoubleType)
_MAX_PRECISION = 38


def _bounded(precision: int, scale: int) -> T.DecimalType:
    """Spark's ``DecimalType.bounded``."""
    return T.DecimalType(min(precision, _MAX_PRECISION), min(scale, _MAX_PRECISION))


def sum_type(dt: T.DataType) -> T.DataType:
    """The type of ``sum(column)`` and of its partial ``_s``."""
    if isinstance(dt, _INTEGRAL):
        return T.LongType()
    if isinstance(dt, T.DecimalType):
        return _bounded(dt.precision + 10, dt.scale)
    return T.DoubleType()


def extreme_type(dt: T.DataType) -> T.DataType:
    """The type of ``min``/``max(column)``: the column's own, for numbers (strings are read as doubles)."""
    if isinstance(dt, (*_INTEGRAL, *_FLOATING, T.DecimalType)):
        return dt
    return T.DoubleType()


def avg_type(dt: T.DataType) -> T.DataType:
    if isinstance(dt, T.DecimalType):
        return _bounded(dt.precision + 4, dt.scale + 4)
    return T.DoubleType()


def field_type(field: Field, dt: T.DataType) -> T.DataType:
    """The type of a partial field of a value column of type ``dt`` (counts are bigint)."""
    if field.counts:
        return T.LongType()
    return sum_type(dt) if field.fold == "sum" else extreme_type(dt)


def result_expr(func: str, dt: T.DataType, col: Callable[[Field], Column]) -> Column:
    """Aggregate ``func`` from the partial columns (``col(field)``) as ``OUTPUTS`` reads them, typed as Spark SQL.

    One field is the result, typed as the field (so ``sum`` is ``sum_type``,
    ``min``/``max`` the column's, ``count`` bigint); a ratio (``avg``) is typed
    as Spark's ``Average``.
    """
    out = OUTPUTS[func]
    value = col(out.field)
    if out.per is None:
        return value.cast(field_type(out.field, dt))
    per = col(out.per)
    # Null when ``per`` is 0, whatever ``value`` is: reconcile's expected value of a window whose rows were all
    # taken back out is a sum of 0 over 0 rows (ANSI would fail the job on the division).
    some = per != 0
    if isinstance(dt, T.DecimalType):  # Spark's Average: sum / count as decimal, then the result type
        return F.when(some, value / per.cast(T.DecimalType(20, 0))).cast(avg_type(dt))
    return F.when(some, value.cast("double") / per).cast("double")


def value_kind(dt: T.DataType) -> str:
    """How a value travels through the executors: ``int`` (Python int), ``decimal`` (Decimal), ``float``."""
    if isinstance(dt, _INTEGRAL):
        return "int"
    if isinstance(dt, T.DecimalType):
        return "decimal"
    return "float"


def value_cast(dt: T.DataType) -> T.DataType:
    """How a value column reaches the session pass: integers as bigint, decimals as they are, else double."""
    kind = value_kind(dt)
    return T.LongType() if kind == "int" else dt if kind == "decimal" else T.DoubleType()


def partial_kinds(value_types: list[T.DataType]) -> list[str]:
    """The value kind of each position of a flat partial ``[n, s0, mn0, mx0, nn0, ...]`` (counts are ints)."""
    return ["int" if f.counts else value_kind(value_types[i]) for _, f, i in layout(len(value_types))]


def arrow_values(col: pa.ChunkedArray | pa.Array, dt: T.DataType) -> pa.Array:
    """A value column as the partials fold it: int64, the column's decimal, or float64 (null stays null)."""
    kind = value_kind(dt)
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    if kind == "int":
        return pc.cast(col, pa.int64())
    if kind == "decimal":
        return col
    if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
        import pandas as pd  # numeric strings accepted; anything else is null (the parse made it a dead letter)

        x = pd.to_numeric(pd.Series(col.to_pylist(), dtype=object), errors="coerce").to_numpy(dtype=np.float64)
        return pa.array(x, from_pandas=True)
    return pa.array(pc.cast(col, pa.float64(), safe=False).to_numpy(zero_copy_only=False), from_pandas=True)


def python_values(col: pa.Array, dt: T.DataType) -> list:
    """A value column as plain Python numbers for the session machine; ``NaN`` is null."""
    kind = value_kind(dt)
    if kind == "float":
        return arrow_values(col, dt).to_numpy(zero_copy_only=False).astype(np.float64).tolist()
    nan = float("nan")
    return [nan if v is None else v for v in arrow_values(col, dt).to_pylist()]


def from_json(kind: str, v: object) -> object:
    """A partial value read back from JSON state (``json.loads(parse_float=Decimal)``) as its kind."""
    if v is None:
        return None
    if kind == "float":
        return float(v)  # type: ignore[arg-type]
    if kind == "decimal":
        return v if isinstance(v, Decimal) else Decimal(str(v))
    return int(v)  # type: ignore[call-overload]

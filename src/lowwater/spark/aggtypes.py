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
string                   refused (exit 2)            string         refused (exit 2)                  bigint
date/timestamp/boolean   refused (exit 2)            column type    refused (exit 2)                  bigint
anything else            refused (exit 2)            refused        refused (exit 2)                  bigint
=======================  ==========================  =============  ================================  =======

Which aggregate takes which type is ``core/aggregates.NEEDS`` (checked before
the run). A value travels through the partials as its *kind*
(:func:`value_kind`): numbers as themselves; strings as strings (compared by
code point, as Spark compares UTF-8 bytes); dates, timestamps and booleans as
integers (days, µs, 0/1), decoded back to their type in the result
(:func:`result_expr`); any other type as 1 where it is not null (``count``
only). The sum field of a non-number stays null.

A sum that overflows its type fails the step loudly (Arrow's checked cast,
Spark's ANSI cast), as Spark SQL's ``sum`` does with ANSI mode on.

A value input other than the column itself (``core/partials.INPUTS``) is
computed where a row is read (:func:`arrow_input`, :func:`input_expr`) and
typed by :func:`input_type`: squares of integers bigint, other squares double,
a boolean's true values 1. ``count_if`` is bigint; the variances and standard
deviations are doubles. A by-time input is the struct ``(e, b, s, m, v)``: the
row's event µs, its arrival order (the step, then ``_seq``, ``_seq_minor``
within it) and its value as it travels; Spark SQL orders structs field by field, so its ``min``/``max``
(``first_by_time``/``last_by_time``) is the row first/last by event time, ties
broken by arrival, and the result is ``v`` in the column's type.

A collection input (``count_distinct``, ``collect_set``, ``collect_list``)
keeps an array in its sum field: the distinct values as they travel, sorted
(a set), or the by-time structs sorted (a list, so in event-time order);
:func:`collection_merge` merges two, bounded by ``partials.COLLECTION_LIMIT``
values (past it the step fails with one line). Its min/max fields stay null.
A sketch input (``approx_count_distinct``) keeps the compact bytes of a
DataSketches HLL sketch (built by ``partials.hll_bytes`` where rows are read),
merged by Spark's ``hll_union_agg`` and read by ``hll_sketch_estimate``; a
quantiles input (``approx_percentile``) a KLL doubles sketch, merged by
``kll_merge_agg_double`` and read by ``kll_sketch_get_quantile_double`` (a double).
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

from lowwater.core.partials import (
    BY_TIME,
    COLLECTION_LIMIT,
    COLLECTION_OVER,
    COLUMN,
    HLL,
    KLL,
    LIST,
    MIN,
    OUTPUTS,
    SET,
    SQUARE,
    TRUE,
    Field,
    Read,
    layout,
)

SUM_OVERFLOW = "lowwater: sum overflow"  # the CLI turns an error starting so into its one line
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
    """The type of ``min``/``max(column)`` of a number: the column's own (other types: :func:`field_type`)."""
    if isinstance(dt, (*_INTEGRAL, *_FLOATING, T.DecimalType)):
        return dt
    return T.DoubleType()


def avg_type(dt: T.DataType) -> T.DataType:
    if isinstance(dt, T.DecimalType):
        return _bounded(dt.precision + 4, dt.scale + 4)
    return T.DoubleType()


NUMBER_KINDS = ("int", "decimal", "float")  # the kinds with a sum


def value_kind(dt: T.DataType) -> str:
    """How a value travels: ``int`` (int64), ``decimal``, ``float`` (float64), ``text`` (string),
    ``ordinal`` (a date, timestamp or boolean as int64) or ``present`` (1 where not null: counted only)."""
    if isinstance(dt, _INTEGRAL):
        return "int"
    if isinstance(dt, T.DecimalType):
        return "decimal"
    if isinstance(dt, _FLOATING):
        return "float"
    if isinstance(dt, T.StringType):
        return "text"
    if isinstance(dt, (T.DateType, T.TimestampType, T.TimestampNTZType, T.BooleanType)):
        return "ordinal"
    return "present"


def summed(dt: T.DataType) -> bool:
    """Whether the partials of a column of this type carry a sum (numbers only)."""
    return value_kind(dt) in NUMBER_KINDS


def field_type(field: Field, dt: T.DataType) -> T.DataType:
    """The type of a partial field of a value column of type ``dt`` (counts are bigint)."""
    if field.counts:
        return T.LongType()
    if isinstance(dt, T.StructType):  # a by-time input: its min/max is the struct, its sum stays null
        return T.LongType() if field.fold == "sum" else dt
    if isinstance(dt, (T.ArrayType, T.BinaryType)):  # a collection or sketch: its sum; min/max stay null
        return dt if field.fold == "sum" else T.LongType()
    kind = value_kind(dt)
    if field.fold == "sum":
        return sum_type(dt) if kind in NUMBER_KINDS else T.LongType()  # null for a non-number
    return extreme_type(dt) if kind in NUMBER_KINDS else value_cast(dt)


def _decoded(value: Column, dt: T.DataType) -> Column:
    """A min/max field back in its column's type (``ordinal`` kinds travel as integers)."""
    if isinstance(dt, T.DateType):
        return F.date_from_unix_date(value.cast("int"))
    if isinstance(dt, T.TimestampType):
        return F.timestamp_micros(value)
    if isinstance(dt, T.TimestampNTZType):  # the session's zone is UTC (runtime/session.py): µs as a wall clock
        return F.timestamp_micros(value).cast(T.TimestampNTZType())
    if isinstance(dt, T.BooleanType):
        return value.cast("boolean")
    return value.cast(field_type(MIN, dt))


def result_expr(func: str, dt: T.DataType, col: Callable[..., Column], fraction: float | None = None) -> Column:
    """Aggregate ``func`` of a column typed ``dt`` from the partial columns it reads, typed as Spark SQL.

    ``col(field)`` is a field of the column's own value input, ``col(field, of)``
    one of its other inputs (``core/partials.INPUTS``: the squares).

    One field is the result, typed as the field (so ``sum`` is ``sum_type``,
    ``min``/``max`` the column's, ``count`` and ``count_if`` bigint); a ratio
    (``avg``) is typed as Spark's ``Average``; the variances and standard
    deviations are doubles, by the arithmetic of ``core/partials.FINISH``.
    """
    out = OUTPUTS[func]

    def read(r: Read) -> Column:
        return col(r.field) if r.of == COLUMN else col(r.field, r.of)

    if out.finish == "value":
        (one,) = out.reads
        value = read(one)
        if one.field.counts or value_kind(dt) in NUMBER_KINDS:
            return value.cast(field_type(one.field, dt))
        return _decoded(value, dt)
    if out.finish == "timed_value":
        (one,) = out.reads
        value = read(one).getField("v")
        return value.cast(field_type(MIN, dt)) if value_kind(dt) in NUMBER_KINDS else _decoded(value, dt)
    if out.finish == "size":
        (one,) = out.reads
        return F.coalesce(F.size(read(one)), F.lit(0)).cast("long")
    if out.finish == "quantile":
        (one,) = out.reads
        sketch = read(one)
        return F.when(F.kll_sketch_get_n_double(sketch) > 0,
                      F.kll_sketch_get_quantile_double(sketch, F.lit(fraction))).cast("double")
    if out.finish == "estimate":
        (one,) = out.reads
        return F.coalesce(F.hll_sketch_estimate(read(one)), F.lit(0)).cast("long")
    if out.finish == "collected":
        (one,) = out.reads
        arr = F.coalesce(read(one), F.array())
        if one.of == LIST:
            arr = F.transform(arr, lambda x: x.getField("v"))
        if value_kind(dt) == "ordinal":
            return F.transform(arr, lambda x: _decoded(x, dt))
        return arr.cast(T.ArrayType(field_type(MIN, dt) if value_kind(dt) in NUMBER_KINDS else value_cast(dt)))
    if out.finish == "ratio":
        value, per = (read(r) for r in out.reads)
        # Null when ``per`` is 0, whatever ``value`` is: reconcile's expected value of a window whose rows were all
        # taken back out is a sum of 0 over 0 rows (ANSI would fail the job on the division).
        some = per != 0
        if isinstance(dt, T.DecimalType):  # Spark's Average: sum / count as decimal, then the result type
            return F.when(some, value / per.cast(T.DecimalType(20, 0))).cast(avg_type(dt))
        return F.when(some, value.cast("double") / per).cast("double")
    n, total, squares = (read(r) for r in out.reads)  # the moments (partials._MOMENTS)
    s, q, nd = total.cast("double"), squares.cast("double"), n.cast("double")
    about_mean = F.greatest(F.lit(0.0), q - s * s / nd)
    sample = out.finish.endswith("_samp")
    var = F.when(n >= F.lit(2 if sample else 1), about_mean / ((nd - F.lit(1.0)) if sample else nd))
    return (F.sqrt(var) if out.finish.startswith("stddev") else var).cast("double")


def input_type(dt: T.DataType, of: str) -> T.DataType:
    """The type of a value input (``core/partials.INPUTS``) of a column of type ``dt``: squares of integers
    stay exact as bigint, others are doubles; a boolean's true values are 1 (bigint)."""
    if of == SQUARE:
        return T.LongType() if value_kind(dt) == "int" else T.DoubleType()
    if of == TRUE:
        return T.LongType()
    if of == BY_TIME:
        return by_time_type(dt)
    if of == SET:
        return T.ArrayType(value_cast(dt))
    if of == LIST:
        return T.ArrayType(by_time_type(dt))
    if of in (HLL, KLL):
        return T.BinaryType()
    return dt


def sketch_merge(col: Column, of: str = HLL) -> Column:
    """The union of HLL sketches (lg K as the sketches': ``partials.HLL_LG_K``) or the merge of KLL sketches."""
    return F.kll_merge_agg_double(col) if of == KLL else F.hll_union_agg(col, True)


def collection_merge(arrays: Column, of: str) -> Column:
    """The merge of a collection field over rows: ``arrays`` is ``collect_list`` of it (an array of arrays).

    The union (a set) or every entry (a list), nulls dropped, sorted; past ``COLLECTION_LIMIT`` values the
    step fails with one line (``raise_error``), never a silently cut collection.
    """
    flat = F.filter(F.flatten(arrays), lambda x: x.isNotNull())
    merged = F.array_sort(F.array_distinct(flat) if of == SET else flat)
    msg = f"{COLLECTION_OVER}: one window's collection holds more than {COLLECTION_LIMIT} values"
    return F.when(F.size(merged) > F.lit(COLLECTION_LIMIT), F.raise_error(F.lit(msg))).otherwise(merged)


def by_time_type(dt: T.DataType) -> T.StructType:
    """The by-time input of a column of type ``dt``: (event µs, step, arrival order in it, minor order, value)."""
    return T.StructType([*[T.StructField(c, T.LongType()) for c in "ebsm"], T.StructField("v", value_cast(dt))])


def input_expr(col: Column, dt: T.DataType, of: str = COLUMN) -> Column:
    """A value input of a column as it travels (:func:`value_expr` of :func:`input_type`), in Spark SQL.

    A by-time input needs the row's arrival order, which the windowed executors and the session machine add
    where they read a row (``arrow_input``, ``partials.input_value``): refused here (reconcile refuses
    ``first_by_time``/``last_by_time`` before this is reached).
    """
    if of in (BY_TIME, SET, LIST, HLL, KLL):
        msg = "first/last by time and collections are built where the windowed or session executors read a row"
        raise ValueError(msg)
    if of == SQUARE:
        v = col.cast(input_type(dt, of))
        return v * v
    if of == TRUE:
        return F.when(col.cast("boolean"), F.lit(1)).cast("long")
    return value_expr(col, dt)


def arrow_input(col: pa.ChunkedArray | pa.Array, dt: T.DataType, of: str = COLUMN,
                at: tuple[np.ndarray, ...] = ()) -> pa.Array:
    """:func:`input_expr` in Arrow, for the executors (an integer square past a bigint fails the step).

    ``at``: the rows' (event µs, step, ``_seq``, ``_seq_minor``), which a by-time input carries.
    """
    if of in (BY_TIME, LIST):
        parts = [pa.array(a, pa.int64()) for a in at]
        v = arrow_values(col, dt)
        mask = pc.is_null(v) if of == LIST else None  # a list's entry is null where its value is: skipped
        return pa.StructArray.from_arrays([*parts, v], names=[*"ebsm", "v"], mask=mask)
    if of in (SET, HLL):  # the values: the fold takes their distinct values per group (and sketches them)
        return arrow_values(col, dt)
    if of == KLL:  # the values as doubles: the fold sketches each group's
        return pc.cast(arrow_values(col, dt), pa.float64(), safe=False)
    if of == SQUARE:
        v = arrow_values(col, dt)
        if value_kind(dt) != "int":
            v = pc.cast(v, pa.float64(), safe=False)
        try:
            return pc.multiply_checked(v, v)
        except pa.ArrowInvalid:
            msg = f"{SUM_OVERFLOW}: a square for a variance is beyond a bigint's range: give the column a double type"
            raise OverflowError(msg) from None
    if of == TRUE:
        if isinstance(col, pa.ChunkedArray):
            col = col.combine_chunks()
        true = pc.fill_null(pc.cast(col, pa.bool_()), False)
        return pc.if_else(true, pa.scalar(1, pa.int64()), pa.scalar(None, pa.int64()))
    return arrow_values(col, dt)


def value_cast(dt: T.DataType) -> T.DataType:
    """The type a value column travels as (:func:`value_expr`): bigint, the decimal, double or string."""
    kind = value_kind(dt)
    if kind == "decimal":
        return dt
    return {"int": T.LongType(), "float": T.DoubleType(), "text": T.StringType()}.get(kind, T.LongType())


def value_expr(col: Column, dt: T.DataType) -> Column:
    """A value column as it travels (:func:`value_kind`), in Spark SQL."""
    if isinstance(dt, T.DateType):
        return F.unix_date(col).cast("long")
    if isinstance(dt, T.TimestampType):
        return F.unix_micros(col)
    if isinstance(dt, T.TimestampNTZType):
        return F.unix_micros(col.cast(T.TimestampType()))
    if value_kind(dt) == "present":
        return F.when(col.isNotNull(), F.lit(1)).cast("long")
    return col.cast(value_cast(dt))


def partial_kinds(value_types: list[T.DataType]) -> list[str]:
    """The value kind of each position of a flat partial ``[n, s0, mn0, mx0, nn0, ...]`` (counts are ints)."""
    return ["int" if f.counts else value_kind(value_types[i]) for _, f, i in layout(len(value_types))]


def arrow_values(col: pa.ChunkedArray | pa.Array, dt: T.DataType) -> pa.Array:
    """A value column as the partials fold it (:func:`value_kind`; null stays null, NaN of a float is null)."""
    kind = value_kind(dt)
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    if kind == "int":
        return pc.cast(col, pa.int64())
    if kind == "decimal":
        return col
    if kind == "text":
        return pc.cast(col, pa.string())
    if kind == "ordinal":
        if pa.types.is_date32(col.type):
            col = pc.cast(col, pa.int32())
        elif pa.types.is_timestamp(col.type):
            col = pc.cast(pc.cast(col, pa.timestamp("us", col.type.tz)), pa.int64())
        return pc.cast(col, pa.int64())
    if kind == "present":
        return pc.if_else(pc.is_valid(col), pa.scalar(1, pa.int64()), pa.scalar(None, pa.int64()))
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
    if kind == "text":
        return str(v)
    if kind == "decimal":
        return v if isinstance(v, Decimal) else Decimal(str(v))
    return int(v)  # type: ignore[call-overload]

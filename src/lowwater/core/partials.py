"""The one layout of a window's mergeable partial aggregate, and how results are read from it.

Every window (or session) keeps its aggregates as a *partial*: the row count,
and per value input ``i`` its sum, min, max and non-null count. A value input
is an aggregated column, or its squares, or "1 where it is true"
(:data:`INPUTS`; which inputs a pipeline has: ``core/aggregates.value_inputs``). Partials of
disjoint row sets merge field by field -- counts and sums add, mins and maxes
pick -- so on-time rows, late updates and stored state combine in any order
and any grouping (the merge is associative and commutative, and the empty
partial is its identity). Every configured aggregate is then one field, or a
ratio of two (``avg = sum / non-null``)::

    field    column    folds values by   merges by   null when
    rows     _n        count_all         sum         never (0)
    sum      _s{i}     sum               sum         no non-null value
    min      _mn{i}    min               min         no non-null value
    max      _mx{i}    max               max         no non-null value
    nonnull  _nn{i}    count             sum         never (0)

    count(c) = nonnull   sum(c) = sum   min(c) = min   max(c) = max
    avg(c)   = sum / nonnull            (and a window's ``count`` column = rows)
    count_if(c) = nonnull of "c true"   var/stddev(c) from nonnull, sum of c, sum of "c squared"
    first_by_time(c) / last_by_time(c) = min / max of "(event, arrival, c)" (its value part)
    count_distinct(c) / collect_set(c) = size / values of the sum ("union") of "c as a set"
    collect_list(c) = values of the sum ("merge in order") of "(event, arrival, c) as a list"

An aggregate is one entry of :data:`OUTPUTS`: the fields it reads and how they
finish (:data:`FINISH`; ADR 0034).

The column names are the persisted names of the window state (Spark), so they
must not change. The fold and merge names are those of Arrow's and Spark SQL's
aggregate functions (``count_all`` counts rows, ``count`` non-null values), so
``spark/operators/windowed/executor.py`` and ``fold.py`` build their aggregations from
this table.

In Python a partial is a flat list in column order: ``[n, s0, mn0, mx0, nn0,
s1, ...]``, values as the value column's type (ints and Decimals stay exact;
floats with ``NaN`` for null on input), and ``None`` for a sum/min/max with no
non-null value -- the same nulls the Spark state holds, so a partial goes to
and from storage unchanged. A sum starts from 0 (as Spark's and Arrow's do).
:func:`add_row` and :func:`merge_into` are the session machine's per-row
path, written out for speed; ``tests/core/test_partials.py`` holds them to the
table.

    >>> p = empty(1)
    >>> for v in (3, 1, float("nan"), 8):
    ...     add_row(p, (v,))
    >>> p, output("avg", p, 0), output("count", p, 0)
    ([4, 12, 1, 8, 3], 4.0, 3)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache

from lowwater.core.partial_values import (  # noqa: F401 - their names are part of the layout's
    COLLECTION_LIMIT,
    COLLECTION_OVER,
    HLL_LG_K,
    KLL_K,
    Collection,
    Quantiles,
    Sketch,
    hll_bytes,
    kll_bytes,
)


@dataclass(frozen=True)
class Field:
    """One field of a partial: its column, how values fold into it and how two of it merge."""

    name: str
    prefix: str  # the column is ``prefix`` (rows) or ``prefix{i}`` (value column i)
    fold: str  # Arrow / SQL aggregate over the raw values: count_all, count, sum, min, max
    merge: str  # aggregate over partials: sum, min or max

    @property
    def counts(self) -> bool:
        """A count: 0 (never null) with no rows, and a row contributes 1 or 0 to it."""
        return self.fold in ("count_all", "count")

    def column(self, i: int | None = None) -> str:
        return self.prefix if i is None else f"{self.prefix}{i}"


ROWS = Field("rows", "_n", "count_all", "sum")
SUM = Field("sum", "_s", "sum", "sum")
MIN = Field("min", "_mn", "min", "min")
MAX = Field("max", "_mx", "max", "max")
NONNULL = Field("nonnull", "_nn", "count", "sum")
VALUE_FIELDS = (SUM, MIN, MAX, NONNULL)  # per value column, in this order
WIDTH = len(VALUE_FIELDS)


# What a value input is of its column: the values themselves, their squares (numbers; ``int`` kinds as
# bigint, others as double), or 1 where a boolean is true and null otherwise (its non-null count counts them).
# A by-time input is the tuple (event µs, arrival order, minor arrival order, value): never null (a null value is
# kept inside), its min the row first by event time and its max the last, ties broken by arrival (ADR 0034).
COLUMN, SQUARE, TRUE, BY_TIME = "", "square", "true", "by_time"
# A collection input keeps its values in its *sum* field, where "adding" is a set union (SET: distinct values,
# sorted) or a merge of (event, arrival, value) entries in their order (LIST); nulls are skipped, as Spark's.
SET, LIST = "set", "list"
# A sketch input keeps a DataSketches HLL sketch (its compact bytes on Spark) in its sum field, "added" by union.
HLL, KLL = "hll", "kll"  # a KLL quantiles sketch of the values as doubles likewise (approx_percentile)
INPUTS = (COLUMN, SQUARE, TRUE, BY_TIME, SET, LIST, HLL, KLL)
COLLECTED = (SET, LIST, HLL, KLL)  # the inputs whose sum field holds a collection or a sketch (min/max unread)


def input_value(v: object, of: str, at: tuple[int, ...] = ()) -> object:
    """Value input ``of`` of one value ``v`` in Python (``NaN``: null): ``spark/aggtypes.input_expr``'s twin.

    ``at``: the row's (event µs, arrival order, minor order), which a :data:`BY_TIME` input carries.
    """
    if of == BY_TIME:
        return (*at, None if v is None or v != v else v)
    if v is None or v != v:
        return math.nan
    if of == SET:
        return Collection((v,), unique=True)
    if of == LIST:
        return Collection(((*at, v),), unique=False)
    if of == HLL:
        return Sketch(hll_bytes((v,)))
    if of == KLL:
        return Quantiles(kll_bytes((v,)))
    if of == SQUARE:  # integers exact, others as doubles (``aggtypes.input_type``)
        return v * v if isinstance(v, int) else float(v) * float(v)  # type: ignore[arg-type]
    if of == TRUE:
        return 1 if v == 1 else math.nan  # True == 1
    return v


@dataclass(frozen=True)
class Read:
    """One field an aggregate reads: ``field`` of the value input ``of`` its column."""

    field: Field
    of: str = COLUMN


@dataclass(frozen=True)
class Output:
    """How an aggregate function reads a partial: the fields it ``reads``, combined by ``FINISH[finish]``."""

    reads: tuple[Read, ...]
    finish: str = "value"


def _ratio(s: object, n: int) -> object:
    return None if s is None or not n else s / n  # type: ignore[operator]


def _squares_about_mean(n: int, s: object, q: object) -> float:
    """``Σ(x - mean)² = Σx² - (Σx)²/n`` in doubles, never below 0 (the moments' rounding; ADR 0034)."""
    s_, q_ = float(s), float(q)  # type: ignore[arg-type]
    return max(0.0, q_ - s_ * s_ / n)


def _variance(n: int, s: object, q: object, sample: bool) -> float | None:
    if n < (2 if sample else 1):  # Spark: null over no value, and var_samp of one value is null
        return None
    return _squares_about_mean(n, s, q) / (n - 1 if sample else n)


def _root(v: float | None) -> float | None:
    return None if v is None else math.sqrt(v)


def _timed_value(t: tuple | None) -> object:
    """The value of a by-time input's min or max (None: no row)."""
    return None if t is None else t[-1]


def _size(c: Collection | None) -> int:
    return 0 if c is None else len(c)


def _collected(c: Collection | None) -> list:
    return [] if c is None else c.values()


def _estimate(s: Sketch | None) -> int:
    return 0 if s is None else s.estimate()


# How the values read give the result (Spark SQL's twin: ``spark/aggtypes.result_expr``, the same arithmetic).
FINISH: dict[str, Callable[..., object]] = {
    "value": lambda v: v,
    "ratio": _ratio,
    "var_samp": lambda n, s, q: _variance(n, s, q, sample=True),
    "var_pop": lambda n, s, q: _variance(n, s, q, sample=False),
    "stddev_samp": lambda n, s, q: _root(_variance(n, s, q, sample=True)),
    "stddev_pop": lambda n, s, q: _root(_variance(n, s, q, sample=False)),
    "timed_value": _timed_value,
    "size": _size,
    "collected": _collected,
    "estimate": _estimate,
    "quantile": lambda q, p: None if q is None else q.quantile(p),  # p: the aggregate's fraction
}
_MOMENTS = (Read(NONNULL), Read(SUM), Read(SUM, SQUARE))  # n, Σx, Σx²: all merge by sum, so retractions undo them

OUTPUTS: dict[str, Output] = {
    "count": Output((Read(NONNULL),)),
    "sum": Output((Read(SUM),)),
    "min": Output((Read(MIN),)),
    "max": Output((Read(MAX),)),
    "avg": Output((Read(SUM), Read(NONNULL)), "ratio"),
    "count_if": Output((Read(NONNULL, TRUE),)),
    **{f: Output(_MOMENTS, f) for f in ("var_samp", "var_pop", "stddev_samp", "stddev_pop")},
    # The value of the row first (last) by (event time, arrival): the min (max) of the by-time input.
    "first_by_time": Output((Read(MIN, BY_TIME),), "timed_value"),
    "last_by_time": Output((Read(MAX, BY_TIME),), "timed_value"),
    # Distinct values (sorted) and every value in (event time, arrival) order, bounded (COLLECTION_LIMIT).
    "count_distinct": Output((Read(SUM, SET),), "size"),
    "collect_set": Output((Read(SUM, SET),), "collected"),
    "collect_list": Output((Read(SUM, LIST),), "collected"),
    # An HLL sketch's estimate (DataSketches, lg K 12: relative standard error about 1.6 %; exact while small).
    "approx_count_distinct": Output((Read(SUM, HLL),), "estimate"),
    # A value of the column at rank p of a KLL sketch (k 200: rank error about 1.65 %; exact up to 200 values).
    "approx_percentile": Output((Read(SUM, KLL),), "quantile"),
}


def layout(n_values: int) -> list[tuple[str, Field, int | None]]:
    """Every column of a partial with ``n_values`` value columns: (name, field, value index or None)."""
    out: list[tuple[str, Field, int | None]] = [(ROWS.column(), ROWS, None)]
    for i in range(n_values):
        out += [(f.column(i), f, i) for f in VALUE_FIELDS]
    return out


def columns(n_values: int) -> list[str]:
    """``["_n", "_s0", "_mn0", "_mx0", "_nn0", "_s1", ...]``: the persisted names, in list order."""
    return [c for c, _, _ in layout(n_values)]


def position(field: Field, i: int | None = None) -> int:
    """Where ``field`` of value column ``i`` sits in a flat partial."""
    return 0 if field is ROWS else 1 + WIDTH * int(i or 0) + VALUE_FIELDS.index(field)


def empty(n_values: int) -> list:
    """The identity of the merge: no rows (counts 0, sums/mins/maxes null)."""
    return [0, *[0 if f.counts else None for f in VALUE_FIELDS] * n_values]


def rows(p: Sequence) -> int:
    return p[0]


def add_row(p: list, values: Sequence) -> None:
    """Fold one row into ``p`` in place (``NaN`` is null: counted in rows only)."""
    p[0] += 1
    i = 1
    for v in values:
        if v == v:  # not NaN
            if p[i + 3]:
                p[i] += v
                if v < p[i + 1]:
                    p[i + 1] = v
                if v > p[i + 2]:
                    p[i + 2] = v
            else:
                p[i] = 0 + v  # a sum starts from 0: -0.0 sums to 0.0, as in Spark and Arrow
                p[i + 1] = p[i + 2] = v
            p[i + 3] += 1
        i += WIDTH


def add_row_where(p: list, values: Sequence, summed: Sequence[bool]) -> None:
    """:func:`add_row` where only the value columns with ``summed`` True have a sum (the rest keep it null).

    Strings, dates and timestamps are counted and compared (``min``/``max``),
    never added: their ``sum`` field stays null, as ``count``/``min``/``max``
    of them read only the other fields (``core/aggregates.NEEDS``). Kept beside
    :func:`add_row`, not under it: that one is the session machine's per-row
    path for all-numeric values (``core/sessions.py`` picks it when every
    column is summed), where a per-value flag test would cost every row.
    """
    p[0] += 1
    i = 1
    for v, add in zip(values, summed, strict=True):
        if v == v:  # not NaN
            if p[i + 3]:
                if add:
                    p[i] += v
                if v < p[i + 1]:
                    p[i + 1] = v
                if v > p[i + 2]:
                    p[i + 2] = v
            else:
                if add:
                    p[i] = 0 + v
                p[i + 1] = p[i + 2] = v
            p[i + 3] += 1
        i += WIDTH


def merge_into(p: list, q: Sequence) -> None:
    """``p ⊕= q``: counts and sums add, mins and maxes pick; a null field is the identity."""
    p[0] += q[0]
    for i in range(1, len(p), WIDTH):
        b = q[i]
        if b is not None:
            a = p[i]
            p[i] = 0 + b if a is None else a + b  # a sum starts from 0
        b = q[i + 1]
        if b is not None:
            a = p[i + 1]
            if a is None or b < a:
                p[i + 1] = b
        b = q[i + 2]
        if b is not None:
            a = p[i + 2]
            if a is None or b > a:
                p[i + 2] = b
        p[i + 3] += q[i + 3]


def merged(p: Sequence, q: Sequence) -> list:
    """``p ⊕ q`` as a new partial."""
    out = list(p)
    merge_into(out, q)
    return out


def of_rows(rows_: Iterable[Sequence], n_values: int) -> list:
    """The partial of some rows (each a sequence of ``n_values`` values)."""
    p = empty(n_values)
    for r in rows_:
        add_row(p, r)
    return p


def signed_sum(terms: Iterable[tuple[int, Sequence]], n_values: int) -> list:
    """``Σ sign · p`` over the fields a retraction can undo (those merged by ``sum``); min/max null.

    What a consumer gets by adding emissions and subtracting retractions
    (``core/panes.py``'s retracting fold); a sum is null where the non-null
    count comes to 0.
    """
    out: list = [0] * (1 + WIDTH * n_values)
    invertible = [j for j, (_, f, _) in enumerate(layout(n_values)) if f.merge == "sum"]
    for sign, p in terms:
        for j in invertible:
            out[j] += sign * (p[j] or 0)
    for j, (_, f, i) in enumerate(layout(n_values)):
        if f.merge != "sum" or (not f.counts and not out[position(NONNULL, i)]):
            out[j] = None
    return out


@lru_cache(maxsize=64)
def _count_positions(size: int) -> tuple[int, ...]:
    return tuple(j for j, (_, f, _) in enumerate(layout((size - 1) // WIDTH)) if f.counts)


def stored(p: Sequence) -> list:
    """A partial as it is stored and emitted: the same values, counts as plain ints."""
    out = list(p)
    for j in _count_positions(len(out)):
        out[j] = int(out[j])
    return out


def output(func: str, p: Sequence, i: int | Callable[[str], int], fraction: float | None = None) -> object:
    """The value of aggregate ``func`` from partial ``p`` (None when null).

    ``i``: the value input each read is of -- an index when every read is of
    the column itself, else a function of the input (``Read.of``) to its index.
    """
    out = OUTPUTS[func]
    where = i if callable(i) else (lambda _of: i)
    args = [p[position(r.field, where(r.of))] for r in out.reads]
    return FINISH[out.finish](*args, *([] if fraction is None else [fraction]))

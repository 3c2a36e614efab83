"""``.agg(total=F.sum("amount"))``: a Spark ``Column`` aggregate as the ``func(column)`` text the file holds.

lowwater keeps every aggregate as a mergeable partial (``core/partials.py``),
so revisions, retractions and sessions stay exact: ``count``, ``sum``,
``min``, ``max``, ``avg``, ``count_if`` (of a boolean column) and the
variances and standard deviations (``stddev``, ``std``, ``stddev_samp``,
``stddev_pop``, ``variance``, ``var_samp``, ``var_pop``) of one column, and
``F.min_by(col, ts)``/``F.max_by(col, ts)`` ordered by the stream's event-time
column, kept as ``first_by_time(col)``/``last_by_time(col)`` (ties of event time
broken by arrival order, so every cut gives one answer), ``F.count_distinct``
(``countDistinct``) of one column, ``F.collect_set`` and ``F.collect_list``
(bounded: ``partials.COLLECTION_LIMIT`` values per window), and
``F.approx_count_distinct(col)`` (an HLL sketch; no ``rsd``).
Anything else (an expression inside, a distinct count, a percentile,
``first``) is refused in one line naming the argument and saying why
(:data:`WHY`), rather than computed some other way.

The Column is read without running anything: its SQL text (``sum(amount)``),
and on classic PySpark its unresolved function node, which also says whether
it is ``DISTINCT`` (the text of ``F.countDistinct("a")`` is ``count(a)``).
No pyspark import here: a Column is recognised by its shape.
"""

from __future__ import annotations

import re
from typing import Any

from lowwater.core.aggregates import FUNCTIONS, AggSpec

_COLUMN_TEXT = re.compile(r"^Column<'(.*)'>$", re.S)
SUPPORTED = ", ".join(f"F.{f}(\"col\")" for f in FUNCTIONS)
NOT_YET = "approximate percentiles are not supported yet"
_BY = re.compile(r"^\s*(min_by|max_by)\s*\(\s*([A-Za-z_][A-Za-z0-9_.]*)\s*,\s*([A-Za-z_][A-Za-z0-9_.]*)\s*\)\s*$", re.I)
_BY_TIME = {"min_by": "first_by_time", "max_by": "last_by_time"}
_UNBOUNDED = "it needs every value of the window, which no bounded partial holds"
_NEXT = "not kept as a mergeable partial yet"
# Why a Spark aggregate is not one lowwater keeps (by its SQL name): one line each.
WHY = {
    "median": f"an exact median: {_UNBOUNDED}",
    "percentile": f"an exact percentile: {_UNBOUNDED}",
    "mode": f"an exact mode: {_UNBOUNDED}",
    "first": "Spark's first() depends on the order rows reach a task, so no cut of the stream could "
             "reproduce it; first by event time is F.min_by(col, <event-time column>)",
    "last": "Spark's last() depends on the order rows reach a task, so no cut of the stream could "
            "reproduce it; last by event time is F.max_by(col, <event-time column>)",
    "any_value": "it picks a value by the order rows reach a task, which no cut of the stream reproduces",
    "approx_count_distinct": "lowwater's HLL sketch has one relative error (lg K 12, about 1.6 %): "
                             "give F.approx_count_distinct(col) no rsd",
    "percentile_approx": "Spark's accuracy (10000) is not lowwater's quantile sketch (KLL, k 200, rank error about "
                         "1.65 %): write it as \"approx_percentile(col, p)\" to use that sketch",
    "approx_percentile": "Spark's accuracy (10000) is not lowwater's quantile sketch (KLL, k 200, rank error about "
                         "1.65 %): write it as \"approx_percentile(col, p)\" to use that sketch",
    "skewness": "it needs the third moment, which the partial does not keep",
    "kurtosis": "it needs the fourth moment, which the partial does not keep",
}


def agg_text(arg: str, value: Any, event_times: tuple[str, ...] = ()) -> str:  # noqa: ANN401 - a Column or text
    """The ``func(column)`` text of one aggregate; one ``ValueError``/``TypeError`` naming ``arg`` otherwise.

    ``event_times``: the stream's event-time columns, the one ordering ``min_by``/``max_by`` may have.
    """
    if isinstance(value, str):
        sql = value
    elif _is_column(value):
        sql = _column_sql(arg, value)
    else:
        msg = f"{arg}: expected a Spark Column aggregate such as F.sum(\"amount\"), got {value!r}"
        raise TypeError(msg)
    if re.match(r"^\s*count\s*\(\s*(\*|1)\s*\)\s*$", sql, re.I):
        msg = (f"{arg}: {sql} is always in the results as the column `count`; "
               "to count a column's values use F.count(\"col\")")
        raise ValueError(msg)
    by = _BY.match(sql)
    if by:
        func, col, order = by.group(1).lower(), by.group(2), by.group(3)
        if order not in event_times:
            msg = (f"{arg}: {sql} cannot be kept as a mergeable partial: ties of {order} are broken by the order "
                   f"rows reach a task, which no cut of the stream reproduces; order by the event-time column "
                   f"({', '.join(event_times) or 'stream(event_time=...)'}): ties of event time are broken by "
                   "arrival order")
            raise ValueError(msg)
        sql = f"{_BY_TIME[func]}({col})"
    try:
        spec = AggSpec.parse(arg, sql)
    except ValueError:
        name = sql.split("(", 1)[0].strip().lower()
        if name in WHY:
            msg = f"{arg}: {sql} cannot be kept as a mergeable partial: {WHY[name]}"
        else:
            msg = f"{arg}: {sql} is not an aggregate lowwater keeps exactly: use one of {SUPPORTED} ({NOT_YET})"
        raise ValueError(msg) from None
    return spec.text


def _is_column(value: Any) -> bool:  # noqa: ANN401
    return type(value).__name__ == "Column" and type(value).__module__.startswith("pyspark.")


def _column_sql(arg: str, col: Any) -> str:  # noqa: ANN401
    """The Column's SQL text; a ``DISTINCT``, ``FILTER`` or window over it is refused."""
    node = None
    jc = getattr(col, "_jc", None)
    if jc is not None:
        try:
            node = jc.node()
        except Exception:  # noqa: BLE001 - another Spark version's Column: the text below decides
            node = None
    if node is not None:
        kind = node.getClass().getSimpleName()
        sql = str(node.sql())
        if kind == "UnresolvedFunction" and bool(node.isDistinct()) and re.match(r"^count\(", sql, re.I):
            return f"count_distinct({sql.split('(', 1)[1]}"  # count(DISTINCT c): its text is count(c)
        if kind == "UnresolvedFunction" and bool(node.isDistinct()):
            msg = f"{arg}: {_distinct(sql, node)} is not an aggregate lowwater keeps exactly ({NOT_YET})"
            raise ValueError(msg)
        if kind == "Alias":
            msg = f"{arg}: pass the aggregate without .alias(...): the argument's name is its name"
            raise ValueError(msg)
        if kind not in ("UnresolvedFunction", "SqlExpression"):
            msg = f"{arg}: {sql} is not a plain aggregate of one column: use one of {SUPPORTED}"
            raise ValueError(msg)
        return sql
    m = _COLUMN_TEXT.match(str(col))  # Spark Connect's Column: Column<'sum(amount)'>
    sql = m.group(1) if m else str(col)
    if re.search(r"\bdistinct\b|\bfilter\b|\bover\b| AS ", sql, re.I):
        msg = f"{arg}: {sql} is not an aggregate lowwater keeps exactly ({NOT_YET})"
        raise ValueError(msg)
    return sql


def _distinct(sql: str, node: Any) -> str:  # noqa: ANN401
    return sql.replace("(", "(DISTINCT ", 1) if bool(node.isDistinct()) else sql

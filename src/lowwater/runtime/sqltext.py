"""Spark SQL expressions written as text: one py4j round trip for a whole expression tree.

In classic PySpark every node of a Column built with ``F.col``/``F.when``/``F.sum``
costs py4j round trips: a lookup of the function, the call, and a delete when
Python drops the object. ``lowwater reconcile``'s per-window aggregates and
comparisons are a few thousand such nodes (10 M rows: ~4,900 round trips,
most of the driver's time before the first job); ``F.expr`` hands the JVM the
same expression as text, parsed there in one call. The engine's answer to the
same cost is ``runtime/columns.memo`` (it builds the same columns every step);
reconcile builds its columns once per run.
"""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql import types as T


def q(name: str) -> str:
    """A column name as a quoted SQL identifier (a user's key may hold any character)."""
    return "`" + name.replace("`", "``") + "`"


def cast(text: str, dt: T.DataType) -> str:
    return f"CAST({text} AS {dt.simpleString()})"


def expr(text: str, name: str | None = None) -> Column:
    """``text`` as a Column, named ``name``."""
    return F.expr(text if name is None else f"{text} AS {q(name)}")

"""Column expressions built once per SparkContext, not once per step.

In classic PySpark every ``F.col``/``F.sum``/``F.when`` is several py4j round
trips (0.1-0.2 ms each on the benchmark machine), and a step used to build the
same column lists every time: ~1,000 round trips a step, most of them for
expressions that depend only on the configuration. Columns hold unresolved
names and expressions, never data, so the ones a context built can be reused
by all of its DataFrames; ``select`` goes one step further and keeps the JVM's
column sequence, so selecting a fixed list of names is one round trip.

The cache lives on the SparkContext object: a new context starts empty.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from typing import TypeVar

from pyspark import SparkContext
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from lowwater.time import MAX_TIMESTAMP_US, NEG_INF

T = TypeVar("T")


def memo(key: Hashable, build: Callable[[], T], sc: SparkContext | None = None) -> T:
    """``build()`` once per SparkContext and ``key``; later calls return the same object."""
    sc = sc or SparkContext._active_spark_context  # noqa: SLF001
    if sc is None:  # no context yet: nothing to share
        return build()
    cache = sc.__dict__.setdefault("_lowwater_memo", {})
    if key not in cache:
        cache[key] = build()
    return cache[key]


def col(name: str) -> Column:
    """``F.col(name)``, built once per context."""
    return memo(("col", name), lambda: F.col(name))


def cols(names: Sequence[str]) -> list[Column]:
    return [col(n) for n in names]


def select(df: DataFrame, names: Sequence[str]) -> DataFrame:
    """``df.select(*names)``, one round trip once the context has seen ``names``."""
    return select_built(df, tuple(names), lambda: list(names))


def select_built(
    df: DataFrame, key: Hashable, build: Callable[[], Sequence[str | Column]], keep: Callable = memo,
) -> DataFrame:
    """``df.select(*build())`` with the JVM column sequence built once per context and ``key``.

    What ``build`` returns must depend on ``key`` only: names, or expressions of the
    configuration (``key`` says which). For a step's values pass ``keep=recent``,
    which keeps only the last few keys.
    """
    sc = df.sparkSession.sparkContext

    def jseq():  # noqa: ANN202 - a py4j JavaObject (scala Seq[Column])
        from pyspark.sql.classic.column import _to_java_column, _to_seq

        return _to_seq(sc, [col(c) if isinstance(c, str) else c for c in build()], _to_java_column)

    return type(df)(df._jdf.select(keep(("select", key), jseq)), df.sparkSession)  # noqa: SLF001


def grouped_agg(
    df: DataFrame, key: Hashable, by: Sequence[str], build: Callable[[], Sequence[Column]],
) -> DataFrame:
    """``df.groupBy(*by).agg(*build())`` with both JVM column sequences built once per context and ``key``
    (``build`` as for :func:`select_built`): two py4j calls a step instead of one a column."""
    sc = df.sparkSession.sparkContext

    def seqs():  # noqa: ANN202 - py4j JavaObjects (scala Seq[Column]) and the first aggregate
        from pyspark.sql.classic.column import _to_java_column, _to_seq

        aggs = [_to_java_column(c) for c in build()]
        return _to_seq(sc, [col(c) for c in by], _to_java_column), aggs[0], _to_seq(sc, aggs[1:])

    group, first, rest = memo(("grouped_agg", key, tuple(by)), seqs, sc)
    return type(df)(df._jdf.groupBy(group).agg(first, rest), df.sparkSession)  # noqa: SLF001


def watermark_ts(us: Column | str) -> Column:
    """A µs watermark column as an output timestamp: null when undefined, ``MAX_TIMESTAMP_US`` when drained.

    The same rule as :func:`lowwater.time.output_us`: the ±2**62 sentinels never
    reach a file (2**62 µs is year 148,108, which no reader can hold).
    """
    c = F.col(us) if isinstance(us, str) else us
    return F.timestamp_micros(F.when(c > F.lit(NEG_INF), F.least(c, F.lit(MAX_TIMESTAMP_US))))


def recent(key: Hashable, build: Callable[[], T], keep: int = 64) -> T:
    """``build()`` once per SparkContext and ``key`` among the last ``keep`` keys: for what a step's values
    decide (``memo`` would keep every step's)."""
    sc = SparkContext._active_spark_context  # noqa: SLF001
    if sc is None:
        return build()
    cache: OrderedDict = sc.__dict__.setdefault("_lowwater_recent", OrderedDict())
    if key in cache:
        cache.move_to_end(key)
    else:
        cache[key] = build()
        while len(cache) > keep:
            cache.popitem(last=False)
    return cache[key]


def step_value(value: int | None) -> Column:
    """A ``long`` that changes every step (a watermark, a processing time), kept out of Spark's generated code.

    Spark writes a ``Long`` literal into the Java source it compiles, so a step whose
    watermark is a plain literal compiles all its code anew (~20 Janino compilations
    of ~10 ms a step, ADR 0049) and never hits Spark's code cache. An array literal
    is held by reference instead; reading its one element at an index the optimizer
    cannot fold (``spark_partition_id() * 0 + 1`` is non-deterministic for Spark,
    always 1 for us) keeps the value out of the source, so every step's code is the
    same text (ADR 0050). ``coalesce`` with a constant keeps the column non-nullable,
    as the literal was. Spark allows such a column in projections, filters and
    aggregates (not in join conditions). One py4j call, once per value.
    """
    if value is None:
        return memo(("null_long",), lambda: F.lit(None).cast("long"))
    v = int(value)
    return recent(("step_value", v), lambda: F.expr(
        f"coalesce(element_at(array(CAST({v} AS BIGINT)), spark_partition_id() * 0 + 1), CAST(0 AS BIGINT))"))

"""Which rows of a step an operator sees: the judged ones (and dead letters), never held or marker rows.

The driver decides (``spark/planner.py``): with several sources a row is
judged only once the arrival frontier has passed it (``core/frontier.py``);
the rest are held for a later step (``spark/held.py``). A marker row of a
punctuated source moves the watermark and is not data, so no operator
aggregates it. The same decision is written here as a Spark filter, from the
per-source bounds the planner used, so the executors select exactly the rows
the driver judged (they check every row id against the driver's lookup).
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from lowwater.core.frontier import before_bound, lane_of
from lowwater.runtime.columns import step_value


def lane_column(by_partition: Sequence[str], single: str | None = None) -> Column:
    """Each row's lane (``core/frontier.lane_of`` in Spark SQL): its ``_source``, or for Kafka ``source, partition,
    topic-partition``.

    ``by_partition``: the sources whose partitions are lanes (Kafka's); ``single``: the name of the only
    source of a ``[source]`` table (its rows have no ``_source`` column).
    """
    source = F.lit(single) if single is not None else F.col("_source")
    return lane_of(SPARK_LANES, source, F.col("_part"), F.col("_file"), by_partition, single is not None)


class _SparkLanes:
    """``core/frontier.LaneOps`` on Spark Columns (the executors' rows): :func:`lane_of` in Spark SQL."""

    def text(self, value: Column) -> Column:
        return value.cast("string")

    def contains(self, value: Column, sub: str) -> Column:
        return value.contains(sub)

    def lpad(self, value: Column, width: int, fill: str) -> Column:
        return F.lpad(value, width, fill)

    def join(self, sep: str, parts: Sequence[Column]) -> Column:
        return F.concat_ws(sep, *parts)

    def is_in(self, value: Column, names: Sequence[str]) -> Column:
        return value.isin(*names)

    def if_else(self, cond: Column, then: Column, other: Column) -> Column:
        return F.when(cond, then).otherwise(other)


SPARK_LANES = _SparkLanes()


def ready_column(bounds: dict[str, tuple[int, str] | None], lane: Column | None = None) -> Column:
    """True on rows the frontier lets through: ``(arrival, lane) < bound`` of their lane (``frontier.before_bound``)."""
    lane = F.col("_source") if lane is None else lane
    expr = F.lit(False)
    for name, bound in bounds.items():
        mine = lane == F.lit(name)
        if bound is not None:
            mine = mine & before_bound(F.col("_arrival_us"), name, bound, _bound_value)
        expr = expr | mine
    return expr


def _bound_value(x: object) -> Column:
    """A bound's arrival time moves every step: out of the generated code (``step_value``); its tie is a bool."""
    return F.lit(x) if isinstance(x, bool) else step_value(int(x))  # type: ignore[call-overload]


def judged_rows(
    parsed: DataFrame, bounds: dict[str, tuple[int, str] | None] | None, *, held: bool = False, markers: bool = False,
    lane: Column | None = None,
) -> DataFrame:
    """The rows an operator sees (dead letters included, it skips them), or with ``held`` the rows to hold."""
    valid = F.col("_dead").isNull()
    ready = F.lit(True) if bounds is None else ready_column(bounds, lane)
    if held:
        return parsed.filter(valid & ~ready)
    if bounds is None and not markers:
        return parsed
    keep = ready & ~F.col("_marker") if markers else ready
    return parsed.filter(~valid | keep)

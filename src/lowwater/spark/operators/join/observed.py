"""What a step's keyed pass tells the driver, observed by the job that writes the state: no job of its own.

The pass (``executor.py``) yields, beside joined rows and the new state, one
``C`` row of count deltas per task and one ``B`` row of summary per state
bucket it wrote. The state write is the first job over the pass's persisted
output; an :class:`~pyspark.sql.Observation` on it sums the counts and takes
each bucket's summary (one ``B`` row a bucket: its min, max or sum is it), so
the driver learns them when the write ends instead of by a collect before it.
The aggregates are two SQL expressions (``runtime/sqltext.py``): two calls to
the JVM, not hundreds.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pyspark.sql import DataFrame, Observation

from lowwater.core.join import Side
from lowwater.runtime.sqltext import expr
from lowwater.spark.operators.join.executor import COUNT_FIELDS, COUNTS, EMITTED, META, NEW_ROWS
from lowwater.spark.operators.join.input import BUCKETS

_COUNTED = (*COUNTS, NEW_ROWS, EMITTED)
_HOW = {"_m_min_free": "min", "_m_max_free": "max", "_m_min_event": "min"}  # the others are sums


@dataclass(frozen=True)
class BucketSummary:
    """One state bucket as the driver knows it without reading it (``executor.META``)."""

    min_free: int  # W > this frees at least one of its rows
    max_free: int  # W > this frees all of them
    min_event: int  # its earliest event time: the held output watermark's part
    open_left: int
    open_right: int
    pending_left: int  # unmatched rows, still buffered
    pending_right: int


@dataclass
class Pass:
    """What a step's keyed pass (if any) left: its persisted output and, once observed, its deltas."""

    out: DataFrame | None = None
    summaries: dict[int, BucketSummary] = field(default_factory=dict)
    deltas: dict[Side, dict[str, int]] = field(default_factory=dict)
    new_rows: int = 0
    emitted: int = 0


def observed_pass(out: DataFrame, step: int) -> tuple[DataFrame, Observation]:
    """``out`` observed for its ``C`` and ``B`` rows (read them with :func:`read_observed` after an action)."""
    obs = Observation(f"join_pass_{step}")
    counts = ", ".join(f"sum(if(_out = 'C', {c}, null))" for c in _COUNTED)
    buckets = ", ".join(
        "array(" + ", ".join(f"{_HOW.get(m, 'sum')}(if(_out = 'B' and _bucket = {b}, {m}, null))" for m in META) + ")"
        for b in range(BUCKETS))
    return out.observe(obs, expr(f"array({counts})", "c"), expr(f"array({buckets})", "b")), obs


def read_observed(got: Pass, obs: Observation) -> None:
    """Fill ``got`` from what :func:`observed_pass` observed."""
    seen = obs.get
    counts = dict(zip(_COUNTED, (int(v or 0) for v in seen["c"]), strict=True))
    for side in Side:
        got.deltas[side] = {f: counts[f"_c_{side.value}_{f}"] for f in COUNT_FIELDS}
    got.new_rows, got.emitted = counts[NEW_ROWS], counts[EMITTED]
    for b, values in enumerate(seen["b"]):
        if values[0] is not None:  # a bucket the pass wrote
            got.summaries[b] = BucketSummary(*(int(v or 0) for v in values))

"""lowwater: event-time stream processing you can trust, on Apache Spark.

Layout (see docs/design.md):

* ``lowwater.core``  -- the pure semantic core: watermark generators, the
  low-watermark combiner and tracker, window assigners, lateness
  classification, accounting. No Spark import.
* ``lowwater.spark`` -- the execution layer mapping the core onto Spark
  Structured Streaming (``foreachBatch``) and Spark batch jobs.
* ``lowwater.io``    -- sources and sinks.
* ``lowwater.cli``   -- ``lowwater run | demo``.
* ``lowwater.api``   -- the Python API: ``lw.stream(df, ...)...start()`` (its names are re-exported here).
"""

# The subpackage lowwater.reconcile is imported first: imported later (lw.reconcile(...) runs it), Python
# would bind it over the package's reconcile, the Python API's function below.
from lowwater import reconcile as _reconcile_package  # noqa: F401
from lowwater.api import (
    Pipeline,
    adaptive,
    bounded,
    delta,
    foreach_batch,
    hopping,
    parquet,
    postgres,
    punctuated,
    reconcile,
    session,
    stream,
    tumbling,
    whatif,
)
from lowwater.core.accounting import Accounting
from lowwater.core.lateness import AllowedLateness, Lateness, LatePolicy, classify
from lowwater.core.tracker import TrackerState, WatermarkTracker
from lowwater.core.watermarks import BoundedOutOfOrderness, WatermarkStrategy, clip_future
from lowwater.core.windows import HoppingWindows, TumblingWindows, Window
from lowwater.time import NEG_INF as _NEG_INF
from lowwater.time import POS_INF as _POS_INF
from lowwater.time import to_duration_us

NEG_INF: int = _NEG_INF
"""Minus infinity in µs: the watermark before any row (no window can close)."""
POS_INF: int = _POS_INF
"""Plus infinity in µs: the drained watermark (every window closes)."""

__all__ = [
    "NEG_INF",
    "POS_INF",
    "Accounting",
    "Pipeline",
    "AllowedLateness",
    "BoundedOutOfOrderness",
    "HoppingWindows",
    "LatePolicy",
    "Lateness",
    "TrackerState",
    "TumblingWindows",
    "WatermarkStrategy",
    "WatermarkTracker",
    "Window",
    "adaptive",
    "bounded",
    "classify",
    "clip_future",
    "delta",
    "foreach_batch",
    "hopping",
    "parquet",
    "postgres",
    "punctuated",
    "reconcile",
    "session",
    "stream",
    "to_duration_us",
    "tumbling",
    "whatif",
]
__version__ = "0.1.0"

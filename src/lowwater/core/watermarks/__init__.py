"""Watermark generators and the strategy that configures them.

A watermark ``W`` is a promise: no row with ``event_time < W`` is expected any
more. Per source partition ``p``, a generator turns the rows of ``p`` into a
partition watermark ``W_p`` (SEMANTICS.md §2); the tracker
(:mod:`lowwater.core.tracker`) asks every partition's generator and combines
them with the one min-of-inputs rule (:mod:`lowwater.core.combine`). Times are
integer µs; ``NEG_INF`` means "undefined" (no promise yet).

One module per concept:

* ``protocol``   -- :class:`WatermarkGenerator` (rows in, ``W_p`` after each row
  out, snapshot/restore) and :class:`GeneratorSpec` (a frozen config that builds one);
* ``bounded``    -- ``max(event) - L`` (Flink's bounded out-of-orderness);
* ``punctuated`` -- ``W_p`` moves only on marker rows;
* ``adaptive``   -- ``L`` follows a quantile of the recent delays (``quantiles``
  holds the vectorised sliding-window quantile);
* ``idleness``   -- a wrapper that takes a silent partition out of the min;
* ``strategy``   -- :class:`WatermarkStrategy`, one source's configuration;
* ``builder``    -- :func:`strategy_from_table`, the configuration table to a strategy, and
  :func:`register_strategy`, the one line that adds a generator;
* ``clipping``   -- :func:`clip_future`, SEMANTICS.md §5.

The idleness is measured on the *arrival* clock, not the wall clock, so that
the same log gives the same watermarks however it is cut into micro-batches.
"""

from lowwater.core.watermarks.adaptive import Adaptive, AdaptiveGenerator
from lowwater.core.watermarks.bounded import BoundedGenerator, BoundedOutOfOrderness
from lowwater.core.watermarks.builder import (
    STRATEGIES,
    StrategyError,
    StrategyTable,
    register_strategy,
    strategy_from_table,
)
from lowwater.core.watermarks.clipping import clip_future
from lowwater.core.watermarks.idleness import IdleAwareGenerator, WithIdleness
from lowwater.core.watermarks.protocol import Emitted, GeneratorSpec, PartitionRows, WatermarkGenerator
from lowwater.core.watermarks.punctuated import Punctuated, PunctuatedGenerator
from lowwater.core.watermarks.strategy import WatermarkStrategy

__all__ = [
    "STRATEGIES",
    "Adaptive",
    "AdaptiveGenerator",
    "BoundedGenerator",
    "BoundedOutOfOrderness",
    "Emitted",
    "GeneratorSpec",
    "IdleAwareGenerator",
    "PartitionRows",
    "Punctuated",
    "PunctuatedGenerator",
    "StrategyError",
    "StrategyTable",
    "WatermarkGenerator",
    "WatermarkStrategy",
    "WithIdleness",
    "clip_future",
    "register_strategy",
    "strategy_from_table",
]

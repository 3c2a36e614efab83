"""The row clock: ``W(r)`` computed where the rows are (issue 32, ADR 0024).

Three pure steps, equal row for row to :meth:`WatermarkTracker.advance`:

* ``summary``  -- pass 1, per partition: its unchanged generator from its
  snapshot, keeping only the critical rows (:func:`summarise_partition`);
* ``fold``     -- the driver: the summaries folded with the one min-of-inputs
  rule into ``W`` as a step function over arrival order (:func:`fold`);
* ``keys``     -- arrival-order keys and :class:`WatermarkStepFunction`, whose
  ``lookup`` gives each row its ``W(r)`` from its key alone.
"""

from lowwater.core.row_clock.fold import FoldCounts, fold
from lowwater.core.row_clock.keys import WatermarkStepFunction, pack
from lowwater.core.row_clock.summary import PartitionSummary, gap_for, summarise_partition

__all__ = ["FoldCounts", "PartitionSummary", "WatermarkStepFunction", "fold", "gap_for", "pack", "summarise_partition"]

"""What a max-based watermark (Spark's ``withWatermark``) would have done to a log.

Spark's watermark is ``max(event_time over all partitions) - delay``, moved only
between micro-batches; rows of windows whose end it has passed are dropped with
a counter. This replays that rule over the same rows and the same batches the
lowwater engine saw, with the same window and lateness, so the demo can show
the difference on one stream. Pure numpy: no Spark.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lowwater.core.lateness import Lateness, classify, row_verdicts
from lowwater.core.windows import HoppingWindows, TumblingWindows
from lowwater.time import NEG_INF


@dataclass(frozen=True)
class MaxWatermarkOutcome:
    rows: int
    dropped: int
    dropped_mask: np.ndarray

    @property
    def completeness(self) -> float:
        return 1.0 if self.rows == 0 else 1 - self.dropped / self.rows


def max_based_outcome(
    event_us: np.ndarray,
    batch: np.ndarray,
    delay_us: int,
    assigner: TumblingWindows | HoppingWindows,
    grace_us: int,
) -> MaxWatermarkOutcome:
    """Rows in arrival order with their micro-batch number → how many a global-max watermark drops.

    The watermark used for batch ``k`` is ``max(event_time in batches < k) - delay``;
    a row is dropped when every part of it would be: its window end + grace is
    at or behind that watermark (the same verdict rule as lowwater's, §4).
    """
    ev = np.asarray(event_us, dtype=np.int64)
    b = np.asarray(batch, dtype=np.int64)
    n_batches = int(b.max()) + 1 if len(b) else 0
    batch_max = np.full(n_batches, NEG_INF, dtype=np.int64)
    np.maximum.at(batch_max, b, ev)
    wm_after = np.maximum.accumulate(batch_max) - delay_us
    wm_for_batch = np.concatenate([[NEG_INF], wm_after[:-1]]) if n_batches else wm_after
    w_row = wm_for_batch[b]
    pairs = assigner.assign(ev)
    verdict = classify(pairs.end, w_row[pairs.row], grace_us)
    rows = row_verdicts(pairs.row, verdict, len(ev))
    mask = rows == Lateness.TOO_LATE
    return MaxWatermarkOutcome(rows=len(ev), dropped=int(mask.sum()), dropped_mask=mask)

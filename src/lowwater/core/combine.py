"""The low watermark: min over active partitions, monotone (SEMANTICS.md §2).

    W = max(W_previous, min over active partitions p of W_p)

* min, never max or mean: the slowest partition governs;
* monotone: a lower proposal (a partition rejoining behind ``W``) is ignored
  and counted;
* undefined (``NEG_INF``) while a declared, non-idle partition has not
  reported; if every partition is idle, ``W`` holds.

Vectorised over evaluation points: row ``k`` of the matrices is the state of
every partition at one moment, so a whole micro-batch is combined in one call.
"""

from __future__ import annotations

import numpy as np

from lowwater.time import NEG_INF, POS_INF


def combine_low_watermark(
    partition_wm: np.ndarray,
    eligible: np.ndarray,
    blocked: np.ndarray,
    previous_us: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Running low watermark at each evaluation point.

    Args:
        partition_wm: (k, P) int64, each partition's watermark at each point.
        eligible: (k, P) bool, partition is active (not idle) and has reported.
        blocked: (k,) bool, a declared active partition has not reported yet.
        previous_us: ``W`` before the first point.

    Returns:
        (k,) int64 running ``W`` and (k,) the candidate min at each point
        (``NEG_INF`` where undefined or no partition is eligible).
    """
    masked = np.where(eligible, partition_wm, POS_INF)
    cand = masked.min(axis=1) if masked.shape[1] else np.full(len(masked), POS_INF, np.int64)
    cand = np.where((cand >= POS_INF) | blocked, NEG_INF, cand)
    running = np.maximum.accumulate(np.maximum(cand, previous_us))
    return running, cand

"""What one step is planned to do and what it did: the types the engine and its operators share.

The driver plans a step (``spark/planner.py``) into a :class:`StepPlan`, a
window operator (``spark/operators/``) carries it out into an
:class:`OperatorResult`, and the engine turns that into the
:class:`StepReport` it commits and logs. They live here, not in the engine,
so an operator never imports the engine (no import circle).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from lowwater.core.accounting import Accounting
from lowwater.spark.state import Bucket

# Input read out of its order (counted and warned about, never skipped): see StepReport.
ORDER_KEYS = ("out_of_order_files", "out_of_order_rows", "arrival_regressions")
TOTAL_KEYS = (
    "rows", "on_time", "late_updates", "too_late", "dead_letter", "clipped", "windows_fired", "revisions",
    "provisionals", *ORDER_KEYS,
)


@dataclass(frozen=True)
class StepPlan:
    """The driver's verdicts on a step, before any executor ran (``StepPlanner.plan``).

    ``lookup`` is what the executors look rows up in (row ids sorted, with
    ``W(r)`` and the arrival sequence number of each); ``read`` the state
    buckets the step touches, fires or may make due; ``fires`` whether any
    window can fire; ``clock`` the step's latest arrival time (None without
    an arrival column); ``now_us`` the processing time the early trigger is
    evaluated at, ``admit_us`` the one the step's rows were admitted at.
    """

    dead: int
    accounting: Accounting
    pair_counts: np.ndarray  # (on time, late, too late) pairs, as the driver judged them
    lookup: tuple[np.ndarray, np.ndarray, np.ndarray]
    read: frozenset[int]
    fires: bool
    watermark: int
    clock: int | None
    now_us: int
    admit_us: int | None = None
    arrival_regression: tuple[int, int] | None = None  # (earliest arrival of the step, latest before)

    @property
    def admitted_at_us(self) -> int:
        """When the rows were admitted (the planning time if the engine did not say)."""
        return self.now_us if self.admit_us is None else self.admit_us


@dataclass(frozen=True)
class OperatorResult:
    """What a window operator did in a step or the drain (its outputs are already written through the sinks)."""

    accounting: Accounting
    buckets: dict[int, Bucket]  # the state the manifest records after the step
    windows_fired: int = 0
    revisions: int = 0
    provisionals: int = 0


@dataclass
class StepReport:
    """What one step did, for logs, metrics and tests."""

    step: int
    spark_batch: int
    accounting: Accounting
    watermark_us: int
    windows_fired: int = 0
    revisions: int = 0
    provisionals: int = 0  # early firings (not part of the determinism guarantee)
    open_windows: int = 0
    state_bytes: int = 0
    duration_s: float = 0.0
    # Files that landed after a file with a later name was admitted (read out of name order), their
    # rows, and 1 if the step's earliest arrival time is before the latest arrival of the steps before.
    out_of_order_files: int = 0
    out_of_order_rows: int = 0
    arrival_regressions: int = 0
    extra: dict = field(default_factory=dict)

"""What one step is planned to do and what it did: the types the engine and its operators share.

The driver plans a step (``spark/planner.py``) into a :class:`StepPlan`, a
window operator (``spark/operators/``) carries it out into an
:class:`OperatorResult`, and the engine turns that into the
:class:`StepReport` it commits and logs. They live here, not in the engine,
so an operator never imports the engine (no import circle); with them the
step's bookkeeping (running totals, input-order counts, the summary).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np

from lowwater.core.accounting import Accounting
from lowwater.io.source import Admitted
from lowwater.spark.clocked import ClockedRows
from lowwater.spark.fused_write import Output
from lowwater.spark.state import Bucket, Manifest
from lowwater.time import NEG_INF, format_ts, output_us

log = logging.getLogger("lowwater")

# Input read out of its order (counted and warned about, never skipped): see StepReport.
ORDER_KEYS = ("out_of_order_files", "out_of_order_rows", "arrival_regressions")
# Watermark events: marker rows consumed (punctuated sources; not rows) and proposals below a
# partition's watermark that were ignored (SEMANTICS.md §2, monotone).
WATERMARK_KEYS = ("markers", "regressions")
TOTAL_KEYS = (
    "rows", "on_time", "late_updates", "too_late", "dead_letter", "clipped", "windows_fired", "revisions",
    "provisionals", *ORDER_KEYS, *WATERMARK_KEYS,
)


@dataclass(frozen=True)
class StepPlan:
    """What the driver knows of a step before the operator runs (``StepPlanner.plan`` or the executors' clock).

    ``rows`` is the operator's input: the judged rows and how each gets its
    ``W(r)`` (``spark/clocked.py``). With the driver's clock the verdicts are
    known in advance (``accounting``, ``pair_counts``, ``read``, ``fires``,
    ``lookup``: row ids sorted with ``W(r)`` and the arrival sequence number of
    each); with the executors' they are None and the operator learns them from
    its own pass (and checks them against the driver's when both exist).
    ``clock`` is the step's latest arrival time (None without an arrival
    column); ``now_us`` the processing time the early trigger is evaluated at,
    ``admit_us`` the one the step's rows were admitted at.
    """

    dead: int
    watermark: int
    clock: int | None
    now_us: int
    # The dead letters per source (both clocks count them as they read the rows; the join splits its
    # dead letters between its sides by it); None: not known.
    dead_by_source: dict[str, int] | None = None
    rows: ClockedRows | None = None
    clipped: int = 0  # data rows whose event time was clipped (SEMANTICS.md §5)
    min_event_us: int | None = None  # the earliest (clipped) event time of the step's data rows
    accounting: Accounting | None = None
    pair_counts: np.ndarray | None = None  # (on time, late, too late) pairs, as the driver judged them
    lookup: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
    read: frozenset[int] | None = None
    fires: bool | None = None
    admit_us: int | None = None
    # Input that landed out of its own arrival order: (earliest arrival, that input's latest before, the
    # source or Kafka partition; None for a single file source). ``behind``: rows of a source released by
    # its idle_timeout judged after rows that arrived later (the cut-dependent case), same layout.
    arrival_regression: tuple[int, int, str | None] | None = None
    behind: tuple[int, int, str] | None = None
    markers: int = 0  # marker rows consumed (punctuated sources): they move W, they are not data
    regressions: int = 0  # watermark proposals ignored in this step (W is monotone)
    # Several sources: valid rows held behind the arrival frontier (not judged in this step), the
    # frontier's state for the manifest, and per source the (arrival, source) its rows were judged
    # before (None: the source waits for nobody; the whole dict None: every row is judged).
    held: int = 0
    frontier: dict | None = None
    ready_bounds: dict[str, tuple[int, str] | None] | None = None
    # The executors' clock: the values the operator's touch column takes on the judged data rows (the join's
    # key buckets), learnt in pass 1; None: not known (the operator finds out itself if it needs to).
    touched: frozenset[int] | None = None
    # Outputs of the step the operator's writes do not feed (dead letters, held rows), handed to an operator
    # that writes its own outputs in one Spark job (``writes_beside``, ``spark/fused_write.py``) to write
    # with them; the engine writes them itself otherwise.
    beside: tuple[Output, ...] = ()

    @property
    def data_rows(self) -> int:
        """The valid, judged, non-marker rows of the step."""
        return 0 if self.rows is None else self.rows.rows

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
    output_watermark_us: int | None = None  # an operator that holds its output watermark back (the join)


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
    markers: int = 0
    regressions: int = 0
    held_rows: int = 0  # rows held behind the arrival frontier after this step (several sources)
    output_watermark_us: int | None = None  # the operator's held output watermark (None: it holds none)
    extra: dict = field(default_factory=dict)

    @classmethod
    def of(cls, step: int, spark_batch: int, watermark_us: int, result: OperatorResult,
           clock: int | None) -> StepReport:
        """The report of a step (or the drain) whose operator returned ``result``; ``clock``: its latest arrival."""
        return cls(
            step=step,
            spark_batch=spark_batch,
            accounting=result.accounting,
            watermark_us=watermark_us,
            windows_fired=result.windows_fired,
            revisions=result.revisions,
            provisionals=result.provisionals,
            open_windows=sum(b.rows for b in result.buckets.values()),
            state_bytes=sum(b.bytes for b in result.buckets.values()),
            output_watermark_us=result.output_watermark_us,
            extra={"clock": clock},
        )


def add_totals(before: dict, report: StepReport) -> dict[str, int]:
    """The manifest's running totals after ``report``'s step (:data:`TOTAL_KEYS`)."""
    totals = {k: int(before.get(k, 0)) for k in TOTAL_KEYS}
    for k, v in report.accounting.as_dict().items():
        totals[k] += v
    totals["windows_fired"] += report.windows_fired
    totals["revisions"] += report.revisions
    totals["provisionals"] += report.provisionals
    for k in (*ORDER_KEYS, *WATERMARK_KEYS):
        totals[k] += getattr(report, k)
    return totals


def count_out_of_order(report: StepReport, plan: StepPlan, admitted: Admitted | None) -> None:
    """Count (and warn about) input read out of its order: nothing is skipped, nothing is silent."""
    if admitted is not None and admitted.out_of_order:
        report.out_of_order_files = len(admitted.out_of_order)
        report.out_of_order_rows = admitted.out_of_order_rows
        log.warning(
            "step %d: %d file(s) (%d rows) landed after a file with a later name had been admitted and are "
            "read out of name order (metrics: out_of_order_files/rows): %s",
            report.step, report.out_of_order_files, report.out_of_order_rows, ", ".join(admitted.out_of_order),
        )
    regression = plan.arrival_regression
    if regression is not None:
        report.arrival_regressions = 1
        earliest, before, who = regression
        log.warning(
            "step %d: earliest arrival %s%s is before the latest arrival it delivered in the steps before (%s): "
            "its input landed out of arrival order (metrics: arrival_regressions)",
            report.step, format_ts(earliest), "" if who is None else f" of {who}", format_ts(before),
        )
    if plan.behind is not None:
        earliest, before, who = plan.behind
        log.warning(
            "step %d: %s delivered rows arriving from %s, before rows already judged (up to %s): it had nothing "
            "landed and was not waited for (idle by its idle_timeout, or a caught-up Kafka partition); judged "
            "now, after them (README: several sources)",
            report.step, who, format_ts(earliest), format_ts(before),
        )


def summarise(manifest: Manifest) -> dict:
    """The accounting totals of SEMANTICS.md §6 for everything a checkpoint processed (``summary.json``)."""
    t = {k: int(manifest.totals.get(k, 0)) for k in TOTAL_KEYS}
    acc = Accounting(**{k: t[k] for k in ("rows", "on_time", "late_updates", "too_late", "dead_letter", "clipped")})
    w = manifest.tracker.get("watermark_us", NEG_INF) if manifest.tracker else NEG_INF
    return {
        **t,
        "completeness": acc.completeness(),
        "balanced": acc.balanced,
        "final_watermark": format_ts(w),
        "final_watermark_us": output_us(w),
        "open_windows": manifest.open_windows,
        "steps": manifest.step + 1,
        "drained": manifest.drained,
        **({"held_rows": manifest.held_rows} if manifest.frontier is not None else {}),
    }

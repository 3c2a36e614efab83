"""The operator protocol: what the engine asks of an operator, and nothing more.

The engine plans a step on the driver (``spark/planner.py`` or the executors'
row clock), hands the plan to its operator, and commits what the operator
returns; it never asks which operator it runs. An operator is built from one
:class:`OperatorContext`; it owns its state layout (the schema of its
versioned buckets, :meth:`WindowOperator.state_schema`, and the store built on
it), reads its rows with ``W(r)`` and arrival order as columns
(``plan.rows``, ``spark/clocked.py``), declares its outputs
(:meth:`WindowOperator.empty_results`), the columns it reads
(:meth:`WindowOperator.row_columns`) and its own summary, writes its emitted
and late frames through the sinks it was given, and returns the new buckets
and its counts. Adding an operator is one package implementing this protocol
and one :func:`~lowwater.spark.operators.registry.register_operator` line.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from lowwater.config import PipelineConfig
from lowwater.io.sink import Sinks
from lowwater.spark.state import BucketStateStore, Manifest
from lowwater.spark.step import OperatorResult, StepPlan


@dataclass(frozen=True)
class OperatorContext:
    """Everything an operator is built from: the engine hands every operator the same.

    ``state_dir`` is where its versioned state lives (its own layout);
    ``inputs`` the input rows' payload schema; ``clock`` the processing-time
    clock in µs (read at each use: tests inject it).
    """

    cfg: PipelineConfig
    spark: SparkSession
    state_dir: str
    sinks: Sinks
    inputs: StructType
    clock: Callable[[], int]


class WindowOperator(Protocol):
    """One operator on Spark (``operators/windowed/``, ``operators/sessions/``, ``operators/join/``)."""

    store: BucketStateStore  # the operator's versioned state; the engine commits manifests through it
    # Why the executors' row clock cannot serve this operator (it then runs on the driver's), or None.
    driver_clock_only: str | None
    # An operator may set ``window_verdicts = False`` (the join): it judges its rows from W(r) itself, so the
    # driver's clock assigns no window (spark/planner.py); absent, the planner's window verdicts serve it.
    # It may define ``touch_column(frame) -> Column`` (the join: a row's key bucket): the executors' row clock
    # then returns that column's values on the step's judged rows in ``plan.touched`` (no job of its own).

    def state_schema(self) -> StructType:
        """The columns of a state row (one bucket file's schema)."""
        ...

    def empty_results(self) -> DataFrame:
        """results/'s columns as an empty frame: the engine prepares every sink's results output with it."""
        ...

    def row_columns(self) -> list[str] | None:
        """The input columns its pass reads (the executors' clock lays out only these); None: every column."""
        ...

    def summary(self, manifest: Manifest) -> dict:
        """Its own accounting for ``summary.json`` beside the engine's (the join's, per side); often empty."""
        ...

    def step(
        self, parsed: DataFrame, plan: StepPlan, prev: Manifest, step: int, cache: list[DataFrame],
    ) -> OperatorResult:
        """Carry out ``plan`` on the parsed micro-batch against ``prev``'s state.

        Writes ``results`` and ``late`` (or clears them) through the sinks and
        the new state as version ``step``; frames it persists go into ``cache``
        (the engine unpersists them when the step ends).
        """
        ...

    def drain(self, prev: Manifest, step: int, cache: list[DataFrame]) -> OperatorResult:
        """``W = +inf``: fire every open window of ``prev``'s state, write ``results`` through the sinks."""
        ...


OperatorFactory = Callable[[OperatorContext], WindowOperator]
